/**
 * The block index: which pages exist and where their copies are, in SQLite (better-sqlite3), with an LRU of
 * lookup answers in front.
 *
 * Threading and lifetimes: every method is synchronous and runs on the caller's thread; one BlockIndex owns its
 * database file (the LRU is kept coherent by this instance's own writes, so two processes must not write one file).
 * Every batch is one transaction: arguments are validated first (nothing is touched on bad input), and any SQLite
 * failure rolls the whole batch back.
 *
 * Hot paths: a lookup of a context whose pages are cached costs one LRU get per page and no SQL; misses are fetched
 * with multi-row `IN (...)` queries. Stores use multi-row INSERT ... RETURNING statements prepared once per chunk
 * size (powers of two), so 2,048 pages cost a handful of statement calls.
 */
import fs from 'node:fs';
import Database from 'better-sqlite3';
import { LRUCache } from 'lru-cache';
import { TierSyncError, describeValue } from '@tiersync/native/errors';
import { COPY_STATE, SCHEMA_VERSION, migrate } from './schema.js';
import type {
  BeginStoreResult,
  BlockIndexOptions,
  CommitEntry,
  CommitResult,
  CopyRecord,
  CopyState,
  IndexStats,
  IndexTier,
  NamespaceRecord,
  PageHit,
  PageKey,
  PageRecord,
  RecoveryReport,
  RemoveResult,
  StorePage,
  TierStats,
} from './types.js';

const KEY_RE = /^[0-9a-f]{16,128}$/;
const NAME_RE = /^[A-Za-z0-9_.-]{1,64}$/;
const TIER_KINDS = new Set(['hbm', 'host', 'fs', 'object', 'peer']);
const STATE_NAMES: readonly CopyState[] = ['pending', 'ready', 'evicting'];
/** Largest multi-row chunk; smaller chunks are powers of two, so at most 10 statements per kind are prepared. */
const MAX_CHUNK = 512;
/** Negative lookup answer (cached like a positive one). */
/** Keys per uncached lookup query (one JSON array parameter). */
const MAX_LOOKUP_CHUNK = 2048;
/** WAL checkpoints: a timer checkpoints (PASSIVE) between calls once the WAL holds this many bytes ... */
const CHECKPOINT_IDLE_BYTES = 4 << 20;
const CHECKPOINT_INTERVAL_MS = 250;
/** ... and a write transaction checkpoints inline only when the WAL grew past this (callers that never yield). */
const CHECKPOINT_INLINE_BYTES = 256 << 20;
/** Remembered page ids of pending copies (see resolveIds); cleared when it would grow past this. */
const MAX_HINTS = 1 << 20;
const ABSENT: PageHit = Object.freeze({ key: '', tiers: Object.freeze([]) as readonly string[], length: 0 });

type Stmt = Database.Statement<unknown[], unknown>;

function invalid(message: string): TierSyncError {
  return new TierSyncError(message, 'ERR_INVALID_ARGUMENT');
}

function checkKey(key: unknown, name: string): asserts key is PageKey {
  if (typeof key !== 'string' || !KEY_RE.test(key)) throw invalid(`${name} must be a page key (16..128 lower-case hex characters), got ${describeValue(key)}`);
}

function checkKeyList(keys: unknown, name: string): asserts keys is readonly PageKey[] {
  if (!Array.isArray(keys)) throw invalid(`${name} must be an array of page keys, got ${describeValue(keys)}`);
  for (let i = 0; i < keys.length; i++) checkKey(keys[i], `${name}[${i}]`);
}

function checkInt(value: unknown, name: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    throw invalid(`${name} must be an integer in [${min}, ${max}], got ${describeValue(value)}`);
  }
  return value;
}

/** Splits n into chunk sizes: MAX_CHUNK while possible, then the binary digits of the rest (prepared-statement reuse). */
function chunks(n: number): number[] {
  const out: number[] = [];
  while (n >= MAX_CHUNK) {
    out.push(MAX_CHUNK);
    n -= MAX_CHUNK;
  }
  for (let size = MAX_CHUNK >> 1; size >= 1; size >>= 1) {
    if (n >= size) {
      out.push(size);
      n -= size;
    }
  }
  return out;
}

function placeholders(rows: number, row: string): string {
  return new Array<string>(rows).fill(row).join(',');
}

function wrapSqlite(error: unknown, what: string): never {
  if (error instanceof TierSyncError) throw error;
  const code = (error as { code?: string }).code ?? '';
  throw new TierSyncError(`index: ${what} failed: ${(error as Error).message ?? String(error)}`, code === 'SQLITE_FULL' ? 'ERR_NO_MEMORY' : 'ERR_IO', { cause: error });
}

export class BlockIndex {
  /** What open() found and repaired. */
  readonly recovery: RecoveryReport;
  readonly path: string;

  private readonly db: Database.Database;
  private readonly tierList: readonly Required<IndexTier>[];
  private readonly tierRank = new Map<string, number>();
  private readonly nsIds = new Map<string, number>();
  private readonly nsNames = new Map<number, string>();
  private readonly cache: LRUCache<string, PageHit>;
  private readonly now: () => number;
  private readonly multi = new Map<string, Stmt>();
  /** Page id by key, for pages given a pending copy by this instance (see resolveIds). */
  private readonly ids = new Map<string, number>();
  /** Id of the next page stored (ids only grow). */
  private nextId = 1;
  private readonly s: Record<string, Stmt>;
  private readonly walPath: string | undefined;
  private checkpointTimer: NodeJS.Timeout | undefined;
  private writes = 0;
  private cacheHits = 0;
  private cacheMisses = 0;
  private closed = false;

