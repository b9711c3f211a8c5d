/**
 * LFU: Least Frequently Used, in O(1).
 *
 * The constant-time structure of Shah, Mitra, Matani, "An O(1) algorithm for implementing the LFU cache eviction
 * scheme", 2010: a list of frequency buckets in increasing frequency, each holding its objects in the order they
 * reached that frequency. Semantics match libCacheSim `LFU.c`:
 * - an inserted object has frequency 1; each hit adds 1; frequencies are forgotten on eviction;
 * - the victim has the lowest frequency; **tie-break**: among equal frequencies, the object that reached that
 *   frequency earliest goes first. Reaching a frequency is always a hit or the insertion, so this is the least
 *   recently used among the least frequently used.
 * Pinned objects are passed over in place: the victim is the first unpinned object in that order.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { emptyList, type List, NIL, resizeFloat64, resizeUint32, type SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Least Frequently Used, ties broken by least recent use. */
export class LfuPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'lfu';

  /** Bucket of each resident slot. Buckets are ids into the bucket arrays below, which grow with the slots. */
  #bucketOf: Uint32Array;
  #freq: Float64Array;
  #head: Uint32Array;
  #tail: Uint32Array;
  #size: Uint32Array;
  /** Links between buckets: `#higher` towards higher frequency. */
  #higher: Uint32Array;
  #lower: Uint32Array;
  #freeBuckets: Uint32Array;
  #freeTop = 0;
  #bucketHighWater = 0;
  /** The lowest-frequency bucket, or NIL. */
  #lowest: SlotId = NIL;
  readonly #scratch: List = emptyList();

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
    const n = this.slotCapacity + 1;
    this.#bucketOf = new Uint32Array(n).fill(NIL);
    this.#freq = new Float64Array(n);
    this.#head = new Uint32Array(n).fill(NIL);
    this.#tail = new Uint32Array(n).fill(NIL);
    this.#size = new Uint32Array(n);
    this.#higher = new Uint32Array(n).fill(NIL);
    this.#lower = new Uint32Array(n).fill(NIL);
    this.#freeBuckets = new Uint32Array(n);
  }

  /** @internal White-box view for tests: [frequency, keys in eviction order] from the lowest frequency up. */
  snapshot(): { buckets: [number, K[]][] } {
    const buckets: [number, K[]][] = [];
    for (let b = this.#lowest; b !== NIL; b = this.#higher[b] as SlotId) {
      const keys: K[] = [];
      for (let s = this.#tail[b] as SlotId; s !== NIL; s = this.links.newer(s)) keys.push(this.keyAt(s));
      buckets.push([this.#freq[b]!, keys]);
    }
    return { buckets };
  }

  /** Access frequency of a resident object (1 after insertion), `undefined` when absent. */
  frequencyOf(key: K): number | undefined {
    if (!this.has(key)) return undefined;
    return this.#freq[this.#bucketOf[this.slotFor(key)!]!];
  }

  protected override onHit(slot: SlotId): void {
    const from = this.#bucketOf[slot] as SlotId;
    const freq = this.#freq[from]! + 1;
    let to = this.#higher[from] as SlotId;
    if (to === NIL || this.#freq[to] !== freq) to = this.#newBucket(freq, from);
    this.#detach(slot);
    this.#attach(slot, to);
  }

  protected override place(slot: SlotId): void {
    let bucket = this.#lowest;
    if (bucket === NIL || this.#freq[bucket] !== 1) bucket = this.#newBucket(1, NIL);
    this.#attach(slot, bucket);
  }

  protected override evictOne(): K {
    const slot = this.#firstUnpinned();
    this.#detach(slot);
    return this.retire(slot, false);
  }

  protected override collectVictims(limit: number, out: K[]): void {
    for (let b = this.#lowest; b !== NIL; b = this.#higher[b] as SlotId) {
      for (let s = this.#tail[b] as SlotId; s !== NIL; s = this.links.newer(s)) {
        if (this.isPinned(s)) continue;
        out.push(this.keyAt(s));
        if (out.length >= limit) return;
      }
    }
  }

  protected override onRemove(slot: SlotId): void {
    this.#detach(slot);
  }

  protected override onGrow(slotCount: number): void {
    // Buckets never outnumber resident objects + 1 (a hit makes the new bucket before leaving the old one).
    const slots = slotCount + 1;
    this.#bucketOf = resizeUint32(this.#bucketOf, slots, NIL);
    this.#freq = resizeFloat64(this.#freq, slots);
    this.#head = resizeUint32(this.#head, slots, NIL);
    this.#tail = resizeUint32(this.#tail, slots, NIL);
    this.#size = resizeUint32(this.#size, slots);
    this.#higher = resizeUint32(this.#higher, slots, NIL);
    this.#lower = resizeUint32(this.#lower, slots, NIL);
    this.#freeBuckets = resizeUint32(this.#freeBuckets, slots);
  }

  protected override onReset(): void {
    this.#bucketOf.fill(NIL);
    this.#head.fill(NIL);
    this.#tail.fill(NIL);
    this.#size.fill(0);
    this.#higher.fill(NIL);
    this.#lower.fill(NIL);
    this.#freeTop = 0;
    this.#bucketHighWater = 0;
    this.#lowest = NIL;
  }

  #firstUnpinned(): SlotId {
    for (let b = this.#lowest; b !== NIL; b = this.#higher[b] as SlotId) {
      for (let s = this.#tail[b] as SlotId; s !== NIL; s = this.links.newer(s)) {
        if (!this.isPinned(s)) return s;
      }
    }
    throw new Error('lfu: no unpinned object');
  }

  /** A bucket's objects form a list through the shared links; `Links` edits it through this reused view. */
  #list(bucket: SlotId): List {
    const list = this.#scratch;
    list.head = this.#head[bucket] as SlotId;
    list.tail = this.#tail[bucket] as SlotId;
    list.length = this.#size[bucket]!;
    return list;
  }

  #store(bucket: SlotId, list: List): void {
    this.#head[bucket] = list.head;
    this.#tail[bucket] = list.tail;
    this.#size[bucket] = list.length;
  }

  #attach(slot: SlotId, bucket: SlotId): void {
    const list = this.#list(bucket);
    this.links.pushHead(list, slot);
    this.#store(bucket, list);
    this.#bucketOf[slot] = bucket;
  }

  /** Takes a slot out of its bucket, dropping the bucket when it empties. */
  #detach(slot: SlotId): void {
    const bucket = this.#bucketOf[slot] as SlotId;
    const list = this.#list(bucket);
    this.links.unlink(list, slot);
    this.#store(bucket, list);
    this.#bucketOf[slot] = NIL;
    if (list.length === 0) this.#dropBucket(bucket);
  }

  /** A new empty bucket of frequency `freq` just above `below` (NIL: at the bottom). */
  #newBucket(freq: number, below: SlotId): SlotId {
    const bucket = (this.#freeTop > 0 ? this.#freeBuckets[--this.#freeTop] : this.#bucketHighWater++) as SlotId;
    this.#freq[bucket] = freq;
    this.#head[bucket] = NIL;
    this.#tail[bucket] = NIL;
    this.#size[bucket] = 0;
    const above = below === NIL ? this.#lowest : (this.#higher[below] as SlotId);
    this.#lower[bucket] = below;
    this.#higher[bucket] = above;
    if (below === NIL) this.#lowest = bucket;
    else this.#higher[below] = bucket;
    if (above !== NIL) this.#lower[above] = bucket;
    return bucket;
  }

  #dropBucket(bucket: SlotId): void {
    const below = this.#lower[bucket] as SlotId;
    const above = this.#higher[bucket] as SlotId;
    if (below === NIL) this.#lowest = above;
    else this.#higher[below] = above;
    if (above !== NIL) this.#lower[above] = below;
    this.#freeBuckets[this.#freeTop++] = bucket;
  }
}
