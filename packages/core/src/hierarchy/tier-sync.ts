/**
 * TierSync: one memory hierarchy over the tier drivers, the facade over the hierarchy's modules.
 *
 * Who does what:
 * - the planner (@tiersync/policy Planner) decides: admission, placement, room and victims, demotion,
 *   write-through and selective copies, promotion, pins, priorities and quotas;
 * - the modules here execute its moves with real bytes: open.ts (drivers, planner, index, reconcile), store.ts,
 *   load.ts / layerwise.ts / read.ts, lookup.ts, moves.ts (evict and copy), background.ts (the queue of background
 *   copies), external.ts (pages written into or read from a tier outside store() and load()), pins.ts, delete.ts;
 *   validate.ts checks what callers pass, once;
 * - the block index (SQLite) records which pages exist and where their copies are.
 *
 * Data path:
 * - store: keys of the full pages; the index says which are new (their copies stay pending, invisible, until the
 *   bytes land); the planner admits them and plans room on the first tier (victims demoted to the next tier when
 *   its write mode says so); one driver write; one index transaction marks the copies ready; write-through is
 *   queued behind the caller.
 * - lookup: the longest prefix of keys with a ready copy on any tier, with each page's tiers and a load estimate.
 * - load: pages are pinned in the planner (so no eviction chooses them meanwhile), read from each one's fastest
 *   copy (one batch per tier, in parallel; durable and remote tiers verify CRC32C); a copy that fails falls back to
 *   the next tier holding the page, and pages found nowhere are reported by index so the caller recomputes only
 *   those.
 *
 * Planning, the moves that make room and the bookkeeping of moves run one at a time (a lock); store writes, the
 * I/O of background copies, loads and lookups run beside them (docs/ARCHITECTURE.md, "Locking").
 */
import { EventEmitter } from 'eventemitter3';
import { TierSyncError, TransferEngine } from '@tiersync/native';
import type { Planner } from '@tiersync/policy';
import { pageKeys, createNamespace, kvLayout, kvLayoutPreset, type KvLayoutInput, type KvPresetName, type Namespace, type TokenArray } from '../keys/index.js';
import type { IndexStats, PageRecord } from '../index/index.js';
import type { PageKey, PageLocation, TierDriver } from '@tiersync/tiers';
import { enqueue as enqueueCopy, flush, stopBackground } from './background.js';
import { parseConfig, type ResolvedConfig, type TierSyncConfig } from './config.js';
import { deleteKeys, deleteNamespace } from './delete.js';
import { adoptPages, forgetPages, makeRoomOn, recordHits } from './external.js';
import { layerRanges } from './layerwise.js';
import { loadPages } from './load.js';
import { lookupExact, lookupPrefix } from './lookup.js';
import { openHierarchy } from './open.js';
import { pinKeys, unpinKeys } from './pins.js';
import type { ReconcileReport } from './reconcile.js';
import { ready, tierNamed, type HierarchyState } from './state.js';
import { retainPages, storePages } from './store.js';
import type { RetentionHint } from '@tiersync/policy';
import type { DeleteResult, KeyLookupResult, LayerRange, LoadOptions, LoadResult, LookupResult, StoreOptions, StoreResult, TierSyncEvents } from './types.js';
import { checkInto, checkKeyedPages, checkKeys, checkLoadOptions, checkPages, checkPinOptions, checkRetentionHint, checkStoreOptions } from './validate.js';

export type { DeleteResult, KeyLookupResult, LayerEvent, LayerRange, LoadOptions, LoadResult, LookupResult, StoreOptions, StoreResult, TierSyncEvents } from './types.js';

export class TierSync extends EventEmitter<TierSyncEvents> {
  readonly config: ResolvedConfig;
  readonly namespace: Namespace;
  readonly #s: HierarchyState;
  readonly counters: HierarchyState['counters'];

