/**
 * `tiersync sim`: the offline capacity simulator. Exact mode replays a trace through each policy at each capacity
 * and prints the reference simulators' counts; with `--model` it runs the tiered TTFT model instead. The sweep
 * (policies x capacities) runs on worker threads with a progress bar on stderr; `--out DIR` writes results.json,
 * results.csv and report.html.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { TierSyncError } from '@tiersync/native/errors';
import {
  accelerator as acceleratorPreset, bundledTrace, checkFormat, checkPolicies, withBound, isOracle, isChainAware, refuseLiveOracle, countersLine, exactCsv, formatSize, guessFormat, kvBytesPerToken, model as modelPreset,
  parseCount, parseList, parseSize, progressBar, renderHtml, runSweep, silentProgress, simHierarchy, storage as storagePreset, tieredCsv,
  type ExactJob, type ExactResult, type PlannedResult, type SweepJob, type TierConfig, type TieredResult, type TraceSource,
  chunkOpener, missRatioCurves, mrcCsv, runExactStream, type MrcResult, isObjectSource, streamObjects, capacityRefusal, loadPolicyModules,
} from '../sim/index.js';
import { UsageError, type Command } from './command.js';
import { loadReplayConfig } from './replay-config.js';

/** Every check of this file is of the command line: exit code 2, with the usage. */
const invalid = (message: string): TierSyncError => new UsageError(message);

const usage = `Usage: tiersync sim (--trace FILE [--format F] | --workload multi-round-qa) [options]
       tiersync sim --config FILE [--trace FILE] [--requests N] [--policy LIST] [--model NAME ...] [--json]

Replays a trace through @tiersync/policy's eviction policies (exact mode), or through a modeled hierarchy of
HBM, host RAM and storage with a TTFT model (tiered mode, with --model). Results per policy x capacity. Where
pages live in a hierarchy is decided by the planner the live hierarchy runs, executed by counting.

Hierarchy config (--config):
  --config FILE          a hierarchy config, YAML or JSON, as TierSync, \`tiersync serve\` and \`tiersync demo\` take
                         it (tiers with capacities, write modes, policies, watermarks, admission, promotion).
                         Without --model: prints the replay's counters, the last line {"counters":{...}} being the
                         one \`tiersync demo --config FILE --json\` prints for the same requests. With --model: the
                         TTFT model over these tiers (hbm in place, host RAM, fs as local-nvme, s3/gs as gcs,
                         peer as filestore). --trace defaults to the bundled Mooncake conversation trace.
  --requests N           replay only the first N requests (any mode)
  --policy-module FILE   import FILE first (repeatable): a module that registers custom policies with
                         @tiersync/policy's registerPolicy, on this thread and on every worker, so --policy and
                         config tiers can name them. Other commands (demo, doctor, serve) take
                         NODE_OPTIONS='--import ./FILE.mjs', which works here too; docs/SIMULATION.md
  --policy LIST          with --config: run every tier with each of these policies instead of the config's

Trace:
  --trace FILE           trace file (.gz, .zst and .zstd are decompressed as read)
  --format F             mooncake | azure | oracleGeneral | csv (default: from the file name)
  --workload multi-round-qa  generate the LMCache multi-round QA workload instead of reading a file
    --users N --rounds N --qps X --system-tokens N --history-tokens N --question-tokens N --answer-tokens N
  --block-tokens N       tokens per page for mooncake/azure/generated traces (default 512)
  --seed N --follow-up P --system-prompts N --system-prompt-tokens N
                         the Azure prefix-sharing model (defaults 42, 0.5, 16, 1024; docs/SIMULATION.md)

Exact mode (no --model):
  --policy LIST          comma-separated: lru,fifo,clock,lfu,arc,s3fifo,sieve or registered names (default lru)
  --capacity LIST        byte capacities, e.g. 128MiB,256MiB; inf = unbounded
  --objects LIST         object-count capacities, e.g. 1000,2000; inf = unbounded
                         (each value once; a point a policy refuses, e.g. S3-FIFO at 1 object, is left out
                         and listed under the table, or as "skipped" with --json)
  --page-bytes SIZE      bytes per page of request traces in byte mode (default: the --model page, else 64MiB)
  --no-bound             leave out the offline bound (opt in objects mode, opt-size in bytes), which every exact
                         sweep otherwise runs beside the policies
  Object traces (oracleGeneral, csv; plain, .gz or .zst) are streamed: every online policy x capacity advances in
  one pass over the file, in bounded memory (--threads does not apply). The bound needs each request's next
  access, so it replays a loaded copy of the trace (memory as the trace): --no-bound keeps the run bounded.

Miss-ratio curves (--mrc, exact mode):
  --mrc                  write miss-ratio curves instead of single points: LRU exactly from stack distances in
                         one pass, every other policy by SHARDS sampling (spatial hashing of keys, capacities
                         scaled by the rate); opt/opt-size (when registered) run in full as the bound. Points: the
                         --objects/--capacity list, else 32 log-spaced capacities up to the trace's footprint
                         (objects unless --capacity is given). --out DIR writes mrc.json, mrc.csv, report.html.
  --sample-rate R        SHARDS rate of the non-LRU policies, in (0, 1] (default 0.01)
  --lru-sample-rate R    SHARDS rate of the LRU curve (default 1: exact)
  --shards-adj           SHARDS-adj: count the sample's shortfall against accesses x rate as hits (off by
                         default: it biases skewed traces low; docs/SIMULATION.md)
  --mrc-points N         points of the default grid (default 32)

Tiered mode (--model):
  --model NAME           llama-3-8b, llama-3-70b, qwen3-235b-a22b, qwen3-coder-480b-a35b, deepseek-v3
  --accelerator NAME     tpu-v6e, tpu-v7x, h100, h200 (default tpu-v7x)
  --chips N              chips per replica (default: fewest that hold the weights)
  --mfu X                prefill model FLOPs utilisation (default 0.5)
  --hbm SIZE             HBM KV pool (default: 90% of HBM minus weights)
  --host LIST            host RAM tier capacities to sweep, e.g. 0,256GiB,1TiB (default 0 = none)
  --storage LIST         storage tiers below host, PRESET:SIZE, e.g. local-nvme:4TiB,gcs:100TiB
                         presets: local-nvme, filestore, gcs
  --no-layerwise         no overlap of loading and compute
  --load-all             load every found page even when recompute is faster

Output:
  --json                 print {"results":[...]} on stdout (progress goes to stderr), with "skipped":[...] when
                         a policy refused a capacity
  --out DIR              write results.json, results.csv and report.html there (created before the run:
                         a path that cannot be a folder fails at once, ERR_IO)
  --threads N            worker threads (default: one per core; 1 = no workers)
  --quiet                no progress bar`;

