/**
 * The slot heap the priority-ordered policies (GDSF, LFUDA, OPT) keep: unpinned residents in a binary heap on
 * `(primary, stamp order)`, lowest first; pinned objects leave the heap while pinned and come back with the
 * priority they had. Subclasses decide the priorities; the next victims are the heap's first slots.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { HeapKeys, SlotHeap } from '../internal/slot-heap.js';
import type { SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** A slot policy whose unpinned residents sit in one heap; ties go to the slot stamped first. */
export abstract class HeapSlotPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  /** Per-slot heap keys: `primary` the priority, `secondary` the stamp order. */
  protected readonly heapKeys: HeapKeys;
  /** Unpinned residents, lowest `primary` first. */
  protected readonly heap: SlotHeap;
  #seq = 0;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
    this.heapKeys = new HeapKeys(this.slotCapacity);
    this.heap = new SlotHeap(this.heapKeys);
  }

  /** Gives `slot` the priority `primary`, ranked after every slot stamped before it at the same priority. */
  protected stamp(slot: SlotId, primary: number): void {
    this.heapKeys.primary[slot] = primary;
    this.heapKeys.secondary[slot] = this.#seq++;
  }

  /** Restores the heap order after `slot` was stamped again (a pinned slot is not in the heap). */
  protected reorder(slot: SlotId): void {
    if (this.heapKeys.pos[slot]! >= 0) this.heap.update(slot);
  }

  protected override collectVictims(limit: number, out: K[]): void {
    // An eviction changes no other resident's priority, so the next victims are the heap in pop order.
    this.heap.first(limit, (slot) => out.push(this.keyAt(slot)));
  }

  protected override onRemove(slot: SlotId): void {
    if (this.heapKeys.pos[slot]! >= 0) this.heap.delete(slot);
  }

  protected override onPinChange(slot: SlotId, pinned: boolean): void {
    if (pinned) this.heap.delete(slot);
    else this.heap.push(slot);
  }

  protected override onGrow(slots: number): void {
    this.heapKeys.grow(slots);
  }

  protected override onReset(): void {
    this.heap.clear();
    this.heapKeys.reset();
    this.#seq = 0;
  }
}
