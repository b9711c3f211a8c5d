/**
 * The one recency list LRU and MRU share: new objects and hits go to the head; the two policies differ only in
 * which end the victim comes from. Pinned objects are passed over in place, walking from the victim end inwards.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { clearList, emptyList, NIL, type SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Which end of the recency list the victim is taken from: `tail` = least recently used, `head` = most. */
export type VictimEnd = 'tail' | 'head';

/** A recency list with the victim taken from one end. O(1) access and insert; eviction O(1) plus pinned passes. */
export abstract class RecencyListPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  readonly #queue = emptyList();
  readonly #fromHead: boolean;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions, victimEnd: VictimEnd) {
    super(options);
    this.#fromHead = victimEnd === 'head';
  }

  /** @internal White-box view for tests: keys from most to least recently used. */
  snapshot(): { queue: K[] } {
    return { queue: this.listKeys(this.#queue) };
  }

  protected override onHit(slot: SlotId): void {
    this.links.moveToHead(this.#queue, slot);
  }

  protected override place(slot: SlotId): void {
    this.links.pushHead(this.#queue, slot);
  }

  protected override evictOne(): K {
    let slot = this.#first();
    while (this.isPinned(slot)) slot = this.#inward(slot);
    this.links.unlink(this.#queue, slot);
    return this.retire(slot, false);
  }

  protected override collectVictims(limit: number, out: K[]): void {
    for (let s = this.#first(); s !== NIL && out.length < limit; s = this.#inward(s)) {
      if (!this.isPinned(s)) out.push(this.keyAt(s));
    }
  }

  protected override onRemove(slot: SlotId): void {
    this.links.unlink(this.#queue, slot);
  }

  protected override onReset(): void {
    clearList(this.#queue);
  }

  /** The slot at the victim end. */
  #first(): SlotId {
    return this.#fromHead ? this.#queue.head : this.#queue.tail;
  }

  /** The next slot from the victim end towards the other end. */
  #inward(slot: SlotId): SlotId {
    return this.#fromHead ? this.links.older(slot) : this.links.newer(slot);
  }
}
