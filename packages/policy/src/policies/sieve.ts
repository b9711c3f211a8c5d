/**
 * SIEVE.
 *
 * Zhang, Yang, Yue, Vigfusson, Rashmi, "SIEVE is Simpler than LRU: an Efficient Turn-Key Eviction Algorithm for
 * Web Caches", NSDI'24. Semantics match libCacheSim `Sieve.c`: one FIFO queue; new objects enter at the head with
 * the visited bit clear; a hit sets the bit (objects never move); the hand starts at the tail and moves towards
 * the head, clearing visited bits, and evicts the first unvisited object; it then rests on that object's newer
 * neighbour, wrapping to the tail after the head. Removing the object under the hand moves the hand to its newer
 * neighbour. Pinned objects are passed over in place, their bit untouched.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { emptyList, clearList, NIL, resizeUint8, type SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** SIEVE: a FIFO queue with a visited bit and a hand that retains objects in place. */
export class SievePolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'sieve';
  readonly #queue = emptyList();
  #visited: Uint8Array;
  /** NIL means "start at the tail" (no eviction yet, or the hand passed the head). */
  #hand: SlotId = NIL;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
    this.#visited = new Uint8Array(this.slotCapacity);
  }

  /** @internal White-box view for tests: keys head to tail, the visited ones, and the key under the hand. */
  snapshot(): { queue: K[]; visited: K[]; hand: K | undefined } {
    const queue = this.listKeys(this.#queue);
    return {
      queue,
      visited: queue.filter((key) => this.#visited[this.slotFor(key)!] === 1),
      hand: this.#hand === NIL ? undefined : this.keyAt(this.#hand),
    };
  }

  protected override onHit(slot: SlotId): void {
    this.#visited[slot] = 1;
  }

  protected override place(slot: SlotId): void {
    this.#visited[slot] = 0;
    this.links.pushHead(this.#queue, slot);
  }

  protected override evictOne(): K {
    let slot = this.#hand === NIL ? this.#queue.tail : this.#hand;
    for (;;) {
      if (!this.isPinned(slot)) {
        if (this.#visited[slot] === 0) break;
        this.#visited[slot] = 0;
      }
      const newer = this.links.newer(slot);
      slot = newer === NIL ? this.#queue.tail : newer;
    }
    this.#hand = this.links.newer(slot);
    this.links.unlink(this.#queue, slot);
    return this.retire(slot, false);
  }

  // One lap from the hand yields the unvisited objects; the visited ones (cleared on that lap) follow in order.
  protected override collectVictims(limit: number, out: K[]): void {
    const start = this.#hand === NIL ? this.#queue.tail : this.#hand;
    const secondLap: K[] = [];
    let slot = start;
    do {
      if (!this.isPinned(slot)) {
        if (this.#visited[slot] === 0) out.push(this.keyAt(slot));
        else secondLap.push(this.keyAt(slot));
      }
      const newer = this.links.newer(slot);
      slot = newer === NIL ? this.#queue.tail : newer;
    } while (slot !== start && out.length < limit);
    for (const key of secondLap) {
      if (out.length >= limit) break;
      out.push(key);
    }
  }

  protected override onRemove(slot: SlotId): void {
    if (slot === this.#hand) this.#hand = this.links.newer(slot);
    this.links.unlink(this.#queue, slot);
  }

  protected override onGrow(slots: number): void {
    this.#visited = resizeUint8(this.#visited, slots);
  }

  protected override onReset(): void {
    clearList(this.#queue);
    this.#visited.fill(0);
    this.#hand = NIL;
  }
}
