/**
 * TierSync: one memory hierarchy over the tier drivers. The block index (SQLite) records which pages exist and
 * where their copies are; an eviction policy per tier picks victims; the native engine moves the bytes.
 *
 * Data path:
 * - store: keys of the full pages; the index says which are new (their copies stay pending, invisible, until the
 *   bytes land); room is made on the first tier (victims demoted to the next tier when no lower copy exists); one
 *   driver write; one index transaction marks the copies ready; write-through is queued behind the caller.
 * - lookup: the longest prefix of keys with a ready copy on any tier, with each page's tiers and a load estimate.
 * - load: pages are pinned in the index (so no eviction frees them meanwhile), read from each one's fastest copy
 *   (one batch per tier, in parallel; durable and remote tiers verify CRC32C); a copy that fails falls back to the
 *   next tier holding the page, and pages found nowhere are reported by index so the caller recomputes only those.
 *
 * Stores and tier-to-tier moves run one at a time (a mutex); loads and lookups run beside them.
 */
import { EventEmitter } from 'eventemitter3';
import { HostArena, TierSyncError, TransferEngine } from '@tiersync/native';
import { PriorityPolicy, TenantQuotaPolicy, createAdmissionFilter, createPolicy, decideWrite, type AdmissionFilter, type EvictionPolicy, type WriteMode } from '@tiersync/policy';
import { PAGE_KEY_PATTERN, createTier, type PageKey, type PageLocation, type PageRead, type ReadOutcome, type TierDriver } from '@tiersync/tiers';
import { BlockIndex, type CopyRecord, type IndexStats, type PageHit, type StorePage } from '../index-store/index.js';
import { createNamespace, kvLayout, kvLayoutPreset, pageKeys, type KvLayoutInput, type KvPresetName, type Namespace, type TokenArray } from '../keys/index.js';
import { parseConfig, type ResolvedConfig, type TierSyncConfig } from './config.js';
import { reconcileTiers } from './reconcile.js';

export interface TierSyncEvents {
  'block:stored': (e: { keys: PageKey[]; tier: string }) => void;
  'block:evicted': (e: { keys: PageKey[]; tier: string }) => void;
  'block:demoted': (e: { keys: PageKey[]; from: string; to: string }) => void;
  'block:promoted': (e: { keys: PageKey[]; from: string; to: string }) => void;
  'transfer:completed': (e: { op: 'store' | 'load' | 'move'; tier: string; pages: number; bytes: number; seconds: number }) => void;
  'transfer:failed': (e: { op: 'store' | 'load' | 'move'; tier: string; error: TierSyncError }) => void;
  'tier:pressure': (e: { tier: string; usedPages: number; capacityPages: number; victims: number }) => void;
  'integrity:failed': (e: { key: PageKey; tier: string; error: TierSyncError }) => void;
  'load:layer': (e: LayerEvent) => void;
}

export interface LookupResult {
  /** Keys of every full page of the tokens, in order. */
  keys: PageKey[];
  /** The cached prefix: one entry per page found, in order. */
  pages: Array<{ key: PageKey; tier: string; tiers: readonly string[]; length: number }>;
  /** Tokens covered by the cached prefix. */
  tokens: number;
  /** Estimated time to load the prefix, from each tier's measured (or nominal) read bandwidth. */
  estimatedLoadMs: number;
}

/**
 * The answer of lookupKeys(): which of exactly the given keys are present. `pages` lists the present ones in input
 * order (so load() accepts it as it accepts a prefix lookup); `indices[j]` is the position in `keys` of `pages[j]`.
 */
export interface KeyLookupResult extends LookupResult {
  /** For each input key: whether some tier holds a ready copy. */
  present: boolean[];
  /** For each entry of `pages`: its index in `keys`. */
  indices: number[];
}

export interface DeleteResult {
  /** Keys removed from every tier and from the index. */
  deleted: PageKey[];
  /** Keys kept because a pin holds them (a TTL pin, a load in progress, or a driver-level pin). */
  pinned: PageKey[];
  /** Keys no tier held. */
  missing: PageKey[];
}

/** Options of store() and storeKeys(). */
export interface StoreOptions {
  /** Eviction priority of the new pages (higher is evicted later); needs config.priorities. Default 0. */
  priority?: number;
  /** Tenant the new pages count against (config.tenantQuotas). Default: config.tenant, or 'default'. */
  tenant?: string;
}

/** Options of load(). */
export interface LoadOptions {
  /**
   * Deliver the pages layer group by layer group: every page's group g lands (and is reported through `onLayer` and
   * the `load:layer` event) before any page's group g+1, so the caller can compute layer l while l+1 arrives.
   * Default false (whole pages, one completion).
   */
  layerwise?: boolean;
  /** With `layerwise`: report runs of this many layers of a group instead of whole groups (see layerRanges()). */
  layersPerEvent?: number;
  /** With `layerwise`: called once per range, in page order, when that range of every loaded page is in place. */
  onLayer?: (event: LayerEvent) => void;
}

/** A byte range of every page that holds some layers of one layer group. */
export interface LayerRange {
  /** The layer group's name in the layout. */
  group: string;
  /** Model layer indices whose KV this range holds. */
  layers: readonly number[];
  /** Bytes from the start of a page. */
  offset: number;
  length: number;
}

/** One range of a layerwise load, in place in every loaded page's destination. */
export interface LayerEvent extends LayerRange {
  /** 0-based position of this range in the load's ranges. */
  index: number;
  /** How many ranges the load delivers. */
  of: number;
  /** Pages whose bytes of this range are in place (missing pages are not counted). */
  pages: number;
}

interface LoadContext {
  hit: LookupResult;
  keys: PageKey[];
  copies: CopyRecord[][];
  into: readonly PageLocation[];
  result: LoadResult;
}

export interface StoreResult {
  keys: PageKey[];
  /** Pages written now. */
  stored: number;
  /** Pages that were already stored. */
  existing: number;
  /** Pages not stored because the first tier had no room left (pinned pages fill it). */
  dropped: number;
  /** New pages the admission filter turned away (not looked up often enough yet). */
  notAdmitted: number;
  /** Write-through copies not queued because the background queue was full (backpressure: counted, not waited for). */
  writeThroughDropped: number;
}

export interface LoadResult {
  /** Pages delivered into their destination. */
  loaded: number;
  /** Indices (into the lookup's pages) of pages found on no tier any more: recompute these. */
  missing: number[];
  bytes: number;
  /** Pages delivered per tier. */
  byTier: Record<string, number>;
}

interface TierState {
  name: string;
  driver: TierDriver;
  policy: EvictionPolicy<string>;
  capacityPages: number;
  high: number;
  low: number;
  /** True when writeMode is write-through (kept for callers that read it). */
  writeThrough: boolean;
  /** How pages reach this tier from above (config tiers[i].writeMode). */
  writeMode: WriteMode;
  /** Slots promised to stores whose driver write is in flight (not yet in the policy). */
  reserved: number;
  /** Read bandwidth estimate, bytes per second (EWMA of measured loads). */
  readBps: number;
}

const NOMINAL_READ_BPS: Record<string, number> = { hbm: 100e9, host: 20e9, fs: 2e9, peer: 2e9, object: 0.2e9 };
const UNLIMITED_PAGES = 2 ** 31;
/** Times a store short of room waits for other stores' writes to land before dropping what does not fit. */
const MAX_ROOM_WAITS = 8;

