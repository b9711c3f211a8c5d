/**
 * Sweeps: many jobs (policies x capacities) over one trace, spread over worker threads. Each worker loads the
 * trace itself from its plain-data source, then takes jobs one at a time, so fast and slow jobs balance.
 * Results come back in job order whatever the finishing order, so a sweep is deterministic.
 *
 * Workers run the compiled `worker.js` beside this module. Run from TypeScript sources (tests), the compiled twin
 * under `dist/` is used when it exists; otherwise, or with `threads: 1`, jobs run on the calling thread.
 */
import fs from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { TierSyncError, type ErrorCode } from '@tiersync/native/errors';
import { runJob, type SweepJob, type SweepResult } from './jobs.js';
import { silentProgress, type Progress } from './progress.js';
import { loadTrace, type TraceSource } from './trace/index.js';

/** Options of {@link runSweep}. */
export interface SweepOptions {
  /** The trace every job replays. */
  source: TraceSource;
  jobs: readonly SweepJob[];
  /** Worker threads. Default: min(jobs, available cores). 1 runs on the calling thread. */
  threads?: number;
  /** Progress sink. Default: silent. */
  progress?: Progress;
}

/** The compiled worker script, or null when there is none (running from sources without a build). */
export function workerScript(): URL | null {
  const candidates = [new URL('./worker.js', import.meta.url)];
  if (import.meta.url.endsWith('.ts')) candidates.push(new URL(import.meta.url.replace('/src/sim/', '/dist/sim/').replace(/sweep\.ts$/, 'worker.js')));
  for (const c of candidates) if (fs.existsSync(fileURLToPath(c))) return c;
  return null;
}

/**
 * The parent's Node flags minus `--conditions` (`-C`): a test runner may resolve workspace packages to their
 * TypeScript sources through a `source` condition, which a plain worker cannot load; the compiled worker must
 * resolve them to their compiled output.
 */
function workerExecArgv(): string[] {
  const out: string[] = [];
  const argv = process.execArgv;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--conditions' || a === '-C') i++;
    else if (!a.startsWith('--conditions=') && !a.startsWith('-C=')) out.push(a);
  }
  return out;
}

/**
 * Runs every job and returns the results in job order.
 * @throws TierSyncError from the first failing job (others are abandoned)
 */
export async function runSweep(options: SweepOptions): Promise<SweepResult[]> {
  const { source, jobs } = options;
  const progress = options.progress ?? silentProgress;
  const threads = Math.max(1, Math.min(options.threads ?? os.availableParallelism(), jobs.length));
  const script = threads > 1 ? workerScript() : null;
  if (script === null) {
    const trace = loadTrace(source);
    const out: SweepResult[] = [];
    for (const job of jobs) {
      out.push(runJob(trace, job));
      progress.tick();
      await new Promise((r) => setImmediate(r)); // let the progress bar and signals through
    }
    progress.done();
    return out;
  }
  const results: SweepResult[] = new Array(jobs.length);
  let next = 0;
  let finished = 0;
  const workers: Worker[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      let failed = false;
      const fail = (e: unknown) => {
        if (failed) return;
        failed = true;
        reject(e);
      };
      const feed = (w: Worker) => {
        if (next < jobs.length) {
          const index = next++;
          w.postMessage({ index, job: jobs[index] });
        } else w.postMessage('exit');
      };
      for (let i = 0; i < threads; i++) {
        const w = new Worker(script, { workerData: { source }, execArgv: workerExecArgv() });
        workers.push(w);
        w.on('message', (msg: { index: number; result?: SweepResult; error?: { message: string; code?: string } }) => {
          if (msg.error) {
            // Untyped stays untyped (an internal error, as on the calling thread), never a made-up code.
            const { message, code } = msg.error;
            fail(code === undefined ? new Error(message) : new TierSyncError(message, code as ErrorCode));
            return;
          }
          results[msg.index] = msg.result!;
          progress.tick();
          if (++finished === jobs.length) resolve();
          else feed(w);
        });
        w.on('error', fail);
        feed(w);
      }
    });
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
    progress.done();
  }
  return results;
}
