/**
 * The block index: which pages exist and where their copies are, in SQLite (better-sqlite3), with a cache of
 * segments in front. This class is the facade: it checks arguments and options, holds the namespaces, and hands
 * each call to the module that does it:
 *
 *   connection.ts  file, pragmas, statements, transactions, checkpoints     schema.ts    tables and migrations
 *   key-batch.ts   hex keys -> bytes, once per batch                         locate.ts    key -> (segment, slot)
 *   segments.ts    segments in memory, cache, write-back                     copy-state.ts the transition table
 *   lookups.ts     prefix/exact lookups, copies, page records                writes.ts    stores, adoption, copy moves
 *   pins.ts        durable (SQL) and load (memory) pins                      recovery.ts  what open repairs
 *   stats.ts       counts                                                    anchor-directory.ts  anchor -> segments
 *
 * Threading and lifetimes: every method is synchronous and runs on the caller's thread; one BlockIndex owns its
 * database file (the cache is kept coherent by this instance's own writes): the file is locked from open to close,
 * and a second open, in this process or another, is refused with ERR_UNAVAILABLE. Every batch is one transaction:
 * arguments are validated first (nothing is touched on bad input), and any SQLite failure rolls the whole batch back
 * (and clears the cache).
 */
import fs from 'node:fs';
import type Database from 'better-sqlite3';
import { TierSyncError, describeValue } from '@tiersync/native/errors';
import { Connection, wrapSqlite } from './connection.js';
import { STATE, STATE_MASK } from './copy-state.js';
import type { IndexContext } from './context.js';
import { type KeyBatch, decodeKeys, invalid } from './key-batch.js';
import { locate } from './locate.js';
import * as lookups from './lookups.js';
import { DurablePins, LoadPins, packSlot } from './pins.js';
import { recover } from './recovery.js';
import { SCHEMA_VERSION, TIER_CODES } from './schema.js';
import { SegmentStore } from './segments.js';
import { stats } from './stats.js';
import { TierTable } from './tiers.js';
import * as writes from './writes.js';
import type {
  AdoptPage,
  AdoptResult,
  BeginStoreResult,
  BlockIndexOptions,
  CommitEntry,
  CommitResult,
  CopyRecord,
  IndexStats,
  IndexTier,
  NamespaceRecord,
  PageHit,
  PageKey,
  PageRecord,
  RecoveryReport,
  RemoveResult,
  StorePage,
} from './types.js';

const NAME_RE = /^[A-Za-z0-9_.-]{1,64}$/;
const TIER_KINDS = new Set(['hbm', 'host', 'fs', 'object', 'peer']);
const { checkInt } = writes;

function checkOptions(options: BlockIndexOptions) {
  if (options === null || typeof options !== 'object') throw invalid(`options must be an object, got ${describeValue(options)}`);
  const { path, tiers, cacheEntries = 262_144, synchronous = 'normal', sqliteCacheMiB = 64, now = Date.now } = options;
  if (typeof path !== 'string' || path.length === 0) throw invalid(`options.path must be a file path or ':memory:', got ${describeValue(path)}`);
  if (!Array.isArray(tiers) || tiers.length === 0) throw invalid(`options.tiers must be a non-empty array of {kind, persistent}, got ${describeValue(tiers)}`);
  if (tiers.length > 31) throw invalid(`options.tiers must list at most 31 tiers, got ${tiers.length}`);
  const seen = new Set<string>();
  const list = tiers.map((t: IndexTier, i) => {
    if (t === null || typeof t !== 'object') throw invalid(`options.tiers[${i}] must be an object, got ${describeValue(t)}`);
    if (!TIER_KINDS.has(t.kind)) throw invalid(`options.tiers[${i}].kind must be one of hbm, host, fs, object, peer, got ${describeValue(t.kind)}`);
    if (typeof t.persistent !== 'boolean') throw invalid(`options.tiers[${i}].persistent must be a boolean, got ${describeValue(t.persistent)}`);
    const name = t.name ?? t.kind;
    if (typeof name !== 'string' || !NAME_RE.test(name)) throw invalid(`options.tiers[${i}].name must be 1..64 characters of A-Z a-z 0-9 _ . -, got ${describeValue(name)}`);
    if (seen.has(name)) throw invalid(`options.tiers[${i}].name '${name}' is used twice (give tiers of one kind distinct names)`);
    seen.add(name);
    return Object.freeze({ name, kind: t.kind, persistent: t.persistent });
  });
  checkInt(cacheEntries, 'options.cacheEntries', 1, 1 << 26);
  if (synchronous !== 'normal' && synchronous !== 'full') throw invalid(`options.synchronous must be 'normal' or 'full', got ${describeValue(synchronous)}`);
  if (typeof sqliteCacheMiB !== 'number' || !(sqliteCacheMiB >= 1 && sqliteCacheMiB <= 65536)) throw invalid(`options.sqliteCacheMiB must be a number in [1, 65536], got ${describeValue(sqliteCacheMiB)}`);
  if (typeof now !== 'function') throw invalid(`options.now must be a function returning ms, got ${describeValue(now)}`);
  return { path, tiers: Object.freeze(list), cacheEntries, synchronous, sqliteCacheMiB, now };
}

