import { TierSyncError, checkInteger } from './errors.js';

/** Index of a fixed-size page slot in an arena. Offset in the arena = slot * pageBytes. */
export type Slot = number & { readonly __brand: 'Slot' };

/**
 * Fixed-size page slots carved from an arena: a LIFO stack of free slots in a Uint32Array (recently freed slots
 * are reused first, so their memory is warm) and one state byte per slot. Allocation is all-or-nothing.
 */
export class PageAllocator {
  readonly pageBytes: number;
  readonly slots: number;
  readonly #free: Uint32Array;
  #top: number;
  readonly #used: Uint8Array;

  /** @throws TierSyncError ERR_INVALID_ARGUMENT when capacity < pageBytes or either is not a positive integer */
  constructor(options: { capacity: number; pageBytes: number }) {
    checkInteger(options.pageBytes, 'pageBytes', 1);
    checkInteger(options.capacity, 'capacity', options.pageBytes);
    this.pageBytes = options.pageBytes;
    this.slots = Math.floor(options.capacity / options.pageBytes);
    if (this.slots > 0xffffffff) throw new TierSyncError('more than 2^32 page slots', 'ERR_INVALID_ARGUMENT');
    this.#free = new Uint32Array(this.slots);
    for (let i = 0; i < this.slots; i++) this.#free[i] = this.slots - 1 - i; // slot 0 on top
    this.#top = this.slots;
    this.#used = new Uint8Array(this.slots);
  }

  get freeCount(): number {
    return this.#top;
  }

  get usedCount(): number {
    return this.slots - this.#top;
  }

  offset(slot: Slot): number {
    return slot * this.pageBytes;
  }

  isUsed(slot: number): boolean {
    return this.#used[slot] === 1;
  }

  /**
   * Takes `count` free slots in ascending order, or returns undefined (taking none) when fewer are free. Ascending:
   * slots freed together come back as one run of adjacent memory (the LIFO stack holds them reversed), so a batch's
   * copies coalesce into a few large ones instead of one per page.
   */
  allocate(count: number): Slot[] | undefined {
    checkInteger(count, 'count');
    if (count > this.#top) return undefined;
    const taken = this.#free.slice(this.#top - count, this.#top).sort();
    this.#top -= count;
    const out = new Array<Slot>(count);
    for (let i = 0; i < count; i++) {
      this.#used[taken[i]!] = 1;
      out[i] = taken[i] as Slot;
    }
    return out;
  }

  /**
   * Marks specific slots used (recovery: rebuilding the allocator from an index after reattaching shared memory).
   * @throws TierSyncError ERR_INVALID_ARGUMENT for a slot out of range or already used
   */
  reserve(slots: readonly number[]): void {
    const wanted = new Set<number>();
    for (const s of slots) {
      checkInteger(s, 'slot');
      if (s >= this.slots) throw new TierSyncError(`slot ${s} out of range (0..${this.slots - 1})`, 'ERR_INVALID_ARGUMENT');
      if (this.#used[s] || wanted.has(s)) throw new TierSyncError(`slot ${s} is already used`, 'ERR_INVALID_ARGUMENT');
      wanted.add(s);
    }
    if (wanted.size === 0) return;
    let w = 0;
    for (let r = 0; r < this.#top; r++) {
      const s = this.#free[r]!;
      if (!wanted.has(s)) this.#free[w++] = s;
    }
    this.#top = w;
    for (const s of wanted) this.#used[s] = 1;
  }

  /** @throws TierSyncError ERR_INVALID_ARGUMENT for a slot out of range or not allocated (double free) */
  free(slots: readonly Slot[]): void {
    for (const s of slots) {
      if (!Number.isInteger(s) || s < 0 || s >= this.slots) {
        throw new TierSyncError(`slot ${s} out of range (0..${this.slots - 1})`, 'ERR_INVALID_ARGUMENT');
      }
      if (!this.#used[s]) throw new TierSyncError(`slot ${s} is not allocated (double free?)`, 'ERR_INVALID_ARGUMENT');
    }
    for (const s of slots) {
      this.#used[s] = 0;
      this.#free[this.#top++] = s;
    }
  }
}
