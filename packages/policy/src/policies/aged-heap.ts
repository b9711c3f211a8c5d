/**
 * The aged-priority heap GDSF and LFUDA share: each object has a priority `L + worth(frequency, cost)`, where the
 * frequency counts requests since the object entered (1 on insert, +1 per hit) and L is the priority of the last
 * victim (0 at start), so objects not requested for a while age out. The victim has the lowest priority; ties go to
 * the object inserted or hit longest ago. Subclasses supply only `worth`.
 *
 * Pinned objects leave the ranking while pinned and come back with the priority they had.
 */
import { resizeFloat64, type SlotId } from '../internal/list.js';
import { HeapSlotPolicy } from './heap-policy.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** A min-heap on `L + worth(frequency, cost)` with L the last victim's priority. O(log n) per request. */
export abstract class AgedHeapPolicy<K extends PolicyKey = PolicyKey> extends HeapSlotPolicy<K> {
  #freq: Float64Array;
  /** The aging clock L: the priority of the last victim. */
  #clock = 0;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
    this.#freq = new Float64Array(this.slotCapacity);
  }

  /** What an object of this request count and cost adds to the clock L to make its priority. */
  protected abstract worth(freq: number, cost: number): number;

  /** The aging clock L (the priority of the last victim). */
  get age(): number {
    return this.#clock;
  }

  /** Priority of a resident object, `undefined` when absent. */
  protected priorityAt(key: K): number | undefined {
    return this.has(key) ? this.heapKeys.primary[this.slotFor(key)!] : undefined;
  }

  protected override onHit(slot: SlotId): void {
    const freq = this.#freq[slot]! + 1;
    this.#freq[slot] = freq;
    this.stamp(slot, this.#clock + this.worth(freq, this.costOf(slot)));
    this.reorder(slot);
  }

  protected override place(slot: SlotId): void {
    this.#freq[slot] = 1;
    this.stamp(slot, this.#clock + this.worth(1, this.costOf(slot)));
    this.heap.push(slot);
  }

  protected override evictOne(): K {
    const slot = this.heap.pop();
    this.#clock = this.heapKeys.primary[slot]!;
    return this.retire(slot, false);
  }

  /** Evicts `key` as a victim: the clock L becomes its priority (never lower: L only grows). */
  evictKey(key: K): boolean {
    const slot = this.evictableSlot(key);
    if (slot === undefined) return false;
    this.heap.delete(slot);
    this.#clock = Math.max(this.#clock, this.heapKeys.primary[slot]!);
    this.retire(slot, false);
    return true;
  }

  protected override onGrow(slots: number): void {
    super.onGrow(slots);
    this.#freq = resizeFloat64(this.#freq, slots);
  }

  protected override onReset(): void {
    super.onReset();
    this.#clock = 0;
  }
}