/** What `--mrc` asks for. */
export interface MrcPlan {
  policies: string[];
  unit: 'objects' | 'bytes';
  capacities?: number[];
  sampleRate: number;
  lruSampleRate: number;
  points: number;
  pageBytes: number;
  adjust: boolean;
}

function int(text: string | undefined, name: string, min = 0): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < min) throw invalid(`${name} must be an integer >= ${min}, got '${text}'`);
  return n;
}

function num(text: string | undefined, name: string): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isFinite(n)) throw invalid(`${name} must be a number, got '${text}'`);
  return n;
}

/** A policy x capacity point of an exact sweep that the policy refuses (e.g. S3-FIFO at 1 object): left out. */
export interface SkippedPoint {
  policy: string;
  unit: 'objects' | 'bytes';
  /** Objects or bytes, as `unit` says. */
  capacity: number;
  /** The policy's own message. */
  reason: string;
}

/** Parsed command line of `tiersync sim`, exposed for tests. */
export interface SimPlan {
  source: TraceSource;
  jobs: SweepJob[];
  mode: 'exact' | 'tiered' | 'planned';
  /** Set by `--mrc`: the curves to draw (the jobs are then the bounds' points only). */
  mrc?: MrcPlan;
  /** Exact mode: the points the policies refuse, left out of `jobs` (reported beside the results). */
  skipped?: SkippedPoint[];
}

/** Options of the multi-round QA generator, of trace files, of Azure traces, of tiered mode and of exact mode. */
const WORKLOAD_FLAGS = ['users', 'rounds', 'qps', 'system-tokens', 'history-tokens', 'question-tokens', 'answer-tokens'] as const;
const FILE_FLAGS = ['format', 'seed', 'follow-up', 'system-prompts', 'system-prompt-tokens'] as const;
const AZURE_FLAGS = ['seed', 'follow-up', 'system-prompts', 'system-prompt-tokens'] as const;
const TIERED_FLAGS = ['accelerator', 'chips', 'mfu', 'hbm', 'host', 'storage', 'no-layerwise', 'load-all'] as const;
const EXACT_FLAGS = ['capacity', 'objects', 'page-bytes', 'no-bound'] as const;

type Values = Record<string, string | boolean | undefined>;

/** Refuses the first of `flags` that is given: it would be ignored, so the user asked for something else. */
function refuseGiven(values: Values, flags: readonly string[], why: string): void {
  for (const flag of flags) if (values[flag] !== undefined) throw invalid(`--${flag} ${why}`);
}

/**
 * Errors that are not the command line's, so they keep their own class and exit code whatever their code: those of
 * the files a plan reads (the `--config` hierarchy), and a policy's factory failing while a sweep is planned.
 */
const fileErrors = new WeakSet<object>();

function readingFiles<T>(read: () => T): T {
  try {
    return read();
  } catch (e) {
    if (typeof e === 'object' && e !== null) fileErrors.add(e);
    throw e;
  }
}

/**
 * Turns `tiersync sim` arguments into a trace source and a job list. Reads no trace; reads the `--config` file.
 * @throws UsageError (a TierSyncError, ERR_INVALID_ARGUMENT; exit code 2) for a bad, missing or conflicting option,
 * TypeError (ERR_PARSE_ARGS_*) for an unknown one; the config loader's errors as they are
 */