  /** Validates the configuration (ERR_CONFIG naming the field); call open() before use. */
  constructor(config: TierSyncConfig) {
    super();
    this.config = parseConfig(config);
    const c = this.config;
    const layout =
      typeof c.layout === 'string' ? kvLayoutPreset(c.layout as KvPresetName, { tokensPerPage: c.tokensPerPage }) : kvLayout(c.layout as KvLayoutInput);
    this.namespace = createNamespace({ model: c.model, layout, tenant: c.tenant, ...(c.tenantSalt ? { tenantSalt: c.tenantSalt } : {}) });
    this.counters = { stores: 0, pagesStored: 0, pagesDropped: 0, pagesNotAdmitted: 0, loads: 0, pagesLoaded: 0, pagesMissing: 0, backgroundDropped: 0, integrityFailures: 0 };
    this.#s = {
      config: c,
      namespace: this.namespace,
      engine: new TransferEngine(c.threads ? { threads: c.threads } : {}),
      pageBytes: this.namespace.layout.bytesPerPage,
      tokensPerPage: this.namespace.layout.tokensPerPage,
      emit: this.emit.bind(this) as HierarchyState['emit'],
      counters: this.counters,
      tiers: [],
      index: undefined,
      planner: undefined,
      staging: undefined,
      reconciled: undefined,
      opening: false,
      closed: false,
      lock: Promise.resolve(),
      queue: [],
      queued: 0,
      draining: undefined,
      storesInFlight: new Set(),
      writesInFlight: new Set(),
    };
  }

  get pageBytes(): number {
    return this.#s.pageBytes;
  }

  get tokensPerPage(): number {
    return this.#s.tokensPerPage;
  }

  get engine(): TransferEngine {
    return this.#s.engine;
  }

  /** The planner deciding this hierarchy's placement (read its state; requests go through TierSync's methods). */
  get planner(): Planner {
    return ready(this.#s).planner;
  }

  /** What open() found on the persistent tiers and adopted into the index; undefined before open(). */
  get reconciled(): ReconcileReport | undefined {
    return this.#s.reconciled;
  }

  /** Opens every tier, the planner and the index; pages the persistent tiers hold are adopted by the index. */
  open(): Promise<void> {
    return openHierarchy(this.#s);
  }

  /** The driver of a tier by name (for its stats, or tools that manage it directly). */
  tierDriver(name: string): TierDriver {
    return tierNamed(this.#s, name).driver;
  }

  /** Keys of the full pages of `tokens` (a partial last page is never cached). */
  keysOf(tokens: TokenArray): PageKey[] {
    return pageKeys(this.namespace, tokens);
  }

  /**
   * Stores the KV pages of `tokens`: `pages[i]` holds page i's bytes (the layout's page size), in host or device
   * memory. Returns once the new pages are on the first tier and recorded; write-through continues behind.
   */
  store(tokens: TokenArray, pages: readonly PageLocation[], options: StoreOptions = {}): Promise<StoreResult> {
    ready(this.#s);
    const keys = this.keysOf(tokens);
    checkPages(pages, keys.length, this.pageBytes, 'pages');
    return storePages(
      this.#s,
      keys.map((key, i) => ({ key, parent: i === 0 ? null : keys[i - 1]!, position: i, length: this.pageBytes, location: key })),
      pages,
      checkStoreOptions(options, this.config.priorities, this.#defaultTenant),
    );
  }

  /**
   * Stores pages under keys the caller chose (no parent chain): `pages[i]` holds the bytes of `keys[i]`, 1 byte up
   * to the layout's page size (the index records each page's true length; load() then needs destinations of at
   * least that length). Keys already stored are left as they are (`existing`).
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed or repeated key or a page of a bad size.
   */
  storeKeys(keys: readonly PageKey[], pages: readonly PageLocation[], options: StoreOptions = {}): Promise<StoreResult> {
    ready(this.#s);
    checkKeys(keys, 'keys');
    checkKeyedPages(pages, keys.length, this.pageBytes);
    return storePages(
      this.#s,
      keys.map((key, i) => ({ key, parent: null, position: 0, length: pages[i]!.length, location: key })),
      pages,
      checkStoreOptions(options, this.config.priorities, this.#defaultTenant),
    );
  }

  /**
   * A soft retention hint for stored pages, as store()'s `retention` option gives it (a session going idle on a tool
   * call, or finished): tiers whose policy is `session-aware:...` order victims by it. Keys not stored are skipped.
   * @throws TierSyncError ERR_INVALID_ARGUMENT for a malformed key or hint
   */
  retain(keys: readonly PageKey[], retention: RetentionHint): void {
    ready(this.#s);
    checkKeys(keys, 'keys', false);
    retainPages(this.#s, keys, checkRetentionHint(retention, 'retention'));
  }

  get #defaultTenant(): string {
    return this.config.tenant || 'default';
  }

  /** Resolves when background write-through and promotion have caught up. */
  flush(): Promise<void> {
    return flush(this.#s);
  }

  /** The longest prefix of `tokens`' pages present on any tier, with where each page is and the cost to load it. */
  lookup(tokens: TokenArray): LookupResult {
    ready(this.#s);
    return lookupPrefix(this.#s, this.keysOf(tokens));
  }

  /**
   * Which of exactly `keys` are present (not only a prefix), with each present page's tier and length. The result
   * can be given to load() as it is (its `pages` are the present keys, in input order).
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed key.
   */
  lookupKeys(keys: readonly PageKey[]): KeyLookupResult {
    ready(this.#s);
    checkKeys(keys, 'keys', false);
    return lookupExact(this.#s, keys);
  }

  /**
   * Removes `keys` from every tier and from the index. Pinned pages (a TTL pin, a load reading them) are kept and
   * listed in `pinned`; keys no tier held are listed in `missing`.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed or repeated key.
   */
  deleteKeys(keys: readonly PageKey[]): Promise<DeleteResult> {
    ready(this.#s);
    checkKeys(keys, 'keys');
    return deleteKeys(this.#s, keys);
  }

  /**
   * Loads the pages of a lookup into `into[i]` (at least the page's recorded length each: the layout's page size
   * for token pages, the stored length for pages of storeKeys()). Pages evicted since the lookup, or
   * whose every copy failed its checksum, are listed in `missing`: recompute only those.
   */
  async load(hit: LookupResult, into: readonly PageLocation[], options: LoadOptions = {}): Promise<LoadResult> {
    ready(this.#s);
    checkInto(into, hit, this.pageBytes);
    checkLoadOptions(options);
    return loadPages(this.#s, hit, into, options);
  }

  /**
   * The byte range of each layer group within a page, in page order; with `layersPerEvent`, runs of that many
   * layers (see layerwise.ts).
   * @throws TierSyncError ERR_INVALID_ARGUMENT for a layersPerEvent that is not a positive integer.
   */
  layerRanges(options: { layersPerEvent?: number } = {}): LayerRange[] {
    return layerRanges(this.#s, options);
  }

  /** Looks up `tokens` and queues promotion of the cached prefix into the first tier. */
  prefetch(tokens: TokenArray): LookupResult {
    const { planner } = ready(this.#s);
    const hit = this.lookup(tokens);
    const below = hit.pages.filter((p) => p.tier !== this.#s.tiers[0]!.name).map((p) => p.key);
    for (const m of planner.promote(below)) if (m.kind === 'queue') enqueueCopy(this.#s, m);
    return hit;
  }

  /** Holds the pages of `tokens` on every tier until `ttlMs` passes or unpin(). */
  pin(tokens: TokenArray, options: { ttlMs: number }): PageKey[] {
    const { index } = ready(this.#s);
    const { ttlMs } = checkPinOptions(options);
    const keys = index.lookupPrefix(this.keysOf(tokens)).map((h) => h.key);
    pinKeys(this.#s, keys, ttlMs, 'user', true, false);
    return keys;
  }

  unpin(tokens: TokenArray): number {
    ready(this.#s);
    return unpinKeys(this.#s, this.keysOf(tokens), 'user', true);
  }

  /**
   * pin() by key: holds `keys` on every tier (eviction skips them) until `ttlMs` passes or unpinKeys() with the same
   * owner (default 'user', the owner pin() uses). Keys need not be stored yet (a page adopted later is held too).
   * With `durable` (default true) the pin is also recorded in the index and survives a restart; `durable: false`
   * holds it in memory only (no SQLite write: a client's lease). Returns the keys stored now.
   */
  pinKeys(keys: readonly PageKey[], options: { ttlMs: number; owner?: string; durable?: boolean }): PageKey[] {
    ready(this.#s);
    checkKeys(keys, 'keys');
    const { ttlMs, owner } = checkPinOptions(options);
    return pinKeys(this.#s, keys, ttlMs, owner, options.durable !== false);
  }

  /**
   * Removes `owner`'s pins (default 'user') on `keys`; `durable: false` for pins made with it (skips the index).
   * Returns how many pins were removed.
   */
  unpinKeys(keys: readonly PageKey[], owner = 'user', options: { durable?: boolean } = {}): number {
    ready(this.#s);
    checkKeys(keys, 'keys');
    return unpinKeys(this.#s, keys, owner, options?.durable !== false);
  }

  /** Deletes every page of this namespace from every tier and the index. */
  deleteNamespace(): Promise<number> {
    ready(this.#s);
    return deleteNamespace(this.#s);
  }

  stats(): { tiers: Array<{ name: string; capacityPages: number; usedPages: number } & ReturnType<TierDriver['stats']>>; index: IndexStats; counters: TierSync['counters']; engine: ReturnType<TransferEngine['stats']> } {
    const { index, planner } = ready(this.#s);
    return {
      tiers: this.#s.tiers.map((t) => ({ ...t.driver.stats(), name: t.name, capacityPages: t.capacityPages, usedPages: planner.view(t.index).usedPages })),
      index: index.stats(),
      counters: { ...this.counters },
      engine: this.#s.engine.stats(),
    };
  }

  /** The index's record of each key (namespace, parent, position, length), or undefined for a key it does not know. */
  pageRecords(keys: readonly PageKey[]): Array<PageRecord | undefined> {
    return ready(this.#s).index.pages(keys);
  }

  /**
   * Waits for stores in flight, then closes tiers, the index and the engine. Background copies (write-through,
   * selective, promotion) whose pages already have a durable copy, or that write to a volatile tier, are aborted
   * (the one in flight) or dropped (queued ones): closing loses nothing by them, and their pages stay where they
   * are. Copies that make pages of a volatile tier durable may finish, all of them within `deadlines.moveMs` (a
   * stalled durable tier holds close() that long once, not once per copy). flush() waits for every copy.
   */
  async close(): Promise<void> {
    const s = this.#s;
    if (s.closed) return;
    if (s.index) await stopBackground(s).catch(() => undefined);
    s.closed = true;
    for (const t of s.tiers) await t.driver.close();
    s.index?.close();
    s.staging?.close();
    s.backgroundStaging?.close();
    await s.engine.close();
  }

  // ---- Pages written into or read from a tier outside store() and load(): peers, same-host clients, RESP ----

  /**
   * Frees room on tier `tier` so `pages` more fit under its high watermark (victims demoted as in store()), before
   * bytes are written into the tier directly (a peer put, a same-host client). Returns how many fit.
   */
  makeRoomOn(tier: string, pages: number): Promise<number> {
    ready(this.#s);
    if (!Number.isSafeInteger(pages) || pages < 0) throw new TierSyncError(`pages must be an integer >= 0, got ${String(pages)}`, 'ERR_INVALID_ARGUMENT');
    return makeRoomOn(this.#s, tier, pages);
  }

  /**
   * Adopts pages whose bytes are already in tier `tier` (written there by a peer or a same-host client) into the
   * block index as ready copies, with the CRC32C they were committed with, and queues write-through to lower tiers.
   * Keys the index already knows on that tier are left alone. Returns the keys newly recorded.
   */
  adoptPages(tier: string, pages: ReadonlyArray<{ key: PageKey; length: number; crc32c: number }>): Promise<PageKey[]> {
    ready(this.#s);
    checkKeys(pages.map((p) => p.key), 'pages.key');
    return adoptPages(this.#s, tier, pages);
  }

  /** Forgets copies that tier `tier` no longer holds (deleted there by a peer). */
  forgetPages(tier: string, keys: readonly PageKey[]): void {
    ready(this.#s);
    forgetPages(this.#s, tier, keys);
  }

  /**
   * Counts reads of `keys` on tier `tier` that did not go through load() (bytes read straight from a host tier's
   * slots, e.g. the RESP door's GETs) as hits, as load() would have: last access and hit count in the index, an
   * access for the tier's eviction policy, promotions and selective copies. Keys the tier does not hold are skipped;
   * a key named twice counts twice, in order. Call it with batches. Resolves with how many keys were counted.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed key or an unknown tier, ERR_CLOSED
   */
  recordHits(tier: string, keys: readonly PageKey[]): Promise<number> {
    ready(this.#s);
    checkKeys(keys, 'keys', false);
    return recordHits(this.#s, tier, keys);
  }
}
