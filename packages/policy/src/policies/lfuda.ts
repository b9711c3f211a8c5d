/**
 * LFUDA: LFU with Dynamic Aging.
 *
 * Arlitt, Cherkasova, Dilley, Friedrich, Jin, "Evaluating content management techniques for Web proxy caches",
 * ACM SIGMETRICS Performance Evaluation Review 27(4), 2000 (the policy of Squid's `heap LFUDA`). Written from the
 * paper: each object has a key `K = F + L`, where F counts its requests since it entered the cache (1 on insert, +1
 * per hit, K recomputed with the current L) and L is the cache age, the key of the last victim (0 at start); the
 * victim has the lowest K, ties going to the object inserted or hit longest ago. Aging lets once-popular objects
 * leave, which plain LFU never does. Sizes do not enter the key (GDSF is the size-aware sibling; in objects mode
 * the two rank alike).
 *
 * libCacheSim's `LFUDA.c` differs on a hit (`K = K + L` instead of `F + 1 + L`) and moves its bucket cursor L only
 * upwards past the object being hit, which can leave objects below L that it then never evicts; its asserted
 * counts (test_evictionAlgo.c `test_LFUDA`) are therefore not claimed here.
 *
 * Pinned objects leave the ranking while pinned and come back with the key they had.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { HeapKeys, SlotHeap } from '../internal/slot-heap.js';
import { resizeFloat64, type SlotId } from '../internal/list.js';
import { heapFirst } from './heap-order.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** LFU with dynamic aging. O(log n) per request. */
export class LfudaPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'lfuda';
  readonly #keys: HeapKeys;
  readonly #heap: SlotHeap;
  #freq: Float64Array;
  /** The cache age L: the key of the last victim. */
  #age = 0;
  #seq = 0;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
    this.#keys = new HeapKeys(this.slotCapacity);
    this.#heap = new SlotHeap(this.#keys);
    this.#freq = new Float64Array(this.slotCapacity);
  }

  /** The cache age L (the key of the last victim). */
  get age(): number {
    return this.#age;
  }

  /** Key K of a resident object, `undefined` when absent. */
  keyValueOf(key: K): number | undefined {
    return this.has(key) ? this.#keys.primary[this.slotFor(key)!] : undefined;
  }

  protected override onHit(slot: SlotId): void {
    const freq = this.#freq[slot]! + 1;
    this.#freq[slot] = freq;
    this.#stamp(slot, freq + this.#age);
    if (this.#keys.pos[slot]! >= 0) this.#heap.update(slot);
  }

  protected override place(slot: SlotId): void {
    this.#freq[slot] = 1;
    this.#stamp(slot, 1 + this.#age);
    this.#heap.push(slot);
  }

  protected override evictOne(): K {
    const slot = this.#heap.pop();
    this.#age = this.#keys.primary[slot]!;
    return this.retire(slot, false);
  }

  /** Evicts `key` as a victim: the cache age L becomes its key (never lower: L only grows). */
  evictKey(key: K): boolean {
    const slot = this.has(key) ? this.slotFor(key)! : undefined;
    if (slot === undefined || this.isPinned(slot)) return false;
    this.#heap.delete(slot);
    this.#age = Math.max(this.#age, this.#keys.primary[slot]!);
    this.retire(slot, false);
    return true;
  }

  protected override collectVictims(limit: number, out: K[]): void {
    // Evicting raises L but changes no resident's key, so the next victims are the heap in order.
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
    this.#age = 0;
    this.#seq = 0;
  }

  #stamp(slot: SlotId, k: number): void {
    this.#keys.primary[slot] = k;
    this.#keys.secondary[slot] = this.#seq++;
  }
}
