/**
 * Tiered mode: replays an LLM trace against a modeled hierarchy (accelerator HBM, then host RAM, then storage) and
 * computes hit ratios, bytes moved, tier occupancy over time and the TTFT of every request against a no-cache
 * baseline. Where pages live is decided by `@tiersync/policy`'s Planner, the one the live hierarchy runs,
 * executed by counting (sim/planned.ts); this file adds only the cost model.
 *
 * Per request, following the data path of docs/DESIGN.md:
 * 1. lookup: the longest prefix of the prompt's pages held on any tier; each prefix page is served by the fastest
 *    tier holding it;
 * 2. TTFT: prefill of the tokens after the prefix, plus loading the prefix pages found below HBM (model/ttft.ts);
 *    cost-aware, only the leading part of the prefix that minimises TTFT is loaded (the rest is recomputed);
 * 3. load: the loaded pages are accessed on their tier and promoted into HBM (background copies, drained);
 * 4. store: the prompt's pages no tier holds are placed in HBM, making room by the planner's rules (watermarks,
 *    victims, demotion) and copied to write-through tiers (drained).
 * Tiers count pages (capacity = floor(bytes / page bytes)): the engine allocates whole pages. Without a hierarchy
 * config, every tier runs `policy` with watermarks at 100% (a tier frees exactly what a placement needs), lower
 * tiers are write-through (or write-back with `writeThrough: false`) and hits promote into HBM.
 */
import type { PlannerConfig } from '@tiersync/policy';
import { configError } from './errors.js';
import type { SimHierarchy } from './hierarchy.js';
import { accelerator, model, kvBytesPerToken } from './model/presets.js';
import { combine, computeSpec, loadSeconds, noCacheSeconds, prefillSeconds, type ComputeSpec } from './model/ttft.js';
import { CountingHierarchy } from './planned.js';
import { retentionHints, type RetentionModel } from './retention.js';
import { distribution, type Distribution } from './stats.js';
import type { LlmTrace } from './trace/types.js';
import { workloadPages } from './workload.js';
import type { ReplayCounters } from './counters.js';

/** One tier of the modeled hierarchy. */
export interface TierConfig {
  /** Display name (`hbm`, `host`, `local-nvme`, ...). */
  name: string;
  /** Capacity in bytes (0 = tier absent). */
  capacityBytes: number;
  /** Read bandwidth, bytes/s (unused for the top tier, which the accelerator reads in place). */
  readBytesPerSec: number;
  /** Write bandwidth, bytes/s (reported; writes are off the TTFT path). */
  writeBytesPerSec: number;
  /** Per-request latency, seconds. */
  latencySec: number;
  /** Requests in flight. */
  parallelism: number;
}

/** Plain-data description of a tiered run (so it can cross to a worker thread). */
export interface TieredJob {
  /** Policy name, used on every tier. */
  policy: string;
  /** Model preset name. */
  model: string;
  /** Accelerator preset name. */
  accelerator: string;
  /** Compute options (chips, mfu, linkEfficiency, layerwise, overheadSec); defaults as in model/ttft.ts. */
  compute?: Partial<Pick<ComputeSpec, 'chips' | 'mfu' | 'linkEfficiency' | 'layerwise' | 'overheadSec'>>;
  /** Tiers, top (HBM) first. The top tier's capacity -1 means the default HBM KV pool. */
  tiers: TierConfig[];
  /** Store every page on every lower tier too. Default true. */
  writeThrough?: boolean;
  /**
   * Cost-aware restore: load only the leading part of the found prefix that minimises TTFT (recompute the rest),
   * as an engine that knows each page's load cost does. Default true; false loads every found page.
   */
  costAware?: boolean;
  /** Occupancy samples over the trace. Default 200. */
  occupancySamples?: number;
  /** Free text shown in reports. */
  label?: string;
  /**
   * A hierarchy config resolved for the simulator (`tiersync sim --config`): its planner (capacities in pages,
   * policies, write modes, watermarks, admission, promotion) runs instead of one built from `tiers`, `policy` and
   * `writeThrough`; `tiers` then only give each tier's name, bandwidth and latency, in the same order, and the
   * pages are the config's (its tokensPerPage must divide the trace's blocks).
   */
  hierarchy?: SimHierarchy;
  /**
   * Soft retention hints derived from the trace's sessions (sim/retention.ts), given after each store as an agent
   * server would give them; `session-aware` policies order victims by them, others ignore them. Default none.
   */
  retention?: RetentionModel;
}

/** Per-tier outcome. */
export interface TierResult {
  name: string;
  capacityBytes: number;
  /** Prefix pages found on this tier (its highest copy). */
  hitPages: number;
  /** hitPages / all pages requested. */
  pageHitRatio: number;
  /** Prefix pages actually used from this tier (cost-aware mode may recompute instead of loading). */
  usedPages: number;
  /** Bytes read from this tier into HBM (restores); 0 for the top tier. */
  readBytes: number;
  /** Bytes written into this tier (stores, restores into HBM, demotions). */
  writeBytes: number;
  /** Highest occupancy seen, bytes. */
  peakUsedBytes: number;
}