function checkKeyArray(keys: unknown, name: string): asserts keys is readonly PageKey[] {
  if (!Array.isArray(keys)) throw invalid(`${name} must be an array of page keys, got ${describeValue(keys)}`);
}

/** Key bytes of a batch, one view per key. */
function keyViews(b: KeyBatch): Uint8Array[] {
  const out = new Array<Uint8Array>(b.n);
  for (let i = 0; i < b.n; i++) out[i] = b.bytes.subarray(b.off[i]!, b.off[i + 1]!);
  return out;
}

export class BlockIndex {
  /** What open() found and repaired. */
  readonly recovery: RecoveryReport;
  readonly path: string;

  private readonly conn: Connection;
  private readonly ctx: IndexContext;
  private readonly tierTable: TierTable;
  private readonly nsIds = new Map<string, number>();
  private readonly nsNames = new Map<number, string>();
  private closed = false;

  private constructor(options: BlockIndexOptions) {
    const o = checkOptions(options);
    this.path = o.path;
    this.conn = new Connection(o);
    try {
      this.tierTable = new TierTable(o.tiers);
      const tiers = this.tierTable;
      const now = o.now;
      this.recovery = this.conn.db.transaction(() => {
        const names = tiers.bind(this.conn);
        return recover(this.conn, tiers, names, now(), this.conn.migratedFrom, SCHEMA_VERSION);
      })();
      const store = new SegmentStore(this.conn, tiers, o.cacheEntries);
      this.conn.onRollback = () => store.reset();
      this.ctx = { conn: this.conn, store, tiers, pins: new DurablePins(this.conn), loadPins: new LoadPins(), now, counters: { hits: 0, misses: 0 } };
      for (const row of this.conn.db.prepare('SELECT id, name FROM namespaces').all() as Array<{ id: number; name: string }>) {
        this.nsIds.set(row.name, row.id);
        this.nsNames.set(row.id, row.name);
      }
    } catch (e) {
      this.conn.close();
      wrapSqlite(e, `opening ${o.path}`, o.path);
    }
  }

  /**
   * Opens (creating or upgrading) the index at `options.path` and recovers it: copies on volatile or unknown tiers,
   * pending and evicting copies and non-durable copies are dropped; durable copies are kept unverified. See
   * `index.recovery` for the counts.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a bad option, ERR_UNSUPPORTED for a newer schema, ERR_IO.
   */
  static open(options: BlockIndexOptions): BlockIndex {
    return new BlockIndex(options);
  }

  private open(): void {
    if (this.closed) throw new TierSyncError('the block index is closed', 'ERR_CLOSED');
  }

  private nsId(namespace: unknown): number {
    const ns = typeof namespace === 'string' ? this.nsIds.get(namespace) : undefined;
    if (ns === undefined) throw invalid(`namespace ${describeValue(namespace)} is not registered (registerNamespace first)`);
    return ns;
  }

  /** The tiers this index was opened with, fastest first. */
  get tiers(): readonly Required<IndexTier>[] {
    return this.tierTable.list;
  }

