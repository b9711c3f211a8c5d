/**
 * OPT-size: Belady's rule weighted by size, the usual offline reference for byte-capacity caches.
 *
 * Optimal eviction with variable sizes is NP-hard (Berger et al., "Practical bounds on optimal caching with
 * variable object sizes", SIGMETRICS'18), so byte-mode bounds use a size-aware Belady. This follows libCacheSim
 * `BeladySize.c`, made exact (libCacheSim scores 128 random samples per eviction; this scores every candidate):
 *
 * - the victim is the resident object with the largest `cost x (next request - now)` (cost = size in bytes, or 1 in
 *   objects mode, where this is plain Belady); objects never requested again score Infinity and go first, the
 *   largest of them first; remaining ties go oldest first;
 * - an object whose next request is known to be "never" is not admitted (`canAdmit` is false: caching it cannot
 *   produce a hit and would evict objects that can), as libCacheSim's `BeladySize_insert` skips it.
 *
 * The future comes from `access(key, nextAccess)` exactly as for `opt`; an access without `nextAccess` counts as
 * "never again" for ranking but is still admitted. Since scores shrink at a rate equal to the cost, objects are
 * kept in one heap per cost (farthest next request first), and an eviction compares the heads: O(log n + distinct
 * resident costs). With one page size (LLM traces) there is one heap and this is Belady.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { HeapKeys, SlotHeap } from '../internal/slot-heap.js';
import type { SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';
import { checkNextAccess } from './opt.js';

/** Size-aware Belady: evicts the largest `cost x distance to the next request`. Needs `access(key, nextAccess)`. */
export class OptSizePolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'opt-size';
  readonly #keys: HeapKeys;
  /** Unpinned residents by cost, each heap farthest next request first. */
  readonly #groups = new Map<number, SlotHeap>();
  #clock = 0;
  #seq = 0;
  #pendingKey: K | undefined;
  #pendingNext = Infinity;
  /** Whether the last `access` carried `nextAccess`. */
  #pendingKnown = false;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
    this.#keys = new HeapKeys(this.slotCapacity);
  }

  /** The request clock: `access` calls since creation or `reset`. */
  get clock(): number {
    return this.#clock;
  }

  override access(key: K, nextAccess?: number): boolean {
    const distance = checkNextAccess(nextAccess);
    this.#clock++;
    this.#pendingKey = key;
    this.#pendingKnown = distance !== undefined;
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

  protected override admits(key: K): boolean {
    return !(this.#pendingKnown && this.#pendingKey === key && this.#pendingNext === Infinity);
  }

  protected override onHit(slot: SlotId): void {
    const inHeap = this.#keys.pos[slot]! >= 0;
    this.#stamp(slot, this.#pendingNext);
    if (inHeap) this.#groupOf(slot).update(slot);
  }

  protected override place(slot: SlotId): void {
    this.#stamp(slot, this.#pendingKey === this.keyAt(slot) ? this.#pendingNext : Infinity);
    this.#groupOf(slot).push(slot);
  }

  protected override evictOne(): K {
    let best = -1;
    let bestScore = -1;
    let bestCost = 0;
    for (const [cost, heap] of this.#groups) {
      const slot = heap.top();
      const score = this.#score(slot, cost);
      if (best < 0 || this.#better(score, cost, slot, bestScore, bestCost, best)) {
        best = slot;
        bestScore = score;
        bestCost = cost;
      }
    }
    const slot = best as SlotId;
    this.#leave(slot);
    return this.retire(slot, false);
  }

  protected override collectVictims(limit: number, out: K[]): void {
    const all: { slot: number; score: number; cost: number }[] = [];
    for (const [cost, heap] of this.#groups) {
      for (const slot of heap.items) all.push({ slot, score: this.#score(slot, cost), cost });
    }
    all.sort((a, b) => (this.#better(a.score, a.cost, a.slot, b.score, b.cost, b.slot) ? -1 : 1));
    for (let i = 0; i < all.length && out.length < limit; i++) out.push(this.keyAt(all[i]!.slot as SlotId));
  }

  protected override onRemove(slot: SlotId): void {
    if (this.#keys.pos[slot]! >= 0) this.#leave(slot);
  }

  protected override onPinChange(slot: SlotId, pinned: boolean): void {
    if (pinned) this.#leave(slot);
    else this.#groupOf(slot).push(slot);
  }

  protected override onGrow(slots: number): void {
    this.#keys.grow(slots);
  }

  protected override onReset(): void {
    this.#groups.clear();
    this.#keys.reset();
    this.#clock = 0;
    this.#seq = 0;
    this.#pendingKey = undefined;
    this.#pendingNext = Infinity;
    this.#pendingKnown = false;
  }

  #score(slot: number, cost: number): number {
    const next = -this.#keys.primary[slot]!;
    return next === Infinity ? Infinity : cost * (next - this.#clock);
  }

  /** Whether candidate a is evicted before b: higher score, then larger cost, then older. */
  #better(sa: number, ca: number, a: number, sb: number, cb: number, b: number): boolean {
    if (sa !== sb) return sa > sb;
    if (ca !== cb) return ca > cb;
    return this.#keys.secondary[a]! < this.#keys.secondary[b]!;
  }

  #groupOf(slot: SlotId): SlotHeap {
    const cost = this.costOf(slot);
    let heap = this.#groups.get(cost);
    if (heap === undefined) {
      heap = new SlotHeap(this.#keys);
      this.#groups.set(cost, heap);
    }
    return heap;
  }

  /** Takes an unpinned resident out of its heap, dropping the heap when it empties (keeps evictions' scan short). */
  #leave(slot: SlotId): void {
    const cost = this.costOf(slot);
    const heap = this.#groups.get(cost)!;
    heap.delete(slot);
    if (heap.size === 0) this.#groups.delete(cost);
  }

  #stamp(slot: SlotId, next: number): void {
    this.#keys.primary[slot] = -next;
    this.#keys.secondary[slot] = this.#seq++;
  }
}
