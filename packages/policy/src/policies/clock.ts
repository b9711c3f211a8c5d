/**
 * CLOCK with one reference bit (second chance).
 *
 * Corbató, "A paging experiment with the Multics system", MIT Project MAC MAC-M-384, 1968. Semantics match
 * libCacheSim `Clock.c` with its default `n-bit-counter=1`: the clock is kept as a FIFO queue; new objects enter
 * at the head with the bit clear; a hit sets the bit; eviction looks at the tail: an object with the bit set gets
 * a second chance (bit cleared, moved to the head), the first one found with the bit clear is the victim.
 * Pinned objects are passed over in place, their bit untouched.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { emptyList, clearList, NIL, resizeUint8, type SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** CLOCK (second chance) with one reference bit per object. */
export class ClockPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'clock';
  readonly #queue = emptyList();
  #referenced: Uint8Array;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
    this.#referenced = new Uint8Array(this.slotCapacity);
  }

  /** @internal White-box view for tests: keys from head to tail, and the referenced ones. */
  snapshot(): { queue: K[]; referenced: K[] } {
    const queue = this.listKeys(this.#queue);
    return { queue, referenced: queue.filter((key) => this.#referenced[this.slotFor(key)!] === 1) };
  }

  protected override onHit(slot: SlotId): void {
    this.#referenced[slot] = 1;
  }

  protected override place(slot: SlotId): void {
    this.#referenced[slot] = 0;
    this.links.pushHead(this.#queue, slot);
  }

  protected override evictOne(): K {
    let slot = this.#queue.tail;
    for (;;) {
      const newer = this.links.newer(slot);
      if (!this.isPinned(slot)) {
        if (this.#referenced[slot] === 0) break;
        this.#referenced[slot] = 0;
        this.links.moveToHead(this.#queue, slot);
      }
      slot = newer === NIL ? this.#queue.tail : newer;
    }
    this.links.unlink(this.#queue, slot);
    return this.retire(slot, false);
  }

  // Unreferenced objects go in queue order; the referenced ones come back, bits cleared, in the same order.
  protected override collectVictims(limit: number, out: K[]): void {
    const secondChance: K[] = [];
    for (let s = this.#queue.tail; s !== NIL && out.length < limit; s = this.links.newer(s)) {
      if (this.isPinned(s)) continue;
      if (this.#referenced[s] === 0) out.push(this.keyAt(s));
      else secondChance.push(this.keyAt(s));
    }
    for (const key of secondChance) {
      if (out.length >= limit) break;
      out.push(key);
    }
  }

  protected override onRemove(slot: SlotId): void {
    this.links.unlink(this.#queue, slot);
  }

  protected override onGrow(slots: number): void {
    this.#referenced = resizeUint8(this.#referenced, slots);
  }

  protected override onReset(): void {
    clearList(this.#queue);
    this.#referenced.fill(0);
  }
}
