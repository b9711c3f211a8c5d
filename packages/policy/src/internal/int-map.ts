/**
 * An open-addressing hash map from non-negative int32 keys to slot ids, in two Int32Arrays: linear probing,
 * Fibonacci hashing (sequential ids spread evenly), load factor at most 1/2, backward-shift deletion (no
 * tombstones, so probe lengths stay short however long a replay runs).
 *
 * It is the default path's key -> slot map for integer keys: a lookup is a multiply, a shift and a typed-array
 * load or two, where a `Map` lookup is a builtin call that hashes and walks a bucket chain. Keys that are not
 * non-negative int32s (strings, fractions, negatives) stay in a `Map`.
 */

const EMPTY = -1;
/** 2^32 / golden ratio, as an int32. */
const FIBONACCI = -1640531527;
const MIN_BITS = 4;

export class IntSlotMap {
  /** Key per cell, EMPTY when free. */
  #keys: Int32Array;
  /** Slot per cell (meaningful where the key is not EMPTY). */
  #slots: Int32Array;
  #mask: number;
  /** 32 - log2(cells): the hash is the top bits of key * FIBONACCI. */
  #shift: number;
  #size = 0;

  constructor() {
    this.#keys = new Int32Array(1 << MIN_BITS).fill(EMPTY);
    this.#slots = new Int32Array(1 << MIN_BITS);
    this.#mask = (1 << MIN_BITS) - 1;
    this.#shift = 32 - MIN_BITS;
  }

  /** Number of keys held. */
  get size(): number {
    return this.#size;
  }

  /** The slot of `key` (a non-negative int32), or -1. */
  get(key: number): number {
    const keys = this.#keys;
    const mask = this.#mask;
    let i = Math.imul(key, FIBONACCI) >>> this.#shift;
    for (;;) {
      const k = keys[i]!;
      if (k === key) return this.#slots[i]!;
      if (k === EMPTY) return -1;
      i = (i + 1) & mask;
    }
  }

  /** Maps `key` (a non-negative int32) to `slot`, replacing any earlier slot. */
  set(key: number, slot: number): void {
    if ((this.#size + 1) * 2 > this.#keys.length) this.#rehash(this.#keys.length * 2);
    const keys = this.#keys;
    const mask = this.#mask;
    let i = Math.imul(key, FIBONACCI) >>> this.#shift;
    for (;;) {
      const k = keys[i]!;
      if (k === key) break;
      if (k === EMPTY) {
        keys[i] = key;
        this.#size++;
        break;
      }
      i = (i + 1) & mask;
    }
    this.#slots[i] = slot;
  }

  /** Removes `key`; false when it was absent. */
  delete(key: number): boolean {
    const keys = this.#keys;
    const slots = this.#slots;
    const mask = this.#mask;
    const shift = this.#shift;
    let hole = Math.imul(key, FIBONACCI) >>> shift;
    for (;;) {
      const k = keys[hole]!;
      if (k === key) break;
      if (k === EMPTY) return false;
      hole = (hole + 1) & mask;
    }
    // Backward shift: pull later entries of the probe run into the hole unless that would put one before its home.
    for (let j = (hole + 1) & mask; ; j = (j + 1) & mask) {
      const k = keys[j]!;
      if (k === EMPTY) break;
      const home = Math.imul(k, FIBONACCI) >>> shift;
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        keys[hole] = k;
        slots[hole] = slots[j]!;
        hole = j;
      }
    }
    keys[hole] = EMPTY;
    this.#size--;
    return true;
  }

  /** Removes every key (the table keeps its size). */
  clear(): void {
    this.#keys.fill(EMPTY);
    this.#size = 0;
  }

  #rehash(cells: number): void {
    const oldKeys = this.#keys;
    const oldSlots = this.#slots;
    const bits = 31 - Math.clz32(cells);
    this.#keys = new Int32Array(cells).fill(EMPTY);
    this.#slots = new Int32Array(cells);
    this.#mask = cells - 1;
    this.#shift = 32 - bits;
    this.#size = 0;
    for (let i = 0; i < oldKeys.length; i++) if (oldKeys[i] !== EMPTY) this.set(oldKeys[i]!, oldSlots[i]!);
  }
}
