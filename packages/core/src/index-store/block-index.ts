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
  private readonly s: Record<string, Stmt>;
  private cacheHits = 0;
  private cacheMisses = 0;
  private closed = false;

  private constructor(options: BlockIndexOptions) {
    const o = BlockIndex.checkOptions(options);
    this.path = o.path;
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
      const from = migrate(this.db);
      this.s = this.prepareAll();
      this.recovery = this.recover(from);
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
    return {
      nsInsert: p('INSERT INTO namespaces(name, model, layout, tenant, tokens_per_page, created_ms) VALUES (?, ?, ?, ?, ?, ?)'),
      nsGet: p('SELECT id, model, layout, tenant, tokens_per_page AS tokensPerPage FROM namespaces WHERE name = ?'),
      nsList: p('SELECT name AS id, model, layout AS layoutFingerprint, tenant, tokens_per_page AS tokensPerPage FROM namespaces ORDER BY id'),
      nsDelete: p('DELETE FROM namespaces WHERE id = ?'),
      nsPins: p('DELETE FROM pins WHERE key IN (SELECT key FROM pages WHERE ns = ?)'),
      nsCopies: p('DELETE FROM copies WHERE key IN (SELECT key FROM pages WHERE ns = ?) RETURNING key, tier, location'),
      nsPages: p('DELETE FROM pages WHERE ns = ?'),
      copiesOf: p('SELECT tier, location, state, durable, verified, updated_ms AS updatedMs FROM copies WHERE key = ?'),
      pageOf: p(
        'SELECT p.key, n.name AS namespace, p.parent, p.position, p.length, p.crc32c, p.created_ms AS createdMs, p.access_ms AS lastAccessMs, p.hits FROM pages p JOIN namespaces n ON n.id = p.ns WHERE p.key = ?',
      ),
      pinUpsert: p('INSERT INTO pins(key, owner, expires_ms) VALUES (?, ?, ?) ON CONFLICT(key, owner) DO UPDATE SET expires_ms = excluded.expires_ms'),
      unpinOwner: p('DELETE FROM pins WHERE key = ? AND owner = ?'),
      unpinAll: p('DELETE FROM pins WHERE key = ?'),
      pinActive: p('SELECT 1 FROM pins WHERE key = ? AND expires_ms > ? LIMIT 1'),
      expirePins: p('DELETE FROM pins WHERE expires_ms <= ? RETURNING key'),
      orphanPage: p('DELETE FROM pages WHERE key = ? AND NOT EXISTS (SELECT 1 FROM copies c WHERE c.key = pages.key)'),
    };
  }

  /** A multi-row statement for `rows` rows of kind `kind`, prepared once. */
  private stmt(kind: 'insertPages' | 'insertCopies' | 'commit' | 'crc' | 'lookup' | 'remove' | 'evict' | 'touch' | 'verify' | 'orphans', rows: number): Stmt {
    const id = `${kind}:${rows}`;
    let st = this.multi.get(id);
    if (st) return st;
    const list = placeholders(rows, '?');
    let sql: string;
    switch (kind) {
      case 'insertPages':
        sql = `INSERT INTO pages(key, ns, parent, position, length, crc32c, created_ms, access_ms) VALUES ${placeholders(rows, '(?,?,?,?,?,?,?,?)')} ON CONFLICT(key) DO NOTHING RETURNING key`;
        break;
      case 'insertCopies':
        sql = `INSERT INTO copies(key, tier, location, state, durable, verified, updated_ms) VALUES ${placeholders(rows, `(?,?,?,${COPY_STATE.pending},0,0,?)`)}`;
        break;
      case 'commit':
        // params: durable, updated_ms, tier, keys...
        sql = `UPDATE copies SET state = ${COPY_STATE.ready}, durable = ?, verified = 1, updated_ms = ? WHERE tier = ? AND state = ${COPY_STATE.pending} AND key IN (${list}) RETURNING key`;
        break;
      case 'crc':
        // params: (key, crc) pairs; one join of the VALUES list against the primary key.
        sql = `UPDATE pages SET crc32c = v.c FROM (SELECT column1 AS k, column2 AS c FROM (VALUES ${placeholders(rows, '(?,?)')})) AS v WHERE pages.key = v.k`;
        break;
      case 'lookup':
        sql = `SELECT c.key AS key, c.tier AS tier, p.length AS length FROM copies c JOIN pages p ON p.key = c.key WHERE c.key IN (${list}) AND c.state = ${COPY_STATE.ready}`;
        break;
      case 'remove':
        sql = `DELETE FROM copies WHERE tier = ? AND key IN (${list}) RETURNING key`;
        break;
      case 'evict':
        sql = `UPDATE copies SET state = ${COPY_STATE.evicting}, updated_ms = ? WHERE tier = ? AND state = ${COPY_STATE.ready} AND key IN (${list}) RETURNING key`;
        break;
      case 'touch':
        sql = `UPDATE pages SET access_ms = ?, hits = hits + 1 WHERE key IN (${list})`;
        break;
      case 'verify':
        sql = `UPDATE copies SET verified = 1 WHERE tier = ? AND state = ${COPY_STATE.ready} AND key IN (${list})`;
        break;
      case 'orphans':
        sql = `DELETE FROM pages WHERE key IN (${list}) AND NOT EXISTS (SELECT 1 FROM copies c WHERE c.key = pages.key)`;
        break;
    }
    st = this.db.prepare(sql) as Stmt;
    this.multi.set(id, st);
    return st;
  }

  /** Runs `fn` for each chunk of `items` with the chunk's statement size. */
  private eachChunk<T>(items: readonly T[], fn: (chunk: readonly T[], size: number) => void): void {
    let at = 0;
    for (const size of chunks(items.length)) {
      fn(items.slice(at, at + size), size);
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
    try {
      return this.db.transaction(fn)();
    } catch (e) {
      wrapSqlite(e, what);
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
        report.orphanPages = this.db.prepare('DELETE FROM pages WHERE NOT EXISTS (SELECT 1 FROM copies c WHERE c.key = pages.key)').run().changes;
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
    if (pages.length === 0) return { fresh, existing };
    const now = this.now();
    this.tx('beginStore', () => {
      const inserted = new Set<string>();
      this.eachChunk(pages, (chunk, size) => {
        const params: unknown[] = new Array(size * 8);
        let j = 0;
        for (const p of chunk) {
          params[j++] = p.key;
          params[j++] = ns;
          params[j++] = p.parent;
          params[j++] = p.position;
          params[j++] = p.length;
          params[j++] = p.crc32c ?? null;
          params[j++] = now;
          params[j++] = now;
        }
        for (const row of this.stmt('insertPages', size).all(params) as Array<{ key: string }>) inserted.add(row.key);
      });
      const newPages: StorePage[] = [];
      for (const p of pages) {
        if (inserted.has(p.key)) {
          fresh.push(p.key);
          newPages.push(p);
        } else existing.push(p.key);
      }
      this.eachChunk(newPages, (chunk, size) => {
        const params: unknown[] = new Array(size * 4);
        let j = 0;
        for (const p of chunk) {
          params[j++] = p.key;
          params[j++] = tier;
          params[j++] = p.location;
          params[j++] = now;
        }
        this.stmt('insertCopies', size).run(params);
      });
    });
    return { fresh, existing };
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
    const existing: PageKey[] = [];
    const missing: PageKey[] = [];
    const now = this.now();
    const hasPage = this.db.prepare('SELECT EXISTS (SELECT 1 FROM pages WHERE key = ?) AS p, EXISTS (SELECT 1 FROM copies WHERE key = ? AND tier = ?) AS c');
    const insert = this.db.prepare(`INSERT INTO copies(key, tier, location, state, durable, verified, updated_ms) VALUES (?, ?, ?, ${COPY_STATE.pending}, 0, 0, ?)`);
    this.tx('beginCopies', () => {
      for (const e of entries) {
        const r = hasPage.get(e.key, e.key, tier) as { p: number; c: number };
        if (!r.p) missing.push(e.key);
        else if (r.c) existing.push(e.key);
        else {
          insert.run(e.key, tier, e.location, now);
          added.push(e.key);
        }
      }
    });
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
    this.tx('commitCopies', () => {
      for (const [g, keys] of groups) {
        const durable = Number(g[0]);
        const tier = g.slice(1);
        const done = new Set<string>();
        this.eachChunk(keys, (chunk, size) => {
          for (const row of this.stmt('commit', size).all(durable, now, tier, chunk) as Array<{ key: string }>) done.add(row.key);
        });
        committed += done.size;
        for (const k of keys) if (!done.has(k)) missing.push(k);
      }
      const missed = new Set(missing);
      this.eachChunk(missed.size ? crcs.filter(([, k]) => !missed.has(k)) : crcs, (chunk, size) => {
        const params: unknown[] = new Array(size * 2);
        let j = 0;
        for (const [crc, key] of chunk) {
          params[j++] = key;
          params[j++] = crc;
        }
        this.stmt('crc', size).run(params);
      });
    });
    for (const e of batch) this.cache.delete(e.key);
    return { committed, missing };
  }

  /** Drops pending copies on `tier` (a store that failed), and pages left without any copy. Returns how many. */
  abortCopies(tier: string, keys: readonly PageKey[]): number {
    this.open();
    this.checkTier(tier, 'tier');
    checkKeyList(keys, 'keys');
    let n = 0;
    const del = this.db.prepare(`DELETE FROM copies WHERE tier = ? AND key = ? AND state = ${COPY_STATE.pending}`);
    this.tx('abortCopies', () => {
      for (const k of keys) {
        if (del.run(tier, k).changes > 0) {
          n++;
          this.s.orphanPage!.run(k);
        }
      }
    });
    for (const k of keys) this.cache.delete(k);
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
      const st = chunks(take);
      const found = new Map<string, { tiers: string[]; length: number }>();
      let at = 0;
      for (const part of st) {
        const rows = this.stmt('lookup', part).all(chunkKeys.slice(at, at + part)) as Array<{ key: string; tier: string; length: number }>;
        at += part;
        for (const r of rows) {
          if (!this.tierRank.has(r.tier)) continue;
          const f = found.get(r.key);
          if (f) f.tiers.push(r.tier);
          else found.set(r.key, { tiers: [r.tier], length: r.length });
        }
      }
      for (let j = 0; j < take; j++, i++) {
        const key = chunkKeys[j]!;
        const f = found.get(key);
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
      size = Math.min(size * 4, MAX_CHUNK);
    }
    return out;
  }

  /** Every copy of each key (empty for an unknown key), in any state. */
  copiesOf(keys: readonly PageKey[]): CopyRecord[][] {
    this.open();
    checkKeyList(keys, 'keys');
    return keys.map((k) =>
      (this.s.copiesOf!.all(k) as Array<{ tier: string; location: string; state: number; durable: number; verified: number; updatedMs: number }>)
        .map((r) => ({ tier: r.tier, location: r.location, state: STATE_NAMES[r.state] ?? 'pending', durable: r.durable === 1, verified: r.verified === 1, updatedMs: r.updatedMs }))
        .sort((a, b) => (this.tierRank.get(a.tier) ?? 99) - (this.tierRank.get(b.tier) ?? 99)),
    );
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

  /**
   * Marks ready copies on `tier` as being evicted (invisible to lookups from now on), skipping pinned pages.
   * The caller frees the bytes, then calls removeCopies.
   */
  markEvicting(tier: string, keys: readonly PageKey[]): { marked: PageKey[]; pinned: PageKey[]; missing: PageKey[] } {
    this.open();
    this.checkTier(tier, 'tier');
    checkKeyList(keys, 'keys');
    const now = this.now();
    const pinned: PageKey[] = [];
    const candidates: PageKey[] = [];
    const marked = new Set<string>();
    this.tx('markEvicting', () => {
      for (const k of keys) (this.s.pinActive!.get(k, now) ? pinned : candidates).push(k);
      this.eachChunk(candidates, (chunk, size) => {
        for (const row of this.stmt('evict', size).all(now, tier, chunk) as Array<{ key: string }>) marked.add(row.key);
      });
    });
    for (const k of marked) this.cache.delete(k);
    return { marked: [...marked], pinned, missing: candidates.filter((k) => !marked.has(k)) };
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
    const pinned: PageKey[] = [];
    const candidates: PageKey[] = [];
    const removed = new Set<string>();
    this.tx('removeCopies', () => {
      for (const k of keys) (!force && this.s.pinActive!.get(k, now) ? pinned : candidates).push(k);
      this.eachChunk(candidates, (chunk, size) => {
        for (const row of this.stmt('remove', size).all(tier, chunk) as Array<{ key: string }>) removed.add(row.key);
      });
      this.eachChunk([...removed], (chunk, size) => this.stmt('orphans', size).run(chunk));
    });
    for (const k of removed) this.cache.delete(k);
    return { removed: [...removed], pinned, missing: candidates.filter((k) => !removed.has(k)) };
  }

  /** Records an access to each existing page: last access time and hit count. */
  touch(keys: readonly PageKey[], now: number = this.now()): void {
    this.open();
    checkKeyList(keys, 'keys');
    checkInt(now, 'now', 0);
    if (keys.length === 0) return;
    this.tx('touch', () => this.eachChunk(keys, (chunk, size) => this.stmt('touch', size).run(now, chunk)));
  }

  /** Records that the ready copies of `keys` on `tier` matched their page CRC32C when read. Returns how many. */
  markVerified(tier: string, keys: readonly PageKey[]): number {
    this.open();
    this.checkTier(tier, 'tier');
    checkKeyList(keys, 'keys');
    let n = 0;
    this.tx('markVerified', () => this.eachChunk(keys, (chunk, size) => (n += this.stmt('verify', size).run(tier, chunk).changes)));
    return n;
  }

  /**
   * Pins `keys` for `ttlMs` (re-pinning by the same owner sets the new expiry). A pinned page is skipped by
   * markEvicting and removeCopies until it expires or is unpinned. Pages need not exist yet.
   */
  pin(keys: readonly PageKey[], options: { ttlMs: number; owner?: string }): void {
    this.open();
    checkKeyList(keys, 'keys');
    if (options === null || typeof options !== 'object') throw invalid(`options must be {ttlMs, owner?}, got ${describeValue(options)}`);
    const ttl = checkInt(options.ttlMs, 'options.ttlMs', 1);
    const owner = options.owner ?? '';
    if (typeof owner !== 'string' || owner.length > 256) throw invalid(`options.owner must be a string of 0..256 characters, got ${describeValue(owner)}`);
    const expires = this.now() + ttl;
    this.tx('pin', () => {
      for (const k of keys) this.s.pinUpsert!.run(k, owner, expires);
    });
  }

  /** Removes the pins of `owner` on `keys` (every owner's when owner is undefined). Returns pins removed. */
  unpin(keys: readonly PageKey[], options: { owner?: string } = {}): number {
    this.open();
    checkKeyList(keys, 'keys');
    const owner = options?.owner;
    if (owner !== undefined && typeof owner !== 'string') throw invalid(`options.owner must be a string, got ${describeValue(owner)}`);
    let n = 0;
    this.tx('unpin', () => {
      for (const k of keys) n += (owner === undefined ? this.s.unpinAll!.run(k) : this.s.unpinOwner!.run(k, owner)).changes;
    });
    return n;
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
      const copies = this.s.nsCopies!.all(ns) as Array<{ key: string; tier: string; location: string }>;
      const pages = this.s.nsPages!.run(ns).changes;
      this.s.nsDelete!.run(ns);
      return { pages, copies };
    });
    this.nsIds.delete(namespace);
    this.nsNames.delete(ns);
    this.cache.clear();
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
         FROM copies c JOIN pages p ON p.key = c.key GROUP BY c.tier, c.state`,
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
    this.cache.clear();
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