  /**
   * Registers a namespace (idempotent for identical records).
   * @throws TierSyncError ERR_INVALID_ARGUMENT for bad fields or an id already registered with other fields.
   */
  registerNamespace(ns: NamespaceRecord): void {
    this.open();
    if (ns === null || typeof ns !== 'object') throw invalid(`namespace must be an object, got ${describeValue(ns)}`);
    const { id, model, layoutFingerprint, tenant = '', tokensPerPage } = ns;
    if (typeof id !== 'string' || !/^[0-9a-f]{64}$/.test(id)) throw invalid(`namespace.id must be 64 lower-case hex characters, got ${describeValue(id)}`);
    if (typeof model !== 'string' || model.length < 1 || model.length > 512) throw invalid(`namespace.model must be a string of 1..512 characters, got ${describeValue(model)}`);
    if (typeof layoutFingerprint !== 'string' || !/^[0-9a-f]{8,128}$/.test(layoutFingerprint)) {
      throw invalid(`namespace.layoutFingerprint must be lower-case hex, got ${describeValue(layoutFingerprint)}`);
    }
    if (typeof tenant !== 'string' || tenant.length > 128) throw invalid(`namespace.tenant must be a string of 0..128 characters, got ${describeValue(tenant)}`);
    checkInt(tokensPerPage, 'namespace.tokensPerPage', 1, 1 << 20);
    const row = this.conn.stmt('SELECT id, model, layout, tenant, tokens_per_page AS tokensPerPage FROM namespaces WHERE name = ?').get(id) as
      | { id: number; model: string; layout: string; tenant: string; tokensPerPage: number }
      | undefined;
    if (row) {
      if (row.model !== model || row.layout !== layoutFingerprint || row.tenant !== tenant || row.tokensPerPage !== tokensPerPage) {
        throw invalid(`namespace.id ${id} is already registered with other fields (model '${row.model}', tenant '${row.tenant}')`);
      }
      return;
    }
    const nid = this.conn.tx('registerNamespace', () =>
      Number(this.conn.stmt('INSERT INTO namespaces(name, model, layout, tenant, tokens_per_page, created_ms) VALUES (?, ?, ?, ?, ?, ?)').run(id, model, layoutFingerprint, tenant, tokensPerPage, this.ctx.now()).lastInsertRowid),
    );
    this.nsIds.set(id, nid);
    this.nsNames.set(nid, id);
  }

  /** Registered namespaces. */
  namespaces(): NamespaceRecord[] {
    this.open();
    return this.conn.stmt('SELECT name AS id, model, layout AS layoutFingerprint, tenant, tokens_per_page AS tokensPerPage FROM namespaces ORDER BY id').all() as NamespaceRecord[];
  }

  /**
   * Starts storing `pages` of namespace `namespace` on `tier`: pages no tier has yet get a pending copy (invisible
   * to lookups until commitCopies); pages that already have a copy anywhere are reported as existing and left
   * alone. New pages that continue each other (parent = the previous page, next position) share one segment row.
   * One transaction.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming the bad argument (`pages[3].key ...`); nothing is changed.
   */
  beginStore(namespace: string, tier: string, pages: readonly StorePage[]): BeginStoreResult {
    this.open();
    const ns = this.nsId(namespace);
    const rank = this.tierTable.check(tier, 'tier');
    return writes.beginStore(this.ctx, ns, rank, pages);
  }

  /**
   * Records pages found on `tier` (rebuilding a lost or stale index from what the tiers hold) as ready copies, in
   * one transaction: new pages are created (chains share segments as in beginStore), pages known on other tiers get
   * a copy on this one. Copies are located at their key, durable as given, and unverified until a read checks
   * their checksum.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming the bad argument; nothing is changed.
   */
  adoptPages(namespace: string, tier: string, pages: readonly AdoptPage[]): AdoptResult {
    this.open();
    const ns = this.nsId(namespace);
    const rank = this.tierTable.check(tier, 'tier');
    return writes.adoptPages(this.ctx, ns, rank, pages);
  }

  /**
   * Adds pending copies of pages that already exist (write-through, demotion, promotion) on `tier`.
   * Returns the keys that got a pending copy; keys with a copy on that tier already, or with no page, are listed apart.
   */
  beginCopies(tier: string, entries: ReadonlyArray<{ key: PageKey; location: string }>): { added: PageKey[]; existing: PageKey[]; missing: PageKey[] } {
    this.open();
    const rank = this.tierTable.check(tier, 'tier');
    return writes.beginCopies(this.ctx, rank, entries);
  }

  /**
   * Marks pending copies ready (visible to lookups) in one transaction. Entries whose pending copy is gone are
   * reported as missing.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming the bad entry; nothing is changed.
   */
  commitCopies(batch: readonly CommitEntry[]): CommitResult {
    this.open();
    return writes.commitCopies(this.ctx, batch);
  }

