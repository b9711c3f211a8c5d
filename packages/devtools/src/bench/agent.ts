/**
 * `tiersync bench agent`: a thin launcher for the agent-server benchmark, `examples/agent-server/bench.mjs` (time to
 * first token of a 2,000-token conversation on llama.cpp, recomputed against restored through tiersync from host
 * RAM and from a cold fs tier). The benchmark needs node-llama-cpp and the examples, which @tiersync/core does not
 * depend on: it is found in the repository this package sits in and runs in a child process of its own (llama.cpp's
 * memory, threads and any crash stay there), under a deadline.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { TierSyncError } from '@tiersync/native';

export interface AgentRestoreFigure {
  tier: 'host' | 'fs';
  /** Median time to first token when restoring from this tier, milliseconds. */
  ttftMs: number;
  /** recomputeMs / ttftMs. Targets: >= 20 from host RAM, >= 8 from the fs tier. */
  speedup: number;
  runsMs: number[];
  /** Medians of each leg: lookup, load (tier -> host arena), pagesToFile, loadFile (llama.cpp), firstToken. */
  breakdownMs: Record<string, number>;
  /** pagesToFile + loadFile: the cost of node-llama-cpp exposing state only through files. */
  fileDetourMs: number;
}

export interface AgentBenchReport {
  suite: 'agent';
  promptTokens: number;
  /** Median time to first token recomputing the whole prompt, milliseconds. */
  recomputeMs: number;
  restore: AgentRestoreFigure[];
  /** llama.cpp threads used (one where the machine is shared). */
  llamaThreads: number;
  /** Whether every restored run's greedy continuation equalled the recompute's. */
  identical: boolean;
  [more: string]: unknown;
}

export interface AgentBenchOptions {
  /** Options passed on to bench.mjs (`--tokens N`, `--model NAME`, `--repetitions N`, `--threads N`, `--dir DIR`, `--tokens-per-page N`). */
  args?: string[];
  /** Longest run, milliseconds. Default 1,800,000 (the first run also writes the ~900 MiB model). */
  timeoutMs?: number;
  /** The benchmark script. Default: located by {@link locateAgentBench}. */
  script?: string;
  /** Progress lines (the benchmark's stderr). */
  log?: (line: string) => void;
}

/**
 * The benchmark script of the repository this package belongs to (`examples/agent-server/bench.mjs`, four folders
 * above this module in `src/bench` or `dist/bench`).
 * @throws TierSyncError ERR_NOT_FOUND when it is absent (an installed package carries no examples).
 */
export function locateAgentBench(): string {
  const script = fileURLToPath(new URL('../../../../examples/agent-server/bench.mjs', import.meta.url));
  if (!existsSync(script)) {
    throw new TierSyncError(`tiersync bench agent runs the repository's examples/agent-server/bench.mjs (it needs node-llama-cpp, which @tiersync/core does not depend on); not found at ${script}: run it from a checkout of the tiersync repository`, 'ERR_NOT_FOUND');
  }
  return script;
}

/** Runs the benchmark in a child Node process and returns its report (the last line of its stdout). */
export function runAgentBench(options: AgentBenchOptions = {}): Promise<AgentBenchReport> {
  const script = options.script ?? locateAgentBench();
  const timeoutMs = options.timeoutMs ?? 1_800_000;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, '--json', ...(options.args ?? [])], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      err += c;
      const lines = err.split('\n');
      err = lines.pop() ?? '';
      for (const l of lines) options.log?.(l);
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new TierSyncError(`the agent benchmark ran past its deadline of ${timeoutMs} ms and was stopped`, 'ERR_TIMEOUT'));
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new TierSyncError(`could not start the agent benchmark: ${e.message}`, 'ERR_IO', { cause: e }));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (err) options.log?.(err);
      const last = out.trim().split('\n').at(-1) ?? '';
      let report: AgentBenchReport | undefined;
      try {
        const parsed = JSON.parse(last) as AgentBenchReport;
        if (parsed?.suite === 'agent' && Array.isArray(parsed.restore)) report = parsed;
      } catch {
        /* no report: the run failed */
      }
      if (report) resolve(report);
      else reject(new TierSyncError(`the agent benchmark exited with ${signal ?? `code ${code}`} and no report${err ? `: ${err}` : ''}`, 'ERR_IO'));
    });
  });
}

/** `tiersync bench agent [options]`: checks the options, runs the benchmark, prints the report. Returns the exit code. */
export async function agentBenchCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      json: { type: 'boolean' },
      tokens: { type: 'string' },
      model: { type: 'string' },
      repetitions: { type: 'string' },
      threads: { type: 'string' },
      dir: { type: 'string' },
      'tokens-per-page': { type: 'string' },
    },
  });
  const pass: string[] = [];
  for (const name of ['tokens', 'repetitions', 'threads', 'tokens-per-page'] as const) {
    const v = values[name];
    if (v === undefined) continue;
    if (!/^[1-9]\d*$/.test(v)) throw new TierSyncError(`--${name} must be a positive integer, got '${v}'`, 'ERR_INVALID_ARGUMENT');
    pass.push(`--${name}`, v);
  }
  if (values.model) pass.push('--model', values.model);
  if (values.dir) pass.push('--dir', values.dir);
  const log = (line: string) => (values.json ? console.error(line) : console.log(line));
  const report = await runAgentBench({ args: pass, log });
  if (values.json) console.log(JSON.stringify(report));
  else {
    console.log(`agent: ${report.promptTokens}-token conversation, ${report.llamaThreads} llama.cpp thread(s); recompute TTFT ${report.recomputeMs} ms`);
    for (const r of report.restore) console.log(`${r.tier.padEnd(5)} TTFT ${r.ttftMs} ms, speedup ${r.speedup}x (file detour ${r.fileDetourMs} ms)`);
    console.log(`identical continuations: ${report.identical}`);
  }
  return report.identical ? 0 : 1;
}