export class TierSync extends EventEmitter<TierSyncEvents> {
  readonly config: ResolvedConfig;
  readonly namespace: Namespace;
  readonly #engine: TransferEngine;
  readonly #tiers: TierState[] = [];
  #index: BlockIndex | undefined;
  #staging: HostArena | undefined;
  #lock: Promise<void> = Promise.resolve();
  #queue: Array<{ keys: PageKey[]; to: number }> = [];
  #queued = 0;
  #draining: Promise<void> | undefined;
  #closed = false;
  #loadSeq = 0;
  /** Store priority of pages stored with a non-zero one (config.priorities). */
  readonly #priority = new Map<PageKey, number>();
  /** Tenant of pages stored while config.tenantQuotas is on. */
  readonly #tenantOf = new Map<PageKey, string>();
  /** Load hits per page, kept while some tier's write mode is selective. */
  readonly #hits = new Map<PageKey, number>();
  #selective = false;
  /** Stores whose driver write runs outside the lock; flush() and close() wait for them. */
  readonly #storesInFlight = new Set<Promise<unknown>>();
  /** Driver writes of stores in flight, settled once their pages are in the policy (evictable). */
  readonly #writesInFlight = new Set<Promise<void>>();
  readonly #admission: AdmissionFilter<string>;
  readonly counters = { stores: 0, pagesStored: 0, pagesDropped: 0, pagesNotAdmitted: 0, loads: 0, pagesLoaded: 0, pagesMissing: 0, backgroundDropped: 0, integrityFailures: 0 };

  /** Validates the configuration (ERR_CONFIG naming the field); call open() before use. */
  constructor(config: TierSyncConfig) {
    super();
    this.config = parseConfig(config);
    const c = this.config;
    const layout =
      typeof c.layout === 'string' ? kvLayoutPreset(c.layout as KvPresetName, { tokensPerPage: c.tokensPerPage }) : kvLayout(c.layout as KvLayoutInput);
    this.namespace = createNamespace({ model: c.model, layout, tenant: c.tenant, ...(c.tenantSalt ? { tenantSalt: c.tenantSalt } : {}) });
    this.#engine = new TransferEngine(c.threads ? { threads: c.threads } : {});
    this.#admission = createAdmissionFilter<string>(c.admission);
  }

  get pageBytes(): number {
    return this.namespace.layout.bytesPerPage;
  }

  get tokensPerPage(): number {
    return this.namespace.layout.tokensPerPage;
  }

  get engine(): TransferEngine {
    return this.#engine;
  }