  /** Drops pending copies on `tier` (a store that failed), and pages left without any copy. Returns how many. */
  abortCopies(tier: string, keys: readonly PageKey[]): number {
    this.open();
    const rank = this.tierTable.check(tier, 'tier');
    return writes.abortCopies(this.ctx, rank, keys);
  }

  /**
   * The longest prefix of `keys` whose every page has a ready copy on some tier, stopping at the first absent key
   * (keys after it are not examined). Each hit lists its tiers, fastest first. No SQL when the pages are cached.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed key among those examined.
   */
  lookupPrefix(keys: readonly PageKey[]): PageHit[] {
    this.open();
    const out = lookups.lookupPrefix(this.ctx, keys);
    this.ctx.store.trim();
    return out;
  }

  /**
   * For each of `keys` (not only a prefix): its ready copies' tiers and length, or undefined when no tier holds a
   * ready copy.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed key.
   */
  lookupExact(keys: readonly PageKey[]): Array<PageHit | undefined> {
    this.open();
    const out = lookups.lookupExact(this.ctx, keys);
    this.ctx.store.trim();
    return out;
  }

  /** Every copy of each key (empty for an unknown key), in any state, fastest tier first. */
  copiesOf(keys: readonly PageKey[]): CopyRecord[][] {
    this.open();
    return lookups.copiesOf(this.ctx, keys);
  }

  /**
   * Keys of every page with a ready copy on `tier` (a scan of that tier's copies rows: for reconciling the index
   * with what a tier holds at open, not for hot paths).
   */
  readyKeys(tier: string): PageKey[] {
    this.open();
    const rank = this.tierTable.check(tier, 'tier');
    const ids = this.conn.stmt('SELECT id FROM copies WHERE id % ? = ?').pluck().all(TIER_CODES, this.tierTable.code(rank)) as number[];
    const segments = ids.map((id) => Math.floor(id / TIER_CODES));
    const store = this.ctx.store;
    const keys: PageKey[] = [];
    // In slices, as deleteNamespace: the segment cache stays bounded on a tier of millions of pages.
    for (let at = 0; at < segments.length; at += 256) {
      for (const seg of store.load(segments.slice(at, at + 256)).values()) {
        const states = seg.copies[rank]?.states;
        if (states) for (let s = 0; s < seg.count; s++) if ((states[s]! & STATE_MASK) === STATE.ready) keys.push(store.keyHex(seg, s));
      }
      store.trim();
    }
    return keys;
  }

  private checkPinOptions(options: { ttlMs: number; owner?: string }): { ttl: number; owner: string } {
    if (options === null || typeof options !== 'object') throw invalid(`options must be {ttlMs, owner?}, got ${describeValue(options)}`);
    const ttl = checkInt(options.ttlMs, 'options.ttlMs', 1);
    const owner = options.owner ?? '';
    if (typeof owner !== 'string' || owner.length > 256) throw invalid(`options.owner must be a string of 0..256 characters, got ${describeValue(owner)}`);
    return { ttl, owner };
  }

  /**
   * The start of a load: pins `keys` for `ttlMs` under `owner` (a load pin: in memory, not kept across a restart,
   * released by endLoad or when `ttlMs` runs out) and returns every copy of each key (as copiesOf()).
   */
  beginLoad(keys: readonly PageKey[], options: { ttlMs: number; owner?: string }): CopyRecord[][] {
    this.open();
    checkKeyArray(keys, 'keys');
    const { ttl, owner } = this.checkPinOptions(options);
    if (keys.length === 0) return [];
    const loc = locate(this.ctx.store, keys, 0, keys.length, (i) => `keys[${i}]`);
    const slots: number[] = [];
    for (let j = 0; j < keys.length; j++) {
      const seg = loc.segs[j];
      if (seg) slots.push(packSlot(seg.id, loc.slots[j]!));
    }
    this.ctx.loadPins.pin(owner, slots, this.ctx.now() + ttl);
    return lookups.copiesAt(this.ctx, keys, loc.segs, loc.slots);
  }

