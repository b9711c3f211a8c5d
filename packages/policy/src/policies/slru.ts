/**
 * SLRU: Segmented LRU.
 *
 * Karedla, Love, Wherry, "Caching strategies to improve disk system performance", IEEE Computer 27(3), 1994
 * (two segments, probationary and protected); generalised to n segments as in libCacheSim `SLRU.c`, whose
 * semantics this follows:
 *
 * - n segments (`segments`, default 4, libCacheSim's default `n-seg=4`), each an LRU list of
 *   floor(capacity / n) units; segment n-1 is the most protected.
 * - A new object goes to the head of the lowest segment with room for it, or of segment 0 when none has room.
 * - A hit in segment i < n-1 moves the object to the head of segment i+1; while segment i+1 is over its share its
 *   tail moves down to the head of segment i, cascading downwards (cooling). A hit in segment n-1 moves the object
 *   to its head.
 * - The victim is the tail of the lowest non-empty segment.
 * - An object larger than one segment is refused (libCacheSim `SLRU_can_insert`).
 *
 * One difference, so that a hit never evicts (the interface reports victims only from `insert` and `evict`):
 * libCacheSim's cooling evicts the tail of segment 0 when segment 0 ends over its share during a hit; here it
 * stays and is the first victim of the next eviction. This can happen only when the segments' shares do not add
 * up to the capacity (capacity not divisible by n) or in bytes mode, and changes miss counts only there.
 * Pinned objects are passed over by eviction in place; cooling moves them like any object (it evicts nothing).
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { clearList, emptyList, type List, NIL, resizeUint8, type SlotId } from '../internal/list.js';
import { checkInteger } from '../internal/validate.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Options of {@link SlruPolicy}. */
export interface SlruOptions extends PolicyOptions {
  /** Number of LRU segments, in [1, 16]. Default 4 (libCacheSim's default; its test suite uses 5). */
  segments?: number;
}

/** Segmented LRU with n equal segments. O(1) per request plus the cooling cascade (at most n moves per hit). */
export class SlruPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'slru';
  /** Number of segments. */
  readonly segments: number;
  /** Capacity of each segment, in units. */
  readonly segmentCapacity: number;
  readonly #lists: List[];
  readonly #used: number[];
  #segOf: Uint8Array;

  /** @throws TypeError / RangeError naming a bad option, including a capacity below one unit per segment */
  constructor(options: SlruOptions) {
    super(options);
    this.segments = checkInteger(options.segments ?? 4, 'options.segments', 1, 16);
    this.segmentCapacity = Math.floor(this.capacity / this.segments);
    if (this.segmentCapacity < 1) {
      throw new RangeError(`options.capacity: ${this.capacity} ${this.unit} leave no room in each of ${this.segments} segments`);
    }
    this.#lists = Array.from({ length: this.segments }, () => emptyList());
    this.#used = new Array<number>(this.segments).fill(0);
    this.#segOf = new Uint8Array(this.slotCapacity);
  }

  /** @internal White-box view for tests: each segment head (newest) to tail, from segment 0 up. */
  snapshot(): { segments: K[][]; used: number[] } {
    return { segments: this.#lists.map((l) => this.listKeys(l)), used: [...this.#used] };
  }

  protected override admits(_key: K, cost: number): boolean {
    return cost <= this.segmentCapacity;
  }

  protected override onHit(slot: SlotId): void {
    const seg = this.#segOf[slot]!;
    const top = this.segments - 1;
    if (seg === top) {
      this.links.moveToHead(this.#lists[top]!, slot);
      return;
    }
    this.#detach(slot);
    this.#attach(slot, seg + 1);
    while (this.#used[seg + 1]! > this.segmentCapacity) this.#cool(seg + 1);
  }

  protected override place(slot: SlotId): void {
    const cost = this.costOf(slot);
    let seg = 0;
    for (let i = 0; i < this.segments; i++) {
      if (this.#used[i]! + cost <= this.segmentCapacity) {
        seg = i;
        break;
      }
    }
    this.#attach(slot, seg);
  }

  protected override evictOne(): K {
    for (const list of this.#lists) {
      const slot = this.oldestUnpinned(list);
      if (slot === NIL) continue;
      this.#detach(slot);
      return this.retire(slot, false);
    }
    throw new Error('slru: no unpinned object');
  }

  protected override collectVictims(limit: number, out: K[]): void {
    for (const list of this.#lists) {
      for (let s = list.tail; s !== NIL && out.length < limit; s = this.links.newer(s)) {
        if (!this.isPinned(s)) out.push(this.keyAt(s));
      }
    }
  }

  protected override onRemove(slot: SlotId): void {
    this.#detach(slot);
  }

  protected override onGrow(slots: number): void {
    this.#segOf = resizeUint8(this.#segOf, slots);
  }

  protected override onReset(): void {
    for (const list of this.#lists) clearList(list);
    this.#used.fill(0);
    this.#segOf.fill(0);
  }

  /**
   * Moves the tail of segment `id` (> 0) to the head of segment id - 1, then cools id - 1 while it is over its
   * share, as libCacheSim's recursive `SLRU_cool` (segment 0 is left over its share instead of evicting).
   */
  #cool(id: number): void {
    const slot = this.#lists[id]!.tail;
    this.#detach(slot);
    this.#attach(slot, id - 1);
    if (id - 1 === 0) return;
    while (this.#used[id - 1]! > this.segmentCapacity) this.#cool(id - 1);
  }

  #attach(slot: SlotId, seg: number): void {
    this.#segOf[slot] = seg;
    this.links.pushHead(this.#lists[seg]!, slot);
    this.#used[seg]! += this.costOf(slot);
  }

  #detach(slot: SlotId): void {
    const seg = this.#segOf[slot]!;
    this.links.unlink(this.#lists[seg]!, slot);
    this.#used[seg]! -= this.costOf(slot);
  }
}