  /** Opens every tier and the index; copies on volatile tiers from an earlier run are dropped from the index. */
  async open(): Promise<void> {
    const context = { engine: this.#engine, pageBytes: this.pageBytes, fingerprint: `${this.namespace.model}/${this.namespace.layoutFingerprint}` };
    const names = new Set<string>();
    for (const [i, t] of this.config.tiers.entries()) {
      const driver = createTier(t.url, context);
      const name = t.name ?? driver.capabilities.kind;
      if (names.has(name)) throw new TierSyncError(`config tiers.${i}.name: '${name}' is used twice (give each tier a name)`, 'ERR_CONFIG');
      names.add(name);
      await driver.open();
      const capacity = driver.stats().capacityBytes;
      const capacityPages = capacity > 0 ? Math.floor(capacity / this.pageBytes) : UNLIMITED_PAGES;
      const policy = this.#policyFor(t.policy, capacityPages);
      const writeMode: WriteMode =
        t.writeMode === undefined ? { kind: t.writeThrough ? 'write-through' : 'write-back' } : typeof t.writeMode === 'string' ? { kind: t.writeMode } : t.writeMode;
      if (writeMode.kind === 'selective') this.#selective = true;
      this.#tiers.push({
        name,
        driver,
        policy,
        capacityPages,
        high: t.highWatermark,
        low: t.lowWatermark,
        writeThrough: writeMode.kind === 'write-through',
        writeMode,
        reserved: 0,
        readBps: NOMINAL_READ_BPS[driver.capabilities.kind] ?? 1e9,
      });
    }
    this.#index = BlockIndex.open({
      path: this.config.index.path,
      synchronous: this.config.index.synchronous,
      tiers: this.#tiers.map((t) => ({ name: t.name, kind: t.driver.capabilities.kind, persistent: t.driver.capabilities.persistent })),
    });
    this.#index.registerNamespace({ id: this.namespace.id, model: this.namespace.model, layoutFingerprint: this.namespace.layoutFingerprint, tenant: this.namespace.tenant, tokensPerPage: this.tokensPerPage });
    await reconcileTiers(this.#index, this.#tiers);
    this.#staging = HostArena.create({ capacity: this.config.stagingPages * this.pageBytes });
  }

  /**
   * A tier's eviction policy: the configured one, inside priority levels (config.priorities) and per-tenant quotas
   * (config.tenantQuotas) when those are on.
   */
  #policyFor(name: string, capacityPages: number): EvictionPolicy<string> {
    const c = this.config;
    const base = (o: { capacity: number; unit: 'objects' | 'bytes' }) => createPolicy(name, o) as EvictionPolicy<string>;
    const levels = c.priorities
      ? (o: { capacity: number; unit: 'objects' | 'bytes' }) => new PriorityPolicy<string>({ ...o, priorityOf: (k) => this.#priority.get(k) ?? 0, create: base }) as EvictionPolicy<string>
      : base;
    const q = c.tenantQuotas;
    if (!q) return levels({ capacity: capacityPages, unit: 'objects' });
    const quotas: Record<string, number> = {};
    for (const [tenant, share] of Object.entries(q.shares)) quotas[tenant] = Math.floor(share * capacityPages);
    return new TenantQuotaPolicy<string>({
      capacity: capacityPages,
      unit: 'objects',
      tenantOf: (k) => this.#tenantOf.get(k) ?? this.#defaultTenant,
      quotas,
      defaultQuota: Math.floor(q.defaultShare * capacityPages),
      overQuota: q.overQuota,
      create: levels,
    }) as EvictionPolicy<string>;
  }

  get #defaultTenant(): string {
    return this.config.tenant || 'default';
  }

  #ready(): BlockIndex {
    if (this.#closed) throw new TierSyncError('TierSync is closed', 'ERR_CLOSED');
    if (!this.#index) throw new TierSyncError('TierSync is not open; call open() first', 'ERR_CLOSED');
    return this.#index;
  }

  /** Runs `fn` after every earlier store or move has finished. */
  #exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#lock.then(fn);
    this.#lock = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  /** Destinations of a load: each must hold its page's recorded length and at most the layout's page size. */
  #checkInto(into: readonly PageLocation[], hit: LookupResult): void {
    const n = hit.pages.length;
    if (!Array.isArray(into)) throw new TierSyncError('into must be an array of { arena, offset, length }', 'ERR_INVALID_ARGUMENT');
    if (into.length < n) throw new TierSyncError(`into: ${n} page(s) needed, ${into.length} given`, 'ERR_INVALID_ARGUMENT');
    for (let i = 0; i < n; i++) {
      const p = into[i]!;
      const need = hit.pages[i]!.length;
      if (!p || typeof p !== 'object' || typeof p.length !== 'number' || p.length < need || p.length > this.pageBytes) {
        throw new TierSyncError(`into[${i}].length must be in [${need}, ${this.pageBytes}] (the page's length, at most the layout's page size), got ${p?.length}`, 'ERR_INVALID_ARGUMENT');
      }
    }
  }

  /** Keys named by a caller: valid PageKeys, each once. */
  #checkKeys(keys: readonly PageKey[], what: string): void {
    if (!Array.isArray(keys)) throw new TierSyncError(`${what} must be an array of page keys`, 'ERR_INVALID_ARGUMENT');
    const seen = new Set<string>();
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      if (typeof k !== 'string' || !PAGE_KEY_PATTERN.test(k)) {
        throw new TierSyncError(`${what}[${i}] must be a page key (16..128 lower-case hex characters), got ${typeof k === 'string' ? `'${k.slice(0, 140)}'` : typeof k}`, 'ERR_INVALID_ARGUMENT');
      }
      if (seen.has(k)) throw new TierSyncError(`${what}[${i}] ${k} appears twice`, 'ERR_INVALID_ARGUMENT');
      seen.add(k);
    }
  }

  #checkPages(pages: readonly PageLocation[], count: number, what: string): void {
    if (!Array.isArray(pages)) throw new TierSyncError(`${what} must be an array of { arena, offset, length }`, 'ERR_INVALID_ARGUMENT');
    if (pages.length < count) throw new TierSyncError(`${what}: ${count} page(s) needed, ${pages.length} given`, 'ERR_INVALID_ARGUMENT');
    for (let i = 0; i < count; i++) {
      const p = pages[i]!;
      if (!p || typeof p !== 'object' || p.length !== this.pageBytes) {
        throw new TierSyncError(`${what}[${i}].length must be the layout's page size ${this.pageBytes}, got ${p?.length}`, 'ERR_INVALID_ARGUMENT');
      }
    }
  }

  /** The driver of a tier by name (for its stats, or tools that manage it directly). */
  tierDriver(name: string): TierDriver {
    const t = this.#tiers.find((x) => x.name === name);
    if (!t) throw new TierSyncError(`no tier named '${name}' (tiers: ${this.#tiers.map((x) => x.name).join(', ')})`, 'ERR_INVALID_ARGUMENT');
    return t.driver;
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
    this.#ready();
    const keys = this.keysOf(tokens);
    this.#checkPages(pages, keys.length, 'pages');
    return this.#storePages(
      keys.map((key, i) => ({ key, parent: i === 0 ? null : keys[i - 1]!, position: i, length: this.pageBytes, location: key })),
      pages,
      this.#checkStoreOptions(options),
    );
  }

  #checkStoreOptions(options: StoreOptions): { priority: number; tenant: string } {
    if (options === null || typeof options !== 'object') throw new TierSyncError('options must be { priority?, tenant? }', 'ERR_INVALID_ARGUMENT');
    const priority = options.priority ?? 0;
    if (!Number.isSafeInteger(priority)) throw new TierSyncError(`options.priority must be a safe integer, got ${String(priority)}`, 'ERR_INVALID_ARGUMENT');
    if (priority !== 0 && !this.config.priorities) throw new TierSyncError('options.priority needs config.priorities: true', 'ERR_INVALID_ARGUMENT');
    const tenant = options.tenant ?? this.#defaultTenant;
    if (typeof tenant !== 'string' || tenant.length < 1 || tenant.length > 256) throw new TierSyncError('options.tenant must be a string of 1..256 characters', 'ERR_INVALID_ARGUMENT');
    return { priority, tenant };
  }

  /**
   * Stores pages under keys the caller chose (no parent chain): `pages[i]` holds the bytes of `keys[i]`, 1 byte up
   * to the layout's page size (the index records each page's true length; load() then needs destinations of at
   * least that length). Keys already stored are left as they are (`existing`).
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed or repeated key or a page of a bad size.
   */
  storeKeys(keys: readonly PageKey[], pages: readonly PageLocation[], options: StoreOptions = {}): Promise<StoreResult> {
    this.#ready();
    this.#checkKeys(keys, 'keys');
    if (!Array.isArray(pages)) throw new TierSyncError('pages must be an array of { arena, offset, length }', 'ERR_INVALID_ARGUMENT');
    if (pages.length !== keys.length) throw new TierSyncError(`pages: ${keys.length} page(s) needed (one per key), ${pages.length} given`, 'ERR_INVALID_ARGUMENT');
    pages.forEach((p, i) => {
      if (!p || typeof p !== 'object' || !Number.isSafeInteger(p.length) || p.length < 1 || p.length > this.pageBytes) {
        throw new TierSyncError(`pages[${i}].length must be an integer in [1, ${this.pageBytes}] (the layout's page size), got ${p?.length}`, 'ERR_INVALID_ARGUMENT');
      }
    });
    return this.#storePages(
      keys.map((key, i) => ({ key, parent: null, position: 0, length: pages[i]!.length, location: key })),
      pages,
      this.#checkStoreOptions(options),
    );
  }

  /**
   * The store path shared by store() and storeKeys(): `pages[i]` holds the bytes of `entries[i]`.
   *
   * Only index and policy bookkeeping and room-making run under the lock; the driver write runs outside it, so
   * stores of different pages overlap. Room is reserved under the lock (`reserved`), so overlapping stores never
   * promise the same slots. Pages another store is writing are `existing` here (their pending copy is in the
   * index); if that store fails, they vanish as if never stored.
   */
  #storePages(entries: StorePage[], pages: readonly PageLocation[], options: { priority: number; tenant: string }): Promise<StoreResult> {
    const index = this.#ready();
    const keys = entries.map((e) => e.key);
    const top = this.#tiers[0]!;
    const run = (async (): Promise<StoreResult> => {
      const { begin, refused, admitted } = await this.#exclusive(async () => {
        const begin = index.beginStore(this.namespace.id, top.name, entries);
        const lengthOf = new Map(entries.map((e) => [e.key, e.length]));
        const admitted = begin.fresh.filter((k) => this.#admission.admit(k, lengthOf.get(k)!));
        const admittedSet = new Set(admitted);
        const refused = begin.fresh.filter((k) => !admittedSet.has(k));
        if (refused.length) index.abortCopies(top.name, refused);
        for (const k of admitted) {
          if (options.priority !== 0) this.#priority.set(k, options.priority);
          if (this.config.tenantQuotas) this.#tenantOf.set(k, options.tenant);
        }
        return { begin, refused, admitted };
      });
      const admittedSet = new Set(admitted);
      let plan: { toWrite: Array<{ key: PageKey; source: PageLocation }>; dropped: PageKey[] } | undefined;
      for (let waits = 0; ; waits++) {
        plan = await this.#exclusive(async () => {
          let room = admitted.length ? await this.#makeRoom(0, admitted.length) : 0;
          // Slots reserved by stores still writing cannot be freed yet: wait for those to land (their pages then
          // become evictable) rather than drop pages that a store run alone would have kept. Bounded, so a stream
          // of other stores cannot hold this one back for ever: after that, what does not fit is dropped.
          if (room < admitted.length && top.reserved > 0 && waits < MAX_ROOM_WAITS) return undefined;
          const toWrite = keys.map((key, i) => ({ key, source: pages[i]! })).filter((p) => admittedSet.has(p.key) && room-- > 0);
          const writing = new Set(toWrite.map((p) => p.key));
          const dropped = admitted.filter((k) => !writing.has(k));
          if (dropped.length) {
            index.abortCopies(top.name, dropped);
            this.#forgetIfGone(dropped);
          }
          top.reserved += toWrite.length;
          return { toWrite, dropped };
        });
        if (plan) break;
        await Promise.allSettled([...this.#writesInFlight]);
      }
      const { toWrite } = plan;
      let dropped = plan.dropped.length;
      let stored = 0;
      let writeThroughDropped = 0;
      let landedNow: () => void = () => undefined;
      const landing = new Promise<void>((resolve) => (landedNow = resolve));
      this.#writesInFlight.add(landing);
      try {
        if (toWrite.length) {
          const start = process.hrtime.bigint();
          let written;
          try {
            // The caller is waiting for this write: demand priority, not the background class of moves.
            written = await top.driver.write(toWrite, { priority: 'demand', timeoutMs: this.config.deadlines.storeMs });
          } catch (e) {
            top.reserved -= toWrite.length;
            index.abortCopies(top.name, toWrite.map((p) => p.key));
            this.#forgetIfGone(toWrite.map((p) => p.key));
            this.emit('transfer:failed', { op: 'store', tier: top.name, error: e as TierSyncError });
            throw e;
          }
          const commit = index.commitCopies(toWrite.map((p, i) => ({ key: p.key, tier: top.name, crc32c: written.crc32c[i]!, durable: top.driver.capabilities.persistent })));
          let landed = toWrite.map((p) => p.key);
          if (commit.missing.length) {
            // Deleted (deleteKeys, deleteNamespace) while being written: free the bytes, store nothing.
            const lost = new Set(commit.missing);
            landed = landed.filter((k) => !lost.has(k));
            await top.driver.delete(commit.missing).catch(() => undefined);
          }
          // The reservation becomes policy entries in one synchronous step.
          top.reserved -= toWrite.length;
          const { refused: overQuota, victims } = this.#trackNow(0, landed);
          landedNow();
          if (overQuota.length || victims.length) await this.#exclusive(() => this.#settle(0, overQuota, victims));
          if (overQuota.length) {
            const out = new Set(overQuota);
            landed = landed.filter((k) => !out.has(k));
            dropped += overQuota.length;
          }
          stored = landed.length;
          const kept = new Set(landed);
          const bytes = toWrite.reduce((sum, p) => sum + (kept.has(p.key) ? p.source.length : 0), 0);
          if (landed.length) this.emit('block:stored', { keys: landed, tier: top.name });
          this.emit('transfer:completed', { op: 'store', tier: top.name, pages: landed.length, bytes, seconds: Number(process.hrtime.bigint() - start) / 1e9 });
          this.#tiers.forEach((t, i) => {
            if (i > 0 && landed.length && decideWrite(t.writeMode, 'stored', { hits: 0, copiedBelow: false }) === 'copy-down') writeThroughDropped += this.#enqueue(landed, i);
          });
        }
      } finally {
        landedNow();
        this.#writesInFlight.delete(landing);
      }
      this.counters.stores++;
      this.counters.pagesStored += stored;
      this.counters.pagesDropped += dropped;
      this.counters.pagesNotAdmitted += refused.length;
      return { keys, stored, existing: begin.existing.length, dropped, notAdmitted: refused.length, writeThroughDropped };
    })();
    this.#storesInFlight.add(run);
    const done = () => this.#storesInFlight.delete(run);
    run.then(done, done);
    return run;
  }

  /**
   * Enters pages that just landed on tier `t` in its policy (synchronous). Returns the pages the policy refuses (a
   * tenant at its quota with overQuota 'refuse') and the victims it names (a tenant over its share with
   * 'evict-own'); pass both to #settle under the lock.
   */
  #trackNow(t: number, keys: readonly PageKey[]): { refused: PageKey[]; victims: PageKey[] } {
    const policy = this.#tiers[t]!.policy;
    const refused: PageKey[] = [];
    const victims: PageKey[] = [];
    for (const k of keys) {
      if (policy.has(k)) continue;
      if (!policy.canAdmit(k, 1)) {
        refused.push(k);
        continue;
      }
      for (const v of policy.insert(k, 1)) victims.push(v);
    }
    return { refused, victims };
  }

  /** Removes refused pages from tier `t` again and evicts the policy's victims for real. Call under the lock. */
  async #settle(t: number, refused: readonly PageKey[], victims: readonly PageKey[]): Promise<void> {
    const tier = this.#tiers[t]!;
    const index = this.#index!;
    if (refused.length) {
      await tier.driver.delete(refused);
      index.removeCopies(tier.name, refused, { force: true });
      this.#forgetIfGone(refused);
    }
    if (!victims.length) return;
    const pinned = index.pinned(victims);
    const evicted = new Set(await this.#evict(t, victims.filter((_, i) => !pinned[i])));
    // Victims that stay (pinned, or already gone from the index) go back into the policy if still held here.
    for (const v of victims) if (!evicted.has(v) && !tier.policy.has(v) && tier.policy.canAdmit(v, 1)) tier.policy.insert(v, 1);
  }

  /** Drops the per-page bookkeeping (priority, tenant, hits) of pages no tier holds any more. */
  #forgetIfGone(keys: readonly PageKey[]): void {
    if (!this.#priority.size && !this.#tenantOf.size && !this.#hits.size) return;
    for (const k of keys) {
      if (this.#tiers.some((t) => t.policy.has(k))) continue;
      this.#priority.delete(k);
      this.#tenantOf.delete(k);
      this.#hits.delete(k);
    }
  }

  /**
   * Frees slots on tier `t` so `need` more pages fit under its high watermark: the policy's victims are demoted to
   * the next tier when no lower copy exists, then removed. Returns how many of `need` fit. Call under the lock.
   */
  async #makeRoom(t: number, need: number): Promise<number> {
    const tier = this.#tiers[t]!;
    const index = this.#index!;
    const used = tier.policy.count + tier.reserved;
    const high = Math.floor(tier.high * tier.capacityPages);
    if (used + need <= high) return need;
    const target = Math.max(0, Math.min(Math.floor(tier.low * tier.capacityPages), tier.capacityPages - need));
    const want = Math.max(0, used - target);
    // Look a bit past the first `want` victims: pinned pages among them are skipped, not counted.
    const victims = tier.policy.peekVictims(Math.min(tier.policy.count, want * 2 + 64));
    if (want > 0 && victims.length) {
      const pinned = index.pinned(victims);
      const candidates = victims.filter((_, i) => !pinned[i]).slice(0, want);
      const marked = await this.#evict(t, candidates);
      this.emit('tier:pressure', { tier: tier.name, usedPages: used, capacityPages: tier.capacityPages, victims: marked.length });
    }
    return Math.max(0, Math.min(need, tier.capacityPages - tier.policy.count - tier.reserved));
  }

  /**
   * Evicts `candidates` (unpinned) from tier `t`: pages with no ready copy lower down are first copied to the next
   * tier when its write mode says so (write-back, write-through, or selective for pages hit often enough), then
   * the copies here are marked evicting, freed and forgotten. Returns the keys evicted. Call under the lock.
   */
  async #evict(t: number, candidates: readonly PageKey[]): Promise<PageKey[]> {
    const tier = this.#tiers[t]!;
    const index = this.#index!;
    if (!candidates.length) return [];
    // Copy down first, while the victims are still readable here, so a page always has a ready copy somewhere
    // (a load running beside this finds it on one tier or the other, never on neither).
    const copies = index.copiesOf(candidates);
    const lower = new Set(this.#tiers.slice(t + 1).map((x) => x.name));
    const orphans = candidates.filter((_, i) => !copies[i]!.some((c) => c.state === 'ready' && lower.has(c.tier)));
    const next = this.#tiers[t + 1];
    if (orphans.length && next) {
      const demote = orphans.filter((k) => decideWrite(next.writeMode, 'evicting', { hits: this.#hits.get(k) ?? 0, copiedBelow: false }) === 'copy-down');
      if (demote.length) await this.#copy(demote, t, t + 1, 'demote');
    }
    const { marked } = index.markEvicting(tier.name, candidates);
    if (marked.length) {
      await tier.driver.delete(marked);
      index.removeCopies(tier.name, marked, { force: true });
      for (const k of marked) tier.policy.remove(k);
      this.emit('block:evicted', { keys: marked, tier: tier.name });
      this.#forgetIfGone(marked);
    }
    return marked;
  }

  /** Copies pages from tier `from` to tier `to` through host staging memory, in staging-sized chunks. */
  async #copy(keys: PageKey[], from: number, to: number, why: 'demote' | 'promote' | 'writeThrough'): Promise<void> {
    const src = this.#tiers[from]!;
    const dst = this.#tiers[to]!;
    const index = this.#index!;
    const staging = this.#staging!;
    const chunk = this.config.stagingPages;
    for (let at = 0; at < keys.length; at += chunk) {
      const part = keys.slice(at, at + chunk);
      const begun = index.beginCopies(dst.name, part.map((key) => ({ key, location: key })));
      const wanted = begun.added;
      if (!wanted.length) continue;
      const fits = await this.#makeRoom(to, wanted.length);
      const moving = wanted.slice(0, fits);
      if (wanted.length > fits) index.abortCopies(dst.name, wanted.slice(fits));
      if (!moving.length) continue;
      const start = process.hrtime.bigint();
      try {
        const read = await src.driver.read(moving.map((key, i) => ({ key, into: { arena: staging, offset: i * this.pageBytes, length: this.pageBytes } })), { priority: 'writeBack', timeoutMs: this.config.deadlines.moveMs });
        const ok = moving.filter((_, i) => read[i]!.status === 'hit');
        this.#reportIntegrity(read, src.name);
        const written = await dst.driver.write(
          ok.map((key) => {
            const hit = read[moving.indexOf(key)] as Extract<ReadOutcome, { status: 'hit' }>;
            // The checksum travels with the page, so the next tier need not compute it again (the peer tier skips a pass).
            return { key, source: { arena: staging, offset: moving.indexOf(key) * this.pageBytes, length: hit.length }, crc32c: hit.crc32c };
          }),
          { priority: 'writeBack', timeoutMs: this.config.deadlines.moveMs },
        );
        index.commitCopies(ok.map((key, i) => ({ key, tier: dst.name, crc32c: written.crc32c[i]!, durable: dst.driver.capabilities.persistent })));
        const lost = moving.filter((k) => !ok.includes(k));
        if (lost.length) index.abortCopies(dst.name, lost);
        const tracked = this.#trackNow(to, ok);
        if (tracked.refused.length || tracked.victims.length) await this.#settle(to, tracked.refused, tracked.victims);
        if (why === 'demote') this.emit('block:demoted', { keys: ok, from: src.name, to: dst.name });
        if (why === 'promote') this.emit('block:promoted', { keys: ok, from: src.name, to: dst.name });
        this.emit('transfer:completed', { op: 'move', tier: dst.name, pages: ok.length, bytes: ok.length * this.pageBytes, seconds: Number(process.hrtime.bigint() - start) / 1e9 });
      } catch (e) {
        index.abortCopies(dst.name, moving);
        this.emit('transfer:failed', { op: 'move', tier: dst.name, error: e as TierSyncError });
        throw e;
      }
    }
  }

  #reportIntegrity(outcomes: readonly ReadOutcome[], tier: string): void {
    for (const o of outcomes) {
      if (o.status === 'error' && o.error.code === 'ERR_CHECKSUM') {
        this.counters.integrityFailures++;
        this.emit('integrity:failed', { key: o.key, tier, error: o.error });
      }
    }
  }

  /**
   * Queues a background copy (write-through, promotion); beyond maxQueuedPages pages are dropped and counted
   * rather than waited for. Returns how many were dropped.
   */
  #enqueue(keys: PageKey[], to: number): number {
    if (this.#queued + keys.length > this.config.maxQueuedPages) {
      this.counters.backgroundDropped += keys.length;
      return keys.length;
    }
    this.#queue.push({ keys, to });
    this.#queued += keys.length;
    this.#draining ??= this.#drain().finally(() => (this.#draining = undefined));
    return 0;
  }

  async #drain(): Promise<void> {
    for (let job = this.#queue.shift(); job; job = this.#queue.shift()) {
      this.#queued -= job.keys.length;
      const { keys, to } = job;
      await this.#exclusive(async () => {
        // Copy from the fastest tier that still holds each page.
        const copies = this.#index!.copiesOf(keys);
        for (let from = 0; from < this.#tiers.length; from++) {
          if (from === to) continue;
          const name = this.#tiers[from]!.name;
          const here = keys.filter((_, i) => copies[i]!.some((c) => c.tier === name && c.state === 'ready') && !copies[i]!.some((c) => c.tier === this.#tiers[to]!.name));
          if (here.length) await this.#copy(here, from, to, to === 0 ? 'promote' : 'writeThrough').catch(() => undefined);
          keys.splice(0, keys.length, ...keys.filter((k) => !here.includes(k)));
        }
      });
    }
  }

  /** Resolves when background write-through and promotion have caught up. */
  async flush(): Promise<void> {
    while (this.#storesInFlight.size) await Promise.allSettled([...this.#storesInFlight]);
    while (this.#draining) await this.#draining;
    await this.#exclusive(async () => undefined);
  }

  /** The longest prefix of `tokens`' pages present on any tier, with where each page is and the cost to load it. */
  lookup(tokens: TokenArray): LookupResult {
    const index = this.#ready();
    const keys = this.keysOf(tokens);
    for (const k of keys) this.#admission.recordLookup(k);
    const hits = index.lookupPrefix(keys);
    const byName = new Map(this.#tiers.map((t) => [t.name, t]));
    let ms = 0;
    const pages = hits.map((h: PageHit) => {
      const tier = h.tiers[0]!;
      ms += (h.length / (byName.get(tier)?.readBps ?? 1e9)) * 1000;
      return { key: h.key, tier, tiers: h.tiers, length: h.length };
    });
    return { keys, pages, tokens: pages.length * this.tokensPerPage, estimatedLoadMs: ms };
  }

  /**
   * Which of exactly `keys` are present (not only a prefix), with each present page's tier and length. The result
   * can be given to load() as it is (its `pages` are the present keys, in input order).
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed key.
   */
  lookupKeys(keys: readonly PageKey[]): KeyLookupResult {
    const index = this.#ready();
    if (!Array.isArray(keys)) throw new TierSyncError('keys must be an array of page keys', 'ERR_INVALID_ARGUMENT');
    keys.forEach((k, i) => {
      if (typeof k !== 'string' || !PAGE_KEY_PATTERN.test(k)) throw new TierSyncError(`keys[${i}] must be a page key (16..128 lower-case hex characters)`, 'ERR_INVALID_ARGUMENT');
    });
    for (const k of keys) this.#admission.recordLookup(k);
    const hits = index.lookupExact(keys);
    const byName = new Map(this.#tiers.map((t) => [t.name, t]));
    let ms = 0;
    const pages: LookupResult['pages'] = [];
    const indices: number[] = [];
    const present: boolean[] = new Array(keys.length);
    for (let i = 0; i < keys.length; i++) {
      const h = hits[i];
      present[i] = h !== undefined;
      if (!h) continue;
      const tier = h.tiers[0]!;
      ms += (h.length / (byName.get(tier)?.readBps ?? 1e9)) * 1000;
      pages.push({ key: h.key, tier, tiers: h.tiers, length: h.length });
      indices.push(i);
    }
    return { keys: [...keys], pages, tokens: 0, estimatedLoadMs: ms, present, indices };
  }

  /**
   * Removes `keys` from every tier and from the index. Pinned pages (a TTL pin, a load reading them) are kept and
   * listed in `pinned`; keys no tier held are listed in `missing`.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed or repeated key.
   */
  deleteKeys(keys: readonly PageKey[]): Promise<DeleteResult> {
    const index = this.#ready();
    this.#checkKeys(keys, 'keys');
    return this.#exclusive(async () => {
      const pinnedNow = index.pinned(keys);
      const pinned = new Set(keys.filter((_, i) => pinnedNow[i]));
      const candidates = keys.filter((_, i) => !pinnedNow[i]);
      const copies = index.copiesOf(candidates);
      const held = new Set<PageKey>();
      for (const t of this.#tiers) {
        const here = candidates.filter((_, i) => copies[i]!.some((c) => c.tier === t.name));
        if (!here.length) continue;
        for (const k of here) held.add(k);
        // The tier first, then the index: a load that reads meanwhile finds a miss and reports the page missing.
        const r = await t.driver.delete(here);
        for (const k of r.pinned) pinned.add(k);
        const kept = new Set(r.pinned);
        const gone = here.filter((k) => !kept.has(k));
        if (gone.length) index.removeCopies(t.name, gone, { force: true });
        for (const k of gone) t.policy.remove(k);
        if (gone.length) this.emit('block:evicted', { keys: gone, tier: t.name });
        this.#forgetIfGone(gone);
      }
      return {
        deleted: candidates.filter((k) => held.has(k) && !pinned.has(k)),
        pinned: keys.filter((k) => pinned.has(k)),
        missing: candidates.filter((k) => !held.has(k)),
      };
    });
  }

  /**
   * Loads the pages of a lookup into `into[i]` (at least the page's recorded length each: the layout's page size
   * for token pages, the stored length for pages of storeKeys()). Pages evicted since the lookup, or
   * whose every copy failed its checksum, are listed in `missing`: recompute only those.
   */
  async load(hit: LookupResult, into: readonly PageLocation[], options: LoadOptions = {}): Promise<LoadResult> {
    const index = this.#ready();
    this.#checkInto(into, hit);
    if (options === null || typeof options !== 'object') throw new TierSyncError('options must be { layerwise?, layersPerEvent?, onLayer? }', 'ERR_INVALID_ARGUMENT');
    if (options.onLayer !== undefined && typeof options.onLayer !== 'function') throw new TierSyncError('options.onLayer must be a function', 'ERR_INVALID_ARGUMENT');
    const ranges = options.layerwise === true ? this.layerRanges(options.layersPerEvent === undefined ? {} : { layersPerEvent: options.layersPerEvent }) : undefined;
    const keys = hit.pages.map((p) => p.key);
    const owner = `load:${++this.#loadSeq}`;
    // Pin and read the copies of every page in one index transaction; touch and unpin in one at the end.
    const copies = index.beginLoad(keys, { ttlMs: 120_000, owner });
    const result: LoadResult = { loaded: 0, missing: [], bytes: 0, byTier: {} };
    const ctx: LoadContext = { hit, keys, copies, into, result };
    let touched: PageKey[] | undefined;
    try {
      const all = keys.map((_, i) => i);
      const pending = ranges ? await this.#readLayerwise(all, ctx, ranges, options.onLayer) : await this.#readWhole(all, ctx);
      result.missing = pending;
      const gone = new Set(pending);
      touched = keys.filter((_, i) => !gone.has(i));
      if (this.#selective) this.#countHits(touched, keys, copies);
    } finally {
      index.endLoad(keys, { owner, ...(touched ? { touched } : {}) });
    }
    this.counters.loads++;
    this.counters.pagesLoaded += result.loaded;
    this.counters.pagesMissing += result.missing.length;
    return result;
  }

  /**
   * Selective write modes: counts a hit on each loaded page, and queues a copy to each selective tier of the pages
   * that now reach its `minHits` and have no copy there or lower down.
   */
  #countHits(touched: readonly PageKey[], keys: readonly PageKey[], copies: CopyRecord[][]): void {
    const at = new Map(keys.map((k, i) => [k, i]));
    for (const k of touched) this.#hits.set(k, (this.#hits.get(k) ?? 0) + 1);
    this.#tiers.forEach((tier, t) => {
      if (t === 0 || tier.writeMode.kind !== 'selective') return;
      const below = new Set(this.#tiers.slice(t).map((x) => x.name));
      const hot = touched.filter((k) => {
        const copiedBelow = copies[at.get(k)!]!.some((c) => c.state === 'ready' && below.has(c.tier));
        return decideWrite(tier.writeMode, 'hit', { hits: this.#hits.get(k)!, copiedBelow }) === 'copy-down';
      });
      if (hot.length) this.#enqueue(hot, t);
    });
  }

  async #readOrFail(tier: TierState, reads: PageRead[]): Promise<ReadOutcome[]> {
    try {
      return await tier.driver.read(reads, { timeoutMs: this.config.deadlines.loadMs });
    } catch (e) {
      // The whole call failed (deadline, closed tier, I/O): every page falls through to its next copy; the copies
      // stay recorded, since nothing proves them gone.
      const error = e instanceof TierSyncError ? e : new TierSyncError(`tier '${tier.name}' read failed: ${(e as Error).message}`, 'ERR_IO', { cause: e });
      this.emit('transfer:failed', { op: 'load', tier: tier.name, error });
      return reads.map((r) => ({ key: r.key, status: 'error', error }));
    }
  }

  /**
   * Reads pages `indices` of a load whole, each from its fastest ready copy; a miss or a bad checksum falls through
   * to the next tier holding the page. Returns the indices found nowhere.
   */
  async #readWhole(indices: readonly number[], ctx: LoadContext): Promise<number[]> {
    const index = this.#index!;
    const { hit, keys, copies, into, result } = ctx;
    let pending = [...indices];
    if (!pending.length) return pending;
    for (const tier of this.#tiers) {
      const here = pending.filter((i) => copies[i]!.some((c) => c.tier === tier.name && c.state === 'ready'));
      if (!here.length) continue;
      const start = process.hrtime.bigint();
      const outcomes = await this.#readOrFail(tier, here.map((i) => ({ key: keys[i]!, into: into[i]! })));
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      this.#reportIntegrity(outcomes, tier.name);
      const done = new Set<number>();
      const broken: PageKey[] = [];
      outcomes.forEach((o, k) => {
        const i = here[k]!;
        if (o.status === 'hit') {
          done.add(i);
          result.loaded++;
          result.bytes += o.length;
          result.byTier[tier.name] = (result.byTier[tier.name] ?? 0) + 1;
          tier.policy.access(keys[i]!);
        } else if (o.status === 'miss' || o.error.code === 'ERR_CHECKSUM') {
          // Only a miss or a failed checksum proves the copy gone or damaged; a transient error (ERR_IO,
          // ERR_TIMEOUT) leaves it recorded, or a durable page would be forgotten and freed at the next open.
          broken.push(keys[i]!);
        }
      });
      if (broken.length) {
        // The index promised a copy the tier no longer has, or has damaged: forget it.
        index.removeCopies(tier.name, broken, { force: true });
        for (const k of broken) tier.policy.remove(k);
      }
      let bytes = 0;
      for (const i of done) bytes += hit.pages[i]!.length;
      if (bytes > 0 && seconds > 0) tier.readBps = 0.8 * tier.readBps + 0.2 * (bytes / seconds);
      const verified = here.filter((i) => done.has(i)).map((i) => keys[i]!);
      if (tier.driver.capabilities.verifiesOnRead && verified.length) index.markVerified(tier.name, verified);
      this.emit('transfer:completed', { op: 'load', tier: tier.name, pages: done.size, bytes, seconds });
      if (this.config.promoteOnHit && tier !== this.#tiers[0] && done.size) this.#enqueue([...done].map((i) => keys[i]!), 0);
      pending = pending.filter((i) => !done.has(i));
      if (!pending.length) break;
    }
    return pending;
  }

  /**
   * The byte range of each layer group within a page, in page order (the page is the groups' parts laid out in group
   * order: keys/layout.ts). With `layersPerEvent`, groups are cut into runs of that many layers, assuming the engine
   * lays a group's part out layer-major (all tokens of layer l, then layer l+1), as vLLM's and llama.cpp's per-layer
   * KV buffers are.
   * @throws TierSyncError ERR_INVALID_ARGUMENT for a layersPerEvent that is not a positive integer.
   */
  layerRanges(options: { layersPerEvent?: number } = {}): LayerRange[] {
    const per = options.layersPerEvent;
    if (per !== undefined && (!Number.isSafeInteger(per) || per < 1)) throw new TierSyncError(`options.layersPerEvent must be an integer >= 1, got ${per}`, 'ERR_INVALID_ARGUMENT');
    const layout = this.namespace.layout;
    const out: LayerRange[] = [];
    let base = 0;
    for (const g of layout.groups) {
      const step = per ?? g.layers.length;
      const layerBytes = g.bytesPerTokenPerLayer * layout.tokensPerPage;
      for (let at = 0; at < g.layers.length; at += step) {
        const layers = g.layers.slice(at, at + step);
        out.push({ group: g.name, layers, offset: base + at * layerBytes, length: layers.length * layerBytes });
      }
      base += g.bytesPerPage;
    }
    return out;
  }

  /**
   * A layerwise load: pages whose fastest copy is on a tier with range reads arrive range by range, every page's
   * range r before any page's range r+1, and `onLayer` / `load:layer` report each range once it is in place for
   * every page. Range reads are memory tiers that need no checksum, and the fs tier, which verifies each range
   * against per-chunk CRC32Cs before reporting it (a failed chunk is an ERR_CHECKSUM outcome, never a hit). Pages on
   * other verifying tiers (object, peer, memory tiers with verify=true) are read whole and checked first, so the
   * first event waits for them: no event ever covers bytes not yet verified. A page whose ranged copy fails
   * mid-way is read whole from its next copy before the event of that range.
   */
  async #readLayerwise(indices: readonly number[], ctx: LoadContext, ranges: readonly LayerRange[], onLayer: ((e: LayerEvent) => void) | undefined): Promise<number[]> {
    const index = this.#index!;
    const { hit, keys, copies, into, result } = ctx;
    const tierOf = (i: number) => this.#tiers.findIndex((t) => copies[i]!.some((c) => c.tier === t.name && c.state === 'ready'));
    const source = new Map<number, number>();
    for (const i of indices) {
      const t = tierOf(i);
      if (t >= 0 && this.#tiers[t]!.driver.capabilities.rangeReads === true && hit.pages[i]!.length === this.pageBytes) source.set(i, t);
    }
    const rest = indices.filter((i) => !source.has(i));
    const wholeDone = this.#readWhole(rest, ctx);
    wholeDone.catch(() => undefined); // awaited below; a rejection before then must not go unhandled
    const missing: number[] = [];
    let landed = 0;
    const started = process.hrtime.bigint();
    for (const [r, range] of ranges.entries()) {
      const byTier = new Map<number, number[]>();
      for (const [i, t] of source) {
        let list = byTier.get(t);
        if (!list) byTier.set(t, (list = []));
        list.push(i);
      }
      const failed: number[] = [];
      await Promise.all(
        [...byTier].map(async ([t, list]) => {
          const tier = this.#tiers[t]!;
          const outcomes = await this.#readOrFail(
            tier,
            list.map((i) => ({ key: keys[i]!, into: { arena: into[i]!.arena, offset: into[i]!.offset + range.offset, length: range.length }, range: { offset: range.offset, length: range.length } })),
          );
          // A range that failed its chunk checksums (tiers that verify ranges, e.g. fs) is reported like a page.
          this.#reportIntegrity(outcomes, tier.name);
          const broken: PageKey[] = [];
          outcomes.forEach((o, k) => {
            if (o.status === 'hit') return;
            const i = list[k]!;
            failed.push(i);
            if (o.status === 'miss' || o.error.code === 'ERR_CHECKSUM') broken.push(keys[i]!);
            // The rest of this page comes whole from its next copy.
            copies[i] = copies[i]!.filter((c) => c.tier !== tier.name);
          });
          if (broken.length) {
            index.removeCopies(tier.name, broken, { force: true });
            for (const k of broken) tier.policy.remove(k);
          }
        }),
      );
      if (failed.length) {
        for (const i of failed) source.delete(i);
        missing.push(...(await this.#readWhole(failed, ctx)));
      }
      if (r === 0) missing.push(...(await wholeDone));
      landed = indices.length - missing.length;
      const event: LayerEvent = { index: r, of: ranges.length, group: range.group, layers: range.layers, offset: range.offset, length: range.length, pages: landed };
      this.emit('load:layer', event);
      onLayer?.(event);
    }
    // Pages that arrived range by range: counted once all their ranges are in place.
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const perTier = new Map<number, number[]>();
    for (const [i, t] of source) {
      let list = perTier.get(t);
      if (!list) perTier.set(t, (list = []));
      list.push(i);
    }
    for (const [t, list] of perTier) {
      const tier = this.#tiers[t]!;
      let bytes = 0;
      for (const i of list) {
        bytes += hit.pages[i]!.length;
        tier.policy.access(keys[i]!);
      }
      result.loaded += list.length;
      result.bytes += bytes;
      result.byTier[tier.name] = (result.byTier[tier.name] ?? 0) + list.length;
      this.emit('transfer:completed', { op: 'load', tier: tier.name, pages: list.length, bytes, seconds });
      if (this.config.promoteOnHit && t > 0) this.#enqueue(list.map((i) => keys[i]!), 0);
    }
    return missing.sort((a, b) => a - b);
  }

  /** Looks up `tokens` and queues promotion of the cached prefix into the first tier. */
  prefetch(tokens: TokenArray): LookupResult {
    const hit = this.lookup(tokens);
    const below = hit.pages.filter((p) => p.tier !== this.#tiers[0]!.name).map((p) => p.key);
    if (below.length) this.#enqueue(below, 0);
    return hit;
  }

  /** Holds the pages of `tokens` on every tier until `ttlMs` passes or unpin(). */
  pin(tokens: TokenArray, options: { ttlMs: number }): PageKey[] {
    const index = this.#ready();
    const keys = index.lookupPrefix(this.keysOf(tokens)).map((h) => h.key);
    index.pin(keys, { ttlMs: options.ttlMs, owner: 'user' });
    return keys;
  }

  unpin(tokens: TokenArray): number {
    return this.#ready().unpin(this.keysOf(tokens), { owner: 'user' });
  }

  /**
   * pin() by key: holds `keys` on every tier (eviction skips them) until `ttlMs` passes or unpinKeys() with the same
   * owner (default 'user', the owner pin() uses). Keys need not be stored yet (a page adopted later is held too).
   * Returns the keys stored now.
   */
  pinKeys(keys: readonly PageKey[], options: { ttlMs: number; owner?: string }): PageKey[] {
    const index = this.#ready();
    this.#checkKeys(keys, 'keys');
    index.pin(keys, { ttlMs: options.ttlMs, owner: options.owner ?? 'user' });
    return index.lookupExact(keys).filter((h): h is PageHit => h !== undefined).map((h) => h.key);
  }

  /** Removes `owner`'s pins (default 'user') on `keys`. Returns how many pins were removed. */
  unpinKeys(keys: readonly PageKey[], owner = 'user'): number {
    const index = this.#ready();
    this.#checkKeys(keys, 'keys');
    return index.unpin(keys, { owner });
  }

  /** Deletes every page of this namespace from every tier and the index. */
  deleteNamespace(): Promise<number> {
    const index = this.#ready();
    return this.#exclusive(async () => {
      const { pages, copies } = index.deleteNamespace(this.namespace.id);
      for (const t of this.#tiers) {
        const keys = copies.filter((c) => c.tier === t.name).map((c) => c.key);
        if (keys.length) await t.driver.delete(keys);
        for (const k of keys) t.policy.remove(k);
      }
      index.registerNamespace({ id: this.namespace.id, model: this.namespace.model, layoutFingerprint: this.namespace.layoutFingerprint, tenant: this.namespace.tenant, tokensPerPage: this.tokensPerPage });
      return pages;
    });
  }

  stats(): { tiers: Array<{ name: string; capacityPages: number; usedPages: number } & ReturnType<TierDriver['stats']>>; index: IndexStats; counters: TierSync['counters']; engine: ReturnType<TransferEngine['stats']> } {
    const index = this.#ready();
    return {
      tiers: this.#tiers.map((t) => ({ ...t.driver.stats(), name: t.name, capacityPages: t.capacityPages, usedPages: t.policy.count })),
      index: index.stats(),
      counters: { ...this.counters },
      engine: this.#engine.stats(),
    };
  }

  /** Waits for background work, closes tiers, the index and the engine. */
  async close(): Promise<void> {
    if (this.#closed) return;
    if (this.#index) await this.flush().catch(() => undefined);
    this.#closed = true;
    for (const t of this.#tiers) await t.driver.close();
    this.#index?.close();
    this.#staging?.close();
    await this.#engine.close();
  }

  // ---- Pages that reach a tier from outside store(): the daemon's peer endpoint and same-host clients ----

  /** Index of a tier by name. */
  #tierIndex(name: string): number {
    const t = this.#tiers.findIndex((x) => x.name === name);
    if (t < 0) throw new TierSyncError(`no tier named '${name}' (tiers: ${this.#tiers.map((x) => x.name).join(', ')})`, 'ERR_INVALID_ARGUMENT');
    return t;
  }

  /**
   * Frees room on tier `tier` so `pages` more fit under its high watermark (victims demoted as in store()), before
   * bytes are written into the tier directly (a peer put, a same-host client). Returns how many fit.
   */
  makeRoomOn(tier: string, pages: number): Promise<number> {
    this.#ready();
    const t = this.#tierIndex(tier);
    return this.#exclusive(() => this.#makeRoom(t, pages));
  }

  /**
   * Adopts pages whose bytes are already in tier `tier` (written there by a peer or a same-host client) into the
   * block index as ready copies, with the CRC32C they were committed with, and queues write-through to lower tiers.
   * Keys the index already knows on that tier are left alone. Returns the keys newly recorded.
   */
  adoptPages(tier: string, pages: ReadonlyArray<{ key: PageKey; length: number; crc32c: number }>): Promise<PageKey[]> {
    const index = this.#ready();
    const t = this.#tierIndex(tier);
    this.#checkKeys(pages.map((p) => p.key), 'pages.key');
    return this.#exclusive(async () => {
      const state = this.#tiers[t]!;
      const begin = index.beginStore(
        this.namespace.id,
        state.name,
        pages.map((p) => ({ key: p.key, parent: null, position: 0, length: p.length, location: p.key, crc32c: p.crc32c })),
      );
      // Pages known elsewhere (e.g. on a lower tier) get a copy on this tier too.
      const more = begin.existing.length ? index.beginCopies(state.name, begin.existing.map((key) => ({ key, location: key }))).added : [];
      const adopted = [...begin.fresh, ...more];
      const crcOf = new Map(pages.map((p) => [p.key, p.crc32c]));
      index.commitCopies(adopted.map((key) => ({ key, tier: state.name, crc32c: crcOf.get(key)!, durable: state.driver.capabilities.persistent })));
      for (const k of adopted) if (state.policy.canAdmit(k, 1)) state.policy.insert(k, 1);
      if (adopted.length) {
        this.counters.pagesStored += adopted.length;
        this.emit('block:stored', { keys: adopted, tier: state.name });
        this.#tiers.forEach((x, i) => {
          if (i > t && x.writeThrough) this.#enqueue([...adopted], i);
        });
      }
      // Bytes written from outside may have pushed the tier past its high watermark.
      await this.#makeRoom(t, 0);
      return adopted;
    });
  }

  /** Forgets copies that tier `tier` no longer holds (deleted there by a peer). */
  forgetPages(tier: string, keys: readonly PageKey[]): void {
    const index = this.#ready();
    const state = this.#tiers[this.#tierIndex(tier)]!;
    if (!keys.length) return;
    index.removeCopies(state.name, keys, { force: true });
    for (const k of keys) state.policy.remove(k);
    this.emit('block:evicted', { keys: [...keys], tier: state.name });
  }
}