  /**
   * The end of a load: records an access to the `touched` pages (as touch(), at `now`) and removes `owner`'s load
   * pins on `keys`. Returns the pins removed.
   */
  endLoad(keys: readonly PageKey[], options: { owner?: string; touched?: readonly PageKey[]; now?: number }): number {
    this.open();
    checkKeyArray(keys, 'keys');
    if (options === null || typeof options !== 'object') throw invalid(`options must be {owner?, touched?, now?}, got ${describeValue(options)}`);
    const owner = options.owner ?? '';
    if (typeof owner !== 'string') throw invalid(`options.owner must be a string, got ${describeValue(owner)}`);
    const touched = options.touched ?? [];
    checkKeyArray(touched, 'options.touched');
    const now = options.now === undefined ? this.ctx.now() : checkInt(options.now, 'options.now', 0);
    const tl = touched.length ? locate(this.ctx.store, touched, 0, touched.length, (i) => `options.touched[${i}]`) : undefined;
    const kl = keys.length ? locate(this.ctx.store, keys, 0, keys.length, (i) => `keys[${i}]`) : undefined;
    if (tl) this.conn.tx('endLoad', () => writes.touchLocated(this.ctx, tl, touched.length, now), false);
    if (!kl) return 0;
    const slots: number[] = [];
    for (let j = 0; j < keys.length; j++) {
      const seg = kl.segs[j];
      if (seg) slots.push(packSlot(seg.id, kl.slots[j]!));
    }
    return this.ctx.loadPins.unpin(owner, slots);
  }

  /** The page record of each key, or undefined. */
  pages(keys: readonly PageKey[]): Array<PageRecord | undefined> {
    this.open();
    return lookups.pages(this.ctx, keys, (id) => this.nsNames.get(id) ?? '');
  }

  /**
   * Marks ready copies on `tier` as being evicted (invisible to lookups from now on), skipping pinned pages.
   * The caller frees the bytes, then calls removeCopies.
   */
  markEvicting(tier: string, keys: readonly PageKey[]): { marked: PageKey[]; pinned: PageKey[]; missing: PageKey[] } {
    this.open();
    const rank = this.tierTable.check(tier, 'tier');
    const r = writes.evictOrRemove(this.ctx, rank, keys, 'evict', false);
    return { marked: r.done, pinned: r.pinned, missing: r.missing };
  }

  /**
   * Removes the copies of `keys` on `tier` (any state) and the pages left with no copy. Pinned pages are skipped
   * unless `force`. One transaction.
   */
  removeCopies(tier: string, keys: readonly PageKey[], options: { force?: boolean } = {}): RemoveResult {
    this.open();
    const rank = this.tierTable.check(tier, 'tier');
    const r = writes.evictOrRemove(this.ctx, rank, keys, 'remove', options?.force === true);
    return { removed: r.done, pinned: r.pinned, missing: r.missing };
  }

  /** Records an access to each existing page: last access time and hit count. */
  touch(keys: readonly PageKey[], now: number = this.ctx.now()): void {
    this.open();
    checkKeyArray(keys, 'keys');
    checkInt(now, 'now', 0);
    if (keys.length === 0) return;
    const loc = locate(this.ctx.store, keys, 0, keys.length, (i) => `keys[${i}]`);
    this.conn.tx('touch', () => writes.touchLocated(this.ctx, loc, keys.length, now), false);
  }

  /** Records that the ready copies of `keys` on `tier` matched their page CRC32C when read. Returns how many. */
  markVerified(tier: string, keys: readonly PageKey[]): number {
    this.open();
    const rank = this.tierTable.check(tier, 'tier');
    if (Array.isArray(keys) && keys.length === 0) return 0;
    return writes.markVerified(this.ctx, rank, keys);
  }

  private decode(keys: readonly PageKey[]): KeyBatch {
    checkKeyArray(keys, 'keys');
    return decodeKeys(keys, (i) => `keys[${i}]`);
  }

  /**
   * Pins `keys` for `ttlMs` (re-pinning by the same owner sets the new expiry): a durable pin, kept across
   * restarts. A pinned page is skipped by markEvicting and removeCopies until it expires or is unpinned. Pages
   * need not exist yet.
   */
  pin(keys: readonly PageKey[], options: { ttlMs: number; owner?: string }): void {
    this.open();
    const batch = this.decode(keys);
    const { ttl, owner } = this.checkPinOptions(options);
    if (keys.length === 0) return;
    const expires = this.ctx.now() + ttl;
    this.conn.tx('pin', () => this.ctx.pins.pin(keyViews(batch), owner, expires));
  }

