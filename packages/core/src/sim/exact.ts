/**
 * Exact mode: replays a trace through one policy with no warm-up and counts what the field's reference simulators
 * (libCacheSim's `cachesim`) count, so results can be compared number for number.
 *
 * The loop applies `@tiersync/policy`'s `replay` rules (libCacheSim `cache_get_base`) inline: `access`; on a miss,
 * `insert` when `canAdmit` allows it. It is inlined (rather than calling `replay`) to skip per-request argument
 * checks and object allocation, and to see each request's outcome for the prefix ratio; `exact.test.ts` checks
 * it against `replay` for every policy. When the trace's ids are dense (the readers make them so) the policy is
 * created with `denseKeys` (see {@link denseKeyBound}): an Int32Array key -> slot map instead of a `Map`, with
 * identical decisions.
 *
 * An {@link LlmTrace} is replayed page by page (each page reference is one request of `pageBytes` bytes); an
 * {@link ObjectTrace} record by record with its own sizes.
 *
 * The oracle policies (`opt`, `opt-size`: the offline bounds) are fed each request's next access
 * (`access(key, nextAccess)`), computed from the trace in one backward pass ({@link nextAccesses}, once per
 * trace and thread) and replayed by twin loops, so the loops of the online policies stay as they were. The
 * oracle loop passes no parent hints: an oracle cannot be wrapped (`checkPolicies` refuses `prefix-aware:opt`).
 */
import { NEVER_AGAIN, nextAccessDistances, type CapacityUnit, type EvictionPolicy } from '@tiersync/policy';
import { isChainAware, isOracle, makePolicy } from './policies.js';
import type { LlmTrace, ObjectTrace, SimTrace } from './trace/types.js';
import { invalid, policyFailure } from './errors.js';

/** One exact-mode run. */
export interface ExactJob {
  /** Policy name in the registry. */
  policy: string;
  /** What `capacity` counts. */
  unit: CapacityUnit;
  /** Capacity in `unit`s; `Infinity` for unbounded. */
  capacity: number;
  /** Bytes per page for LLM traces (ignored for object traces). Default 1. */
  pageBytes?: number;
}

/** The counts of one run, in the shape the CLI prints. */
export interface ExactResult {
  policy: string;
  /** Byte capacity, or null in objects mode or when unbounded. */
  capacityBytes: number | null;
  /** Object capacity, or null in bytes mode or when unbounded. */
  capacityObjects: number | null;
  /** Page (LLM traces) or object requests. */
  requests: number;
  misses: number;
  /** Sum of request sizes, bytes. */
  bytesRequested: number;
  /** Sum of the sizes of missed requests, bytes. */
  bytesMissed: number;
  /** LLM traces only: pages found as part of the longest cached prefix of their request / pages requested. */
  prefixPageHitRatio?: number;
}

/** The columns of a result that come from its job (the streamed replay, mrc/replay-stream.ts, fills them too). */
export function row(job: ExactJob): Pick<ExactResult, 'policy' | 'capacityBytes' | 'capacityObjects'> {
  const finite = Number.isFinite(job.capacity);
  return {
    policy: job.policy,
    capacityBytes: finite && job.unit === 'bytes' ? job.capacity : null,
    capacityObjects: finite && job.unit === 'objects' ? job.capacity : null,
  };
}

/** Largest dense-key bound the simulator asks for (the key -> slot map costs 4 bytes per possible key). */
const DENSE_LIMIT = 1 << 30;

/**
 * The `denseKeyBound` for replaying `trace` (1 + its largest id), or `undefined` when its ids are too sparse for
 * the dense-key fast path (the bound would exceed 4 x the distinct ids + 2^16, or 2^30). The readers densify ids
 * to [0, distinct), so their traces always qualify.
 */
export function denseKeyBound(trace: SimTrace): number | undefined {
  let max = -1;
  let distinct: number;
  if (trace.kind === 'object') {
    const { keys, length } = trace;
    for (let i = 0; i < length; i++) if (keys[i]! > max) max = keys[i]!;
    distinct = trace.distinct;
  } else {
    for (const r of trace.requests) {
      const pages = r.pages;
      for (let j = 0; j < pages.length; j++) if (pages[j]! > max) max = pages[j]!;
    }
    distinct = trace.distinctPages;
  }
  const bound = max + 1;
  return bound <= DENSE_LIMIT && bound <= 4 * distinct + (1 << 16) ? Math.max(bound, 1) : undefined;
}

/** Per-trace next-access distances: a sweep's oracle jobs on one thread share one backward pass. */
const futures = new WeakMap<SimTrace, Uint32Array>();

/**
 * For each request of `trace` (each page reference of an LLM trace, in replay order), in how many requests its
 * key comes back, or `NEVER_AGAIN` (0): what the oracle policies need. 4 bytes per request, computed once per
 * trace (cached) with the dense-key map when the ids allow it.
 */
export function nextAccesses(trace: SimTrace): Uint32Array {
  let out = futures.get(trace);
  if (out !== undefined) return out;
  const bound = denseKeyBound(trace);
  if (trace.kind === 'object') out = nextAccessDistances(trace.keys.subarray(0, trace.length), bound);
  else {
    const flat = new Uint32Array(trace.pageRefs);
    let n = 0;
    for (const r of trace.requests) {
      flat.set(r.pages, n);
      n += r.pages.length;
    }
    out = nextAccessDistances(n === flat.length ? flat : flat.subarray(0, n), bound);
  }
  futures.set(trace, out);
  return out;
}

