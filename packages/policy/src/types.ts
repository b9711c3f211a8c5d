/**
 * The uniform eviction-policy interface. Every algorithm in this package, and every custom policy registered
 * through {@link registerPolicy}, implements it, so the live hierarchy and the offline simulator drive them alike.
 */

/**
 * Identity of a cached object. tiersync uses KV page keys (chained hashes); they may be numbers (a 52-bit hash
 * prefix) or strings (a hex digest). Numbers must be finite. Keys compare with `SameValueZero` (as `Map` keys).
 */
export type PolicyKey = number | string;

/**
 * What `capacity` counts: `'bytes'` charges each object its size; `'objects'` charges each object 1 whatever its
 * size (the libCacheSim `ignore_obj_size` convention).
 */
export type CapacityUnit = 'bytes' | 'objects';

/** Options every policy accepts. */
export interface PolicyOptions {
  /** Capacity in `unit`s. A positive safe integer. Required. (The planner gives each tier's page count.) */
  capacity: number;
  /** What `capacity` counts. Default `'bytes'`. (The planner always asks for `'objects'`.) */
  unit?: CapacityUnit;
  /**
   * The dense-key fast path (built-in policies): every key must be an integer in `[0, bound)`, and the key ->
   * slot map is an `Int32Array` indexed by the key (grown as keys arrive, never past `bound`) instead of a `Map`.
   * Decisions are identical to the default path; only the accepted keys differ. A key that is not a number throws
   * `TypeError`; a number that is not an integer in `[0, bound)` throws `RangeError` naming the key.
   * `bound` is an integer in `[1, 2^31 - 1]`. Meant for traces whose ids are densified (the simulator's readers).
   * The registry hands it only to factories that take it: the built-ins, and custom ones registered with
   * `{ denseKeys: true }` (`RegisterOptions`); other custom factories never see it. The composites ignore it.
   */
  denseKeys?: DenseKeys;
}

/** See {@link PolicyOptions.denseKeys}. */
export interface DenseKeys {
  /** Keys are integers in `[0, bound)`. */
  bound: number;
}

/**
 * A soft retention hint: it orders victims, it never refuses a store or holds a page the way a pin does.
 * Times are milliseconds on the caller's clock (the policy has none: `now` is what advances its notion of time).
 */
export type Retention =
  /** The page is expected to be requested again at `returnAt` (a session waiting on a tool call). */
  | { readonly returnAt: number; readonly now: number }
  /** Nothing is expected to request the page again (its session finished). */
  | { readonly finished: true; readonly now?: number };

/**
 * What a caller knows of a page beyond its key, handed to {@link EvictionPolicy.insert} (and to
 * {@link EvictionPolicy.hint} for a resident page). Policies that have no use for it ignore it.
 */
export interface PageHint<K extends PolicyKey = PolicyKey> {
  /**
   * The page this page's key is chained from (the previous page of its token sequence): the page is reachable
   * only through it. `null`: the first page of a sequence. Absent: unknown.
   */
  readonly parent?: K | null;
  /** Soft retention: when the page is expected back, or that its session finished. */
  readonly retention?: Retention;
}

/**
 * An eviction policy over a set of resident objects with a shared capacity.
 *
 * Two callers drive policies, in two patterns; a policy must be right under both.
 *
 * **Trace replay** ({@link replay}, the simulator's exact mode and `--mrc`): libCacheSim's `cache_get_base`, one
 * request at a time:
 * 1. `access(key)`: a hit updates the policy's metadata and returns `true`. A miss returns `false`; a policy with
 *    ghost history (ARC, S3-FIFO) consumes the key's ghost entry here and remembers it for step 3.
 * 2. `canAdmit(key, size)`: whether step 3 would succeed. `false` for an object larger than the capacity, for one
 *    that cannot fit beside the pinned objects, and for what the policy itself refuses (S3-FIFO).
 * 3. `insert(key, size)`: evicts victims until the object fits, then inserts it; returns the victims in order.
 * Keys are numbers (the trace readers' dense ids; `denseKeys` for the built-ins), sizes the objects' bytes (the
 * page size for request traces), `unit` as asked (`--objects` or `--capacity`). Oracle policies get `nextAccess`.
 *
 * **The planner** (`Planner`, planner/planner.ts: every live tier of a hierarchy, and the simulator's tiered mode
 * and `--config` runs), one instance per tier, created with `{ capacity: <the tier's pages>, unit: 'objects' }`:
 * - keys are page keys: in a live hierarchy strings of 64 lower-case hex characters (chained hashes), in the
 *   simulator integer page ids; sizes are always 1 (a page costs 1 whatever its bytes);
 * - `access(key)` is called only for pages a load served from this tier (a hit: the key is resident, or a victim
 *   still being freed, for which it answers `false`), never for a lookup, never for a miss, never with `nextAccess`. A key that is not resident reaches the policy directly
 *   through `canAdmit(key, 1)` then `insert(key, 1, hint)`, without an `access` first: a policy with ghost history
 *   must look its ghosts up in `insert` too (the built-ins do);
 * - room is made before pages are placed: the planner takes victims one at a time with `evict()` (down to the
 *   tier's low watermark, or `peekVictims(n)` first to decide whether to wait for writes in flight), so `insert`
 *   usually has nothing to evict; victims it does return are freed all the same;
 * - `insert` runs when the page's bytes have landed, `remove(key)` when a copy vanished without a move (deleted,
 *   lost, damaged), `pin`/`unpin` around loads and for TTL pins, `hint(key, h)` for a retention hint given later;
 *   `reset` and `evictKey` are never called (wrappers call `evictKey` on their inner policy);
 * - a call that throws or breaks this contract costs the request's key on that tier, not the tier (see
 *   `PlannerOptions.onPolicyError`).
 *
 * Pinned objects (pin count > 0) are never victims; they still count towards `used`.
 * Sizes are in bytes (positive safe integers); `used` and `capacity` are in `unit`s.
 */
