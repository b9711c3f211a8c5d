/**
 * The one record of which keys are held (never chosen as victims): load pins (a load reading the pages) and TTL
 * pins (a caller holding a prefix until a deadline, one per owner and key). Time is passed in; this module never
 * reads a clock. Every change reports the keys whose held state flipped, so the planner pins or unpins them in
 * the tiers' policies exactly once.
 */
import { checkKey, checkNumber, describe } from '../internal/validate.js';
import type { PolicyKey } from '../types.js';

/** Identifies the pins of one load, for {@link PinTable.endLoad}. */
export type LoadPinId = number & { readonly __brand: 'LoadPinId' };

/** One TTL pin, as listed by {@link PinTable.ttlPins}. */
export interface TtlPin<K extends PolicyKey = string> {
  readonly key: K;
  readonly owner: string;
  readonly expiresAt: number;
}

interface HeapEntry<K> {
  expiresAt: number;
  seq: number;
  key: K;
  owner: string;
}

/** Load pins and TTL pins over keys. */
export class PinTable<K extends PolicyKey = string> {
  /** Live load pins per key. */
  readonly #loads = new Map<K, number>();
  readonly #loadKeys = new Map<LoadPinId, readonly K[]>();
  /** TTL pins per key: owner -> its entry (the heap entry is current while its seq matches). */
  readonly #ttl = new Map<K, Map<string, { expiresAt: number; seq: number }>>();
  /** Min-heap by (expiresAt, seq); entries replaced or removed are skipped when they surface. */
  #heap: HeapEntry<K>[] = [];
  #seq = 0;
  #nextLoad = 1;

  /** Whether some pin holds `key`. */
  isHeld(key: K): boolean {
    return this.#loads.has(key) || this.#ttl.has(key);
  }

