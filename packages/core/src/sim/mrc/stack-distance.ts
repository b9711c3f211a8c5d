/**
 * LRU stack distances in one pass (Mattson et al. 1970; the Fenwick-tree form of Bennett & Kruskal 1975):
 * O(log M) per access with M about twice the distinct keys.
 *
 * Each key's last access holds a mark (its weight: 1 per object, or its size in bytes) at its access time in a
 * Fenwick tree over time slots. An access's stack distance is the total weight of the marks at or after the key's
 * previous access: the distinct keys touched since, the key itself included. LRU of capacity C (objects) hits
 * exactly when that distance is <= C, whatever C, so one pass gives the whole curve. When the time slots run out,
 * the live marks (one per key) are renumbered in order, so memory stays proportional to the distinct keys, not
 * to the trace length.
 *
 * In byte mode the distance is the bytes of the distinct objects touched since, the key's current size included;
 * LRU of C bytes keeps a prefix of the recency stack, so it hits when the distance is <= C, except around objects
 * that never fit (libCacheSim does not insert an object larger than the cache): the byte-mode curve is the
 * textbook one, checked against simulation in mrc.test.ts.
 */
import { invalid } from '../errors.js';

/** Distance of a first access. */
export const COLD = Number.POSITIVE_INFINITY;

/** One-pass LRU stack-distance computer over dense integer keys. */
export class StackDistance {
  /** Fenwick tree over time slots (1-based). */
  #tree: Float64Array;
  /** Key per time slot (-1 = none). */
  #keyAt: Int32Array;
  /** Per key: time slot of its last access + 1 (0 = never seen). */
  #last = new Int32Array(1024);
  /** Per key: weight of its mark. */
  #weight = new Float64Array(1024);
  #time = 0;
  #total = 0;
  #distinct = 0;

  constructor(initialSlots = 1 << 16) {
    this.#tree = new Float64Array(initialSlots + 1);
    this.#keyAt = new Int32Array(initialSlots).fill(-1);
  }

  /** Distinct keys seen. */
  get distinct(): number {
    return this.#distinct;
  }

  /** Sum of the current weights of every key seen (the footprint: bytes, or objects). */
  get footprint(): number {
    return this.#total;
  }

  /**
   * Records an access and returns its stack distance (weight of the distinct keys touched since the key's last
   * access, its own current weight included), or {@link COLD} for a first access.
   * @param key dense key in [0, 2^31 - 1)
   * @param weight 1 for object distances, the size for byte distances
   */
  access(key: number, weight: number): number {
    if (key >= this.#last.length) this.#growKeys(key);
    if (this.#time === this.#keyAt.length) this.#compact();
    const prev = this.#last[key]! - 1;
    let distance = COLD;
    if (prev >= 0) {
      const old = this.#weight[key]!;
      // Marks at slots >= prev: total minus the prefix before prev; the key's old mark swapped for its new weight.
      distance = this.#total - this.#prefix(prev) - old + weight;
      this.#add(prev, -old);
      this.#keyAt[prev] = -1;
      this.#total -= old;
    } else this.#distinct++;
    const slot = this.#time++;
    this.#add(slot, weight);
    this.#keyAt[slot] = key;
    this.#last[key] = slot + 1;
    this.#weight[key] = weight;
    this.#total += weight;
    return distance;
  }

  /** Sum of marks at slots [0, slot). */
  #prefix(slot: number): number {
    const t = this.#tree;
    let s = 0;
    for (let i = slot; i > 0; i -= i & -i) s += t[i]!;
    return s;
  }

  #add(slot: number, delta: number): void {
    const t = this.#tree;
    const n = t.length;
    for (let i = slot + 1; i < n; i += i & -i) t[i]! += delta;
  }

  #growKeys(key: number): void {
    if (!Number.isInteger(key) || key < 0 || key >= 0x7fff_ffff) throw invalid(`stack distance keys must be integers in [0, 2^31 - 1), got ${key}`);
    let n = this.#last.length;
    while (n <= key) n *= 2;
    const last = new Int32Array(n);
    last.set(this.#last);
    const weight = new Float64Array(n);
    weight.set(this.#weight);
    this.#last = last;
    this.#weight = weight;
  }

  /** Renumbers the live marks 0..distinct-1 in time order, into a tree with room for as many new accesses. */
  #compact(): void {
    const slots = Math.max(1 << 16, 2 * this.#distinct);
    const keyAt = new Int32Array(slots).fill(-1);
    const tree = new Float64Array(slots + 1);
    let next = 0;
    const old = this.#keyAt;
    for (let s = 0; s < this.#time; s++) {
      const key = old[s]!;
      if (key < 0) continue;
      keyAt[next] = key;
      this.#last[key] = next + 1;
      tree[next + 1] = this.#weight[key]!;
      next++;
    }
    // Linear Fenwick build: push each node's sum to its parent.
    for (let i = 1; i <= slots; i++) {
      const parent = i + (i & -i);
      if (parent <= slots) tree[parent]! += tree[i]!;
    }
    this.#keyAt = keyAt;
    this.#tree = tree;
    this.#time = next;
  }
}
