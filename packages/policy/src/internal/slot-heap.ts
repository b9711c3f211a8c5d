/**
 * Binary min-heaps of slot ids ordered by two per-slot numbers (`primary`, then `secondary`), for the policies that
 * rank objects by a score (OPT, GDSF, LFUDA). Several heaps may share one {@link HeapKeys} (a slot is in at most
 * one heap at a time), which holds the keys and each slot's position so a slot can leave its heap in O(log n).
 */
import { resizeFloat64, type SlotId } from './list.js';

/** Per-slot heap keys and positions, grown with the policy's slot arrays. */
export class HeapKeys {
  /** Ordering key; smaller comes out first. */
  primary: Float64Array;
  /** Tie-break; smaller comes out first. Callers keep it unique (a sequence number) so the order is total. */
  secondary: Float64Array;
  /** Index of the slot in its heap, or -1 when in none. */
  pos: Int32Array;

  constructor(slots: number) {
    this.primary = new Float64Array(slots);
    this.secondary = new Float64Array(slots);
    this.pos = new Int32Array(slots).fill(-1);
  }

  grow(slots: number): void {
    this.primary = resizeFloat64(this.primary, slots);
    this.secondary = resizeFloat64(this.secondary, slots);
    const pos = new Int32Array(slots).fill(-1);
    pos.set(this.pos.subarray(0, Math.min(this.pos.length, slots)));
    this.pos = pos;
  }

  /** Whether `a` comes out before `b`. */
  before(a: number, b: number): boolean {
    const pa = this.primary[a]!;
    const pb = this.primary[b]!;
    return pa < pb || (pa === pb && this.secondary[a]! < this.secondary[b]!);
  }

  reset(): void {
    this.pos.fill(-1);
  }
}

/** One heap over slots whose keys live in a shared {@link HeapKeys}. */
export class SlotHeap {
  readonly items: number[] = [];

  constructor(readonly keys: HeapKeys) {}

  get size(): number {
    return this.items.length;
  }

  /** The first slot, or -1 when empty. */
  top(): number {
    return this.items.length === 0 ? -1 : this.items[0]!;
  }

  /** Adds a slot whose keys are already set. */
  push(slot: SlotId): void {
    const i = this.items.length;
    this.items.push(slot);
    this.keys.pos[slot] = i;
    this.#up(i);
  }

  /** Removes a slot that is in this heap. */
  delete(slot: SlotId): void {
    const pos = this.keys.pos;
    const i = pos[slot]!;
    const last = this.items.pop()!;
    pos[slot] = -1;
    if (i === this.items.length) return;
    this.items[i] = last;
    pos[last] = i;
    this.#down(i);
    this.#up(pos[last]!);
  }

  /** Removes and returns the first slot (the heap must not be empty). */
  pop(): SlotId {
    const first = this.items[0]! as SlotId;
    this.delete(first);
    return first;
  }

  /** Restores the order after the keys of a slot in this heap changed. */
  update(slot: SlotId): void {
    const i = this.keys.pos[slot]!;
    this.#up(i);
    this.#down(this.keys.pos[slot]!);
  }

  clear(): void {
    for (const slot of this.items) this.keys.pos[slot] = -1;
    this.items.length = 0;
  }

  /**
   * Calls `take` with the first `limit` slots in the order `pop` would return them (the heap is unchanged). A
   * best-first walk of the heap's tree: the next slot is the first of a frontier of at most `limit + 1` slots, so a
   * short peek (what eviction planning and the chain-aware wrappers ask for) costs O(limit^2), not a sort.
   */
  first(limit: number, take: (slot: SlotId) => void): void {
    const items = this.items;
    const keys = this.keys;
    if (items.length === 0 || limit <= 0) return;
    // Frontier of heap indices whose parents were taken.
    const frontier: number[] = [0];
    for (let n = 0; n < limit && frontier.length > 0; n++) {
      let best = 0;
      for (let i = 1; i < frontier.length; i++) if (keys.before(items[frontier[i]!]!, items[frontier[best]!]!)) best = i;
      const at = frontier[best]!;
      frontier[best] = frontier[frontier.length - 1]!;
      frontier.pop();
      take(items[at]! as SlotId);
      const left = 2 * at + 1;
      if (left < items.length) frontier.push(left);
      if (left + 1 < items.length) frontier.push(left + 1);
    }
  }

  /** The slots in the order they would be popped (a sorted copy; the heap is unchanged). */
  sorted(): SlotId[] {
    return [...this.items].sort((a, b) => (this.keys.before(a, b) ? -1 : this.keys.before(b, a) ? 1 : 0)) as SlotId[];
  }

  #up(i: number): void {
    const items = this.items;
    const pos = this.keys.pos;
    const slot = items[i]!;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = items[parent]!;
      if (!this.keys.before(slot, p)) break;
      items[i] = p;
      pos[p] = i;
      i = parent;
    }
    items[i] = slot;
    pos[slot] = i;
  }

  #down(i: number): void {
    const items = this.items;
    const pos = this.keys.pos;
    const n = items.length;
    const slot = items[i]!;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && this.keys.before(items[child + 1]!, items[child]!)) child++;
      const c = items[child]!;
      if (!this.keys.before(c, slot)) break;
      items[i] = c;
      pos[c] = i;
      i = child;
    }
    items[i] = slot;
    pos[slot] = i;
  }
}
