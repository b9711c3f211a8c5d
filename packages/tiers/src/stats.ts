import type { PageInfo, PageKey, PageMeta, TierKind, TierStats } from './driver.js';
import { checkKeys } from './validate.js';

/** Mutable counters behind `TierDriver.stats()`. */
export class TierCounters {
  bytesWritten = 0;
  bytesRead = 0;
  writes = 0;
  reads = 0;
  hits = 0;
  misses = 0;
  errors = 0;
  checksumFailures = 0;

  snapshot(kind: TierKind, capacityBytes: number, usedBytes: number, pages: number, pinned: number): TierStats {
    return {
      kind,
      capacityBytes,
      usedBytes,
      pages,
      pinned,
      bytesWritten: this.bytesWritten,
      bytesRead: this.bytesRead,
      writes: this.writes,
      reads: this.reads,
      hits: this.hits,
      misses: this.misses,
      errors: this.errors,
      checksumFailures: this.checksumFailures,
    };
  }
}

/** Pin counts per key. */
export class PinTable {
  readonly #pins = new Map<string, number>();

  /** TierDriver.pin: checks the keys, then pins those `exists` knows. */
  pinKeys(keys: readonly PageKey[], tier: string, exists: (key: string) => boolean): void {
    checkKeys(keys, tier);
    this.pin(keys, exists);
  }

  /** TierDriver.unpin: checks the keys, then unpins them. */
  unpinKeys(keys: readonly PageKey[], tier: string): void {
    checkKeys(keys, tier);
    this.unpin(keys);
  }

  pin(keys: readonly string[], exists: (key: string) => boolean): void {
    for (const k of keys) if (exists(k)) this.#pins.set(k, (this.#pins.get(k) ?? 0) + 1);
  }

  unpin(keys: readonly string[]): void {
    for (const k of keys) {
      const n = this.#pins.get(k);
      if (n === undefined) continue;
      if (n <= 1) this.#pins.delete(k);
      else this.#pins.set(k, n - 1);
    }
  }

  isPinned(key: string): boolean {
    return this.#pins.has(key);
  }

  forget(key: string): void {
    this.#pins.delete(key);
  }

  get size(): number {
    return this.#pins.size;
  }
}

/** Counts in-flight calls so close() can wait for them. */
export class InFlight {
  #count = 0;
  #waiters: Array<() => void> = [];

  async run<T>(fn: () => Promise<T>): Promise<T> {
    this.#count++;
    try {
      return await fn();
    } finally {
      if (--this.#count === 0) for (const w of this.#waiters.splice(0)) w();
    }
  }

  drained(): Promise<void> {
    return this.#count === 0 ? Promise.resolve() : new Promise((resolve) => this.#waiters.push(resolve));
  }
}

/** TierDriver.list over a key table: a snapshot, so pages written or deleted meanwhile do not disturb it. */
export async function* listPages(table: ReadonlyMap<PageKey, { length: number; crc32c: number; meta?: PageMeta | undefined }>): AsyncIterable<PageInfo> {
  for (const [key, p] of [...table]) yield p.meta ? { key, length: p.length, crc32c: p.crc32c, meta: p.meta } : { key, length: p.length, crc32c: p.crc32c };
}
