/**
 * How the RESP door reaches the tier hierarchy: a small interface of batched page operations (write, read, has,
 * remove), and its implementation over TierSync's key-based API (storeKeys / lookupKeys + load / deleteKeys).
 *
 * Calls from concurrent clients are coalesced: while one batch runs, later calls queue and go as one batch next
 * (group commit), so 50 clients' SETs cost one index transaction per batch rather than one each.
 *
 * When the hierarchy's first tier is a host tier, the store also lends its slots (`slots`, slot-access.ts): values
 * are parsed straight into reserved slots and GETs are written from pinned ones, with no staging copy. Such reads
 * bypass the hierarchy's load(), so the door reports them (`recordReads`, batched by server/access-batch.ts) for the
 * tier's eviction policy to count.
 */
import type { Logger } from 'pino';
import type { PageKey, PageLocation } from '@tiersync/tiers';
import { HostTier } from '@tiersync/tiers';
import type { TierSync } from '../../hierarchy/index.js';
import { HostSlots, type SlotAccess } from './slot-access.js';

export interface RespPageStore {
  /** Largest page, bytes; a value is cut into pages of this size (the last one shorter). */
  readonly pageBytes: number;
  /** Stores pages (each 1..pageBytes bytes); per page: whether it is now stored. */
  write(pages: ReadonlyArray<{ key: PageKey; source: PageLocation }>): Promise<boolean[]>;
  /** Loads pages into `into` (at least the page's length each; checksums checked by the tiers); per page: found. */
  read(pages: ReadonlyArray<{ key: PageKey; into: PageLocation }>): Promise<boolean[]>;
  /** Whether each page is present on some tier. */
  has(keys: readonly PageKey[]): boolean[];
  /** Deletes pages; resolves with those kept because something pins them (retry later). */
  remove(keys: readonly PageKey[]): Promise<PageKey[]>;
  /** Holds pages on every tier (eviction skips them) for `owner` until unpin() or `ttlMs`; returns how many are stored. */
  pin(keys: readonly PageKey[], owner: string, ttlMs: number): number;
  /** Removes `owner`'s pins on `keys`. */
  unpin(keys: readonly PageKey[], owner: string): void;
  /** The first tier's slots, when it is a host tier (values are received into and sent from them directly). */
  readonly slots?: SlotAccess | undefined;
  /**
   * Counts pages read straight from `slots` (not through read()) as accesses for the first tier's eviction policy,
   * as read() counts its own (TierSync.recordHits). Pages the tier does not hold (not recorded yet, gone) are
   * skipped. Call it with batches.
   */
  recordReads?(keys: readonly PageKey[]): Promise<unknown>;
  /** Whether the first tier keeps its pages across a restart of the process (a shm host tier, fs, ...). */
  readonly firstTierPersistent: boolean;
  /** Whether any tier keeps its pages across a restart. */
  readonly anyTierPersistent: boolean;
  /** Keys of every page the persistent tiers hold (for the door's catalog recovery at start). */
  persistentKeys(): Promise<PageKey[]>;
}

interface Pending<I, O> {
  items: I[];
  resolve: (out: O[]) => void;
  reject: (e: unknown) => void;
}

/** Runs queued requests as one batch at a time; requests whose keys collide with the batch wait for the next. */
class Coalescer<I extends { key: PageKey }, O> {
  #queue: Array<Pending<I, O>> = [];
  #running = false;
  constructor(
    private readonly run: (items: I[]) => Promise<O[]>,
    private readonly maxItems: number,
  ) {}

  submit(items: I[]): Promise<O[]> {
    if (!items.length) return Promise.resolve([]);
    return new Promise<O[]>((resolve, reject) => {
      this.#queue.push({ items, resolve, reject });
      if (!this.#running) void this.#drain();
    });
  }

  async #drain(): Promise<void> {
    this.#running = true;
    try {
      while (this.#queue.length) {
        const batch: Array<Pending<I, O>> = [];
        const keys = new Set<PageKey>();
        let count = 0;
        const rest: Array<Pending<I, O>> = [];
        for (const p of this.#queue) {
          if (batch.length && (count + p.items.length > this.maxItems || p.items.some((it) => keys.has(it.key)))) {
            rest.push(p);
            continue;
          }
          batch.push(p);
          for (const it of p.items) keys.add(it.key);
          count += p.items.length;
        }
        this.#queue = rest;
        const items = batch.flatMap((p) => p.items);
        try {
          const out = await this.run(items);
          let at = 0;
          for (const p of batch) {
            p.resolve(out.slice(at, at + p.items.length));
            at += p.items.length;
          }
        } catch (e) {
          for (const p of batch) p.reject(e);
        }
      }
    } finally {
      this.#running = false;
    }
  }
}

