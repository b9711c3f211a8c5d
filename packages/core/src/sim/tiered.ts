/**
 * Tiered mode: replays an LLM trace against a modeled hierarchy (accelerator HBM, then host RAM, then storage),
 * each tier run by a policy object from `@tiersync/policy`, and computes hit ratios, bytes moved, tier occupancy
 * over time and the TTFT of every request against a no-cache baseline.
 *
 * Per request, following the data path of docs/DESIGN.md:
 * 1. lookup: the longest prefix of the prompt's pages held on any tier (stop at the first page no tier holds);
 *    each prefix page is served by the highest tier holding it (`access` there: a hit);
 * 2. TTFT: prefill of the tokens after the prefix, plus loading the prefix pages found below HBM (model/ttft.ts);
 * 3. placement: every page of the prompt ends up in HBM (restored or computed), pinned while the request runs so
 *    its own pages do not evict each other; with write-through (the default, as LMCache's offloading) every page
 *    is also stored on each lower tier that lacks it;
 * 4. pressure: a victim of tier t that tier t+1 lacks is demoted into it (possibly cascading further down).
 * Tiers count pages (objects mode, capacity = floor(bytes / page bytes)): the engine allocates whole pages.
 */
import type { EvictionPolicy } from '@tiersync/policy';
import { configError } from './errors.js';
import { accelerator, model, kvBytesPerToken } from './model/presets.js';
import { combine, computeSpec, loadSeconds, noCacheSeconds, prefillSeconds, type ComputeSpec } from './model/ttft.js';
import { makePolicy } from './policies.js';
import { distribution, type Distribution } from './stats.js';
import type { LlmTrace } from './trace/types.js';

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
}

/**
 * Runs a tiered simulation.
 * @throws TierSyncError ERR_CONFIG / ERR_INVALID_ARGUMENT for unknown presets or impossible capacities
 */
export function runTiered(trace: LlmTrace, job: TieredJob): TieredResult {
  const m = model(job.model);
  const acc = accelerator(job.accelerator);
  const c = computeSpec(m, acc, job.compute);
  const B = trace.blockTokens;
  const pageBytes = B * kvBytesPerToken(m);
  if (job.tiers.length === 0) throw configError('at least one tier (HBM) is needed');
  const specs = job.tiers.map((t) => ({ ...t }));
  if (specs[0]!.capacityBytes < 0) {
    const free = c.chips * acc.hbmBytes * 0.9 - m.totalParams * m.weightBytes;
    if (free <= 0) throw configError(`${m.label} weights do not fit in ${c.chips} x ${acc.label}; raise --chips`);
    specs[0]!.capacityBytes = Math.floor(free);
  }
  // Tiers smaller than one page hold nothing: leave them out of the replay but keep them in the report.
  const policies: Array<EvictionPolicy<number> | null> = specs.map((t) => {
    const pages = Math.floor(t.capacityBytes / pageBytes);
    return pages >= 1 ? makePolicy(job.policy, pages, 'objects') : null;
  });
  const T = specs.length;
  const writeThrough = job.writeThrough ?? true;
  const hitPages = new Float64Array(T);
  const readBytes = new Float64Array(T);
  const writeBytes = new Float64Array(T);
  const peak = new Float64Array(T);

  const insertInto = (t: number, key: number): boolean => {
    const p = policies[t];
    if (!p || !p.canAdmit(key, pageBytes)) return false;
    const victims = p.insert(key, pageBytes);
    writeBytes[t]! += pageBytes;
    for (const v of victims) {
      for (let d = t + 1; d < T; d++) {
        const below = policies[d];
        if (!below) continue;
        if (!below.has(v)) insertInto(d, v);
        break;
      }
    }
    return true;
  };

  const n = trace.requests.length;
  const ttft = new Float64Array(n);
  const base = new Float64Array(n);
  const every = Math.max(1, Math.ceil(n / (job.occupancySamples ?? 200)));
  const occTime: number[] = [];
  const occUsed: number[][] = specs.map(() => []);
  let src = new Int8Array(64);
  const pinned: number[] = [];
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
    const pages = req.pages;
    if (pages.length > src.length) src = new Int8Array(pages.length * 2);
    // 1. lookup
    let prefix = 0;
    for (; prefix < pages.length; prefix++) {
      const key = pages[prefix]!;
      let t = 0;
      while (t < T && !policies[t]?.has(key)) t++;
      if (t === T) break;
      src[prefix] = t;
    }
    for (let j = 0; j < prefix; j++) policies[src[j]!]!.access(pages[j]!);
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
    // 3. placement
    const top = policies[0];
    for (let j = 0; j < pages.length; j++) {
      const key = pages[j]!;
      if (top) {
        if (top.has(key)) {
          if (j >= prefix) top.access(key);
        } else insertInto(0, key);
        if (top.pin(key) > 0) pinned.push(key);
      }
      if (writeThrough) for (let t = 1; t < T; t++) if (policies[t] && !policies[t]!.has(key)) insertInto(t, key);
    }
    if (top) for (const key of pinned) top.unpin(key);
    pinned.length = 0;
    // stats
    pagesTotal += pages.length;
    prefixTotal += prefix;
    tokensTotal += req.inputTokens;
    hitTokensTotal += hitTokens;
    if (prefix > 0) requestHits++;
    for (let t = 0; t < T; t++) {
      const used = (policies[t]?.used ?? 0) * pageBytes;
      if (used > peak[t]!) peak[t] = used;
    }
    if (r % every === 0 || r === n - 1) {
      occTime.push(req.timeMs);
      for (let t = 0; t < T; t++) occUsed[t]!.push((policies[t]?.used ?? 0) * pageBytes);
    }
  }
  const d = distribution(ttft);
  const b = distribution(base);
  const strip = ({ percentiles: _p, ...rest }: Distribution) => rest;
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
      writeBytes: writeBytes[i]!,
      peakUsedBytes: peak[i]!,
    })),
    ttft: strip(d),
    noCacheTtft: strip(b),
    ttftReductionMean: 1 - d.mean / b.mean,
    ttftReductionP50: 1 - d.p50 / b.p50,
    ttftPercentiles: d.percentiles,
    noCacheTtftPercentiles: b.percentiles,
    occupancy: { timeMs: occTime, usedBytes: occUsed },
  };
}