  /** Keys held by some pin (load or TTL). */
  get heldCount(): number {
    let n = this.#ttl.size;
    for (const k of this.#loads.keys()) if (!this.#ttl.has(k)) n++;
    return n;
  }

  /** Pins `keys` for one load. Returns the pin's id and the keys that were not held before. */
  beginLoad(keys: readonly K[]): { id: LoadPinId; held: K[] } {
    const id = this.#nextLoad++ as LoadPinId;
    const unique = [...new Set(keys)];
    const held: K[] = [];
    for (const k of unique) {
      checkKey(k);
      const wasHeld = this.isHeld(k);
      this.#loads.set(k, (this.#loads.get(k) ?? 0) + 1);
      if (!wasHeld) held.push(k);
    }
    this.#loadKeys.set(id, unique);
    return { id, held };
  }

  /** Ends a load's pins. Returns the keys no longer held by anything (empty when `id` had already ended). */
  endLoad(id: LoadPinId): K[] {
    const keys = this.#loadKeys.get(id);
    if (keys === undefined) return [];
    this.#loadKeys.delete(id);
    const released: K[] = [];
    for (const k of keys) {
      const n = this.#loads.get(k)!;
      if (n > 1) this.#loads.set(k, n - 1);
      else {
        this.#loads.delete(k);
        if (!this.#ttl.has(k)) released.push(k);
      }
    }
    return released;
  }

  /**
   * Holds `keys` for `owner` until `expiresAt` (a pin by the same owner on the same key takes the new deadline).
   * Returns the keys that were not held before.
   * @throws TypeError / RangeError naming a bad argument
   */
  hold(keys: readonly K[], owner: string, expiresAt: number): K[] {
    if (typeof owner !== 'string' || owner === '') throw new TypeError(`owner must be a non-empty string, got ${describe(owner)}`);
    checkNumber(expiresAt, 'expiresAt', -Number.MAX_VALUE, Number.MAX_VALUE);
    const held: K[] = [];
    for (const k of keys) {
      checkKey(k);
      const wasHeld = this.isHeld(k);
      let owners = this.#ttl.get(k);
      if (!owners) this.#ttl.set(k, (owners = new Map()));
      const seq = this.#seq++;
      owners.set(owner, { expiresAt, seq });
      this.#push({ expiresAt, seq, key: k, owner });
      if (!wasHeld) held.push(k);
    }
    return held;
  }

  /** Removes `owner`'s TTL pins on `keys`. Returns how many pins were removed and the keys no longer held. */
  release(keys: readonly K[], owner: string): { removed: number; released: K[] } {
    let removed = 0;
    const released: K[] = [];
    for (const k of keys) {
      const owners = this.#ttl.get(k);
      if (!owners?.delete(owner)) continue;
      removed++;
      if (owners.size === 0) {
        this.#ttl.delete(k);
        if (!this.#loads.has(k)) released.push(k);
      }
    }
    this.#compact();
    return { removed, released };
  }

  /**
   * Ends every TTL pin whose deadline is at or before `now`, earliest first (ties in pin order).
   * @returns the keys no longer held by anything, in that order
   */
  expire(now: number): K[] {
    checkNumber(now, 'now', -Number.MAX_VALUE, Number.MAX_VALUE);
    const released: K[] = [];
    while (this.#heap.length > 0 && this.#heap[0]!.expiresAt <= now) {
      const e = this.#pop();
      const owners = this.#ttl.get(e.key);
      if (owners?.get(e.owner)?.seq !== e.seq) continue;
      owners.delete(e.owner);
      if (owners.size === 0) {
        this.#ttl.delete(e.key);
        if (!this.#loads.has(e.key)) released.push(e.key);
      }
    }
    return released;
  }

  /** The earliest live TTL deadline, `undefined` when none: when expire() has something to do next. */
  nextExpiry(): number | undefined {
    while (this.#heap.length > 0) {
      const e = this.#heap[0]!;
      if (this.#ttl.get(e.key)?.get(e.owner)?.seq === e.seq) return e.expiresAt;
      this.#pop();
    }
    return undefined;
  }

  /** Every live TTL pin, in pin order (for mirroring durable pins, and tests). */
  ttlPins(): TtlPin<K>[] {
    const out: Array<TtlPin<K> & { seq: number }> = [];
    for (const [key, owners] of this.#ttl) for (const [owner, e] of owners) out.push({ key, owner, expiresAt: e.expiresAt, seq: e.seq });
    return out.sort((a, b) => a.seq - b.seq).map(({ key, owner, expiresAt }) => ({ key, owner, expiresAt }));
  }

  /** Drops every pin (reporting nothing). */
  reset(): void {
    this.#loads.clear();
    this.#loadKeys.clear();
    this.#ttl.clear();
    this.#heap = [];
  }

  /** Drops stale heap entries once they dominate it, so released pins do not accumulate. */
  #compact(): void {
    let live = 0;
    for (const owners of this.#ttl.values()) live += owners.size;
    if (this.#heap.length <= 2 * live + 64) return;
    this.#heap = this.#heap.filter((e) => this.#ttl.get(e.key)?.get(e.owner)?.seq === e.seq).sort((a, b) => (this.#before(a, b) ? -1 : 1));
  }

  #before(a: HeapEntry<K>, b: HeapEntry<K>): boolean {
    return a.expiresAt < b.expiresAt || (a.expiresAt === b.expiresAt && a.seq < b.seq);
  }

  #push(e: HeapEntry<K>): void {
    const heap = this.#heap;
    let i = heap.push(e) - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#before(heap[i]!, heap[parent]!)) break;
      [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
      i = parent;
    }
  }

  #pop(): HeapEntry<K> {
    const heap = this.#heap;
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < heap.length && this.#before(heap[left]!, heap[smallest]!)) smallest = left;
        if (right < heap.length && this.#before(heap[right]!, heap[smallest]!)) smallest = right;
        if (smallest === i) break;
        [heap[i], heap[smallest]] = [heap[smallest]!, heap[i]!];
        i = smallest;
      }
    }
    return top;
  }
}