export function planSim(args: string[]): { plan: SimPlan; values: Values } {
  try {
    return planArgs(args);
  } catch (e) {
    // Option values checked by the simulator's library (sizes, counts, formats, policies, presets) come back as
    // plain ERR_INVALID_ARGUMENT: here they are the command line's mistakes, as this file's own checks are.
    if (e instanceof TierSyncError && e.code === 'ERR_INVALID_ARGUMENT' && !(e instanceof UsageError) && !fileErrors.has(e)) throw new UsageError(e.message);
    throw e;
  }
}

/**
 * A capacity list (`--objects`, `--capacity`, `--host`): at least one value, none twice. A repeat is refused
 * rather than dropped: `1GiB,1024MiB` is more likely a typo than a wish for one point.
 */
function capacityList(text: string, flag: string, parse: (item: string, name: string) => number): number[] {
  const items = parseList(text);
  if (items.length === 0) throw invalid(`--${flag} needs at least one value`);
  const seen = new Map<number, string>();
  return items.map((item) => {
    const value = parse(item, `--${flag}`);
    const before = seen.get(value);
    if (before !== undefined) throw invalid(`--${flag} lists the same capacity twice ('${before}' and '${item}')`);
    seen.set(value, item);
    return value;
  });
}

/** Exact jobs of each policy at each capacity, leaving out (and naming) the points a policy refuses. */
function exactJobs(policies: readonly string[], caps: readonly number[], unit: 'objects' | 'bytes', pageBytes: number): { jobs: SweepJob[]; skipped: SkippedPoint[] } {
  const jobs: SweepJob[] = [];
  const skipped: SkippedPoint[] = [];
  for (const policy of policies) {
    for (const capacity of caps) {
      let reason: string | undefined;
      try {
        reason = capacityRefusal(policy, capacity, unit);
      } catch (e) {
        // A factory that fails otherwise than by refusing (a bug in a custom one): the policy's fault, not the
        // command line's (an unknown name never gets here: checkPolicies came first).
        if (typeof e === 'object' && e !== null) fileErrors.add(e);
        throw e;
      }
      if (reason === undefined) jobs.push({ kind: 'exact', job: { policy, unit, capacity, pageBytes } });
      else skipped.push({ policy, unit, capacity, reason });
    }
  }
  if (jobs.length === 0) throw invalid(`no policy takes any of these capacities: ${skipped.map((k) => `${k.policy} at ${k.capacity}: ${k.reason}`).join('; ')}`);
  return { jobs, skipped };
}

