/**
 * Miss-ratio curves of many policies from one or two passes over a trace:
 * - LRU from stack distances ({@link StackDistance}): exact at every capacity, or from a SHARDS sample of the
 *   keys with distances scaled by 1/R (`lruSampleRate` < 1);
 * - every other policy (any registered name) by SHARDS: the sampled accesses replayed through the policy at each
 *   capacity scaled by R, all capacities in the same pass.
 * When no capacities are given, a first pass (the LRU one) measures the footprint and the curve is drawn at
 * `points` log-spaced capacities up to it; the sampled replays then take a second pass.
 */
import type { CapacityUnit, EvictionPolicy } from '@tiersync/policy';
import { invalid, policyFailure } from '../errors.js';
import type { ExactResult } from '../exact.js';
import { makePolicy } from '../policies.js';
import { DistanceHistogram } from './histogram.js';
import { inSample, shardsThreshold } from './shards.js';
import { StackDistance } from './stack-distance.js';

/** A block of accesses: dense keys and sizes (the readers' `ObjectChunk` is one). */
export interface AccessChunk {
  readonly keys: Uint32Array;
  readonly sizes: Float64Array;
  readonly length: number;
}

/** Options of {@link missRatioCurves}. */
export interface MrcOptions {
  /** Policies to draw; `lru` is done from stack distances, the others by sampled replay. */
  policies: readonly string[];
  /** What capacities count. */
  unit: CapacityUnit;
  /** Capacities to evaluate. Default: `points` log-spaced up to the footprint. */
  capacities?: readonly number[];
  /** Points of the default grid. Default 32. */
  points?: number;
  /** SHARDS rate of the non-LRU policies, in (0, 1]. Default 0.01. */
  sampleRate?: number;
  /** SHARDS rate of the LRU stack distances. Default 1 (exact). */
  lruSampleRate?: number;
  /**
   * SHARDS-adj: count the sample's shortfall (or excess) against trace accesses x rate as hits, for LRU and the
   * sampled replays alike. Default false: on skewed (Zipf-like) traces the sampled access count is usually below
   * its mean (a few hot keys carry much of it), so the correction biases every point low (measured: 0.02 mean
   * error at 1% where the plain estimate has 0.002-0.005); it helps on small traces whose hot keys were missed.
   */
  adjust?: boolean;
}

/** One point of a curve. */
export interface MrcPoint {
  capacity: number;
  missRatio: number;
}

/** One policy's curve. */
export interface MrcCurve {
  policy: string;
  unit: CapacityUnit;
  /** `stack-distance`: exact LRU; `shards-stack-distance`: sampled LRU; `shards-replay`: sampled replay. */
  method: 'stack-distance' | 'shards-stack-distance' | 'shards-replay';
  sampleRate: number;
  /** Accesses in the trace, and in the sample. */
  requests: number;
  sampledRequests: number;
  points: MrcPoint[];
  /** Capacities left out, with why (e.g. a policy that refuses the scaled capacity). */
  skipped?: Array<{ capacity: number; reason: string }>;
}

/** The curves and the trace's footprint. */
export interface MrcResult {
  unit: CapacityUnit;
  requests: number;
  /** Distinct keys. */
  distinct: number;
  /** Sum of the distinct keys' (last) sizes: objects or bytes. */
  footprint: number;
  /**
   * Whether `distinct` and `footprint` are estimates: scaled up by 1/R from the keys of a sampled LRU pass
   * (`lruSampleRate` < 1); exact counts otherwise.
   */
  estimated: boolean;
  curves: MrcCurve[];
}

/** `n` log-spaced capacities in [1, max] (integers, distinct, ascending). */
export function logGrid(max: number, n: number): number[] {
  if (!(max >= 1)) return [1];
  const out = new Set<number>();
  for (let i = 0; i < n; i++) out.add(Math.max(1, Math.round(max ** ((i + 1) / n))));
  return [...out].sort((a, b) => a - b);
}

