/**
 * Sweeps: many jobs (policies x capacities) over one trace, spread over worker threads. Each worker loads the
 * trace itself from its plain-data source, then takes jobs one at a time, so fast and slow jobs balance.
 * Results come back in job order whatever the finishing order, so a sweep is deterministic.
 *
 * Workers run the compiled `worker.js` beside this module. Run from TypeScript sources (tests), the compiled twin
 * under `dist/` is used when it exists; otherwise, or with `threads: 1`, jobs run on the calling thread.
 *
 * Custom policies: a worker is a fresh module graph, so what the calling script registered (`registerPolicy`) is
 * not registered there. A worker has what the modules it loads register: those of `policyModules`, and those the
 * process was started with (`node --import ./mypolicy.mjs`, `NODE_OPTIONS`: workers inherit the flags). Each worker
 * tells the calling thread which policies it has; a job naming one it lacks runs on the calling thread instead.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { TierSyncError, type ErrorCode } from '@tiersync/native/errors';
import { invalid } from './errors.js';
import { jobPolicies, runJob, type SweepJob, type SweepResult } from './jobs.js';
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
  /**
   * Modules that register custom policies (`registerPolicy`), imported by the calling thread and by each worker
   * before it takes jobs, so jobs naming those policies run in parallel: file paths (relative to the working
   * folder) or `file:` URLs. Default none: a job naming a policy the workers lack (one this script registered
   * itself) runs on the calling thread.
   */
  policyModules?: readonly (string | URL)[];
}

/**
 * Imports each module (paths relative to the working folder, or `file:` URLs) once, in order, and answers their
 * URLs. What they register (`registerPolicy`) is then known to this thread.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming a module that cannot be loaded, with its error as the cause
 */
export async function loadPolicyModules(modules: readonly (string | URL)[]): Promise<string[]> {
  const urls: string[] = [];
  for (const m of modules) {
    const url = m instanceof URL ? m.href : /^file:/.test(m) ? m : pathToFileURL(path.resolve(m)).href;
    try {
      await import(url);
    } catch (e) {
      throw invalid(`policy module ${String(m)} cannot be loaded: ${e instanceof Error ? e.message : String(e)}`, e);
    }
    urls.push(url);
  }
  return urls;
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
  const modules = await loadPolicyModules(options.policyModules ?? []);
  const threads = Math.max(1, Math.min(options.threads ?? os.availableParallelism(), jobs.length));
  const script = threads > 1 ? workerScript() : null;
  const results: SweepResult[] = new Array(jobs.length);
  if (script === null) {
    await runHere(source, jobs, jobs.keys(), results, progress);
    progress.done();
    return results;
  }
  // Jobs for the workers, in order; those naming a policy the workers lack go to `here` once the first worker
  // says what it has.
  let queue: number[] | undefined;
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
      const done = () => {
        progress.tick();
        if (++finished === jobs.length) resolve();
      };
      const feed = (w: Worker) => {
        if (next < queue!.length) {
          const index = queue![next++]!;
          w.postMessage({ index, job: jobs[index] });
        } else w.postMessage('exit');
      };
      const split = (known: ReadonlySet<string>) => {
        queue = [];
        const here: number[] = [];
        jobs.forEach((job, i) => (workersHave(job, known) ? queue! : here).push(i));
        if (here.length) runHere(source, jobs, here, results, { tick: done, done() {} }, () => failed).catch(fail);
      };
      for (let i = 0; i < threads; i++) {
        const w = new Worker(script, { workerData: { source, policyModules: modules }, execArgv: workerExecArgv() });
        workers.push(w);
        w.on('message', (msg: { ready?: string[]; index: number; result?: SweepResult; error?: { message: string; code?: string } }) => {
          if (msg.ready) {
            if (queue === undefined) split(new Set(msg.ready));
            feed(w);
            return;
          }
          if (msg.error) {
            // Untyped stays untyped (an internal error, as on the calling thread), never a made-up code.
            const { message, code } = msg.error;
            fail(code === undefined ? new Error(message) : new TierSyncError(message, code as ErrorCode));
            return;
          }
          results[msg.index] = msg.result!;
          done();
          if (finished < jobs.length) feed(w);
        });
        w.on('error', fail);
      }
    });
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
    progress.done();
  }
  return results;
}

/** Whether threads that registered `known` can run `job` (a malformed job goes to them too: it fails alike anywhere). */
function workersHave(job: SweepJob, known: ReadonlySet<string>): boolean {
  try {
    return jobPolicies(job).every((p) => known.has(p));
  } catch {
    return true;
  }
}

/**
 * Runs jobs `indexes` on the calling thread (loading the trace once), each result into `results`, yielding between
 * jobs so progress, signals and the workers' messages get through. Stops early once `stopped()`.
 */
async function runHere(source: TraceSource, jobs: readonly SweepJob[], indexes: Iterable<number>, results: SweepResult[], progress: Progress, stopped = () => false): Promise<void> {
  const trace = loadTrace(source);
  for (const i of indexes) {
    if (stopped()) return;
    results[i] = runJob(trace, jobs[i]!);
    progress.tick();
    await new Promise((r) => setImmediate(r));
  }
}