function planArgs(args: string[]): { plan: SimPlan; values: Values } {
  // --policy-module files were imported before (loadModulesOf): the policies they register are known by now.
  const { values: { 'policy-module': _imported, ...values } } = parseArgs({
    args,
    options: {
      trace: { type: 'string' }, format: { type: 'string' }, workload: { type: 'string' },
      users: { type: 'string' }, rounds: { type: 'string' }, qps: { type: 'string' },
      'system-tokens': { type: 'string' }, 'history-tokens': { type: 'string' }, 'question-tokens': { type: 'string' }, 'answer-tokens': { type: 'string' },
      'block-tokens': { type: 'string' }, seed: { type: 'string' }, 'follow-up': { type: 'string' }, 'system-prompts': { type: 'string' }, 'system-prompt-tokens': { type: 'string' },
      policy: { type: 'string' }, capacity: { type: 'string' }, objects: { type: 'string' }, 'page-bytes': { type: 'string' },
      model: { type: 'string' }, accelerator: { type: 'string' }, chips: { type: 'string' }, mfu: { type: 'string' }, hbm: { type: 'string' },
      host: { type: 'string' }, storage: { type: 'string' }, 'no-layerwise': { type: 'boolean' }, 'load-all': { type: 'boolean' }, 'no-bound': { type: 'boolean' },
      json: { type: 'boolean' }, out: { type: 'string' }, threads: { type: 'string' }, quiet: { type: 'boolean' },
      config: { type: 'string' }, requests: { type: 'string' }, 'policy-module': { type: 'string', multiple: true },
      mrc: { type: 'boolean' }, 'shards-adj': { type: 'boolean' }, 'sample-rate': { type: 'string' }, 'lru-sample-rate': { type: 'string' }, 'mrc-points': { type: 'string' },
    },
  });
  const requests = int(values.requests, '--requests', 1);
  const blockTokens = int(values['block-tokens'], '--block-tokens', 1);
  int(values.threads, '--threads', 1);
  let source: TraceSource;
  if (values.workload !== undefined) {
    if (values.workload !== 'multi-round-qa') throw invalid(`--workload must be multi-round-qa, got '${values.workload}'`);
    if (values.trace !== undefined) throw invalid('give either --trace or --workload, not both');
    refuseGiven(values, FILE_FLAGS, 'does not go with --workload: the workload is generated, no file is read');
    const options = {
      users: int(values.users, '--users', 1), rounds: int(values.rounds, '--rounds', 1), qps: num(values.qps, '--qps'),
      systemPromptTokens: int(values['system-tokens'], '--system-tokens'), historyTokens: int(values['history-tokens'], '--history-tokens'),
      questionTokens: int(values['question-tokens'], '--question-tokens'), answerTokens: int(values['answer-tokens'], '--answer-tokens'), blockTokens,
    };
    source = { generator: 'multi-round-qa', options: Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) };
  } else {
    if (values.trace === undefined && values.config === undefined) throw invalid('--trace FILE (or --workload multi-round-qa) is required');
    refuseGiven(values, WORKLOAD_FLAGS, 'goes with --workload multi-round-qa');
    const file = values.trace ?? bundledTrace();
    const format = values.format !== undefined ? checkFormat(values.format) : guessFormat(file);
    if (format !== 'azure') refuseGiven(values, AZURE_FLAGS, `goes with Azure traces (--format azure); this trace reads as ${format}`);
    if (format === 'oracleGeneral' || format === 'csv') refuseGiven(values, ['block-tokens'], `goes with request traces; a ${format} trace has objects, not pages`);
    const azure = {
      seed: int(values.seed, '--seed'), followUpProbability: num(values['follow-up'], '--follow-up'),
      systemPrompts: int(values['system-prompts'], '--system-prompts', 1), systemPromptTokens: int(values['system-prompt-tokens'], '--system-prompt-tokens'),
    };
    source = {
      file,
      format,
      ...(blockTokens !== undefined ? { blockTokens } : {}),
      azure: Object.fromEntries(Object.entries(azure).filter(([, v]) => v !== undefined)),
    };
  }
  if (requests !== undefined) source = { ...source, requests };
  const jobs: SweepJob[] = [];
  if (values.config !== undefined) return { plan: planConfigured(values, source, jobs), values };
  const policies = checkPolicies(parseList(values.policy ?? 'lru'));
  if (values.mrc) return { plan: planMrc(values, source, policies, blockTokens), values };
  for (const flag of ['sample-rate', 'lru-sample-rate', 'mrc-points', 'shards-adj'] as const) if (values[flag] !== undefined) throw invalid(`--${flag} goes with --mrc`);
  if (values.model === undefined) {
    refuseGiven(values, TIERED_FLAGS, 'goes with --model (tiered mode)');
    if ((values.capacity === undefined) === (values.objects === undefined)) throw invalid('exact mode needs exactly one of --capacity LIST (bytes) or --objects LIST (tiered mode: --model NAME)');
    const unit = values.capacity !== undefined ? 'bytes' : 'objects';
    const caps = unit === 'bytes' ? capacityList(values.capacity!, 'capacity', parseSize) : capacityList(values.objects!, 'objects', parseCount);
    for (const c of caps) if (c < 1) throw invalid(`capacities must be at least 1, got ${c}`);
    const pageBytes = values['page-bytes'] !== undefined ? parseSize(values['page-bytes'], '--page-bytes') : (blockTokens ?? 512) * kvBytesPerToken(modelPreset('llama-3-8b'));
    // The offline bound (opt / opt-size) runs beside the chosen policies, so every table and report shows it.
    const planned = exactJobs(values['no-bound'] ? policies : withBound(policies, unit), caps, unit, pageBytes);
    return { plan: { source, jobs: planned.jobs, mode: 'exact', ...(planned.skipped.length ? { skipped: planned.skipped } : {}) }, values };
  }
  refuseGiven(values, EXACT_FLAGS, 'goes with exact mode (without --model): tiered mode sweeps --host');
  // Refused before the trace loads (the planner would refuse it too, in a worker, after the load).
  for (const policy of policies) refuseLiveOracle(policy);
  modelPreset(values.model);
  const acc = values.accelerator ?? 'tpu-v7x';
  acceleratorPreset(acc);
  const hbm: TierConfig = { name: 'hbm', capacityBytes: values.hbm !== undefined ? parseSize(values.hbm, '--hbm') : -1, readBytesPerSec: 0, writeBytesPerSec: 0, latencySec: 0, parallelism: 1 };
  const hosts = capacityList(values.host ?? '0', 'host', parseSize);
  const lower: TierConfig[] = parseList(values.storage ?? '').map((s) => {
    const [name, size] = s.split(':');
    if (!name || !size) throw invalid(`--storage items look like PRESET:SIZE (e.g. local-nvme:4TiB), got '${s}'`);
    const p = storagePreset(name);
    return { name: p.name, capacityBytes: parseSize(size, '--storage'), readBytesPerSec: p.readBytesPerSec, writeBytesPerSec: p.writeBytesPerSec, latencySec: p.latencySec, parallelism: p.parallelism };
  });
  const hostSpec = storagePreset('host');
  const compute = {
    ...(values.chips !== undefined ? { chips: int(values.chips, '--chips', 1)! } : {}),
    ...(values.mfu !== undefined ? { mfu: num(values.mfu, '--mfu')! } : {}),
    ...(values['no-layerwise'] ? { layerwise: false } : {}),
  };
  for (const policy of policies) {
    for (const host of hosts) {
      if (!Number.isFinite(host)) throw invalid('--host must be finite in tiered mode');
      const tiers = [hbm, ...(host > 0 ? [{ name: 'host', capacityBytes: host, readBytesPerSec: hostSpec.readBytesPerSec, writeBytesPerSec: hostSpec.writeBytesPerSec, latencySec: hostSpec.latencySec, parallelism: hostSpec.parallelism }] : []), ...lower];
      const label = `${policy} host=${formatSize(host)}${lower.map((l) => ` ${l.name}=${formatSize(l.capacityBytes)}`).join('')}`;
      jobs.push({ kind: 'tiered', job: { policy, model: values.model, accelerator: acc, compute, tiers, costAware: !values['load-all'], label } });
    }
  }
  return { plan: { source, jobs, mode: 'tiered' }, values };
}

