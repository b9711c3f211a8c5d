/**
 * FIFO: First In, First Out.
 *
 * The baseline queue (Belady, "A study of replacement algorithms for a virtual-storage computer", IBM Systems
 * Journal 5(2), 1966, studies it beside random and optimal replacement). Semantics match libCacheSim `FIFO.c`:
 * new objects enter at the head, hits change nothing, the victim is the tail (oldest insertion).
 * Pinned objects are passed over in place: the victim is the oldest unpinned object.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { emptyList, clearList, NIL, type SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** First In, First Out. O(1) everything, plus the pinned objects an eviction passes. */
export class FifoPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'fifo';
  readonly #queue = emptyList();

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
  }

  /** @internal White-box view for tests: keys from newest to oldest. */
  snapshot(): { queue: K[] } {
    return { queue: this.listKeys(this.#queue) };
  }

  protected override onHit(): void {}

  protected override place(slot: SlotId): void {
    this.links.pushHead(this.#queue, slot);
  }

  protected override evictOne(): K {
    let slot = this.#queue.tail;
    while (this.isPinned(slot)) slot = this.links.newer(slot);
    this.links.unlink(this.#queue, slot);
    return this.retire(slot, false);
  }

  protected override collectVictims(limit: number, out: K[]): void {
    for (let s = this.#queue.tail; s !== NIL && out.length < limit; s = this.links.newer(s)) {
      if (!this.isPinned(s)) out.push(this.keyAt(s));
    }
  }

  protected override onRemove(slot: SlotId): void {
    this.links.unlink(this.#queue, slot);
  }

  protected override onReset(): void {
    clearList(this.#queue);
  }
}
