/**
 * `tiersync bench prefix` and `tiersync bench session`: the eviction lab's measurements of the policy wrappers
 * (`@tiersync/policy` wrappers/), replayed through the planner by counting (`runTiered`, the simulator's tiered
 * mode: the live hierarchy's decisions), one HBM tier of `capacity` pages, Llama-3-8B's TTFT model on one H100.
 *
 * - prefix: the bundled Mooncake and Azure traces at three capacities (fractions of each trace's distinct pages);
 *   for each base policy, the prefix-page hit ratio (prefix pages found / pages requested) with and without
 *   `prefix-aware:`, and the gain.
 * - session: a multi-round QA workload with think times (users whose turns are separated by tool calls of varied
 *   length) and the Mooncake conversation trace with its own timestamps; hit ratio and mean / p90 TTFT of LRU and
 *   S3-FIFO with and without `session-aware:`, the hints derived from the trace's sessions (core sim/retention.ts):
 *   exact, noisy (each expected wait off by up to 2x either way) and finished-only.
 * Every figure is deterministic (no timing): one run gives the tables.
 */
import { bundledTrace, loadTrace, runTiered, type LlmRequest, type LlmTrace, type RetentionModel, type TierConfig, type TieredResult } from '@tiersync/core/sim';
import { round } from './stats.js';

const MODEL = 'llama-3-8b';
const ACCELERATOR = 'h100';
/** Bytes of one 512-token page of Llama-3-8B (128 KiB per token). */
const PAGE_BYTES = 512 * 128 * 1024;

const hbm = (pages: number): TierConfig => ({ name: 'hbm', capacityBytes: pages * PAGE_BYTES, readBytesPerSec: 0, writeBytesPerSec: 0, latencySec: 0, parallelism: 1 });

function run(trace: LlmTrace, policy: string, pages: number, retention?: RetentionModel): TieredResult {
  return runTiered(trace, { policy, model: MODEL, accelerator: ACCELERATOR, compute: { chips: 1 }, tiers: [hbm(pages)], occupancySamples: 2, ...(retention ? { retention } : {}) });
}

/** The bundled request traces, by short name. */
export function labTraces(): { name: string; trace: LlmTrace }[] {
  const file = (name: string, format: 'mooncake' | 'azure') => loadTrace({ file: bundledTrace(name), format }) as LlmTrace;
  return [
    { name: 'mooncake-conversation', trace: file('conversation_trace.jsonl.gz', 'mooncake') },
    { name: 'mooncake-synthetic', trace: file('synthetic_trace.jsonl.gz', 'mooncake') },
    { name: 'azure-conv', trace: file('AzureLLMInferenceTrace_conv.csv.gz', 'azure') },
    { name: 'azure-code', trace: file('AzureLLMInferenceTrace_code.csv.gz', 'azure') },
  ];
}

/** Options of {@link runPrefixBench}. */
export interface PrefixBenchOptions {
  /** Base policies. Default lru, fifo, clock, sieve, arc, s3fifo. */
  policies?: string[];
  /** Capacities as fractions of each trace's distinct pages. Default 0.01, 0.04, 0.16. */
  fractions?: number[];
  /** Keep only the first this many requests of each trace. Default all. */
  requests?: number;
  /** The chain-aware wrapper measured: `prefix-aware` (trims the inner victim's chain) or `prefix-hold`. Default prefix-aware. */
  wrapper?: 'prefix-aware' | 'prefix-hold';
  log?: (line: string) => void;
}

/** One cell of the prefix table. */
export interface PrefixCell {
  trace: string;
  policy: string;
  capacityPages: number;
  /** Prefix-page hit ratio of the base policy. */
  plain: number;
  /** The same with the wrapper measured (the report's `wrapper`: `prefix-aware:` by default, or `prefix-hold:`). */
  wrapped: number;
  /** wrapped - plain (absolute). */
  gain: number;
}