/** `--mrc`: the curves, plus full exact jobs for the bounds at the given capacities. */
function planMrc(values: Record<string, string | boolean | undefined>, source: TraceSource, policies: string[], blockTokens: number | undefined): SimPlan {
  if (values.model !== undefined || values.config !== undefined) throw invalid('--mrc goes with exact mode (no --model, no --config)');
  refuseGiven(values, TIERED_FLAGS, 'goes with --model (tiered mode), not with --mrc');
  refuseGiven(values, ['no-bound'], 'does not go with --mrc: the curves draw a bound only when --policy names opt or opt-size');
  if (values.capacity !== undefined && values.objects !== undefined) throw invalid('--mrc takes at most one of --capacity LIST (bytes) or --objects LIST');
  const unit = values.capacity !== undefined ? 'bytes' : 'objects';
  const list = (values.capacity ?? values.objects) as string | undefined;
  const capacities = list === undefined ? undefined : capacityList(list, unit === 'bytes' ? 'capacity' : 'objects', unit === 'bytes' ? parseSize : parseCount);
  for (const c of capacities ?? []) if (!(c >= 1) || !Number.isFinite(c)) throw invalid(`--mrc capacities must be finite and at least 1, got ${c}`);
  const rate = (flag: string, dflt: number) => {
    const v = num(values[flag] as string | undefined, `--${flag}`) ?? dflt;
    if (!(v > 0 && v <= 1)) throw invalid(`--${flag} must be in (0, 1], got ${v}`);
    return v;
  };
  const pageBytes = values['page-bytes'] !== undefined ? parseSize(values['page-bytes'] as string, '--page-bytes') : (blockTokens ?? 512) * kvBytesPerToken(modelPreset('llama-3-8b'));
  // The bounds (oracle policies) are computed from the trace's future: run in full, not sampled.
  const curves = policies.filter((p) => !isOracle(p));
  const bounds = policies.filter(isOracle);
  if (curves.length === 0) throw invalid('--mrc needs at least one policy besides opt/opt-size');
  // SHARDS samples keys, so most pages of a chain are missing from the replay and their parents cannot be passed:
  // a prefix- wrapper would draw its inner policy's curve under its own name.
  const chained = curves.find(isChainAware);
  if (chained !== undefined) throw invalid(`--mrc cannot run '${chained}': sampling drops the page chains a prefix- wrapper needs; run it in exact mode (without --mrc)`);
  if (bounds.length > 0 && capacities === undefined) throw invalid('--mrc with opt/opt-size needs the capacities (--objects or --capacity): the bound is simulated at each');
  const planned = bounds.length > 0 ? exactJobs(bounds, capacities!, unit, pageBytes) : { jobs: [], skipped: [] };
  return {
    source,
    jobs: planned.jobs,
    mode: 'exact',
    ...(planned.skipped.length ? { skipped: planned.skipped } : {}),
    mrc: {
      policies: curves, unit, ...(capacities ? { capacities } : {}), pageBytes,
      sampleRate: rate('sample-rate', 0.01), lruSampleRate: rate('lru-sample-rate', 1),
      points: int(values['mrc-points'] as string | undefined, '--mrc-points', 2) ?? 32,
      adjust: values['shards-adj'] === true,
    },
  };
}

/** A capacity as the tables print it: a size in bytes mode, a count in objects mode, `inf` when unbounded. */
function capacityText(unit: 'objects' | 'bytes', capacity: number): string {
  return unit === 'bytes' ? formatSize(capacity) : Number.isFinite(capacity) ? String(capacity) : 'inf';
}

/** The points an exact sweep left out, under its table. */
function skippedLines(skipped: readonly SkippedPoint[] | undefined): string[] {
  if (!skipped?.length) return [];
  return ['left out (the policy refuses the capacity):', ...skipped.map((k) => `  ${k.policy.padEnd(8)} ${capacityText(k.unit, k.capacity).padStart(12)}  ${k.reason}`)];
}

