/**
 * The shared driver loop: replays a trace through a policy under libCacheSim's rules (`cache_get_base`), so the
 * offline simulator, the exact-result tests and any comparison with libCacheSim count the same way.
 *
 * For each request `{ key, size }`:
 * 1. the admission filter (if any) records the lookup;
 * 2. `policy.access(key)`: a hit counts `hits` and `hitBytes += size`, and the request is done;
 * 3. otherwise a miss (`misses`, `missBytes += size`); the object is then
 *    - `bypassed` when the admission filter refuses it,
 *    - `rejected` when the policy cannot take it (`canAdmit` false: larger than the capacity, refused by the
 *      policy itself, or no room beside pinned objects) — nothing is evicted for it,
 *    - otherwise inserted, after evicting victims until it fits (`evictions`).
 * The size of a hit is the request's; the resident object keeps the size it was inserted with (as libCacheSim).
 */
import type { AdmissionFilter } from './admission.js';
import { checkKey, checkOptions, checkSize, describe } from './internal/validate.js';
import type { EvictionPolicy, PolicyKey } from './types.js';

/** One request of a trace. */
export interface TraceRequest<K extends PolicyKey = PolicyKey> {
  readonly key: K;
  /** Object size in bytes: a positive safe integer. */
  readonly size: number;
}

/** Options of {@link replay}. */
export interface ReplayOptions<K extends PolicyKey = PolicyKey> {
  /** Consulted on every miss; default: admit everything. */
  admission?: AdmissionFilter<K>;
  /** Keep the per-request outcomes and the victims in the result (for tests and small traces). Default false. */
  record?: boolean;
  /** Called with each victim, in eviction order. */
  onEvict?: (key: K) => void;
}

/** Counters of one replay. */
export interface ReplayResult<K extends PolicyKey = PolicyKey> {
  requests: number;
  hits: number;
  misses: number;
  /** Sum of the sizes of requests that hit, in bytes. */
  hitBytes: number;
  /** Sum of the sizes of requests that missed, in bytes. */
  missBytes: number;
  /** Misses that were inserted. */
  inserted: number;
  /** Misses the admission filter refused. */
  bypassed: number;
  /** Misses the policy could not take (`canAdmit` false). */
  rejected: number;
  /** Objects evicted. */
  evictions: number;
  /** With `record`: per request, true for a hit. */
  outcomes?: boolean[];
  /** With `record`: every victim, in order. */
  victims?: K[];
}

/**
 * Replays `requests` through `policy` (which keeps its state: call `policy.reset()` first for a fresh run).
 * @throws TypeError / RangeError for a malformed request (naming its index) or bad options
 */
export function replay<K extends PolicyKey>(
  policy: EvictionPolicy<K>,
  requests: Iterable<TraceRequest<K>>,
  options: ReplayOptions<K> = {},
): ReplayResult<K> {
  checkOptions(options);
  const { admission, record = false, onEvict } = options;
  const result: ReplayResult<K> = {
    requests: 0,
    hits: 0,
    misses: 0,
    hitBytes: 0,
    missBytes: 0,
    inserted: 0,
    bypassed: 0,
    rejected: 0,
    evictions: 0,
  };
  const outcomes: boolean[] = [];
  const victims: K[] = [];
  for (const request of requests) {
    const index = result.requests++;
    if (typeof request !== 'object' || request === null) {
      throw new TypeError(`requests[${index}] must be an object, got ${describe(request)}`);
    }
    const { key, size } = request;
    checkKey(key, `requests[${index}].key`);
    checkSize(size, `requests[${index}].size`);
    admission?.recordLookup(key);
    const hit = policy.access(key);
    if (record) outcomes.push(hit);
    if (hit) {
      result.hits++;
      result.hitBytes += size;
      continue;
    }
    result.misses++;
    result.missBytes += size;
    if (admission !== undefined && !admission.admit(key, size)) {
      result.bypassed++;
      continue;
    }
    if (!policy.canAdmit(key, size)) {
      result.rejected++;
      continue;
    }
    const evicted = policy.insert(key, size);
    result.inserted++;
    result.evictions += evicted.length;
    for (const victim of evicted) {
      if (record) victims.push(victim);
      onEvict?.(victim);
    }
  }
  if (record) {
    result.outcomes = outcomes;
    result.victims = victims;
  }
  return result;
}