/** A chain-aware wrapper (`options.wrapper`) against each base policy. */
export function runPrefixBench(options: PrefixBenchOptions = {}): { wrapper: 'prefix-aware' | 'prefix-hold'; cells: PrefixCell[]; neverWorse: boolean; meanGain: number } {
  const wrapper = options.wrapper ?? 'prefix-aware';
  const policies = options.policies ?? ['lru', 'fifo', 'clock', 'sieve', 'arc', 's3fifo'];
  const fractions = options.fractions ?? [0.01, 0.04, 0.16];
  const cells: PrefixCell[] = [];
  for (const { name, trace: whole } of labTraces()) {
    const trace = options.requests ? { ...whole, requests: whole.requests.slice(0, options.requests) } : whole;
    const distinct = new Set<number>();
    for (const q of trace.requests) for (const p of q.pages) distinct.add(p);
    for (const f of fractions) {
      // S3-FIFO needs 20 objects at least (its small queue is 10% of the capacity).
      const pages = Math.max(20, Math.round(f * distinct.size));
      for (const policy of policies) {
        const plain = run(trace, policy, pages).pageHitRatio;
        const aware = run(trace, `${wrapper}:${policy}`, pages).pageHitRatio;
        const cell = { trace: name, policy, capacityPages: pages, plain: round(plain, 5), wrapped: round(aware, 5), gain: round(aware - plain, 5) };
        cells.push(cell);
        options.log?.(`${name.padEnd(22)} ${String(pages).padStart(7)}p ${policy.padEnd(7)} ${cell.plain.toFixed(4)} -> ${cell.wrapped.toFixed(4)} (${cell.gain >= 0 ? '+' : ''}${cell.gain.toFixed(4)})`);
      }
    }
  }
  const neverWorse = cells.every((c) => c.gain >= 0);
  return { wrapper, cells, neverWorse, meanGain: round(cells.reduce((s, c) => s + c.gain, 0) / Math.max(1, cells.length), 5) };
}

/** xorshift32 in [0, 1). */
function random(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32;
  };
}

/** Options of {@link agentQa}. */
export interface AgentQaOptions {
  /** Users (sessions). Default 48. */
  users?: number;
  /** Turns per user. Default 8. */
  rounds?: number;
  /** Shared system prompt tokens. Default 2048. */
  systemPromptTokens?: number;
  /** Each user's own history before the first turn. Default 4096. */
  historyTokens?: number;
  /** Tokens added per turn (question, tool output, answer). Default 512. */
  turnTokens?: number;
  /** Users start uniformly within this many ms. Default 120,000. */
  startSpreadMs?: number;
  /** Each user's mean think time (tool calls) is log-uniform in [min, max] ms; each wait is exponential around it. Default [2,000, 180,000]. */
  thinkMs?: [number, number];
  seed?: number;
}

/**
 * The multi-round QA workload with think times: users who each start at a random time, then alternate a turn and
 * a wait (a tool call, a human reading); users differ in how long they wait. Page ids chain as the generator's
 * (core sim/trace/page-keys.ts): the system prompt's full pages are shared, each conversation's full pages are its
 * own, a partial last page is fresh each turn.
 */