/** Outcome of a tiered run. */
export interface TieredResult {
  label: string;
  policy: string;
  model: string;
  accelerator: string;
  chips: number;
  pageBytes: number;
  blockTokens: number;
  requests: number;
  pages: number;
  inputTokens: number;
  /** Requests whose first page was found. */
  requestHitRatio: number;
  /** Prefix pages found / pages requested. */
  pageHitRatio: number;
  /** Prompt tokens covered by the pages used (loaded or already in HBM) / prompt tokens. */
  tokenHitRatio: number;
  tiers: TierResult[];
  /** TTFT, seconds. */
  ttft: Omit<Distribution, 'percentiles'>;
  /** TTFT with no cache (full prefill), seconds. */
  noCacheTtft: Omit<Distribution, 'percentiles'>;
  /** 1 - mean TTFT / mean no-cache TTFT. */
  ttftReductionMean: number;
  /** 1 - p50 TTFT / p50 no-cache TTFT. */
  ttftReductionP50: number;
  /** CDF data: 0th..100th percentiles of TTFT and of the no-cache TTFT, seconds. */
  ttftPercentiles: number[];
  noCacheTtftPercentiles: number[];
  /** Occupancy over time: sample times (ms) and, per tier, bytes used at each sample. */
  occupancy: { timeMs: number[]; usedBytes: number[][] };
  /** The planner's moves, counted (tiers smaller than one page are left out). */
  counters: ReplayCounters;
}

/**
 * Runs a tiered simulation.
 * @throws TierSyncError ERR_CONFIG / ERR_INVALID_ARGUMENT for unknown presets or impossible capacities
 */