function mrcTable(m: MrcResult, bounds: readonly ExactResult[], skipped: readonly SkippedPoint[] | undefined): string {
  // From a sampled LRU pass the trace's distinct keys and footprint are scaled up from the sample: estimates.
  const about = m.estimated ? '~' : '';
  const footprint = m.unit === 'bytes' ? formatSize(m.footprint) : String(Math.round(m.footprint));
  const lruRate = m.curves.find((c) => c.policy === 'lru')?.sampleRate;
  const lines = [`${m.requests} requests, ${about}${m.distinct} distinct, footprint ${about}${footprint}${m.estimated ? ` (estimated from the LRU sample${lruRate !== undefined ? ` at rate ${lruRate}` : ''})` : ''}`];
  for (const c of m.curves) {
    lines.push(`${c.policy} (${c.method}, rate ${c.sampleRate}, ${c.sampledRequests} sampled requests)`);
    for (const p of c.points) lines.push(`  ${capacityText(m.unit, p.capacity).padStart(12)} ${p.missRatio.toFixed(4)}`);
    for (const s of c.skipped ?? []) lines.push(`  ${capacityText(m.unit, s.capacity).padStart(12)} left out: ${s.reason}`);
  }
  // The offline bounds (opt / opt-size when --policy names them), replayed in full at each capacity.
  for (const policy of [...new Set(bounds.map((b) => b.policy))]) {
    lines.push(`${policy} (offline bound, full replay)`);
    for (const b of bounds.filter((r) => r.policy === policy)) {
      const capacity = m.unit === 'bytes' ? b.capacityBytes : b.capacityObjects;
      lines.push(`  ${(capacity === null ? 'inf' : capacityText(m.unit, capacity)).padStart(12)} ${(b.requests ? b.misses / b.requests : 0).toFixed(4)}`);
    }
  }
  lines.push(...skippedLines(skipped));
  return lines.join('\n');
}

/**
 * `--config`: one planned job per `--policy` (or one with the config's own policies), or with `--model` one
 * tiered job per policy over the config's tiers.
 */
function planConfigured(values: Record<string, string | boolean | undefined>, source: TraceSource, jobs: SweepJob[]): SimPlan {
  for (const flag of ['capacity', 'objects', 'page-bytes', 'hbm', 'host', 'storage']) {
    if (values[flag] !== undefined) throw invalid(`--${flag} does not go with --config: the config's tier URLs give the capacities`);
  }
  refuseGiven(values, ['no-bound'], 'goes with exact mode (--objects or --capacity, without --config)');
  if (values.model === undefined) refuseGiven(values, TIERED_FLAGS, 'goes with --model (the TTFT model over the config\'s tiers)');
  // A scratch folder for '{tmp}': the simulator opens nothing, the path only has to be well formed.
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'tiersync-sim-'));
  let config;
  try {
    config = readingFiles(() => loadReplayConfig(values.config as string, scratch));
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  const hierarchy = readingFiles(() => simHierarchy(config));
  const policies = values.policy !== undefined ? checkPolicies(parseList(values.policy as string)) : [undefined];
  // The planner runs every --policy here: an oracle is refused before the trace loads (the config loader refuses
  // one in the file's own tiers).
  for (const policy of policies) if (policy !== undefined) refuseLiveOracle(policy);
  if (values.model === undefined) {
    for (const policy of policies) jobs.push({ kind: 'planned', job: { config, ...(policy !== undefined ? { policy } : {}) } });
    return { source, jobs, mode: 'planned' };
  }
  const modelName = values.model as string;
  modelPreset(modelName);
  const acc = (values.accelerator as string | undefined) ?? 'tpu-v7x';
  acceleratorPreset(acc);
  const preset: Record<string, string> = { host: 'host', fs: 'local-nvme', s3: 'gcs', gs: 'gcs', peer: 'filestore' };
  const tiers: TierConfig[] = hierarchy.tiers.map((t, i) => {
    if (i === 0 || !preset[t.scheme]) return { name: t.name, capacityBytes: 0, readBytesPerSec: 0, writeBytesPerSec: 0, latencySec: 0, parallelism: 1 };
    const p = storagePreset(preset[t.scheme]!);
    return { name: t.name, capacityBytes: 0, readBytesPerSec: p.readBytesPerSec, writeBytesPerSec: p.writeBytesPerSec, latencySec: p.latencySec, parallelism: p.parallelism };
  });
  const compute = {
    ...(values.chips !== undefined ? { chips: int(values.chips as string, '--chips', 1)! } : {}),
    ...(values.mfu !== undefined ? { mfu: num(values.mfu as string, '--mfu')! } : {}),
    ...(values['no-layerwise'] ? { layerwise: false } : {}),
  };
  for (const policy of policies) {
    const h = policy === undefined ? hierarchy : simHierarchy({ ...config, tiers: config.tiers.map((t) => ({ ...t, policy })) });
    const names = [...new Set(h.planner.tiers.map((t) => t.policy ?? 'lru'))].join('/');
    const label = `${names} ${h.tiers.map((t) => `${t.name}=${t.capacityPages}p`).join(' ')}`;
    jobs.push({ kind: 'tiered', job: { policy: names, model: modelName, accelerator: acc, compute, tiers, hierarchy: h, costAware: !values['load-all'], label } });
  }
  return { source, jobs, mode: 'tiered' };
}