interface Sampled {
  policy: string;
  capacity: number;
  instance: EvictionPolicy<number>;
  misses: number;
}

/**
 * Computes the curves. `open` yields the trace's chunks from the start each time it is called (it is called twice
 * when no capacities are given and a non-LRU policy is asked for).
 * @throws TierSyncError ERR_INVALID_ARGUMENT for bad options, an unknown policy or one that fails
 */
export function missRatioCurves(open: () => Iterable<AccessChunk>, options: MrcOptions): MrcResult {
  try {
    return curves(open, options);
  } catch (e) {
    throw policyFailure(e, 'ERR_INVALID_ARGUMENT');
  }
}

function curves(open: () => Iterable<AccessChunk>, options: MrcOptions): MrcResult {
  const { unit } = options;
  const rate = options.sampleRate ?? 0.01;
  const lruRate = options.lruSampleRate ?? 1;
  const threshold = shardsThreshold(rate);
  const lruThreshold = shardsThreshold(lruRate);
  const points = options.points ?? 32;
  if (!Number.isSafeInteger(points) || points < 2) throw invalid(`MRC points must be an integer >= 2, got ${points}`);
  if (options.policies.length === 0) throw invalid('MRC needs at least one policy');
  for (const c of options.capacities ?? []) if (!(c >= 1) || !Number.isFinite(c)) throw invalid(`MRC capacities must be finite and >= 1, got ${c}`);
  const wantLru = options.policies.includes('lru');
  const others = options.policies.filter((p) => p !== 'lru');
  for (const p of others) makePolicy(p, 1000, unit); // unknown names fail before any pass

  // Pass 1: stack distances (always: they give the footprint), plus the sampled replays when capacities are known.
  const sd = new StackDistance();
  const hist = new DistanceHistogram(unit, options.capacities ?? []);
  let requests = 0;
  let sampledLru = 0;
  let caps = options.capacities ? [...options.capacities].sort((a, b) => a - b) : undefined;
  let replays = caps ? makeReplays(others, caps, unit, rate) : undefined;
  let sampledReplay = 0;
  const objects = unit === 'objects';
  const remap = new SampleIds();
  for (const chunk of open()) {
    const { keys, sizes, length } = chunk;
    for (let i = 0; i < length; i++) {
      const key = keys[i]!;
      if (lruThreshold === 0x1_0000_0000 || inSample(key, lruThreshold)) {
        const d = sd.access(key, objects ? 1 : sizes[i]!);
        hist.record(d / lruRate);
        sampledLru++;
      }
    }
    requests += length;
    if (replays) sampledReplay += replayChunk(replays.runs, chunk, threshold, remap);
  }
  const adjust = options.adjust ?? false;
  if (lruRate < 1 && adjust) hist.adjust(requests * lruRate);
  const footprint = lruRate < 1 ? sd.footprint / lruRate : sd.footprint;
  const distinct = Math.round(lruRate < 1 ? sd.distinct / lruRate : sd.distinct);
  caps ??= logGrid(footprint, points);

  // Pass 2 (only without given capacities): the sampled replays at the grid.
  if (!replays && others.length > 0) {
    replays = makeReplays(others, caps, unit, rate);
    for (const chunk of open()) sampledReplay += replayChunk(replays.runs, chunk, threshold, remap);
  }

  const curves: MrcCurve[] = [];
  for (const policy of options.policies) {
    if (policy === 'lru') {
      curves.push({
        policy,
        unit,
        method: lruRate < 1 ? 'shards-stack-distance' : 'stack-distance',
        sampleRate: lruRate,
        requests,
        sampledRequests: sampledLru,
        points: caps.map((capacity) => ({ capacity, missRatio: hist.missRatio(capacity) })),
      });
      continue;
    }
    const runs = replays!.runs.filter((r) => r.policy === policy);
    const skipped = replays!.skipped.filter((s) => s.policy === policy).map(({ capacity, reason }) => ({ capacity, reason }));
    curves.push({
      policy,
      unit,
      method: 'shards-replay',
      sampleRate: rate,
      requests,
      sampledRequests: sampledReplay,
      points: runs.map((r) => ({ capacity: r.capacity, missRatio: replayRatio(r.misses, sampledReplay, requests * rate, adjust && rate < 1) })),
      ...(skipped.length ? { skipped } : {}),
    });
  }
  if (!wantLru && curves.length === 0) throw invalid('MRC needs at least one policy');
  return { unit, requests, distinct, footprint, estimated: lruRate < 1, curves };
}