  /**
   * Every durable pin still in force at `now` (default: the index's clock), ordered by expiry: what a reopened
   * hierarchy hands back to its planner so pins survive a restart.
   */
  activePins(now: number = this.ctx.now()): Array<{ key: PageKey; owner: string; expiresAt: number }> {
    this.open();
    return this.ctx.pins.active(now) as Array<{ key: PageKey; owner: string; expiresAt: number }>;
  }

  /** Removes the durable pins of `owner` on `keys` (every owner's when owner is undefined). Returns pins removed. */
  unpin(keys: readonly PageKey[], options: { owner?: string } = {}): number {
    this.open();
    const batch = this.decode(keys);
    const owner = options?.owner;
    if (owner !== undefined && typeof owner !== 'string') throw invalid(`options.owner must be a string, got ${describeValue(owner)}`);
    if (keys.length === 0) return 0;
    return this.conn.tx('unpin', () => this.ctx.pins.unpin(keyViews(batch), owner));
  }

  /** Whether each key holds an unexpired pin (durable or load pin) at `now`. */
  pinned(keys: readonly PageKey[], now: number = this.ctx.now()): boolean[] {
    this.open();
    return writes.pinnedKeys(this.ctx, keys, now);
  }

  /** Deletes durable pins that expired at or before `now`. Returns the keys released (each once). */
  expire(now: number = this.ctx.now()): PageKey[] {
    this.open();
    checkInt(now, 'now', 0);
    this.ctx.loadPins.sweep(now);
    return this.conn.tx('expire', () => this.ctx.pins.expire(now));
  }

  /**
   * Deletes a namespace with all its pages, copies and pins. Returns the copies that were recorded, so the caller
   * can free them on their tiers. Unknown namespace: `{pages: 0, copies: []}`.
   */
  deleteNamespace(namespace: string): { pages: number; copies: Array<{ key: PageKey; tier: string; location: string }> } {
    this.open();
    if (typeof namespace !== 'string') throw invalid(`namespace must be a namespace id, got ${describeValue(namespace)}`);
    const ns = this.nsIds.get(namespace);
    if (ns === undefined) return { pages: 0, copies: [] };
    const store = this.ctx.store;
    const result = this.conn.tx('deleteNamespace', () => {
      const ids = this.conn.stmt('SELECT id FROM segments WHERE ns = ?').pluck().all(ns) as number[];
      const copies: Array<{ key: PageKey; tier: string; location: string }> = [];
      const keys: Uint8Array[] = [];
      let pages = 0;
      for (let at = 0; at < ids.length; at += 256) {
        for (const seg of store.load(ids.slice(at, at + 256)).values()) {
          for (let s = 0; s < seg.count; s++) {
            let any = false;
            seg.copies.forEach((t, rank) => {
              if (!t || !(t.states[s]! & 3)) return;
              const key = store.keyHex(seg, s);
              any = true;
              copies.push({ key, tier: this.tierTable.list[rank]!.name, location: t.locations?.[s] ?? key });
            });
            if (any) {
              pages++;
              keys.push(seg.keys.subarray(s * seg.width, (s + 1) * seg.width));
            }
          }
          store.deleteRows(seg);
          store.evict(seg);
        }
      }
      this.ctx.pins.unpin(keys, undefined);
      this.conn.stmt('DELETE FROM namespaces WHERE id = ?').run(ns);
      return { pages, copies };
    });
    this.nsIds.delete(namespace);
    this.nsNames.delete(ns);
    return result;
  }

  /** Counts (O(pages): a scan; not for hot paths). */
  stats(): IndexStats {
    this.open();
    let fileBytes = 0;
    try {
      if (this.path !== ':memory:') fileBytes = fs.statSync(this.path).size;
    } catch {
      fileBytes = 0;
    }
    const s = stats(this.ctx, fileBytes);
    const c = this.ctx.counters;
    return { ...s, cache: { entries: this.ctx.store.size, max: this.ctx.store.max, hits: c.hits, misses: c.misses } };
  }

  /** Checkpoints the WAL and closes the database. Idempotent; later calls throw ERR_CLOSED. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.ctx.store.clear();
    this.conn.close();
  }

  /** @internal white-box access for tests and benchmarks: the database, and the segment cache (`clear()` empties it). */
  get _internal(): { db: Database.Database; cache: { clear(): void; readonly size: number }; tierCodes: number } {
    return { db: this.conn.db, cache: this.ctx.store, tierCodes: TIER_CODES };
  }
}
