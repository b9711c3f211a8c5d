/**
 * OPT: Belady's optimal offline policy (MIN).
 *
 * Belady, "A study of replacement algorithms for a virtual-storage computer", IBM Systems Journal 5(2), 1966: the
 * victim is the resident object whose next request lies farthest in the future; with every object costing one
 * unit this gives the fewest misses any policy can (Mattson et al. 1970 prove it for demand paging). Semantics match
 * libCacheSim `Belady.c`: every miss is inserted, and objects never requested again (`Infinity`) go first.
 *
 * The future comes from the caller: `access(key, nextAccess)` says in how many requests `key` comes back (see
 * {@link EvictionPolicy.access}); the policy counts its `access` calls as the clock, so a distance becomes an
 * absolute request number, and the `insert` that follows a miss uses the same answer. An access without
 * `nextAccess` (live use, tests) counts as "never again". Ties (several objects never requested again) go in
 * insertion or last-hit order, oldest first.
 *
 * In bytes mode this is still Belady's rule (farthest next request, whatever the size), which is not optimal for
 * variable sizes (that problem is NP-hard); `opt-size` is the size-aware variant. Pinned objects leave the heap
 * while pinned.
 */
import type { SlotId } from '../internal/list.js';
import { HeapSlotPolicy } from './heap-policy.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Validates an oracle distance: `undefined` (unknown), or a number >= 1 (`Infinity` = never again). */
export function checkNextAccess(nextAccess: unknown): number | undefined {
  if (nextAccess === undefined) return undefined;
  if (typeof nextAccess !== 'number' || !(nextAccess >= 1)) {
    throw new RangeError(`nextAccess must be a number >= 1 or Infinity, got ${String(nextAccess)}`);
  }
  return nextAccess;
}

/** The value {@link nextAccessDistances} stores for "never requested again". */
export const NEVER_AGAIN = 0;

/**
 * The `nextAccess` of every request of a trace, in one backward pass: `out[i]` is in how many requests `keys[i]`
 * is requested again (`i' - i` for the next position `i'` with the same key), or {@link NEVER_AGAIN} (0) when it
 * never is. Memory: the output (4 bytes per request) and the last-seen position of each key, an Int32Array of
 * `denseBound` entries when every key is an integer in `[0, denseBound)`, a `Map` otherwise.
 * @throws RangeError for a trace of 2^32 requests or more, or a key outside `[0, denseBound)`
 */
export function nextAccessDistances<K extends PolicyKey>(keys: ArrayLike<K>, denseBound?: number): Uint32Array {
  const n = keys.length;
  if (n >= 2 ** 32) throw new RangeError(`keys: ${n} requests do not fit 32-bit distances`);
  const out = new Uint32Array(n);
  if (denseBound !== undefined) {
    const last = new Int32Array(denseBound).fill(-1);
    for (let i = n - 1; i >= 0; i--) {
      const k = keys[i] as unknown as number;
      if (!(k >= 0 && k < denseBound)) throw new RangeError(`keys[${i}] = ${String(k)} is outside [0, ${denseBound})`);
      const seen = last[k]!;
      if (seen >= 0) out[i] = seen - i;
      last[k] = i;
    }
    return out;
  }
  const last = new Map<K, number>();
  for (let i = n - 1; i >= 0; i--) {
    const k = keys[i]!;
    const seen = last.get(k);
    if (seen !== undefined) out[i] = seen - i;
    last.set(k, i);
  }
  return out;
}

/** Belady's OPT (MIN): evicts the object requested again farthest in the future. Needs `access(key, nextAccess)`. */
export class OptPolicy<K extends PolicyKey = PolicyKey> extends HeapSlotPolicy<K> {
  override readonly name: string = 'opt';
  // The heap holds unpinned residents farthest next request first (priority: minus the next request).
  /** Requests seen (`access` calls). */
  #clock = 0;
  /** The key of the last `access` and its next request (absolute), for the `insert` that follows a miss. */
  #pendingKey: K | undefined;
  #pendingNext = Infinity;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
  }

  /** The request clock: `access` calls since creation or `reset`. */
  get clock(): number {
    return this.#clock;
  }

  override access(key: K, nextAccess?: number): boolean {
    const distance = checkNextAccess(nextAccess);
    this.#clock++;
    this.#pendingKey = key;
    this.#pendingNext = distance === undefined ? Infinity : this.#clock + distance;
    try {
      return super.access(key);
    } catch (e) {
      // A refused key is not a request: the clock and the pending answer stay as they were.
      this.#clock--;
      this.#pendingKey = undefined;
      throw e;
    }
  }

  /** @internal White-box view for tests: resident keys with their next request (absolute), farthest first. */
  snapshot(): { order: [K, number][] } {
    return { order: this.heap.sorted().map((s) => [this.keyAt(s), -this.heapKeys.primary[s]!]) };
  }

  protected override onHit(slot: SlotId): void {
    this.#stamp(slot, this.#pendingNext);
    this.reorder(slot);
  }

  protected override place(slot: SlotId): void {
    this.#stamp(slot, this.#pendingKey === this.keyAt(slot) ? this.#pendingNext : Infinity);
    this.heap.push(slot);
  }

  protected override evictOne(): K {
    return this.retire(this.heap.pop(), false);
  }

  protected override onReset(): void {
    super.onReset();
    this.#clock = 0;
    this.#pendingKey = undefined;
    this.#pendingNext = Infinity;
  }

  #stamp(slot: SlotId, next: number): void {
    this.stamp(slot, -next);
  }
}
