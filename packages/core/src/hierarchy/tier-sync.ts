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
import { createAdmissionFilter, createPolicy, type AdmissionFilter, type EvictionPolicy } from '@tiersync/policy';
import { createTier, type PageKey, type PageLocation, type ReadOutcome, type TierDriver } from '@tiersync/tiers';
import { BlockIndex, type IndexStats, type PageHit } from '../index-store/index.js';
import { createNamespace, kvLayout, kvLayoutPreset, pageKeys, type KvLayoutInput, type KvPresetName, type Namespace, type TokenArray } from '../keys/index.js';
import { parseConfig, type ResolvedConfig, type TierSyncConfig } from './config.js';

export interface TierSyncEvents {
  'block:stored': (e: { keys: PageKey[]; tier: string }) => void;
  'block:evicted': (e: { keys: PageKey[]; tier: string }) => void;
  'block:demoted': (e: { keys: PageKey[]; from: string; to: string }) => void;
  'block:promoted': (e: { keys: PageKey[]; from: string; to: string }) => void;
  'transfer:completed': (e: { op: 'store' | 'load' | 'move'; tier: string; pages: number; bytes: number; seconds: number }) => void;
  'transfer:failed': (e: { op: 'store' | 'load' | 'move'; tier: string; error: TierSyncError }) => void;
  'tier:pressure': (e: { tier: string; usedPages: number; capacityPages: number; victims: number }) => void;
  'integrity:failed': (e: { key: PageKey; tier: string; error: TierSyncError }) => void;
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
  writeThrough: boolean;
  /** Read bandwidth estimate, bytes per second (EWMA of measured loads). */
  readBps: number;
}

