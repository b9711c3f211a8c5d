/**
 * MRU: Most Recently Used.
 *
 * Chou and DeWitt, "An evaluation of buffer management strategies for relational database systems", VLDB'85,
 * where MRU is the right policy for repeated sequential scans larger than the cache (LRU then misses on every
 * access). Semantics match libCacheSim `MRU.c`: one recency list, new objects and hits go to the head, the victim
 * is the head (the object requested last). Pinned objects are passed over in place: the victim is the most
 * recently used unpinned object.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { clearList, emptyList, NIL, type SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Most Recently Used. O(1) access and insert; eviction O(1) plus the pinned objects it passes. */
export class MruPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'mru';
  readonly #queue = emptyList();

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
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
    let slot = this.#queue.head;
    while (this.isPinned(slot)) slot = this.links.older(slot);
    this.links.unlink(this.#queue, slot);
    return this.retire(slot, false);
  }

  protected override collectVictims(limit: number, out: K[]): void {
    for (let s = this.#queue.head; s !== NIL && out.length < limit; s = this.links.older(s)) {
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