/** Replays an object trace through an oracle policy, feeding `next` (from {@link nextAccesses}). */
export function replayObjectsOracle(
  policy: EvictionPolicy<number>,
  trace: ObjectTrace,
  next: Uint32Array,
): { misses: number; bytesRequested: number; bytesMissed: number } {
  const { keys, sizes, length } = trace;
  let misses = 0;
  let bytesRequested = 0;
  let bytesMissed = 0;
  for (let i = 0; i < length; i++) {
    const key = keys[i]!;
    const size = sizes[i]!;
    const d = next[i]!;
    bytesRequested += size;
    if (policy.access(key, d === NEVER_AGAIN ? Infinity : d)) continue;
    misses++;
    bytesMissed += size;
    if (policy.canAdmit(key, size)) policy.insert(key, size);
  }
  return { misses, bytesRequested, bytesMissed };
}

/** Replays an LLM trace page by page through an oracle policy, feeding `next`; also counts prefix hits. */
export function replayPagesOracle(
  policy: EvictionPolicy<number>,
  trace: LlmTrace,
  pageBytes: number,
  next: Uint32Array,
): { requests: number; misses: number; prefixHits: number } {
  let requests = 0;
  let misses = 0;
  let prefixHits = 0;
  for (const r of trace.requests) {
    const pages = r.pages;
    let inPrefix = true;
    for (let j = 0; j < pages.length; j++) {
      const key = pages[j]!;
      const d = next[requests + j]!;
      if (policy.access(key, d === NEVER_AGAIN ? Infinity : d)) {
        if (inPrefix) prefixHits++;
        continue;
      }
      inPrefix = false;
      misses++;
      if (policy.canAdmit(key, pageBytes)) policy.insert(key, pageBytes);
    }
    requests += pages.length;
  }
  return { requests, misses, prefixHits };
}

/** Replays an object trace. */
export function replayObjects(policy: EvictionPolicy<number>, trace: ObjectTrace): { misses: number; bytesRequested: number; bytesMissed: number } {
  const { keys, sizes, length } = trace;
  let misses = 0;
  let bytesRequested = 0;
  let bytesMissed = 0;
  for (let i = 0; i < length; i++) {
    const key = keys[i]!;
    const size = sizes[i]!;
    bytesRequested += size;
    if (policy.access(key)) continue;
    misses++;
    bytesMissed += size;
    if (policy.canAdmit(key, size)) policy.insert(key, size);
  }
  return { misses, bytesRequested, bytesMissed };
}

/**
 * Replays an LLM trace page by page; also counts prefix hits. With `chained` (a chain-aware policy: `prefix-aware:`,
 * `prefix-hold:`) each insert carries the page's parent, the page before it in its request (`null` for the first),
 * as the planner's executor does in tiered mode (planned.ts): without it those wrappers decide as their inner
 * policy. Other policies ignore the hint, so they are not handed one (no allocation per insert).
 */
export function replayPages(
  policy: EvictionPolicy<number>,
  trace: LlmTrace,
  pageBytes: number,
  chained = false,
): { requests: number; misses: number; prefixHits: number } {
  let requests = 0;
  let misses = 0;
  let prefixHits = 0;
  for (const r of trace.requests) {
    const pages = r.pages;
    let inPrefix = true;
    for (let j = 0; j < pages.length; j++) {
      const key = pages[j]!;
      if (policy.access(key)) {
        if (inPrefix) prefixHits++;
        continue;
      }
      inPrefix = false;
      misses++;
      if (!policy.canAdmit(key, pageBytes)) continue;
      if (chained) policy.insert(key, pageBytes, { parent: j === 0 ? null : pages[j - 1]! });
      else policy.insert(key, pageBytes);
    }
    requests += pages.length;
  }
  return { requests, misses, prefixHits };
}

/**
 * Runs one exact-mode job on a loaded trace.
 * @throws TierSyncError ERR_INVALID_ARGUMENT for an unknown policy or options it refuses, or a policy that fails
 * (throws, or breaks the EvictionPolicy contract: custom policies are checked, `@tiersync/policy` registry)
 */
export function runExact(trace: SimTrace, job: ExactJob): ExactResult {
  try {
    return exact(trace, job);
  } catch (e) {
    throw policyFailure(e, 'ERR_INVALID_ARGUMENT');
  }
}

function exact(trace: SimTrace, job: ExactJob): ExactResult {
  const policy = makePolicy(job.policy, job.capacity, job.unit, { denseKeyBound: denseKeyBound(trace) });
  const next = isOracle(job.policy) ? nextAccesses(trace) : undefined;
  if (trace.kind === 'object') {
    const r = next !== undefined ? replayObjectsOracle(policy, trace, next) : replayObjects(policy, trace);
    return { ...row(job), requests: trace.length, ...r };
  }
  const pageBytes = job.pageBytes ?? 1;
  if (!Number.isSafeInteger(pageBytes) || pageBytes < 1) throw invalid(`page bytes must be a positive integer, got ${pageBytes}`);
  const r = next !== undefined ? replayPagesOracle(policy, trace, pageBytes, next) : replayPages(policy, trace, pageBytes, isChainAware(job.policy));
  return {
    ...row(job),
    requests: r.requests,
    misses: r.misses,
    bytesRequested: r.requests * pageBytes,
    bytesMissed: r.misses * pageBytes,
    prefixPageHitRatio: r.requests === 0 ? 0 : r.prefixHits / r.requests,
  };
}