function plannedTable(results: PlannedResult[]): string {
  const lines: string[] = [];
  for (const r of results) {
    const c = r.counters;
    lines.push(`${r.label}: ${c.requests} requests, ${c.lookupPages} pages looked up, ${c.prefixPageHits} found (${((100 * c.prefixPageHits) / Math.max(1, c.lookupPages)).toFixed(1)}%)`);
    lines.push(`  tier     ${'hits'.padStart(9)} ${'inserts'.padStart(9)} ${'demoted'.padStart(9)} ${'evicted'.padStart(9)} ${'promoted'.padStart(9)} ${'used/capacity'.padStart(16)}`);
    c.tiers.forEach((t, i) => {
      const o = r.tiers[i]!;
      lines.push(`  ${t.tier.padEnd(8)} ${[t.hits, t.inserts, t.demotions, t.evictions, t.promotions].map((v) => String(v).padStart(9)).join(' ')} ${`${o.usedPages}/${o.capacityPages}`.padStart(16)}`);
    });
  }
  return lines.join('\n');
}

function textTable(mode: 'exact' | 'tiered', results: Array<ExactResult | TieredResult>, skipped?: readonly SkippedPoint[]): string {
  if (mode === 'exact') {
    // The policy column as wide as its longest name (prefix-aware:session-aware:sieve), so columns stay aligned.
    const w = Math.max(8, ...(results as ExactResult[]).map((r) => r.policy.length));
    const rows = (results as ExactResult[]).map((r) =>
      `${r.policy.padEnd(w)} ${String(r.capacityBytes !== null ? formatSize(r.capacityBytes) : r.capacityObjects ?? 'inf').padStart(12)} ${String(r.requests).padStart(10)} ${String(r.misses).padStart(10)} ${(r.requests ? r.misses / r.requests : 0).toFixed(4).padStart(8)}${r.prefixPageHitRatio !== undefined ? ` ${r.prefixPageHitRatio.toFixed(4).padStart(8)}` : ''}`,
    );
    return [`${'policy'.padEnd(w)} ${'capacity'.padStart(12)} ${'requests'.padStart(10)} ${'misses'.padStart(10)} ${'miss'.padStart(8)} ${'prefix'.padStart(8)}`, ...rows, ...skippedLines(skipped)].join('\n');
  }
  return (results as TieredResult[])
    .map((r) => `${r.label}: page hit ${(r.pageHitRatio * 100).toFixed(1)}%, token hit ${(r.tokenHitRatio * 100).toFixed(1)}%, TTFT p50/p90/p99 ${r.ttft.p50.toFixed(3)}/${r.ttft.p90.toFixed(3)}/${r.ttft.p99.toFixed(3)} s vs no cache ${r.noCacheTtft.p50.toFixed(3)}/${r.noCacheTtft.p90.toFixed(3)}/${r.noCacheTtft.p99.toFixed(3)} s (mean -${(r.ttftReductionMean * 100).toFixed(1)}%)`)
    .join('\n');
}

/**
 * Runs the plan's jobs: exact jobs over an object file in one streamed pass (bounded memory), anything else
 * through the worker sweep on the loaded trace.
 */
async function runJobs(plan: SimPlan, threads: number | undefined, progress: ReturnType<typeof progressBar>, policyModules: readonly string[]): Promise<Array<ExactResult | TieredResult | PlannedResult>> {
  if (plan.mode === 'exact' && isObjectSource(plan.source) && plan.jobs.length > 0) {
    const exact = plan.jobs.map((j) => (j as { kind: 'exact'; job: ExactJob }).job);
    const online = exact.filter((j) => !isOracle(j.policy));
    const streamed = online.length > 0 ? runExactStream(streamObjects(plan.source), online) : [];
    for (let i = 0; i < streamed.length; i++) progress.tick();
    // Oracle policies (the bound) need every request's next access: a loaded trace, through the sweep.
    const oracle = plan.jobs.filter((j) => isOracle((j as { kind: 'exact'; job: ExactJob }).job.policy));
    const bound = oracle.length > 0 ? (await runSweep({ source: plan.source, jobs: oracle, threads: 1, progress })).map((t) => t.result as ExactResult) : [];
    if (oracle.length === 0) progress.done();
    return exact.map((j) => (isOracle(j.policy) ? bound.shift()! : streamed.shift()!));
  }
  const tagged = await runSweep({ source: plan.source, jobs: plan.jobs, ...(threads !== undefined ? { threads } : {}), progress, policyModules });
  return tagged.map((t) => t.result);
}

/** `--mrc`: curves (and the bounds' points), printed or written with the report. */
async function runMrc(plan: SimPlan, mrc: MrcPlan, values: Record<string, string | boolean | undefined>, args: string[]): Promise<number> {
  const curves = missRatioCurves(chunkOpener(plan.source, mrc.pageBytes), {
    policies: mrc.policies, unit: mrc.unit, ...(mrc.capacities ? { capacities: mrc.capacities } : {}),
    sampleRate: mrc.sampleRate, lruSampleRate: mrc.lruSampleRate, points: mrc.points, adjust: mrc.adjust,
  });
  const progress = values.quiet || plan.jobs.length === 0 ? silentProgress : progressBar(plan.jobs.length);
  const bounds = plan.jobs.length > 0 ? ((await runJobs(plan, undefined, progress, [])) as ExactResult[]) : [];
  const json = JSON.stringify({ mrc: curves, bounds, ...(plan.skipped ? { skipped: plan.skipped } : {}) });
  if (typeof values.out === 'string') {
    fs.writeFileSync(path.join(values.out, 'mrc.json'), `${json}\n`);
    fs.writeFileSync(path.join(values.out, 'mrc.csv'), mrcCsv(curves, bounds));
    const traceName = 'file' in plan.source ? `${plan.source.file} (${plan.source.format})` : `generated ${plan.source.generator}`;
    fs.writeFileSync(
      path.join(values.out, 'report.html'),
      renderHtml({ title: 'tiersync sim: miss-ratio curves', notes: [`trace: ${traceName}`, `command: tiersync sim ${args.join(' ')}`, ...skippedNotes(plan.skipped)], mrc: curves, ...(bounds.length ? { exact: bounds } : {}) }),
    );
    if (!values.json) console.log(`wrote ${path.join(values.out, 'mrc.json')}, mrc.csv, report.html`);
  }
  console.log(values.json ? json : mrcTable(curves, bounds, plan.skipped));
  return 0;
}