export function agentQa(options: AgentQaOptions = {}): LlmTrace {
  const o = { users: 48, rounds: 8, systemPromptTokens: 2048, historyTokens: 4096, turnTokens: 512, startSpreadMs: 120_000, thinkMs: [2_000, 180_000] as [number, number], seed: 7, ...options };
  const B = 512;
  const rand = random(o.seed);
  const ids = new Map<string, number>();
  let next = 0;
  const id = (k: string): number => {
    let v = ids.get(k);
    if (v === undefined) ids.set(k, (v = next++));
    return v;
  };
  const raw: LlmRequest[] = [];
  for (let u = 0; u < o.users; u++) {
    let t = rand() * o.startSpreadMs;
    const mean = o.thinkMs[0] * Math.exp(rand() * Math.log(o.thinkMs[1] / o.thinkMs[0]));
    for (let r = 0; r < o.rounds; r++) {
      const input = o.systemPromptTokens + o.historyTokens + (r + 1) * o.turnTokens;
      const n = Math.ceil(input / B);
      const pages = new Uint32Array(n);
      for (let j = 0; j < n; j++) {
        const end = (j + 1) * B;
        pages[j] = end > input ? next++ : end <= o.systemPromptTokens ? id(`s:${j}`) : id(`c${u}:${j}`);
      }
      raw.push({ timeMs: t, inputTokens: input, outputTokens: 200, pages });
      t += -mean * Math.log(1 - rand());
    }
  }
  const requests = raw.sort((a, b) => a.timeMs - b.timeMs);
  return { kind: 'llm', source: `agent-qa(users=${o.users},rounds=${o.rounds},think=${o.thinkMs.join('..')}ms,seed=${o.seed})`, blockTokens: B, requests, distinctPages: next, pageRefs: requests.reduce((s, q) => s + q.pages.length, 0) };
}

/** Options of {@link runSessionBench}. */
export interface SessionBenchOptions {
  /** Base policies. Default lru, s3fifo. */
  policies?: string[];
  /** Capacities as fractions of each workload's distinct pages. Default 0.1, 0.25. */
  fractions?: number[];
  /** Keep only the first this many requests of the Mooncake trace. Default all. */
  requests?: number;
  log?: (line: string) => void;
}

/** One row of the session table. */
export interface SessionRow {
  workload: string;
  capacityPages: number;
  policy: string;
  /** The hints: none (the base policy), exact, noisy (x/2..x2), finished-only. */
  hints: 'none' | 'exact' | 'noisy' | 'finished-only';
  pageHitRatio: number;
  ttftMeanSec: number;
  ttftP90Sec: number;
}

const HINTS: { name: SessionRow['hints']; model: RetentionModel }[] = [
  { name: 'exact', model: {} },
  { name: 'noisy', model: { noise: 1, seed: 3 } },
  { name: 'finished-only', model: { finishedOnly: true } },
];

/** Session-aware retention against the base policies. */
export function runSessionBench(options: SessionBenchOptions = {}): { rows: SessionRow[] } {
  const policies = options.policies ?? ['lru', 's3fifo'];
  const fractions = options.fractions ?? [0.1, 0.25];
  const whole = loadTrace({ file: bundledTrace('conversation_trace.jsonl.gz'), format: 'mooncake' }) as LlmTrace;
  const conversation = options.requests ? { ...whole, requests: whole.requests.slice(0, options.requests) } : whole;
  const workloads = [
    { name: 'agent-qa (think times)', trace: agentQa() },
    { name: 'mooncake-conversation', trace: conversation },
  ];
  const rows: SessionRow[] = [];
  for (const { name, trace } of workloads) {
    const distinct = new Set<number>();
    for (const q of trace.requests) for (const p of q.pages) distinct.add(p);
    for (const f of fractions) {
      const pages = Math.max(20, Math.round(f * distinct.size));
      const row = (policy: string, hints: SessionRow['hints'], r: TieredResult): void => {
        const p90 = r.ttftPercentiles[90]!;
        const out = { workload: name, capacityPages: pages, policy, hints, pageHitRatio: round(r.pageHitRatio, 5), ttftMeanSec: round(r.ttft.mean, 5), ttftP90Sec: round(p90, 5) };
        rows.push(out);
        options.log?.(`${name.padEnd(24)} ${String(pages).padStart(7)}p ${policy.padEnd(22)} ${hints.padEnd(13)} hit ${out.pageHitRatio.toFixed(4)}  TTFT mean ${out.ttftMeanSec.toFixed(4)} s p90 ${out.ttftP90Sec.toFixed(4)} s`);
      };
      for (const policy of policies) {
        row(policy, 'none', run(trace, policy, pages));
        for (const h of HINTS) row(`session-aware:${policy}`, h.name, run(trace, `session-aware:${policy}`, pages, h.model));
      }
    }
  }
  return { rows };
}