  private constructor(options: BlockIndexOptions) {
    const o = BlockIndex.checkOptions(options);
    this.path = o.path;
    this.walPath = o.path === ':memory:' || o.path.startsWith('file:') ? undefined : `${o.path}-wal`;
    this.now = o.now;
    this.tierList = o.tiers;
    o.tiers.forEach((t, i) => this.tierRank.set(t.name, i));
    this.cache = new LRUCache<string, PageHit>({ max: o.cacheEntries });
    try {
      this.db = new Database(o.path);
    } catch (e) {
      wrapSqlite(e, `opening ${o.path}`);
    }
    try {
      this.db.pragma('journal_mode = WAL');
      this.db.pragma(`synchronous = ${o.synchronous === 'full' ? 'FULL' : 'NORMAL'}`);
      this.db.pragma(`cache_size = ${-Math.round(o.sqliteCacheMiB * 1024)}`);
      this.db.pragma('temp_store = MEMORY');
      this.db.pragma('busy_timeout = 5000');
      // SQLite's automatic checkpoint runs inside whichever commit crosses its threshold (copying and fsyncing
      // megabytes there). Checkpoints run between calls instead, from a timer (see checkpointSoon).
      this.db.pragma('wal_autocheckpoint = 0');
      const from = migrate(this.db);
      this.s = this.prepareAll();
      this.recovery = this.recover(from);
      this.nextId = (this.s.maxId!.get() as { n: number }).n + 1;
      for (const row of this.db.prepare('SELECT id, name FROM namespaces').all() as Array<{ id: number; name: string }>) {
        this.nsIds.set(row.name, row.id);
        this.nsNames.set(row.id, row.name);
      }
    } catch (e) {
      this.db.close();
      wrapSqlite(e, `opening ${o.path}`);
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

  private static checkOptions(options: BlockIndexOptions) {
    if (options === null || typeof options !== 'object') throw invalid(`options must be an object, got ${describeValue(options)}`);
    const { path, tiers, cacheEntries = 262_144, synchronous = 'normal', sqliteCacheMiB = 64, now = Date.now } = options;
    if (typeof path !== 'string' || path.length === 0) throw invalid(`options.path must be a file path or ':memory:', got ${describeValue(path)}`);
    if (!Array.isArray(tiers) || tiers.length === 0) throw invalid(`options.tiers must be a non-empty array of {kind, persistent}, got ${describeValue(tiers)}`);
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

  private prepareAll(): Record<string, Stmt> {
    const p = (sql: string) => this.db.prepare(sql) as Stmt;
    const hexKey = (col: string) => `lower(hex(${col}))`;
    return {
      nsInsert: p('INSERT INTO namespaces(name, model, layout, tenant, tokens_per_page, created_ms) VALUES (?, ?, ?, ?, ?, ?)'),
      nsGet: p('SELECT id, model, layout, tenant, tokens_per_page AS tokensPerPage FROM namespaces WHERE name = ?'),
      nsList: p('SELECT name AS id, model, layout AS layoutFingerprint, tenant, tokens_per_page AS tokensPerPage FROM namespaces ORDER BY id'),
      nsDelete: p('DELETE FROM namespaces WHERE id = ?'),
      nsPins: p('DELETE FROM pins WHERE key IN (SELECT key FROM pages WHERE ns = ?)'),
      nsCopyList: p(`SELECT ${hexKey('p.key')} AS key, c.tier AS tier, c.location AS location FROM pages p JOIN copies c ON c.page = p.id WHERE p.ns = ?`),
      nsCopies: p('DELETE FROM copies WHERE page IN (SELECT id FROM pages WHERE ns = ?)'),
      nsPages: p('DELETE FROM pages WHERE ns = ?'),
      maxId: p('SELECT coalesce(max(id), 0) AS n FROM pages'),
      idOf: p('SELECT id FROM pages WHERE key = unhex(?)').pluck(),
      // (index into the JSON array of keys, page id) for the keys that have a page row.
      idsOf: p('SELECT j.key AS i, p.id AS id FROM json_each(?) j JOIN pages p ON p.key = unhex(j.value)'),
      freshIds: p('SELECT id FROM pages WHERE id >= ? AND id < ?').pluck(),
      copiesOfKeys: p(
        'SELECT j.key AS i, c.tier AS tier, c.location AS location, c.state AS state, c.durable AS durable, c.verified AS verified, c.updated_ms AS updatedMs FROM json_each(?) j JOIN pages p ON p.key = unhex(j.value) JOIN copies c ON c.page = p.id',
      ),
      lookupKeys: p(`SELECT j.key AS i, c.tier AS tier, p.length AS length FROM json_each(?) j JOIN pages p ON p.key = unhex(j.value) JOIN copies c ON c.page = p.id WHERE c.state = ${COPY_STATE.ready}`),
      pageOf: p(
        `SELECT ${hexKey('p.key')} AS key, n.name AS namespace, iif(p.parent IS NULL, NULL, ${hexKey('p.parent')}) AS parent, p.position, p.length, p.crc32c, p.created_ms AS createdMs, p.access_ms AS lastAccessMs, p.hits FROM pages p JOIN namespaces n ON n.id = p.ns WHERE p.key = unhex(?)`,
      ),
      hasCopy: p('SELECT 1 FROM copies WHERE page = ? AND tier = ?'),
      insertCopy: p(`INSERT INTO copies(page, tier, location, state, durable, verified, updated_ms) VALUES (?, ?, ?, ${COPY_STATE.pending}, 0, 0, ?)`),
      abortCopy: p(`DELETE FROM copies WHERE tier = ? AND page = ? AND state = ${COPY_STATE.pending}`),
      commitRange: p(
        `UPDATE copies SET state = ${COPY_STATE.ready}, durable = @durable, verified = 1, updated_ms = @now WHERE page >= @lo AND page <= @hi AND tier = @tier AND state = ${COPY_STATE.pending}`,
      ),
      commitIds: p(
        `UPDATE copies SET state = ${COPY_STATE.ready}, durable = @durable, verified = 1, updated_ms = @now WHERE tier = @tier AND state = ${COPY_STATE.pending} AND page IN (SELECT value FROM json_each(@ids)) RETURNING page`,
      ).pluck(),
      // params: JSON array of [id, crc] pairs.
      crcIds: p('UPDATE pages SET crc32c = j.value ->> 1 FROM json_each(?) j WHERE pages.id = j.value ->> 0'),
      pinsUpsert: p(
        'INSERT INTO pins(key, owner, expires_ms) SELECT unhex(value), @owner, @expires FROM json_each(@keys) WHERE true ON CONFLICT(key, owner) DO UPDATE SET expires_ms = excluded.expires_ms',
      ),
      unpinOwner: p('DELETE FROM pins WHERE owner = ? AND key IN (SELECT unhex(value) FROM json_each(?))'),
      unpinAll: p('DELETE FROM pins WHERE key IN (SELECT unhex(value) FROM json_each(?))'),
      pinActive: p('SELECT 1 FROM pins WHERE key = unhex(?) AND expires_ms > ? LIMIT 1'),
      // Indices (into the JSON array of keys) of the keys holding an unexpired pin.
      pinnedOf: p('SELECT DISTINCT j.key AS i FROM json_each(?) j JOIN pins ON pins.key = unhex(j.value) WHERE pins.expires_ms > ?').pluck(),
      expirePins: p(`DELETE FROM pins WHERE expires_ms <= ? RETURNING ${hexKey('key')} AS key`),
      touchKeys: p('UPDATE pages SET access_ms = ?, hits = hits + 1 WHERE key IN (SELECT unhex(value) FROM json_each(?))'),
      verifyKeys: p(
        `UPDATE copies SET verified = 1 WHERE tier = ? AND state = ${COPY_STATE.ready} AND page IN (SELECT p.id FROM pages p WHERE p.key IN (SELECT unhex(value) FROM json_each(?)))`,
      ),
      evictIds: p(`UPDATE copies SET state = ${COPY_STATE.evicting}, updated_ms = ? WHERE tier = ? AND state = ${COPY_STATE.ready} AND page IN (SELECT value FROM json_each(?)) RETURNING page`).pluck(),
      removeIds: p('DELETE FROM copies WHERE tier = ? AND page IN (SELECT value FROM json_each(?)) RETURNING page').pluck(),
      countPending: p(`SELECT count(*) FROM copies WHERE page >= ? AND page <= ? AND tier = ? AND state = ${COPY_STATE.pending}`).pluck(),
      orphanIds: p('DELETE FROM pages WHERE id IN (SELECT value FROM json_each(?)) AND NOT EXISTS (SELECT 1 FROM copies c WHERE c.page = pages.id)'),
    };
  }

  /** A multi-row statement for `rows` rows of kind `kind`, prepared once. */
  private stmt(kind: 'insertPages' | 'insertCopies', rows: number): Stmt {
    const id = `${kind}:${rows}`;
    let st = this.multi.get(id);
    if (st) return st;
    let sql: string;
    switch (kind) {
      case 'insertPages':
        // params: (id, key, parent, position, length, crc32c) per row; @ns, @now.
        sql = `INSERT INTO pages(id, key, ns, parent, position, length, crc32c, created_ms, access_ms) VALUES ${placeholders(rows, '(?,unhex(?),@ns,unhex(?),?,?,?,@now,@now)')} ON CONFLICT(key) DO NOTHING`;
        break;
      case 'insertCopies':
        // params: (page id, location) per row; @tier, @now.
        sql = `INSERT INTO copies(page, tier, location, state, durable, verified, updated_ms) VALUES ${placeholders(rows, `(?,@tier,?,${COPY_STATE.pending},0,0,@now)`)}`;
        break;
    }
    st = this.db.prepare(sql) as Stmt;
    this.multi.set(id, st);
    return st;
  }

  /** Runs `fn` for each chunk of `items` with the chunk's statement size. */
  private eachChunk<T>(items: readonly T[], fn: (chunk: readonly T[], size: number, at: number) => void): void {
    let at = 0;
    for (const size of chunks(items.length)) {
      fn(items.slice(at, at + size), size, at);
      at += size;
    }
  }

  private open(): void {
    if (this.closed) throw new TierSyncError('the block index is closed', 'ERR_CLOSED');
  }

  private checkTier(tier: unknown, name: string): string {
    if (typeof tier !== 'string' || !this.tierRank.has(tier)) {
      throw invalid(`${name} must be one of the index's tiers (${[...this.tierRank.keys()].join(', ')}), got ${describeValue(tier)}`);
    }
    return tier;
  }

  private tx<T>(what: string, fn: () => T): T {
    let out: T;
    try {
      out = this.db.transaction(fn)();
    } catch (e) {
      wrapSqlite(e, what);
    }
    if (this.walPath !== undefined && (++this.writes & 15) === 0) this.checkpointSoon();
    return out;
  }

  private walBytes(): number {
    try {
      return fs.statSync(this.walPath!).size;
    } catch {
      return 0;
    }
  }

  /**
   * Keeps the WAL short without checkpointing inside a commit: a timer (unref'ed) runs a PASSIVE checkpoint when
   * the event loop gets to it; only a caller that never yields while the WAL passes CHECKPOINT_INLINE_BYTES pays
   * for one inline. A checkpoint that finishes lets the next write start the WAL over.
   */
  private checkpointSoon(): void {
    const bytes = this.walBytes();
    if (bytes >= CHECKPOINT_INLINE_BYTES) {
      this.checkpoint();
      return;
    }
    if (bytes >= CHECKPOINT_IDLE_BYTES && this.checkpointTimer === undefined) {
      this.checkpointTimer = setTimeout(() => {
        this.checkpointTimer = undefined;
        if (!this.closed) this.checkpoint();
      }, CHECKPOINT_INTERVAL_MS);
      this.checkpointTimer.unref();
    }
  }

  private checkpoint(): void {
    try {
      this.db.pragma('wal_checkpoint(PASSIVE)');
    } catch {
      // A busy or failed checkpoint is retried by a later one; commits do not depend on it.
    }
  }

  private recover(from: number): RecoveryReport {
    const report: RecoveryReport = {
      migratedFrom: from,
      schemaVersion: SCHEMA_VERSION,
      droppedVolatile: {},
      droppedUnknownTier: {},
      droppedPending: 0,
      droppedEvicting: 0,
      droppedNotDurable: 0,
      unverified: 0,
      orphanPages: 0,
      expiredPins: 0,
    };
    this.db.transaction(() => {
      const now = this.now();
      const tiersInDb = (this.db.prepare('SELECT DISTINCT tier FROM copies').all() as Array<{ tier: string }>).map((r) => r.tier);
      const dropTier = this.db.prepare('DELETE FROM copies WHERE tier = ?');
      let dropped = 0;
      for (const tier of tiersInDb) {
        const t = this.tierList.find((x) => x.name === tier);
        if (t && t.persistent) continue;
        const n = dropTier.run(tier).changes;
        dropped += n;
        if (t) report.droppedVolatile[tier] = n;
        else report.droppedUnknownTier[tier] = n;
      }
      report.droppedPending = this.db.prepare(`DELETE FROM copies WHERE state = ${COPY_STATE.pending}`).run().changes;
      report.droppedEvicting = this.db.prepare(`DELETE FROM copies WHERE state = ${COPY_STATE.evicting}`).run().changes;
      report.droppedNotDurable = this.db.prepare('DELETE FROM copies WHERE durable = 0').run().changes;
      dropped += report.droppedPending + report.droppedEvicting + report.droppedNotDurable;
      this.db.prepare('UPDATE copies SET verified = 0 WHERE verified <> 0').run();
      report.unverified = (this.db.prepare('SELECT count(*) AS n FROM copies').get() as { n: number }).n;
      if (dropped > 0) {
        report.orphanPages = this.db.prepare('DELETE FROM pages WHERE NOT EXISTS (SELECT 1 FROM copies c WHERE c.page = pages.id)').run().changes;
      }
      report.expiredPins = this.db.prepare('DELETE FROM pins WHERE expires_ms <= ?').run(now).changes;
    })();
    return report;
  }

  /** The tiers this index was opened with, fastest first. */
  get tiers(): readonly Required<IndexTier>[] {
    return this.tierList;
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
    const row = this.s.nsGet!.get(id) as { id: number; model: string; layout: string; tenant: string; tokensPerPage: number } | undefined;
    if (row) {
      if (row.model !== model || row.layout !== layoutFingerprint || row.tenant !== tenant || row.tokensPerPage !== tokensPerPage) {
        throw invalid(`namespace.id ${id} is already registered with other fields (model '${row.model}', tenant '${row.tenant}')`);
      }
      return;
    }
    const nid = this.tx('registerNamespace', () => Number(this.s.nsInsert!.run(id, model, layoutFingerprint, tenant, tokensPerPage, this.now()).lastInsertRowid));
    this.nsIds.set(id, nid);
    this.nsNames.set(nid, id);
  }

  /** Registered namespaces. */
  namespaces(): NamespaceRecord[] {
    this.open();
    return this.s.nsList!.all() as NamespaceRecord[];
  }

  /**
   * Starts storing `pages` of namespace `namespace` on `tier`: pages no tier has yet get a page row and a pending
   * copy (invisible to lookups until commitCopies); pages that already have a copy anywhere are reported as
   * existing and left alone. One transaction.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming the bad argument (`pages[3].key ...`); nothing is changed.
   */
  beginStore(namespace: string, tier: string, pages: readonly StorePage[]): BeginStoreResult {
    this.open();
    const ns = this.nsIds.get(namespace);
    if (ns === undefined) throw invalid(`namespace ${describeValue(namespace)} is not registered (registerNamespace first)`);
    this.checkTier(tier, 'tier');
    if (!Array.isArray(pages)) throw invalid(`pages must be an array, got ${describeValue(pages)}`);
    const seen = new Set<string>();
    for (let i = 0; i < pages.length; i++) {
      const p = pages[i] as StorePage;
      if (p === null || typeof p !== 'object') throw invalid(`pages[${i}] must be an object, got ${describeValue(p)}`);
      checkKey(p.key, `pages[${i}].key`);
      if (seen.has(p.key)) throw invalid(`pages[${i}].key ${p.key} appears twice in the batch`);
      seen.add(p.key);
      if (p.parent !== null) checkKey(p.parent, `pages[${i}].parent`);
      checkInt(p.position, `pages[${i}].position`, 0);
      checkInt(p.length, `pages[${i}].length`, 1);
      if (typeof p.location !== 'string' || p.location.length < 1 || p.location.length > 4096) {
        throw invalid(`pages[${i}].location must be a string of 1..4096 characters, got ${describeValue(p.location)}`);
      }
      if (p.crc32c !== undefined) checkInt(p.crc32c, `pages[${i}].crc32c`, 0, 0xffffffff);
    }
    const fresh: PageKey[] = [];
    const existing: PageKey[] = [];
    const n = pages.length;
    if (n === 0) return { fresh, existing };
    const now = this.now();
    // Page i gets id base + i if it is new: ids only grow, so a store appends to the pages and copies B-trees, and
    // the new pages are found again by id range (no RETURNING of 2,048 keys).
    const base = this.nextId;
    this.nextId += n;
    const freshIds: number[] = [];
    this.tx('beginStore', () => {
      let inserted = 0;
      const named = { ns, now };
      this.eachChunk(pages, (chunk, size, at) => {
        const params: unknown[] = new Array(size * 6);
        let j = 0;
        for (let k = 0; k < size; k++) {
          const p = chunk[k]!;
          params[j++] = base + at + k;
          params[j++] = p.key;
          params[j++] = p.parent;
          params[j++] = p.position;
          params[j++] = p.length;
          params[j++] = p.crc32c ?? null;
        }
        inserted += this.stmt('insertPages', size).run(params, named).changes;
      });
      const isFresh = inserted === n ? undefined : new Set(this.s.freshIds!.all(base, base + n) as number[]);
      const newPages: StorePage[] = [];
      for (let i = 0; i < n; i++) {
        const p = pages[i]!;
        if (isFresh === undefined || isFresh.has(base + i)) {
          fresh.push(p.key);
          newPages.push(p);
          freshIds.push(base + i);
        } else existing.push(p.key);
      }
      const copyNamed = { tier, now };
      this.eachChunk(newPages, (chunk, size, at) => {
        const params: unknown[] = new Array(size * 2);
        let j = 0;
        for (let k = 0; k < size; k++) {
          params[j++] = freshIds[at + k];
          params[j++] = chunk[k]!.location;
        }
        this.stmt('insertCopies', size).run(params, copyNamed);
      });
    });
    this.hint(fresh, freshIds);
    return { fresh, existing };
  }

  /** Remembers the page ids of keys with a pending copy (commitCopies then needs no key lookups). */
  private hint(keys: readonly PageKey[], ids: readonly number[]): void {
    if (this.ids.size + keys.length > MAX_HINTS) this.ids.clear();
    for (let i = 0; i < keys.length; i++) this.ids.set(keys[i]!, ids[i]!);
  }

  /**
   * The page id of each key (undefined: no page). Ids remembered from beginStore/beginCopies are used as they are:
   * a remembered id is either the key's page or a deleted page (ids are never reused; only beginStore creates
   * pages, and it remembers the new id), so a statement given a stale id matches nothing, as for an absent page.
   */
  private resolveIds(keys: readonly PageKey[]): Array<number | undefined> {
    const out: Array<number | undefined> = new Array(keys.length);
    let unknown: PageKey[] | undefined;
    let where: number[] | undefined;
    for (let i = 0; i < keys.length; i++) {
      const id = this.ids.get(keys[i]!);
      if (id !== undefined) out[i] = id;
      else {
        (unknown ??= []).push(keys[i]!);
        (where ??= []).push(i);
      }
    }
    if (unknown) {
      for (const r of this.s.idsOf!.all(JSON.stringify(unknown)) as Array<{ i: number; id: number }>) out[where![r.i]!] = r.id;
    }
    return out;
  }

  /**
   * Adds pending copies of pages that already exist (write-through, demotion, promotion) on `tier`.
   * Returns the keys that got a pending copy; keys with a copy on that tier already, or with no page, are listed apart.
   */
  beginCopies(tier: string, entries: ReadonlyArray<{ key: PageKey; location: string }>): { added: PageKey[]; existing: PageKey[]; missing: PageKey[] } {
    this.open();
    this.checkTier(tier, 'tier');
    if (!Array.isArray(entries)) throw invalid(`entries must be an array, got ${describeValue(entries)}`);
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      if (e === null || typeof e !== 'object') throw invalid(`entries[${i}] must be an object, got ${describeValue(e)}`);
      checkKey(e.key, `entries[${i}].key`);
      if (typeof e.location !== 'string' || e.location.length < 1 || e.location.length > 4096) {
        throw invalid(`entries[${i}].location must be a string of 1..4096 characters, got ${describeValue(e.location)}`);
      }
    }
    const added: PageKey[] = [];
    const addedIds: number[] = [];
    const existing: PageKey[] = [];
    const missing: PageKey[] = [];
    const now = this.now();
    this.tx('beginCopies', () => {
      for (const e of entries) {
        const id = this.s.idOf!.get(e.key) as number | undefined;
        if (id === undefined) missing.push(e.key);
        else if (this.s.hasCopy!.get(id, tier)) existing.push(e.key);
        else {
          this.s.insertCopy!.run(id, tier, e.location, now);
          added.push(e.key);
          addedIds.push(id);
        }
      }
    });
    this.hint(added, addedIds);
    return { added, existing, missing };
  }

  /**
   * Marks pending copies ready (visible to lookups) in one transaction. Entries whose pending copy is gone are
   * reported as missing.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming the bad entry; nothing is changed.
   */
  commitCopies(batch: readonly CommitEntry[]): CommitResult {
    this.open();
    if (!Array.isArray(batch)) throw invalid(`batch must be an array, got ${describeValue(batch)}`);
    const groups = new Map<string, PageKey[]>();
    const crcs: Array<[number, string]> = [];
    for (let i = 0; i < batch.length; i++) {
      const e = batch[i] as CommitEntry;
      if (e === null || typeof e !== 'object') throw invalid(`batch[${i}] must be an object, got ${describeValue(e)}`);
      checkKey(e.key, `batch[${i}].key`);
      this.checkTier(e.tier, `batch[${i}].tier`);
      if (e.durable !== undefined && typeof e.durable !== 'boolean') throw invalid(`batch[${i}].durable must be a boolean, got ${describeValue(e.durable)}`);
      if (e.crc32c !== undefined) crcs.push([checkInt(e.crc32c, `batch[${i}].crc32c`, 0, 0xffffffff), e.key]);
      const g = `${e.durable ? 1 : 0}${e.tier}`;
      let list = groups.get(g);
      if (!list) groups.set(g, (list = []));
      list.push(e.key);
    }
    const missing: PageKey[] = [];
    let committed = 0;
    if (batch.length === 0) return { committed, missing };
    const now = this.now();
    const idOfKey = new Map<string, number>();
    this.tx('commitCopies', () => {
      for (const [g, keys] of groups) {
        const durable = Number(g[0]);
        const tier = g.slice(1);
        const ids = this.resolveIds(keys);
        const n = keys.length;
        const lo = ids[0];
        let range = lo !== undefined;
        for (let i = 1; range && i < n; i++) range = ids[i] === lo! + i;
        // The usual case: the pages of one beginStore, committed together: one range UPDATE over their ids.
        if (range && (this.s.countPending!.get(lo, lo! + n - 1, tier) as number) === n) {
          this.s.commitRange!.run({ durable, now, lo, hi: lo! + n - 1, tier });
          committed += n;
          for (let i = 0; i < n; i++) idOfKey.set(keys[i]!, lo! + i);
          continue;
        }
        const known: number[] = [];
        for (const id of ids) if (id !== undefined) known.push(id);
        const done = new Set(known.length ? (this.s.commitIds!.all({ durable, now, tier, ids: JSON.stringify(known) }) as number[]) : []);
        committed += done.size;
        for (let i = 0; i < n; i++) {
          const id = ids[i];
          if (id !== undefined && done.has(id)) idOfKey.set(keys[i]!, id);
          else missing.push(keys[i]!);
        }
      }
      const missed = new Set(missing);
      const pairs: Array<[number, number]> = [];
      for (const [crc, key] of crcs) if (!missed.has(key)) pairs.push([idOfKey.get(key)!, crc]);
      if (pairs.length) this.s.crcIds!.run(JSON.stringify(pairs));
    });
    for (const e of batch) {
      this.cache.delete(e.key);
      this.ids.delete(e.key);
    }
    return { committed, missing };
  }

  /** Drops pending copies on `tier` (a store that failed), and pages left without any copy. Returns how many. */
  abortCopies(tier: string, keys: readonly PageKey[]): number {
    this.open();
    this.checkTier(tier, 'tier');
    checkKeyList(keys, 'keys');
    let n = 0;
    this.tx('abortCopies', () => {
      const ids = this.resolveIds(keys);
      const dropped: number[] = [];
      for (const id of ids) {
        if (id !== undefined && this.s.abortCopy!.run(tier, id).changes > 0) {
          n++;
          dropped.push(id);
        }
      }
      if (dropped.length) this.s.orphanIds!.run(JSON.stringify(dropped));
    });
    for (const k of keys) {
      this.cache.delete(k);
      this.ids.delete(k);
    }
    return n;
  }

  /**
   * The longest prefix of `keys` whose every page has a ready copy on some tier, stopping at the first absent key
   * (keys after it are not examined). Each hit lists its tiers, fastest first. No SQL when the pages are cached.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed key among those examined.
   */
  lookupPrefix(keys: readonly PageKey[]): PageHit[] {
    this.open();
    if (!Array.isArray(keys)) throw invalid(`keys must be an array of page keys, got ${describeValue(keys)}`);
    const out: PageHit[] = [];
    const n = keys.length;
    const cache = this.cache;
    let i = 0;
    for (; i < n; i++) {
      const hit = cache.get(keys[i]!);
      if (hit === undefined) break;
      if (hit === ABSENT) {
        this.cacheHits += i + 1;
        return out;
      }
      out.push(hit);
    }
    this.cacheHits += i;
    // Cache misses from i on: query in growing chunks (a short hit costs a small query; a long one few calls).
    let size = 16;
    while (i < n) {
      const take = Math.min(size, n - i);
      const chunkKeys = keys.slice(i, i + take);
      for (let j = 0; j < take; j++) checkKey(chunkKeys[j], `keys[${i + j}]`);
      const found: Array<{ tiers: string[]; length: number } | undefined> = new Array(take);
      for (const r of this.s.lookupKeys!.all(JSON.stringify(chunkKeys)) as Array<{ i: number; tier: string; length: number }>) {
        if (!this.tierRank.has(r.tier)) continue;
        const f = found[r.i];
        if (f) f.tiers.push(r.tier);
        else found[r.i] = { tiers: [r.tier], length: r.length };
      }
      for (let j = 0; j < take; j++, i++) {
        const key = chunkKeys[j]!;
        const f = found[j];
        this.cacheMisses++;
        if (!f) {
          cache.set(key, ABSENT);
          return out;
        }
        if (f.tiers.length > 1) f.tiers.sort((a, b) => this.tierRank.get(a)! - this.tierRank.get(b)!);
        const hit: PageHit = Object.freeze({ key, tiers: Object.freeze(f.tiers), length: f.length });
        cache.set(key, hit);
        out.push(hit);
      }
      size = Math.min(size * 4, MAX_LOOKUP_CHUNK);
    }
    return out;
  }

  /** Every copy of each key, fastest tier first, from one multi-key query. */
  private copiesOfChecked(keys: readonly PageKey[]): CopyRecord[][] {
    const out: CopyRecord[][] = new Array(keys.length);
    for (let i = 0; i < keys.length; i++) out[i] = [];
    if (keys.length === 0) return out;
    const rows = this.s.copiesOfKeys!.all(JSON.stringify(keys)) as Array<{ i: number; tier: string; location: string; state: number; durable: number; verified: number; updatedMs: number }>;
    for (const r of rows) {
      out[r.i]!.push({ tier: r.tier, location: r.location, state: STATE_NAMES[r.state] ?? 'pending', durable: r.durable === 1, verified: r.verified === 1, updatedMs: r.updatedMs });
    }
    const rank = (t: string) => this.tierRank.get(t) ?? 99;
    for (const list of out) if (list.length > 1) list.sort((a, b) => rank(a.tier) - rank(b.tier));
    return out;
  }

  /** Every copy of each key (empty for an unknown key), in any state. */
  copiesOf(keys: readonly PageKey[]): CopyRecord[][] {
    this.open();
    checkKeyList(keys, 'keys');
    return this.copiesOfChecked(keys);
  }

  private checkPinOptions(options: { ttlMs: number; owner?: string }): { ttl: number; owner: string } {
    if (options === null || typeof options !== 'object') throw invalid(`options must be {ttlMs, owner?}, got ${describeValue(options)}`);
    const ttl = checkInt(options.ttlMs, 'options.ttlMs', 1);
    const owner = options.owner ?? '';
    if (typeof owner !== 'string' || owner.length > 256) throw invalid(`options.owner must be a string of 0..256 characters, got ${describeValue(owner)}`);
    return { ttl, owner };
  }

  /**
   * The start of a load: pins `keys` for `ttlMs` under `owner` (as pin()) and returns every copy of each key (as
   * copiesOf()), in one transaction and two statements, whatever the number of keys.
   */
  beginLoad(keys: readonly PageKey[], options: { ttlMs: number; owner?: string }): CopyRecord[][] {
    this.open();
    checkKeyList(keys, 'keys');
    const { ttl, owner } = this.checkPinOptions(options);
    if (keys.length === 0) return [];
    const expires = this.now() + ttl;
    return this.tx('beginLoad', () => {
      this.s.pinsUpsert!.run({ owner, expires, keys: JSON.stringify(keys) });
      return this.copiesOfChecked(keys);
    });
  }

  /**
   * The end of a load: records an access to the `touched` pages (as touch(), at `now`) and removes `owner`'s pins
   * on `keys` (as unpin()), in one transaction. Returns the pins removed.
   */
  endLoad(keys: readonly PageKey[], options: { owner?: string; touched?: readonly PageKey[]; now?: number }): number {
    this.open();
    checkKeyList(keys, 'keys');
    if (options === null || typeof options !== 'object') throw invalid(`options must be {owner?, touched?, now?}, got ${describeValue(options)}`);
    const owner = options.owner ?? '';
    if (typeof owner !== 'string') throw invalid(`options.owner must be a string, got ${describeValue(owner)}`);
    const touched = options.touched ?? [];
    checkKeyList(touched, 'options.touched');
    const now = options.now === undefined ? this.now() : checkInt(options.now, 'options.now', 0);
    if (keys.length === 0 && touched.length === 0) return 0;
    return this.tx('endLoad', () => {
      if (touched.length) this.s.touchKeys!.run(now, JSON.stringify(touched));
      return keys.length ? this.s.unpinOwner!.run(owner, JSON.stringify(keys)).changes : 0;
    });
  }

  /** The page row of each key, or undefined. */
  pages(keys: readonly PageKey[]): Array<PageRecord | undefined> {
    this.open();
    checkKeyList(keys, 'keys');
    return keys.map((k) => {
      const r = this.s.pageOf!.get(k) as PageRecord | undefined;
      return r ? { ...r } : undefined;
    });
  }

  /** Splits keys into those an unexpired pin holds and the others, in input order. */
  private splitPinned(keys: readonly PageKey[], now: number, force: boolean): { pinned: PageKey[]; candidates: PageKey[] } {
    if (force || keys.length === 0) return { pinned: [], candidates: [...keys] };
    const held = new Set(this.s.pinnedOf!.all(JSON.stringify(keys), now) as number[]);
    const pinned: PageKey[] = [];
    const candidates: PageKey[] = [];
    for (let i = 0; i < keys.length; i++) (held.has(i) ? pinned : candidates).push(keys[i]!);
    return { pinned, candidates };
  }

  /** Runs `st` (params: ..., JSON array of ids; RETURNING page) over the pages of `keys`; returns the keys hit, in order. */
  private byIds(keys: readonly PageKey[], run: (ids: string) => number[]): { hit: PageKey[]; hitIds: number[]; missing: PageKey[] } {
    const ids = this.resolveIds(keys);
    const known: number[] = [];
    for (const id of ids) if (id !== undefined) known.push(id);
    const done = new Set(known.length ? run(JSON.stringify(known)) : []);
    const hit: PageKey[] = [];
    const hitIds: number[] = [];
    const missing: PageKey[] = [];
    const seen = new Set<string>();
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      const id = ids[i];
      if (id !== undefined && done.has(id)) {
        if (seen.has(k)) continue;
        seen.add(k);
        hit.push(k);
        hitIds.push(id);
      } else missing.push(k);
    }
    return { hit, hitIds, missing };
  }

  /**
   * Marks ready copies on `tier` as being evicted (invisible to lookups from now on), skipping pinned pages.
   * The caller frees the bytes, then calls removeCopies.
   */
  markEvicting(tier: string, keys: readonly PageKey[]): { marked: PageKey[]; pinned: PageKey[]; missing: PageKey[] } {
    this.open();
    this.checkTier(tier, 'tier');
    checkKeyList(keys, 'keys');
    const now = this.now();
    const r = this.tx('markEvicting', () => {
      const { pinned, candidates } = this.splitPinned(keys, now, false);
      const { hit, missing } = this.byIds(candidates, (ids) => this.s.evictIds!.all(now, tier, ids) as number[]);
      return { marked: hit, pinned, missing };
    });
    for (const k of r.marked) this.cache.delete(k);
    return r;
  }

  /**
   * Removes the copies of `keys` on `tier` (any state) and the pages left with no copy. Pinned pages are skipped
   * unless `force`. One transaction.
   */
  removeCopies(tier: string, keys: readonly PageKey[], options: { force?: boolean } = {}): RemoveResult {
    this.open();
    this.checkTier(tier, 'tier');
    checkKeyList(keys, 'keys');
    const force = options?.force === true;
    const now = this.now();
    const r = this.tx('removeCopies', () => {
      const { pinned, candidates } = this.splitPinned(keys, now, force);
      const { hit, hitIds, missing } = this.byIds(candidates, (ids) => this.s.removeIds!.all(tier, ids) as number[]);
      if (hitIds.length) this.s.orphanIds!.run(JSON.stringify(hitIds));
      return { removed: hit, pinned, missing };
    });
    for (const k of r.removed) {
      this.cache.delete(k);
      this.ids.delete(k);
    }
    return r;
  }

  /** Records an access to each existing page: last access time and hit count. */
  touch(keys: readonly PageKey[], now: number = this.now()): void {
    this.open();
    checkKeyList(keys, 'keys');
    checkInt(now, 'now', 0);
    if (keys.length === 0) return;
    this.tx('touch', () => this.s.touchKeys!.run(now, JSON.stringify(keys)));
  }

  /** Records that the ready copies of `keys` on `tier` matched their page CRC32C when read. Returns how many. */
  markVerified(tier: string, keys: readonly PageKey[]): number {
    this.open();
    this.checkTier(tier, 'tier');
    checkKeyList(keys, 'keys');
    if (keys.length === 0) return 0;
    return this.tx('markVerified', () => this.s.verifyKeys!.run(tier, JSON.stringify(keys)).changes);
  }

  /**
   * Pins `keys` for `ttlMs` (re-pinning by the same owner sets the new expiry). A pinned page is skipped by
   * markEvicting and removeCopies until it expires or is unpinned. Pages need not exist yet.
   */
  pin(keys: readonly PageKey[], options: { ttlMs: number; owner?: string }): void {
    this.open();
    checkKeyList(keys, 'keys');
    const { ttl, owner } = this.checkPinOptions(options);
    const expires = this.now() + ttl;
    if (keys.length === 0) return;
    this.tx('pin', () => this.s.pinsUpsert!.run({ owner, expires, keys: JSON.stringify(keys) }));
  }

  /** Removes the pins of `owner` on `keys` (every owner's when owner is undefined). Returns pins removed. */
  unpin(keys: readonly PageKey[], options: { owner?: string } = {}): number {
    this.open();
    checkKeyList(keys, 'keys');
    const owner = options?.owner;
    if (owner !== undefined && typeof owner !== 'string') throw invalid(`options.owner must be a string, got ${describeValue(owner)}`);
    if (keys.length === 0) return 0;
    const list = JSON.stringify(keys);
    return this.tx('unpin', () => (owner === undefined ? this.s.unpinAll!.run(list) : this.s.unpinOwner!.run(owner, list)).changes);
  }

  /** Whether each key holds an unexpired pin at `now`. */
  pinned(keys: readonly PageKey[], now: number = this.now()): boolean[] {
    this.open();
    checkKeyList(keys, 'keys');
    return keys.map((k) => this.s.pinActive!.get(k, now) !== undefined);
  }

  /** Deletes pins that expired at or before `now`. Returns the keys released (each once). */
  expire(now: number = this.now()): PageKey[] {
    this.open();
    checkInt(now, 'now', 0);
    const rows = this.tx('expire', () => this.s.expirePins!.all(now) as Array<{ key: string }>);
    return [...new Set(rows.map((r) => r.key))];
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
    const result = this.tx('deleteNamespace', () => {
      this.s.nsPins!.run(ns);
      const copies = this.s.nsCopyList!.all(ns) as Array<{ key: string; tier: string; location: string }>;
      this.s.nsCopies!.run(ns);
      const pages = this.s.nsPages!.run(ns).changes;
      this.s.nsDelete!.run(ns);
      return { pages, copies };
    });
    this.nsIds.delete(namespace);
    this.nsNames.delete(ns);
    this.cache.clear();
    this.ids.clear();
    return result;
  }

  /** Counts (O(pages): a scan; not for hot paths). */
  stats(): IndexStats {
    this.open();
    const one = (sql: string, ...args: unknown[]) => this.db.prepare(sql).get(...args) as Record<string, number>;
    const tiers: Record<string, TierStats> = {};
    for (const t of this.tierList) tiers[t.name] = { pending: 0, ready: 0, evicting: 0, durable: 0, unverified: 0, readyBytes: 0 };
    const rows = this.db
      .prepare(
        `SELECT c.tier AS tier, c.state AS state, count(*) AS n, sum(c.durable) AS durable, sum(c.state = ${COPY_STATE.ready} AND c.verified = 0) AS unverified, sum(p.length) AS bytes
         FROM copies c JOIN pages p ON p.id = c.page GROUP BY c.tier, c.state`,
      )
      .all() as Array<{ tier: string; state: number; n: number; durable: number; unverified: number; bytes: number }>;
    for (const r of rows) {
      const t = (tiers[r.tier] ??= { pending: 0, ready: 0, evicting: 0, durable: 0, unverified: 0, readyBytes: 0 });
      t[STATE_NAMES[r.state] ?? 'pending'] += r.n;
      t.durable += r.durable;
      t.unverified += r.unverified;
      if (r.state === COPY_STATE.ready) t.readyBytes += r.bytes;
    }
    const pages = one('SELECT count(*) AS n, coalesce(sum(length), 0) AS bytes FROM pages');
    let fileBytes = 0;
    try {
      if (this.path !== ':memory:') fileBytes = fs.statSync(this.path).size;
    } catch {
      fileBytes = 0;
    }
    return {
      namespaces: one('SELECT count(*) AS n FROM namespaces').n!,
      pages: pages.n!,
      pageBytes: pages.bytes!,
      tiers,
      pins: one('SELECT count(*) AS n FROM pins WHERE expires_ms > ?', this.now()).n!,
      cache: { entries: this.cache.size, max: this.cache.max, hits: this.cacheHits, misses: this.cacheMisses },
      fileBytes,
    };
  }

  /** Checkpoints the WAL and closes the database. Idempotent; later calls throw ERR_CLOSED. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.checkpointTimer !== undefined) clearTimeout(this.checkpointTimer);
    this.checkpointTimer = undefined;
    this.cache.clear();
    this.ids.clear();
    try {
      this.db.pragma('wal_checkpoint(TRUNCATE)');
    } finally {
      this.db.close();
    }
  }

  /** @internal white-box access for tests and benchmarks. */
  get _internal(): { db: Database.Database; cache: LRUCache<string, PageHit> } {
    return { db: this.db, cache: this.cache };
  }
}