/** The left-out points as notes of the HTML report. */
function skippedNotes(skipped: readonly SkippedPoint[] | undefined): string[] {
  return (skipped ?? []).map((k) => `left out: ${k.policy} at ${capacityText(k.unit, k.capacity)}${k.unit === 'objects' ? ' objects' : ''} (${k.reason})`);
}

/**
 * Creates the `--out` folder (and checks it is writable) before anything runs, so a bad path fails at once, not
 * after a long sweep. @throws TierSyncError ERR_IO naming the path
 */
function prepareOut(dir: string): void {
  try {
    fs.mkdirSync(dir, { recursive: true });
    fs.accessSync(dir, fs.constants.W_OK);
  } catch (e) {
    throw new TierSyncError(`--out ${dir}: cannot create or write the output folder (${(e as Error).message})`, 'ERR_IO', { cause: e });
  }
}

/**
 * Imports the `--policy-module` files of `args` (before the rest is read: the policies they register are checked by
 * name) and answers their URLs, for the sweep's workers.
 * @throws UsageError for a module that cannot be loaded
 */
async function loadModulesOf(args: string[]): Promise<string[]> {
  const { values } = parseArgs({ args, options: { 'policy-module': { type: 'string', multiple: true } }, strict: false, allowPositionals: true });
  const files = (values['policy-module'] ?? []).filter((f): f is string => typeof f === 'string');
  try {
    return await loadPolicyModules(files);
  } catch (e) {
    throw e instanceof TierSyncError ? new UsageError(`--policy-module: ${e.message}`) : e;
  }
}

export const simCommand: Command = {
  summary: 'simulate caches offline: policies x capacities on traces, hit ratios and TTFT',
  usage,
  async run(args) {
    const policyModules = await loadModulesOf(args);
    const { plan, values } = planSim(args);
    const threads = int(values.threads as string | undefined, '--threads', 1);
    if (typeof values.out === 'string') prepareOut(values.out);
    if (plan.mrc) return runMrc(plan, plan.mrc, values, args);
    const progress = values.quiet ? silentProgress : progressBar(plan.jobs.length);
    const results = await runJobs(plan, threads, progress, policyModules);
    if (plan.mode === 'planned') {
      // Counters only: results.json when asked; the last line is the counters of the (first) run, as demo prints.
      if (typeof values.out === 'string') {
          fs.writeFileSync(path.join(values.out, 'results.json'), `${JSON.stringify({ results })}\n`);
      }
      const planned = results as PlannedResult[];
      console.log(values.json ? JSON.stringify({ results }) : plannedTable(planned));
      if (values.json) console.log(countersLine(planned[0]!.counters));
      return 0;
    }
    const shown = results as Array<ExactResult | TieredResult>;
    const json = JSON.stringify({ results, ...(plan.skipped ? { skipped: plan.skipped } : {}) });
    if (typeof values.out === 'string') {
      fs.writeFileSync(path.join(values.out, 'results.json'), `${json}\n`);
      fs.writeFileSync(path.join(values.out, 'results.csv'), plan.mode === 'exact' ? exactCsv(shown as ExactResult[]) : tieredCsv(shown as TieredResult[]));
      const traceName = 'file' in plan.source ? `${plan.source.file} (${plan.source.format})` : `generated ${plan.source.generator}`;
      fs.writeFileSync(
        path.join(values.out, 'report.html'),
        renderHtml({
          title: `tiersync sim: ${plan.mode} mode`,
          notes: [`trace: ${traceName}`, `command: tiersync sim ${args.join(' ')}`, ...skippedNotes(plan.skipped)],
          ...(plan.mode === 'exact' ? { exact: shown as ExactResult[] } : { tiered: shown as TieredResult[] }),
        }),
      );
      if (!values.json) console.log(`wrote ${path.join(values.out, 'results.json')}, results.csv, report.html`);
    }
    console.log(values.json ? json : textTable(plan.mode, shown, plan.skipped));
    // A tiered run over a config ends with its counters too (the planner's moves), as demo and planned runs do.
    if (values.json && values.config !== undefined) console.log(countersLine((shown[0] as TieredResult).counters));
    return 0;
  },
};