export function runTiered(trace: LlmTrace, job: TieredJob): TieredResult {
  const m = model(job.model);
  const acc = accelerator(job.accelerator);
  const c = computeSpec(m, acc, job.compute);
  if (job.tiers.length === 0) throw configError('at least one tier (HBM) is needed');
  const B = job.hierarchy?.tokensPerPage ?? trace.blockTokens;
  const pageBytes = B * kvBytesPerToken(m);
  const specs = job.tiers.map((t) => ({ ...t }));
  if (job.hierarchy) {
    if (job.hierarchy.tiers.length !== specs.length) throw configError(`the hierarchy has ${job.hierarchy.tiers.length} tiers, the job's cost model ${specs.length}`);
    job.hierarchy.tiers.forEach((t, i) => (specs[i]!.capacityBytes = t.capacityPages * pageBytes));
  } else if (specs[0]!.capacityBytes < 0) {
    const free = c.chips * acc.hbmBytes * 0.9 - m.totalParams * m.weightBytes;
    if (free <= 0) throw configError(`${m.label} weights do not fit in ${c.chips} x ${acc.label}; raise --chips`);
    specs[0]!.capacityBytes = Math.floor(free);
  }
  // Tiers smaller than one page hold nothing: leave them out of the planner but keep them in the report.
  const live = job.hierarchy ? specs.map((_, i) => i) : specs.flatMap((t, i) => (Math.floor(t.capacityBytes / pageBytes) >= 1 ? [i] : []));
  if (live.length === 0) throw configError(`no tier holds one ${pageBytes}-byte page`);
  const planner: PlannerConfig = job.hierarchy?.planner ?? {
    tiers: live.map((i, j) => ({
      name: specs[i]!.name,
      capacityPages: Math.min(Number.MAX_SAFE_INTEGER, Math.floor(specs[i]!.capacityBytes / pageBytes)),
      highWatermark: 1,
      lowWatermark: 1,
      policy: job.policy,
      writeMode: j === 0 || (job.writeThrough ?? true) ? 'write-through' : 'write-back',
    })),
    promoteOnHit: true,
  };
  const sim = new CountingHierarchy({ tokensPerPage: B, pageBytes, tiers: live.map((i) => ({ name: specs[i]!.name, scheme: '', capacityBytes: specs[i]!.capacityBytes, capacityPages: 0 })), planner, maxQueuedPages: job.hierarchy?.maxQueuedPages ?? Number.MAX_SAFE_INTEGER });
  const workload = workloadPages(trace, B);
  const hints = job.retention ? retentionHints(workload.pages, trace.requests.map((q) => q.timeMs), job.retention) : undefined;
  const T = specs.length;
  const hitPages = new Float64Array(T);
  const readBytes = new Float64Array(T);
  const peak = new Float64Array(T);

  const n = trace.requests.length;
  const ttft = new Float64Array(n);
  const base = new Float64Array(n);
  const every = Math.max(1, Math.ceil(n / (job.occupancySamples ?? 200)));
  const occTime: number[] = [];
  const occUsed: number[][] = specs.map(() => []);
  const used = (t: number): number => {
    const j = live.indexOf(t);
    return j < 0 ? 0 : sim.planner.view(j).usedPages * pageBytes;
  };
  let pagesTotal = 0;
  let prefixTotal = 0;
  let tokensTotal = 0;
  let hitTokensTotal = 0;
  let requestHits = 0;
  const tierPages = new Float64Array(T);
  const loadedPages = new Float64Array(T);
  const costAware = job.costAware ?? true;

  for (let r = 0; r < n; r++) {
    const req = trace.requests[r]!;
    const keys = Array.from(workload.pages[r]!);
    // 1. lookup (planner tier numbers -> report tiers)
    const found = sim.lookup(keys);
    const prefix = found.prefix;
    const src = found.tiers.slice(0, prefix).map((j) => live[j]!);
    // 2. TTFT: try every cut k <= prefix (load pages [0, k), recompute the rest) when cost-aware.
    const ttftAt = (k: number, count: boolean): number => {
      tierPages.fill(0);
      for (let j = 0; j < k; j++) tierPages[src[j]!]!++;
      let load = 0;
      for (let t = 1; t < T; t++) {
        if (tierPages[t] === 0) continue;
        const bytes = tierPages[t]! * pageBytes;
        load += loadSeconds(c, specs[t]!, tierPages[t]!, bytes);
        if (count) readBytes[t]! += bytes;
      }
      if (count) for (let t = 0; t < T; t++) loadedPages[t]! += tierPages[t]!;
      const hit = Math.min(k * B, req.inputTokens);
      const fresh = Math.max(1, req.inputTokens - hit);
      return combine(c, prefillSeconds(c, fresh, req.inputTokens - fresh), load);
    };
    let cut = prefix;
    if (costAware && prefix > 0) {
      let best = Infinity;
      // Pages are tried in blocks of tiers: a cut only pays off at the end of a run from one tier, or at 0.
      for (let k = 0; k <= prefix; k++) {
        if (k !== 0 && k !== prefix && src[k] === src[k - 1]) continue;
        const v = ttftAt(k, false);
        if (v < best) {
          best = v;
          cut = k;
        }
      }
    }
    ttft[r] = ttftAt(cut, true);
    const hitTokens = Math.min(cut * B, req.inputTokens);
    for (let j = 0; j < prefix; j++) hitPages[src[j]!]!++;
    base[r] = noCacheSeconds(c, req.inputTokens);
    // 3. load what the cut keeps, 4. store the prompt: the planner decides, background copies drain each time.
    if (cut > 0) {
      sim.load(keys.slice(0, cut), found.tiers);
      sim.flush();
    }
    // An expected return covers the whole prompt and goes with the store (held pages are re-hinted before room is
    // made); finished covers the private pages only, after it.
    const h = hints?.[r]?.hint;
    if (h !== undefined && 'expectedReturnMs' in h) sim.store(keys, { retention: h, now: req.timeMs });
    else sim.store(keys);
    if (h !== undefined && 'finished' in h) sim.retain(hints![r]!.pages.map((j) => keys[j]!), h, req.timeMs);
    sim.flush();
    // stats
    pagesTotal += keys.length;
    prefixTotal += prefix;
    tokensTotal += req.inputTokens;
    hitTokensTotal += hitTokens;
    if (prefix > 0) requestHits++;
    for (let t = 0; t < T; t++) {
      const u = used(t);
      if (u > peak[t]!) peak[t] = u;
    }
    if (r % every === 0 || r === n - 1) {
      occTime.push(req.timeMs);
      for (let t = 0; t < T; t++) occUsed[t]!.push(used(t));
    }
  }
  const d = distribution(ttft);
  const b = distribution(base);
  const strip = ({ percentiles: _p, ...rest }: Distribution) => rest;
  const inserts = (t: number): number => {
    const j = live.indexOf(t);
    return j < 0 ? 0 : sim.counters.tiers[j]!.inserts;
  };
  return {
    label: job.label ?? `${job.policy} ${specs.map((t) => `${t.name}=${Math.round(t.capacityBytes / 2 ** 30)}GiB`).join(' ')}`,
    policy: job.policy,
    model: m.name,
    accelerator: acc.name,
    chips: c.chips,
    pageBytes,
    blockTokens: B,
    requests: n,
    pages: pagesTotal,
    inputTokens: tokensTotal,
    requestHitRatio: n ? requestHits / n : 0,
    pageHitRatio: pagesTotal ? prefixTotal / pagesTotal : 0,
    tokenHitRatio: tokensTotal ? hitTokensTotal / tokensTotal : 0,
    tiers: specs.map((t, i) => ({
      name: t.name,
      capacityBytes: t.capacityBytes,
      hitPages: hitPages[i]!,
      pageHitRatio: pagesTotal ? hitPages[i]! / pagesTotal : 0,
      usedPages: loadedPages[i]!,
      readBytes: readBytes[i]!,
      writeBytes: inserts(i) * pageBytes,
      peakUsedBytes: peak[i]!,
    })),
    ttft: strip(d),
    noCacheTtft: strip(b),
    ttftReductionMean: 1 - d.mean / b.mean,
    ttftReductionP50: 1 - d.p50 / b.p50,
    ttftPercentiles: d.percentiles,
    noCacheTtftPercentiles: b.percentiles,
    occupancy: { timeMs: occTime, usedBytes: occUsed },
    counters: sim.counters,
  };
}