/** The prefix table as text. */
export function prefixTable(r: ReturnType<typeof runPrefixBench>): string {
  const lines = [`trace                  capacity  policy   plain    ${r.wrapper.padEnd(12)}  gain`];
  for (const c of r.cells) lines.push(`${c.trace.padEnd(22)} ${String(c.capacityPages).padStart(8)}  ${c.policy.padEnd(7)}  ${c.plain.toFixed(4)}   ${c.wrapped.toFixed(4)}        ${c.gain >= 0 ? '+' : ''}${c.gain.toFixed(4)}`);
  lines.push(`never worse: ${r.neverWorse}; mean gain ${r.meanGain}`);
  return lines.join('\n');
}

/** The session table as text. */
export function sessionTable(r: ReturnType<typeof runSessionBench>): string {
  const lines = ['workload                 capacity  policy                  hints          hit     TTFT mean  TTFT p90'];
  for (const x of r.rows) lines.push(`${x.workload.padEnd(24)} ${String(x.capacityPages).padStart(8)}  ${x.policy.padEnd(22)}  ${x.hints.padEnd(13)}  ${x.pageHitRatio.toFixed(4)}  ${x.ttftMeanSec.toFixed(4)} s   ${x.ttftP90Sec.toFixed(4)} s`);
  return lines.join('\n');
}

/**
 * `tiersync bench prefix|session [--json] [--requests N] [--wrapper prefix-aware|prefix-hold] [--policies a,b,...]`
 * (N: the first N requests of each bundled trace; --policies: the prefix bench's base policies, default six).
 */
export async function evictionLabCommand(args: string[]): Promise<number> {
  const { parseArgs } = await import('node:util');
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { json: { type: 'boolean' }, requests: { type: 'string' }, wrapper: { type: 'string' }, policies: { type: 'string' } } });
  const log = (line: string) => (values.json ? console.error(line) : console.log(line));
  const requests = values.requests === undefined ? undefined : Number(values.requests);
  if (requests !== undefined && (!Number.isSafeInteger(requests) || requests < 1)) {
    const { TierSyncError } = await import('@tiersync/native');
    throw new TierSyncError(`--requests must be a positive integer, got '${values.requests}'`, 'ERR_INVALID_ARGUMENT');
  }
  const wrapper = values.wrapper ?? 'prefix-aware';
  if (wrapper !== 'prefix-aware' && wrapper !== 'prefix-hold') {
    const { TierSyncError } = await import('@tiersync/native');
    throw new TierSyncError(`--wrapper must be prefix-aware or prefix-hold, got '${wrapper}'`, 'ERR_INVALID_ARGUMENT');
  }
  const policies = values.policies?.split(',').map((p) => p.trim()).filter((p) => p !== '');
  if (policies !== undefined) {
    const { hasPolicy } = await import('@tiersync/policy');
    const bad = policies.find((p) => !hasPolicy(p));
    if (bad !== undefined || policies.length === 0) {
      const { TierSyncError } = await import('@tiersync/native');
      throw new TierSyncError(`--policies must list registered policies, got '${bad ?? values.policies}'`, 'ERR_INVALID_ARGUMENT');
    }
  }
  if (positionals[0] === 'prefix') {
    const report = runPrefixBench({ ...(requests ? { requests } : {}), ...(policies ? { policies } : {}), wrapper, log });
    console.log(values.json ? JSON.stringify(report) : `\n${prefixTable(report)}`);
    return 0;
  }
  const report = runSessionBench({ ...(requests ? { requests } : {}), log });
  console.log(values.json ? JSON.stringify(report) : `\n${sessionTable(report)}`);
  return 0;
}