/** RespPageStore over one TierSync hierarchy (the daemon's). */
export class TierSyncPageStore implements RespPageStore {
  readonly pageBytes: number;
  readonly #writes: Coalescer<{ key: PageKey; source: PageLocation }, boolean>;
  readonly #reads: Coalescer<{ key: PageKey; into: PageLocation }, boolean>;
  readonly #removes: Coalescer<{ key: PageKey }, boolean>;
  readonly slots: HostSlots | undefined;
  readonly #firstTier: string;
  readonly firstTierPersistent: boolean;
  readonly anyTierPersistent: boolean;

  constructor(
    private readonly ts: TierSync,
    options: { maxBatchPages?: number; log?: Logger } = {},
  ) {
    this.pageBytes = ts.pageBytes;
    const first = ts.stats().tiers[0]!.name;
    this.#firstTier = first;
    const driver = ts.tierDriver(first);
    this.firstTierPersistent = driver.capabilities.persistent;
    this.anyTierPersistent = ts.stats().tiers.some((t) => ts.tierDriver(t.name).capabilities.persistent);
    this.slots = driver instanceof HostTier ? new HostSlots(ts, driver, first, options.log) : undefined;
    const max = options.maxBatchPages ?? 1024;
    this.#writes = new Coalescer(async (items) => {
      const r = await this.ts.storeKeys(
        items.map((i) => i.key),
        items.map((i) => i.source),
      );
      if (r.stored + r.existing === items.length) return items.map(() => true);
      // The aggregate counts do not say which page was dropped or refused: ask the index.
      return this.ts.lookupKeys(items.map((i) => i.key)).present;
    }, max);
    this.#reads = new Coalescer(async (items) => {
      const hit = this.ts.lookupKeys(items.map((i) => i.key));
      const out = hit.present.slice();
      if (!hit.pages.length) return out;
      const r = await this.ts.load(
        hit,
        hit.indices.map((i) => items[i]!.into),
      );
      for (const m of r.missing) out[hit.indices[m]!] = false;
      return out;
    }, max);
    this.#removes = new Coalescer(async (items) => {
      const r = await this.ts.deleteKeys(items.map((i) => i.key));
      const pinned = new Set(r.pinned);
      return items.map((i) => pinned.has(i.key));
    }, max * 4);
  }

  write(pages: ReadonlyArray<{ key: PageKey; source: PageLocation }>): Promise<boolean[]> {
    return this.#writes.submit([...pages]);
  }

  async read(pages: ReadonlyArray<{ key: PageKey; into: PageLocation }>): Promise<boolean[]> {
    // The hierarchy reads what the index lists: pages committed into the first tier's slots and not yet recorded
    // would read as missing (and a damaged one would go unreported), so wait for the recorder's batch first.
    const slots = this.slots;
    if (slots?.unrecordedCount) {
      const waiting = pages.filter((p) => slots.isUnrecorded(p.key)).map((p) => p.key);
      if (waiting.length) await slots.recorded(waiting);
    }
    return this.#reads.submit([...pages]);
  }

  recordReads(keys: readonly PageKey[]): Promise<number> {
    return this.ts.recordHits(this.#firstTier, keys);
  }

  has(keys: readonly PageKey[]): boolean[] {
    if (!keys.length) return [];
    const present = this.ts.lookupKeys(keys).present;
    // Pages committed into the first tier's slots that the index has yet to record are there all the same.
    if (this.slots?.unrecordedCount) keys.forEach((k, i) => (present[i] ||= this.slots!.isUnrecorded(k)));
    return present;
  }

  async persistentKeys(): Promise<PageKey[]> {
    const out = new Set<PageKey>();
    for (const t of this.ts.stats().tiers) {
      const d = this.ts.tierDriver(t.name);
      if (!d.capabilities.persistent) continue;
      for await (const p of d.list()) out.add(p.key);
    }
    return [...out];
  }

  pin(keys: readonly PageKey[], owner: string, ttlMs: number): number {
    if (!keys.length) return 0;
    return this.ts.pinKeys(keys, { ttlMs, owner }).length;
  }

  unpin(keys: readonly PageKey[], owner: string): void {
    if (keys.length) this.ts.unpinKeys(keys, owner);
  }

  async remove(keys: readonly PageKey[]): Promise<PageKey[]> {
    let direct: PageKey[] = [];
    if (this.slots?.unrecordedCount) {
      // Pages the index has yet to record are freed in the tier directly; those in the batch being recorded now
      // would read as missing in the index and keep their slots: wait for that batch.
      const r = this.slots.dropUnrecorded(keys);
      direct = r.pinned;
      keys = r.rest;
      if (keys.length) await this.slots.recorded(keys);
    }
    if (!keys.length) return direct;
    const pinned = await this.#removes.submit(keys.map((key) => ({ key })));
    return [...direct, ...keys.filter((_, i) => pinned[i])];
  }
}