/** Sampled misses over sampled accesses, or with SHARDS-adj over the accesses the rate promised. */
function replayRatio(misses: number, sampled: number, expected: number, adjust: boolean): number {
  const total = adjust ? Math.max(expected, misses) : sampled;
  return total > 0 ? Math.min(1, misses / total) : 0;
}

function makeReplays(policies: readonly string[], caps: readonly number[], unit: 'objects' | 'bytes', rate: number) {
  const runs: Sampled[] = [];
  const skipped: Array<{ policy: string; capacity: number; reason: string }> = [];
  for (const policy of policies) {
    for (const capacity of caps) {
      const scaled = Math.max(1, Math.round(capacity * rate));
      try {
        runs.push({ policy, capacity, instance: makePolicy(policy, scaled, unit, { denseKeyBound: 1 << 30 }), misses: 0 });
      } catch (e) {
        skipped.push({ policy, capacity, reason: `scaled capacity ${scaled}: ${(e as Error).message}` });
      }
    }
  }
  return { runs, skipped };
}

/**
 * Dense ids of the sampled keys (first-seen order), so each sampled policy's dense key map is sized by the sample,
 * not by the trace's distinct keys.
 */
class SampleIds {
  #ids = new Int32Array(1024).fill(-1);
  #next = 0;
  id(key: number): number {
    if (key >= this.#ids.length) {
      let n = this.#ids.length;
      while (n <= key) n *= 2;
      const ids = new Int32Array(n).fill(-1);
      ids.set(this.#ids);
      this.#ids = ids;
    }
    let id = this.#ids[key]!;
    if (id < 0) this.#ids[key] = id = this.#next++;
    return id;
  }
}

/** Replays the sampled accesses of a chunk through every run; returns how many were sampled. */
function replayChunk(runs: Sampled[], chunk: AccessChunk, threshold: number, remap: SampleIds): number {
  const { keys, sizes, length } = chunk;
  let sampled = 0;
  const all = threshold === 0x1_0000_0000;
  for (let i = 0; i < length; i++) {
    const original = keys[i]!;
    if (!all && !inSample(original, threshold)) continue;
    const key = remap.id(original);
    sampled++;
    const size = sizes[i]!;
    for (let r = 0; r < runs.length; r++) {
      const run = runs[r]!;
      const p = run.instance;
      if (p.access(key)) continue;
      run.misses++;
      if (p.canAdmit(key, size)) p.insert(key, size);
    }
  }
  return sampled;
}

/**
 * Curves as CSV: `policy,method,sampleRate,unit,capacity,missRatio`, one row per point; then the offline bounds'
 * points (`opt` / `opt-size`, replayed in full: method `bound`, rate 1) when `bounds` holds them.
 */
export function mrcCsv(result: MrcResult, bounds: readonly ExactResult[] = []): string {
  const rows = ['policy,method,sampleRate,unit,capacity,missRatio'];
  for (const c of result.curves) for (const p of c.points) rows.push(`${c.policy},${c.method},${c.sampleRate},${c.unit},${p.capacity},${p.missRatio}`);
  for (const b of bounds) {
    const capacity = result.unit === 'bytes' ? b.capacityBytes : b.capacityObjects;
    rows.push(`${b.policy},bound,1,${result.unit},${capacity ?? 'inf'},${b.requests ? b.misses / b.requests : 0}`);
  }
  return rows.join('\n') + '\n';
}
