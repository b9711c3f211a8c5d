/**
 * TTL pins: hold a set of keys (a prefix that an agent will reuse, a system prompt) on every tier until a
 * deadline. Time is always passed in, in whatever unit the caller uses consistently (milliseconds usually); this
 * module never reads a clock, so the same calls give the same answers.
 *
 * `TtlPins` is the record of which keys are held. Holds overlap: a key stays held while any unexpired hold names
 * it. Every call reports the keys whose held state changed, so the caller pins a newly held key once on each tier
 * where it is resident (and on any tier it enters while held: ask {@link TtlPins.isHeld}) and unpins exactly
 * those pins when the key is released.
 */
import { checkKey, checkNumber, describe } from './internal/validate.js';
import type { PolicyKey } from './types.js';

/** Identifies one hold, for early release. */
export type HoldId = number & { readonly __brand: 'HoldId' };

interface Hold<K> {
  readonly id: HoldId;
  readonly keys: readonly K[];
  readonly expiresAt: number;
}

/** Keys held until their deadlines. */
export class TtlPins<K extends PolicyKey = PolicyKey> {
  readonly #holds = new Map<HoldId, Hold<K>>();
  /** Number of live holds naming each key. */
  readonly #counts = new Map<K, number>();
  /** Min-heap by (expiresAt, id); released holds are skipped when they surface. */
  #heap: Hold<K>[] = [];
  #nextId = 1;

  /** Live holds. */
  get size(): number {
    return this.#holds.size;
  }

  /**
   * Holds `keys` (duplicates count once) until `now + ttl`.
   * @param now the current time; `ttl` the duration, > 0, in the same unit
   * @returns the hold's id and the keys that were not held before
   * @throws TypeError / RangeError naming a bad argument
   */
  hold(keys: readonly K[], now: number, ttl: number): { id: HoldId; held: K[] } {
    if (!Array.isArray(keys)) throw new TypeError(`keys must be an array, got ${describe(keys)}`);
    keys.forEach((key, i) => checkKey(key, `keys[${i}]`));
    checkNumber(now, 'now', -Number.MAX_VALUE, Number.MAX_VALUE);
    checkNumber(ttl, 'ttl', Number.MIN_VALUE, Number.MAX_VALUE);
    const unique = [...new Set(keys)];
    const hold: Hold<K> = { id: this.#nextId++ as HoldId, keys: unique, expiresAt: now + ttl };
    this.#holds.set(hold.id, hold);
    this.#push(hold);
    const held: K[] = [];
    for (const key of unique) {
      const count = this.#counts.get(key) ?? 0;
      this.#counts.set(key, count + 1);
      if (count === 0) held.push(key);
    }
    return { id: hold.id, held };
  }

  /**
   * Ends a hold before its deadline.
   * @returns the keys no longer held by anything (empty when the hold had already ended)
   */
  release(id: HoldId): K[] {
    const hold = this.#holds.get(id);
    if (hold === undefined) return [];
    this.#holds.delete(id);
    // Released holds wait in the heap until they surface; compact when they dominate it.
    if (this.#heap.length > 2 * this.#holds.size + 64) {
      this.#heap = this.#heap.filter((h) => this.#holds.has(h.id)).sort((a, b) => (this.#before(a, b) ? -1 : 1));
    }
    return this.#drop(hold);
  }

  /**
   * Ends every hold whose deadline is at or before `now`, earliest deadline first (ties in creation order).
   * @returns the keys no longer held by anything, in that order
   * @throws RangeError / TypeError when `now` is not a finite number
   */
  expire(now: number): K[] {
    checkNumber(now, 'now', -Number.MAX_VALUE, Number.MAX_VALUE);
    const released: K[] = [];
    while (this.#heap.length > 0 && this.#heap[0]!.expiresAt <= now) {
      const hold = this.#pop();
      if (!this.#holds.delete(hold.id)) continue;
      released.push(...this.#drop(hold));
    }
    return released;
  }

  /** Whether any live hold names `key` (expire first to account for the current time). */
  isHeld(key: K): boolean {
    checkKey(key);
    return this.#counts.has(key);
  }

  /** Number of live holds naming `key`. */
  holdCount(key: K): number {
    checkKey(key);
    return this.#counts.get(key) ?? 0;
  }

  /** The earliest deadline among live holds, `undefined` when none: when to call `expire` next. */
  nextExpiry(): number | undefined {
    while (this.#heap.length > 0 && !this.#holds.has(this.#heap[0]!.id)) this.#pop();
    return this.#heap[0]?.expiresAt;
  }

  /** Held keys, in no particular order. */
  keys(): IterableIterator<K> {
    return this.#counts.keys();
  }

  /** Ends every hold at once (reporting nothing). */
  reset(): void {
    this.#holds.clear();
    this.#counts.clear();
    this.#heap = [];
  }

  #drop(hold: Hold<K>): K[] {
    const released: K[] = [];
    for (const key of hold.keys) {
      const count = this.#counts.get(key)!;
      if (count === 1) {
        this.#counts.delete(key);
        released.push(key);
      } else this.#counts.set(key, count - 1);
    }
    return released;
  }

  #before(a: Hold<K>, b: Hold<K>): boolean {
    return a.expiresAt < b.expiresAt || (a.expiresAt === b.expiresAt && a.id < b.id);
  }

  #push(hold: Hold<K>): void {
    const heap = this.#heap;
    let i = heap.push(hold) - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#before(heap[i]!, heap[parent]!)) break;
      [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
      i = parent;
    }
  }

  #pop(): Hold<K> {
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
