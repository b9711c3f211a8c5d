/**
 * GDSF: Greedy-Dual-Size-Frequency.
 *
 * Cherkasova, "Improving WWW proxies performance with Greedy-Dual-Size-Frequency caching policy", HP Labs
 * HPL-98-69, 1998 (after Cao and Irani's GreedyDual-Size, USITS'97). Each object has a priority
 * `H = L + frequency x cost / size`; the victim has the lowest H and the clock `L` becomes the victim's H, so objects
 * not requested for a while age out. Semantics match libCacheSim `GDSF.cpp` (cost 1e6, the constant it uses):
 *
 * - insert: frequency 1, `H = L + 1e6 / size`; a hit: frequency + 1, `H = L + frequency x 1e6 / size` with the
 *   current L (the same double arithmetic);
 * - the victim has the lowest H; ties go to the object inserted or hit longest ago (libCacheSim orders equal
 *   priorities by the request time of their last update);
 * - `size` is the object's cost: bytes, or 1 in objects mode (libCacheSim `ignore_obj_size`), where GDSF ranks
 *   by `L + frequency`.
 *
 * Pinned objects leave the ranking while pinned and come back with the priority they had.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { HeapKeys, SlotHeap } from '../internal/slot-heap.js';
import { resizeFloat64, type SlotId } from '../internal/list.js';
import { heapFirst } from './heap-order.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** The cost libCacheSim's GDSF gives every object. */
const COST = 1.0e6;

/** Greedy-Dual-Size-Frequency. O(log n) per request. */
export class GdsfPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'gdsf';
  readonly #keys: HeapKeys;
  readonly #heap: SlotHeap;
  #freq: Float64Array;
  /** The aging clock L: the priority of the last victim. */
  #clock = 0;
  #seq = 0;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
    this.#keys = new HeapKeys(this.slotCapacity);
    this.#heap = new SlotHeap(this.#keys);
    this.#freq = new Float64Array(this.slotCapacity);
  }

  /** The aging clock L (the priority of the last victim). */
  get age(): number {
    return this.#clock;
  }

  /** Priority H of a resident object, `undefined` when absent. */
  priorityOf(key: K): number | undefined {
    return this.has(key) ? this.#keys.primary[this.slotFor(key)!] : undefined;
  }

  protected override onHit(slot: SlotId): void {
    const freq = this.#freq[slot]! + 1;
    this.#freq[slot] = freq;
    this.#stamp(slot, this.#clock + (freq * COST) / this.costOf(slot));
    if (this.#keys.pos[slot]! >= 0) this.#heap.update(slot);
  }

  protected override place(slot: SlotId): void {
    this.#freq[slot] = 1;
    this.#stamp(slot, this.#clock + COST / this.costOf(slot));
    this.#heap.push(slot);
  }

  protected override evictOne(): K {
    const slot = this.#heap.pop();
    this.#clock = this.#keys.primary[slot]!;
    return this.retire(slot, false);
  }

  /** Evicts `key` as a victim: the clock L becomes its priority H (never lower: L only grows). */
  evictKey(key: K): boolean {
    const slot = this.has(key) ? this.slotFor(key)! : undefined;
    if (slot === undefined || this.isPinned(slot)) return false;
    this.#heap.delete(slot);
    this.#clock = Math.max(this.#clock, this.#keys.primary[slot]!);
    this.retire(slot, false);
    return true;
  }

  protected override collectVictims(limit: number, out: K[]): void {
    // Evicting raises L but changes no resident's priority, so the next victims are the heap in order.
    heapFirst(this.#heap, limit, (slot) => out.push(this.keyAt(slot)));
  }

  protected override onRemove(slot: SlotId): void {
    if (this.#keys.pos[slot]! >= 0) this.#heap.delete(slot);
  }

  protected override onPinChange(slot: SlotId, pinned: boolean): void {
    if (pinned) this.#heap.delete(slot);
    else this.#heap.push(slot);
  }

  protected override onGrow(slots: number): void {
    this.#keys.grow(slots);
    this.#freq = resizeFloat64(this.#freq, slots);
  }

  protected override onReset(): void {
    this.#heap.clear();
    this.#keys.reset();
    this.#clock = 0;
    this.#seq = 0;
  }

  #stamp(slot: SlotId, priority: number): void {
    this.#keys.primary[slot] = priority;
    this.#keys.secondary[slot] = this.#seq++;
  }
}