const NOMINAL_READ_BPS: Record<string, number> = { hbm: 100e9, host: 20e9, fs: 2e9, peer: 2e9, object: 0.2e9 };
const UNLIMITED_PAGES = 2 ** 31;

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
      const policy = createPolicy(t.policy, { capacity: capacityPages, unit: 'objects' }) as EvictionPolicy<string>;
      this.#tiers.push({ name, driver, policy, capacityPages, high: t.highWatermark, low: t.lowWatermark, writeThrough: t.writeThrough, readBps: NOMINAL_READ_BPS[driver.capabilities.kind] ?? 1e9 });
    }
    this.#index = BlockIndex.open({
      path: this.config.index.path,
      synchronous: this.config.index.synchronous,
      tiers: this.#tiers.map((t) => ({ name: t.name, kind: t.driver.capabilities.kind, persistent: t.driver.capabilities.persistent })),
    });
    this.#index.registerNamespace({ id: this.namespace.id, model: this.namespace.model, layoutFingerprint: this.namespace.layoutFingerprint, tenant: this.namespace.tenant, tokensPerPage: this.tokensPerPage });
    await this.#reconcile();
    this.#staging = HostArena.create({ capacity: this.config.stagingPages * this.pageBytes });
  }

  /** Persistent tiers: forget index copies the tier no longer holds; let policies know what each tier holds. */
  async #reconcile(): Promise<void> {
    const index = this.#index!;
    for (const t of this.#tiers) {
      if (!t.driver.capabilities.persistent) continue;
      const held = new Set<string>();
      for await (const p of t.driver.list()) held.add(p.key);
      for (const key of held) if (t.policy.canAdmit(key, 1)) t.policy.insert(key, 1);
      const known = index.copiesOf([...held]);
      const stale = [...held].filter((_, i) => !known[i]!.some((c) => c.tier === t.name));
      // Pages on the tier that the index does not know (e.g. index lost): not reachable by lookup; free them.
      if (stale.length) {
        await t.driver.delete(stale);
        for (const k of stale) t.policy.remove(k);
      }
    }
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
  store(tokens: TokenArray, pages: readonly PageLocation[]): Promise<StoreResult> {
    const index = this.#ready();
    const keys = this.keysOf(tokens);
    this.#checkPages(pages, keys.length, 'pages');
    return this.#exclusive(async () => {
      const top = this.#tiers[0]!;
      const begin = index.beginStore(
        this.namespace.id,
        top.name,
        keys.map((key, i) => ({ key, parent: i === 0 ? null : keys[i - 1]!, position: i, length: this.pageBytes, location: key })),
      );
      const admitted = begin.fresh.filter((k) => this.#admission.admit(k, this.pageBytes));
      const refused = begin.fresh.filter((k) => !admitted.includes(k));
      if (refused.length) index.abortCopies(top.name, refused);
      const fresh = new Set(admitted);
      let room = await this.#makeRoom(0, fresh.size);
      const toWrite = keys.map((key, i) => ({ key, source: pages[i]! })).filter((p) => fresh.has(p.key) && room-- > 0);
      const dropped = admitted.filter((k) => !toWrite.some((p) => p.key === k));
      let writeThroughDropped = 0;
      if (dropped.length) index.abortCopies(top.name, dropped);
      if (toWrite.length) {
        const start = process.hrtime.bigint();
        let written;
        try {
          written = await top.driver.write(toWrite);
        } catch (e) {
          index.abortCopies(top.name, toWrite.map((p) => p.key));
          this.emit('transfer:failed', { op: 'store', tier: top.name, error: e as TierSyncError });
          throw e;
        }
        index.commitCopies(toWrite.map((p, i) => ({ key: p.key, tier: top.name, crc32c: written.crc32c[i]!, durable: top.driver.capabilities.persistent })));
        for (const p of toWrite) if (top.policy.canAdmit(p.key, 1)) top.policy.insert(p.key, 1);
        this.emit('block:stored', { keys: toWrite.map((p) => p.key), tier: top.name });
        this.emit('transfer:completed', { op: 'store', tier: top.name, pages: toWrite.length, bytes: toWrite.length * this.pageBytes, seconds: Number(process.hrtime.bigint() - start) / 1e9 });
        this.#tiers.forEach((t, i) => {
          if (i > 0 && t.writeThrough) writeThroughDropped += this.#enqueue(toWrite.map((p) => p.key), i);
        });
      }
      this.counters.stores++;
      this.counters.pagesStored += toWrite.length;
      this.counters.pagesDropped += dropped.length;
      this.counters.pagesNotAdmitted += refused.length;
      return { keys, stored: toWrite.length, existing: begin.existing.length, dropped: dropped.length, notAdmitted: refused.length, writeThroughDropped };
    });
  }

  /**
   * Frees slots on tier `t` so `need` more pages fit under its high watermark: the policy's victims are demoted to
   * the next tier when no lower copy exists, then removed. Returns how many of `need` fit. Call under the lock.
   */
  async #makeRoom(t: number, need: number): Promise<number> {
    const tier = this.#tiers[t]!;
    const index = this.#index!;
    const used = tier.policy.count;
    const high = Math.floor(tier.high * tier.capacityPages);
    if (used + need <= high) return need;
    const target = Math.max(0, Math.min(Math.floor(tier.low * tier.capacityPages), tier.capacityPages - need));
    const want = Math.max(0, used - target);
    // Look a bit past the first `want` victims: pinned pages among them are skipped, not counted.
    const victims = tier.policy.peekVictims(Math.min(used, want * 2 + 64));
    if (want > 0 && victims.length) {
      // Copy down first, while the victims are still readable here, so a page always has a ready copy somewhere
      // (a load running beside this finds it on one tier or the other, never on neither).
      const pinned = index.pinned(victims);
      const candidates = victims.filter((_, i) => !pinned[i]).slice(0, want);
      const copies = index.copiesOf(candidates);
      const lower = new Set(this.#tiers.slice(t + 1).map((x) => x.name));
      const orphans = candidates.filter((_, i) => !copies[i]!.some((c) => c.state === 'ready' && lower.has(c.tier)));
      if (orphans.length && t + 1 < this.#tiers.length) await this.#copy(orphans, t, t + 1, 'demote');
      const { marked } = index.markEvicting(tier.name, candidates);
      this.emit('tier:pressure', { tier: tier.name, usedPages: used, capacityPages: tier.capacityPages, victims: marked.length });
      if (marked.length) {
        await tier.driver.delete(marked);
        index.removeCopies(tier.name, marked, { force: true });
        for (const k of marked) tier.policy.remove(k);
        this.emit('block:evicted', { keys: marked, tier: tier.name });
      }
    }
    return Math.max(0, Math.min(need, tier.capacityPages - tier.policy.count));
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
        const read = await src.driver.read(moving.map((key, i) => ({ key, into: { arena: staging, offset: i * this.pageBytes, length: this.pageBytes } })), { priority: 'writeBack' });
        const ok = moving.filter((_, i) => read[i]!.status === 'hit');
        this.#reportIntegrity(read, src.name);
        const written = await dst.driver.write(
          ok.map((key) => {
            const hit = read[moving.indexOf(key)] as Extract<ReadOutcome, { status: 'hit' }>;
            // The checksum travels with the page, so the next tier need not compute it again (the peer tier skips a pass).
            return { key, source: { arena: staging, offset: moving.indexOf(key) * this.pageBytes, length: hit.length }, crc32c: hit.crc32c };
          }),
        );
        index.commitCopies(ok.map((key, i) => ({ key, tier: dst.name, crc32c: written.crc32c[i]!, durable: dst.driver.capabilities.persistent })));
        const lost = moving.filter((k) => !ok.includes(k));
        if (lost.length) index.abortCopies(dst.name, lost);
        for (const k of ok) if (dst.policy.canAdmit(k, 1)) dst.policy.insert(k, 1);
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
   * Loads the pages of a lookup into `into[i]` (the layout's page size each). Pages evicted since the lookup, or
   * whose every copy failed its checksum, are listed in `missing`: recompute only those.
   */
  async load(hit: LookupResult, into: readonly PageLocation[]): Promise<LoadResult> {
    const index = this.#ready();
    const n = hit.pages.length;
    this.#checkPages(into, n, 'into');
    const keys = hit.pages.map((p) => p.key);
    const owner = `load:${++this.#loadSeq}`;
    // Pin and read the copies of every page in one index transaction; touch and unpin in one at the end.
    const copies = index.beginLoad(keys, { ttlMs: 120_000, owner });
    const result: LoadResult = { loaded: 0, missing: [], bytes: 0, byTier: {} };
    let touched: PageKey[] | undefined;
    try {
      // Each page tries its tiers fastest first; a miss or a bad checksum falls through to the next copy.
      let pending = keys.map((_, i) => i);
      for (const tier of this.#tiers) {
        const here = pending.filter((i) => copies[i]!.some((c) => c.tier === tier.name && c.state === 'ready'));
        if (!here.length) continue;
        const start = process.hrtime.bigint();
        const outcomes = await tier.driver.read(here.map((i) => ({ key: keys[i]!, into: into[i]! })));
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
          } else if (o.status === 'error' || o.status === 'miss') {
            broken.push(keys[i]!);
          }
        });
        if (broken.length) {
          // The index promised a copy the tier no longer has, or has damaged: forget it.
          index.removeCopies(tier.name, broken, { force: true });
          for (const k of broken) tier.policy.remove(k);
        }
        const bytes = [...done].length * this.pageBytes;
        if (bytes > 0 && seconds > 0) tier.readBps = 0.8 * tier.readBps + 0.2 * (bytes / seconds);
        const verified = here.filter((i) => done.has(i)).map((i) => keys[i]!);
        if (tier.driver.capabilities.verifiesOnRead && verified.length) index.markVerified(tier.name, verified);
        this.emit('transfer:completed', { op: 'load', tier: tier.name, pages: done.size, bytes, seconds });
        if (this.config.promoteOnHit && tier !== this.#tiers[0] && done.size) this.#enqueue([...done].map((i) => keys[i]!), 0);
        pending = pending.filter((i) => !done.has(i));
        if (!pending.length) break;
      }
      result.missing = pending;
      const gone = new Set(pending);
      touched = keys.filter((_, i) => !gone.has(i));
    } finally {
      index.endLoad(keys, { owner, ...(touched ? { touched } : {}) });
    }
    this.counters.loads++;
    this.counters.pagesLoaded += result.loaded;
    this.counters.pagesMissing += result.missing.length;
    return result;
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
}