export interface EvictionPolicy<K extends PolicyKey = PolicyKey> {
  /** Registry name of the algorithm (`'lru'`, `'s3fifo'`, ...). */
  readonly name: string;
  /** Capacity in `unit`s. */
  readonly capacity: number;
  /** What `capacity` and `used` count. */
  readonly unit: CapacityUnit;
  /** Units held by resident objects (bytes, or the object count when `unit` is `'objects'`). */
  readonly used: number;
  /** Bytes held by resident objects, whatever the unit. */
  readonly usedBytes: number;
  /** Number of resident objects. */
  readonly count: number;
  /** Number of resident objects with a pin count above zero. */
  readonly pinnedCount: number;
  /** Units held by pinned objects. */
  readonly pinnedUsed: number;

  /** Whether `key` is resident. Never changes state. @throws TypeError when `key` is not a valid key */
  has(key: K): boolean;
  /** Size in bytes of a resident object, `undefined` when absent. Never changes state. */
  sizeOf(key: K): number | undefined;
  /** Resident keys, in no particular order. Never changes state. */
  keys(): IterableIterator<K>;

  /**
   * A request for `key`: on a hit, updates the policy's metadata (recency, frequency, reference bit) and returns
   * `true`; on a miss returns `false` (and may consume ghost history, which the next `insert` of `key` uses).
   * Trace replay calls it for every request; the planner only for pages a load served, so live it is the hit
   * signal alone (see the interface's comment).
   * @param nextAccess oracle knowledge for offline bounds: in how many requests `key` is requested again (1 = the
   *   very next request; `Infinity` = never), counting every `access` call as one request. Only the oracle policies
   *   (`opt`, `opt-size`) read it, and they also apply it to the `insert` that follows this miss; every other
   *   policy ignores it. The simulator computes it from the trace; live callers omit it.
   * @throws TypeError when `key` is not a valid key
   */
  access(key: K, nextAccess?: number): boolean;

  /**
   * Whether `insert(key, size)` would succeed now: `key` is not resident, `size` fits in the capacity beside the
   * pinned objects, and the policy admits it. Never changes state.
   * @throws TypeError / RangeError when `key` or `size` is invalid
   */
  canAdmit(key: K, size: number): boolean;

  /**
   * Inserts an absent object of `size` bytes, first evicting victims (in the policy's order) until it fits.
   * `hint` says what the caller knows of the page (its parent, a retention hint); the plain algorithms ignore it,
   * the wrappers (`prefix-aware`, `session-aware`) order victims by it. The planner passes `size` 1 (its policies
   * count pages, `unit: 'objects'`) and may insert a key no `access` announced.
   * @returns the evicted keys, oldest decision first (empty when nothing had to go)
   * @throws RangeError when `key` is already resident or `canAdmit(key, size)` is false
   */
  insert(key: K, size: number, hint?: PageHint<K>): K[];

  /**
   * Tells the policy something new of a resident page (a retention hint given after it was stored, a parent
   * learnt late). Optional: policies without it ignore hints. Never evicts.
   * @returns whether the policy holds `key` and took the hint into account
   */
  hint?(key: K, hint: PageHint<K>): boolean;

  /**
   * Evicts `key` as though the policy had chosen it as its next victim: the history the policy keeps of its own
   * victims records it (ARC's B1/B2, S3-FIFO's and 2Q's ghost queues, LIRS's non-resident entries, LFUDA's and
   * GDSF's cache age), where `remove` would forget it. For wrappers that choose victims themselves
   * (`prefix-aware:` trims a chain from its tail): a page they evict comes back as a returning page, not a new one.
   * Optional: callers fall back to `remove` for policies without it (a policy with no history needs none).
   * @returns `true` when `key` was resident and unpinned and is now evicted; `false` (nothing changed) otherwise
   */
  evictKey?(key: K): boolean;

  /**
   * Evicts one victim, as for memory pressure with no incoming object.
   * @returns the evicted key, or `undefined` when every resident object is pinned (or none is resident)
   */
  evict(): K | undefined;

  /**
   * The keys that the next `count` calls of `evict()` would return, in order, without changing any state.
   * Shorter than `count` when fewer objects are evictable.
   * @throws RangeError when `count` is not a non-negative safe integer
   */
  peekVictims(count: number): K[];

  /**
   * Removes `key` whether pinned or not (an explicit removal is the caller's decision) and forgets any ghost
   * history of it.
   * @returns `true` when a resident object was removed
   */
  remove(key: K): boolean;

  /**
   * Increments the pin count of a resident object; pinned objects are never victims.
   * @returns the new pin count, or 0 when `key` is not resident (nothing is pinned)
   * @throws RangeError when the pin count would exceed 2^32 - 1
   */
  pin(key: K): number;

  /**
   * Decrements the pin count of a resident object.
   * @returns the new pin count; 0 also when `key` is absent or was not pinned
   */
  unpin(key: K): number;

  /** The pin count of `key` (0 when absent). */
  pinCount(key: K): number;

  /** Empties the policy: no resident objects, no pins, no ghost history, adaptive state back to its start. */
  reset(): void;
}
