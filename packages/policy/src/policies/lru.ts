/**
 * LRU: Least Recently Used.
 *
 * The textbook policy (e.g. Mattson et al., "Evaluation techniques for storage hierarchies", IBM Systems Journal
 * 9(2), 1970, where LRU's stack property is introduced). Semantics match libCacheSim `LRU.c`: a hit moves the
 * object to the head; new objects enter at the head; the victim is the tail (least recently used).
 * Pinned objects are passed over in place: the victim is the least recently used unpinned object.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { emptyList, clearList, NIL, type SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Least Recently Used. O(1) access and insert; eviction O(1) plus the pinned objects it passes. */
export class LruPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'lru';
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
