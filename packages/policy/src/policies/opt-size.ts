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
 * "never again" for ranking but is still admitted. Scores shrink as time passes, each at a rate equal to its cost,
 * so objects are kept in one heap per cost (farthest next request first) and the heads of those heaps in a heap of
 * groups keyed by their score when last computed: a stale key can only overstate a score, so an eviction
 * recomputes the top group's score and takes it once it still beats every other group's key (O(log n) plus the
 * groups whose stale keys it passes). With one page size (LLM traces) there is one group and this is Belady.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { HeapKeys, SlotHeap } from '../internal/slot-heap.js';
import type { SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';
import { checkNextAccess } from './opt.js';

/** The unpinned residents of one cost, and their place in the heap of groups. */
interface Group {
  readonly cost: number;
  readonly heap: SlotHeap;
  /** The head's score when last computed: its current score or more (scores only fall as time passes). */
  key: number;
  /** Position in the heap of groups. */
  index: number;
}

/** Size-aware Belady: evicts the largest `cost x distance to the next request`. Needs `access(key, nextAccess)`. */
export class OptSizePolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'opt-size';
  readonly #keys: HeapKeys;
  /** Unpinned residents by cost, each heap farthest next request first. */
  readonly #groups = new Map<number, Group>();
  /** The non-empty groups, highest key first (see {@link Group}). */
  readonly #order: Group[] = [];
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
    if (inHeap) {
      const group = this.#groups.get(this.costOf(slot))!;
      group.heap.update(slot);
      this.#rekey(group);
    }
  }

  protected override place(slot: SlotId): void {
    this.#stamp(slot, this.#pendingKey === this.keyAt(slot) ? this.#pendingNext : Infinity);
    this.#join(slot);
  }

  protected override evictOne(): K {
    // The top group's key may be stale (too high): refresh it; once the top stays on top, its head is the victim.
    for (;;) {
      const group = this.#order[0]!;
      this.#rekey(group);
      if (this.#order[0] === group) break;
    }
    const slot = this.#order[0]!.heap.top() as SlotId;
    this.#leave(slot);
    return this.retire(slot, false);
  }

  protected override collectVictims(limit: number, out: K[]): void {
    const all: { slot: number; score: number; cost: number }[] = [];
    for (const [cost, group] of this.#groups) {
      for (const slot of group.heap.items) all.push({ slot, score: this.#score(slot, cost), cost });
    }
    all.sort((a, b) => (this.#better(a.score, a.cost, a.slot, b.score, b.cost, b.slot) ? -1 : 1));
    for (let i = 0; i < all.length && out.length < limit; i++) out.push(this.keyAt(all[i]!.slot as SlotId));
  }

  protected override onRemove(slot: SlotId): void {
    if (this.#keys.pos[slot]! >= 0) this.#leave(slot);
  }

  protected override onPinChange(slot: SlotId, pinned: boolean): void {
    if (pinned) this.#leave(slot);
    else this.#join(slot);
  }

  protected override onGrow(slots: number): void {
    this.#keys.grow(slots);
  }

  protected override onReset(): void {
    this.#groups.clear();
    this.#order.length = 0;
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

  /** Puts an unpinned resident (keys set) into its cost's heap. */
  #join(slot: SlotId): void {
    const cost = this.costOf(slot);
    let group = this.#groups.get(cost);
    if (group === undefined) {
      group = { cost, heap: new SlotHeap(this.#keys), key: 0, index: this.#order.length };
      this.#groups.set(cost, group);
      this.#order.push(group);
    }
    group.heap.push(slot);
    this.#rekey(group);
  }

  /** Takes an unpinned resident out of its heap, dropping the group when it empties (keeps the group heap small). */
  #leave(slot: SlotId): void {
    const cost = this.costOf(slot);
    const group = this.#groups.get(cost)!;
    group.heap.delete(slot);
    if (group.heap.size > 0) {
      this.#rekey(group);
      return;
    }
    this.#groups.delete(cost);
    const last = this.#order.pop()!;
    if (last !== group) {
      this.#order[group.index] = last;
      last.index = group.index;
      this.#siftDown(last);
      this.#siftUp(last);
    }
  }

  /** Sets a group's key to its head's score now and restores the group heap. */
  #rekey(group: Group): void {
    const old = group.key;
    group.key = this.#score(group.heap.top(), group.cost);
    if (group.key >= old) this.#siftUp(group);
    if (group.key <= old) this.#siftDown(group);
  }

  /** Whether group a comes before group b: by key, then as {@link #better} for their heads. */
  #before(a: Group, b: Group): boolean {
    return this.#better(a.key, a.cost, a.heap.top(), b.key, b.cost, b.heap.top());
  }

  #siftUp(group: Group): void {
    const order = this.#order;
    let i = group.index;
    while (i > 0) {
      const parent = order[(i - 1) >> 1]!;
      if (!this.#before(group, parent)) break;
      order[i] = parent;
      parent.index = i;
      i = (i - 1) >> 1;
    }
    order[i] = group;
    group.index = i;
  }

  #siftDown(group: Group): void {
    const order = this.#order;
    const n = order.length;
    let i = group.index;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && this.#before(order[child + 1]!, order[child]!)) child++;
      const c = order[child]!;
      if (!this.#before(c, group)) break;
      order[i] = c;
      c.index = i;
      i = child;
    }
    order[i] = group;
    group.index = i;
  }

  #stamp(slot: SlotId, next: number): void {
    this.#keys.primary[slot] = -next;
    this.#keys.secondary[slot] = this.#seq++;
  }
}
