/**
 * The block index: which pages exist and where their copies are, in SQLite (better-sqlite3), with an LRU of
 * lookup answers in front. Pages are kept in runs (schema.ts): up to 32 pages of one chain per row, copies as bit
 * masks per (run, tier); a key is found through its run's 8-byte anchor.
 *
 * Threading and lifetimes: every method is synchronous and runs on the caller's thread; one BlockIndex owns its
 * database file (the LRU is kept coherent by this instance's own writes, so two processes must not write one file).
 * Every batch is one transaction: arguments are validated first (nothing is touched on bad input), and any SQLite
 * failure rolls the whole batch back.
 *
 * Hot paths: a lookup of a context whose pages are cached costs one LRU get per page and no SQL; misses are fetched
 * by anchor (one query per chunk of keys). A store of a 2,048-page chain writes 64 runs and 64 copies rows; its
 * commit rewrites the 64 copies rows (page positions of a store are remembered, so the commit needs no lookup).
 */
import fs from 'node:fs';
import Database from 'better-sqlite3';
import { LRUCache } from 'lru-cache';
import { TierSyncError, describeValue } from '@tiersync/native/errors';
import { RUN_PAGES, SCHEMA_VERSION, f64Blob, migrate, u32Blob } from './schema.js';
import type {
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
  TierStats,
} from './types.js';

const KEY_RE = /^[0-9a-f]{16,128}$/;
const NAME_RE = /^[A-Za-z0-9_.-]{1,64}$/;
const TIER_KINDS = new Set(['hbm', 'host', 'fs', 'object', 'peer']);
/** Keys per uncached lookup query (one JSON array parameter). */
const MAX_LOOKUP_CHUNK = 2048;
/** WAL checkpoints: a timer checkpoints (PASSIVE) between calls once the WAL holds this many bytes ... */
const CHECKPOINT_IDLE_BYTES = 4 << 20;
const CHECKPOINT_INTERVAL_MS = 250;
/** ... and a write transaction checkpoints inline only when the WAL grew past this (callers that never yield). */
const CHECKPOINT_INLINE_BYTES = 256 << 20;
/** Remembered positions of pending copies (see locate); cleared when it would grow past this. */
const MAX_HINTS = 1 << 20;
/** Runs whose copies rows are kept in memory after a write (see rowCache). */
const ROW_CACHE_RUNS = 4096;
/** Most new runs per multi-row INSERT statement (see newRunsStmt). */
const NEW_RUNS_CHUNK = 16;
const ABSENT: PageHit = Object.freeze({ key: '', tiers: Object.freeze([]) as readonly string[], length: 0 });

type Stmt = Database.Statement<unknown[], unknown>;

function invalid(message: string): TierSyncError {
  return new TierSyncError(message, 'ERR_INVALID_ARGUMENT');
}

/** `name` is built only on failure (a template string per key would cost more than the check on 2,048 keys). */
function checkKey(key: unknown, name: string | (() => string)): asserts key is PageKey {
  if (typeof key !== 'string' || !KEY_RE.test(key)) {
    throw invalid(`${typeof name === 'function' ? name() : name} must be a page key (16..128 lower-case hex characters), got ${describeValue(key)}`);
  }
}

function checkKeyList(keys: unknown, name: string): asserts keys is readonly PageKey[] {
  if (!Array.isArray(keys)) throw invalid(`${name} must be an array of page keys, got ${describeValue(keys)}`);
  for (let i = 0; i < keys.length; i++) checkKey(keys[i], () => `${name}[${i}]`);
}

function checkInt(value: unknown, name: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    throw invalid(`${name} must be an integer in [${min}, ${max}], got ${describeValue(value)}`);
  }
  return value;
}

function wrapSqlite(error: unknown, what: string): never {
  if (error instanceof TierSyncError) throw error;
  const code = (error as { code?: string }).code ?? '';
  throw new TierSyncError(`index: ${what} failed: ${(error as Error).message ?? String(error)}`, code === 'SQLITE_FULL' ? 'ERR_NO_MEMORY' : 'ERR_IO', { cause: error });
}

/** Page s of a run is bit s of its copies' masks. */
const bitOf = (slot: number) => (1 << slot) >>> 0;

function popcount(mask: number): number {
  let m = mask >>> 0;
  m = m - ((m >>> 1) & 0x55555555);
  m = (m & 0x33333333) + ((m >>> 2) & 0x33333333);
  return (((m + (m >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
}

function u32s(blob: Buffer, count: number): number[] {
  const out = new Array<number>(count);
  for (let i = 0; i < count; i++) out[i] = blob.readUInt32LE(i * 4);
  return out;
}

function f64s(blob: Buffer, count: number): number[] {
  const out = new Array<number>(count);
  for (let i = 0; i < count; i++) out[i] = blob.readDoubleLE(i * 8);
  return out;
}

/** A run row, decoded. */
interface Run {
  id: number;
  ns: number;
  count: number;
  keyBytes: number;
  keys: Buffer;
  parent: Buffer | null;
  position: number;
  lengths: number[];
  crcs: number[];
  crcKnown: number;
  created: number[];
  access: number[];
  hits: number[];
  /** Per-page arrays changed (written back by flush). */
  dirty: boolean;
}

/** A copies row (one run on one tier), decoded. */
interface CopyRow {
  run: number;
  tier: string;
  pending: number;
  ready: number;
  evicting: number;
  durable: number;
  verified: number;
  /** Per-page locations; null entries (or a null array) mean the page's key. */
  locations: Array<string | null> | null;
  updated: number;
  dirty: boolean;
  /** Not in the database yet. */
  fresh: boolean;
}

/** A copies row's state bits, as read by a full scan. */
type CopyStates = Pick<CopyRow, 'run' | 'tier' | 'pending' | 'ready' | 'evicting' | 'durable' | 'verified'>;

interface Loc {
  run: number;
  slot: number;
}

/** Runs and copies rows read by one operation, changed in memory, written back by flush(). */
interface Work {
  runs: Map<number, Run>;
  copies: Map<string, CopyRow>;
  /** The copies rows of each run, as in `copies`. */
  byRun: Map<number, CopyRow[]>;
  /** Run ids looked for and not found. */
  gone: Set<number>;
  /** Runs whose copies rows are all in `copies`. */
  fetched: Set<number>;
}

const rowId = (run: number, tier: string) => `${run}\u0000${tier}`;
const anyState = (c: CopyRow) => c.pending | c.ready | c.evicting;

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
  /**
   * The copies rows of recently written runs, complete per run (every row of the run), as last written by this
   * instance (the only writer of its file): a commit right after its beginStore reads nothing back. Cleared when it
   * would grow past ROW_CACHE_RUNS runs, and by deleteNamespace.
   */
  private readonly rowCache = new Map<number, CopyRow[]>();
  /** Where pages given a pending copy by this instance are (see locate); dropped at commit or abort. */
  private readonly hints = new Map<string, Loc>();
  /** Id of the next run stored (ids only grow within a process, so a remembered position never names another run). */
  private nextId = 1;
  private readonly s: Record<string, Stmt>;
  private readonly multi = new Map<number, { runs: Stmt; copies: Stmt }>();
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
    return {
      nsInsert: p('INSERT INTO namespaces(name, model, layout, tenant, tokens_per_page, created_ms) VALUES (?, ?, ?, ?, ?, ?)'),
      nsGet: p('SELECT id, model, layout, tenant, tokens_per_page AS tokensPerPage FROM namespaces WHERE name = ?'),
      nsList: p('SELECT name AS id, model, layout AS layoutFingerprint, tenant, tokens_per_page AS tokensPerPage FROM namespaces ORDER BY id'),
      nsDelete: p('DELETE FROM namespaces WHERE id = ?'),
      nsRuns: p('SELECT id FROM runs WHERE ns = ?').pluck(),
      nsCopies: p('DELETE FROM copies WHERE run IN (SELECT id FROM runs WHERE ns = ?)'),
      nsRunsDelete: p('DELETE FROM runs WHERE ns = ?'),
      maxId: p('SELECT coalesce(max(id), 0) AS n FROM runs'),
      runsByAnchor: p('SELECT id, count, keys FROM runs WHERE anchor IN (SELECT unhex(value) FROM json_each(?))'),
      runsById: p('SELECT * FROM runs WHERE id IN (SELECT value FROM json_each(?))'),
      copiesOfRuns: p('SELECT * FROM copies WHERE run IN (SELECT value FROM json_each(?))'),
      updateRun: p('UPDATE runs SET lengths = ?, crcs = ?, crc_known = ?, created = ?, access = ?, hits = ? WHERE id = ?'),
      deleteRun: p('DELETE FROM runs WHERE id = ?'),
      insertCopy: p('INSERT INTO copies(run, tier, pending, ready, evicting, durable, verified, locations, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)'),
      updateCopy: p('UPDATE copies SET pending = ?, ready = ?, evicting = ?, durable = ?, verified = ?, locations = ?, updated_ms = ? WHERE run = ? AND tier = ?'),
      deleteCopy: p('DELETE FROM copies WHERE run = ? AND tier = ?'),
      pinsUpsert: p(
        'INSERT INTO pins(key, owner, expires_ms) SELECT unhex(value), @owner, @expires FROM json_each(@keys) WHERE true ON CONFLICT(key, owner) DO UPDATE SET expires_ms = excluded.expires_ms',
      ),
      unpinOwner: p('DELETE FROM pins WHERE owner = ? AND key IN (SELECT unhex(value) FROM json_each(?))'),
      unpinAll: p('DELETE FROM pins WHERE key IN (SELECT unhex(value) FROM json_each(?))'),
      pinActive: p('SELECT 1 FROM pins WHERE key = unhex(?) AND expires_ms > ? LIMIT 1'),
      // Indices (into the JSON array of keys) of the keys holding an unexpired pin.
      pinnedOf: p('SELECT DISTINCT j.key AS i FROM json_each(?) j JOIN pins ON pins.key = unhex(j.value) WHERE pins.expires_ms > ?').pluck(),
      expirePins: p('DELETE FROM pins WHERE expires_ms <= ? RETURNING lower(hex(key)) AS key'),
    };
  }

  /**
   * Multi-row INSERT of `rows` new runs (and their first copies rows), prepared once per size; sizes are powers
   * of two up to NEW_RUNS_CHUNK, so a 2,048-page store makes 4 + 4 statement calls instead of 64 + 64.
   */
  private newRunsStmt(rows: number): { runs: Stmt; copies: Stmt } {
    let st = this.multi.get(rows);
    if (!st) {
      const runs = this.db.prepare(
        `INSERT INTO runs(id, anchor, ns, count, keys, parent, position, lengths, crcs, crc_known, created, access, hits, created_ms) VALUES ${new Array<string>(rows).fill("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, X'', X'', X'', ?)").join(', ')}`,
      ) as Stmt;
      const copies = this.db.prepare(
        `INSERT INTO copies(run, tier, pending, ready, evicting, durable, verified, locations, updated_ms) VALUES ${new Array<string>(rows).fill('(?, ?, ?, 0, 0, 0, 0, ?, ?)').join(', ')}`,
      ) as Stmt;
      this.multi.set(rows, (st = { runs, copies }));
    }
    return st;
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
      // Rolled back: rows remembered during the transaction may describe what was never committed.
      this.rowCache.clear();
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

  // ---- runs and copies rows in memory ----

  private work(): Work {
    return { runs: new Map(), copies: new Map(), byRun: new Map(), gone: new Set(), fetched: new Set() };
  }

  private decodeRun(r: Record<string, unknown>): Run {
    const count = r.count as number;
    const keys = r.keys as Buffer;
    const born = r.created_ms as number;
    const times = (blob: Buffer) => (blob.length ? f64s(blob, count) : new Array<number>(count).fill(born));
    return {
      id: r.id as number,
      ns: r.ns as number,
      count,
      keyBytes: keys.length / count,
      keys,
      parent: (r.parent as Buffer | null) ?? null,
      position: r.position as number,
      lengths: u32s(r.lengths as Buffer, count),
      crcs: u32s(r.crcs as Buffer, count),
      crcKnown: r.crc_known as number,
      created: times(r.created as Buffer),
      access: times(r.access as Buffer),
      hits: (r.hits as Buffer).length ? u32s(r.hits as Buffer, count) : new Array<number>(count).fill(0),
      dirty: false,
    };
  }

  /** Reads the run rows (keys and per-page arrays) not read yet by this operation. */
  private fetchRuns(w: Work, ids: Iterable<number>): void {
    const need: number[] = [];
    for (const id of new Set(ids)) if (!w.runs.has(id) && !w.gone.has(id)) need.push(id);
    if (!need.length) return;
    for (const r of this.s.runsById!.all(JSON.stringify(need)) as Array<Record<string, unknown>>) w.runs.set(r.id as number, this.decodeRun(r));
    for (const id of need) if (!w.runs.has(id)) w.gone.add(id);
  }

  /** The run row of `id` (read on first use). */
  private runOf(w: Work, id: number): Run | undefined {
    if (!w.runs.has(id)) this.fetchRuns(w, [id]);
    return w.runs.get(id);
  }

  /** Reads every copies row of the runs not read yet by this operation (a run with no row has been deleted). */
  private fetch(w: Work, ids: Iterable<number>): void {
    const need: number[] = [];
    for (const id of new Set(ids)) {
      if (w.fetched.has(id)) continue;
      w.fetched.add(id);
      const cached = this.rowCache.get(id);
      if (cached) for (const row of cached) this.addRow(w, { ...row, locations: row.locations && [...row.locations] });
      else need.push(id);
    }
    if (!need.length) return;
    const list = JSON.stringify(need);
    for (const c of this.s.copiesOfRuns!.all(list) as Array<Record<string, unknown>>) {
      const loc = c.locations as string | null;
      this.addRow(w, {
        run: c.run as number,
        tier: c.tier as string,
        pending: c.pending as number,
        ready: c.ready as number,
        evicting: c.evicting as number,
        durable: c.durable as number,
        verified: c.verified as number,
        locations: loc === null ? null : (JSON.parse(loc) as Array<string | null>),
        updated: c.updated_ms as number,
        dirty: false,
        fresh: false,
      });
    }
  }

  private addRow(w: Work, row: CopyRow): void {
    w.copies.set(rowId(row.run, row.tier), row);
    const list = w.byRun.get(row.run);
    if (list) list.push(row);
    else w.byRun.set(row.run, [row]);
  }

  private keyAt(run: Run, slot: number): string {
    return run.keys.toString('hex', slot * run.keyBytes, (slot + 1) * run.keyBytes);
  }

  /**
   * Where each key is (run and slot), reading the runs involved into `w`: remembered positions first (checked
   * against the run's keys), then runs found by the keys' 8-byte anchors. Undefined: the key is in no run.
   */
  private locate(w: Work, keys: readonly PageKey[]): Array<Loc | undefined> {
    const out: Array<Loc | undefined> = new Array(keys.length);
    const hinted: number[] = [];
    for (let i = 0; i < keys.length; i++) {
      const h = this.hints.get(keys[i]!);
      if (h) {
        out[i] = h;
        hinted.push(h.run);
      }
    }
    // A remembered position is right while its run exists: run ids are never reused within a process, a run only
    // goes when no page of it has a copy left, and every path that removes a page's last copy forgets its hint.
    if (hinted.length) this.fetch(w, hinted);
    const rest: number[] = [];
    const anchors = new Set<string>();
    let last = '';
    for (let i = 0; i < keys.length; i++) {
      const h = out[i];
      if (h) {
        if (w.byRun.has(h.run)) continue;
        out[i] = undefined;
      }
      rest.push(i);
      // Keys of one chain share their anchor 64 at a time: skip the repeats cheaply.
      const k = keys[i]!;
      if (last !== '' && k.startsWith(last)) continue;
      last = k.slice(0, 16);
      anchors.add(last);
    }
    if (!rest.length) return out;
    const runs = this.s.runsByAnchor!.all(JSON.stringify([...anchors])) as Array<{ id: number; count: number; keys: Buffer }>;
    if (!runs.length) return out;
    const wanted = new Map<string, number[]>();
    for (const i of rest) {
      const list = wanted.get(keys[i]!);
      if (list) list.push(i);
      else wanted.set(keys[i]!, [i]);
    }
    const found: number[] = [];
    for (const r of runs) {
      const kb = r.keys.length / r.count;
      for (let s = 0; s < r.count; s++) {
        const at = wanted.get(r.keys.toString('hex', s * kb, (s + 1) * kb));
        if (!at) continue;
        for (const i of at) out[i] = { run: r.id, slot: s };
        found.push(r.id);
      }
    }
    this.fetch(w, found);
    return out;
  }

  private copyRow(w: Work, run: number, tier: string, create: true): CopyRow;
  private copyRow(w: Work, run: number, tier: string, create?: false): CopyRow | undefined;
  private copyRow(w: Work, run: number, tier: string, create = false): CopyRow | undefined {
    const id = rowId(run, tier);
    let row = w.copies.get(id);
    if (!row && create) {
      row = { run, tier, pending: 0, ready: 0, evicting: 0, durable: 0, verified: 0, locations: null, updated: 0, dirty: true, fresh: true };
      this.addRow(w, row);
    }
    return row;
  }

  /** Bits of a run held in any state on any tier. */
  private held(w: Work, run: number): number {
    let bits = 0;
    for (const t of this.tierListAll(w, run)) bits |= anyState(t);
    return bits >>> 0;
  }

  private tierListAll(w: Work, run: number): CopyRow[] {
    return w.byRun.get(run) ?? [];
  }

  /** Whether page `slot` of `run` exists (has a copy in some state on some tier). */
  private exists(w: Work, loc: Loc): boolean {
    const bit = bitOf(loc.slot);
    for (const row of this.tierListAll(w, loc.run)) if (anyState(row) & bit) return true;
    return false;
  }

  private setLocation(row: CopyRow, run: Run, slot: number, key: string, location: string): void {
    if (location === key) {
      if (row.locations) row.locations[slot] = null;
      return;
    }
    row.locations ??= new Array<string | null>(run.count).fill(null);
    row.locations[slot] = location;
  }

  /** Writes back changed rows; deletes copies rows left without any page and runs left without any copy. */
  private flush(w: Work): void {
    const touched = new Set<number>();
    for (const row of w.copies.values()) {
      if (!row.dirty) continue;
      touched.add(row.run);
      const empty = anyState(row) === 0;
      const locations = row.locations && row.locations.some((l) => l !== null) ? JSON.stringify(row.locations) : null;
      if (empty) {
        if (!row.fresh) this.s.deleteCopy!.run(row.run, row.tier);
        w.copies.delete(rowId(row.run, row.tier));
        const list = w.byRun.get(row.run)!;
        list.splice(list.indexOf(row), 1);
      } else if (row.fresh) {
        this.s.insertCopy!.run(row.run, row.tier, row.pending >>> 0, row.ready >>> 0, row.evicting >>> 0, row.durable >>> 0, row.verified >>> 0, locations, row.updated);
        row.fresh = false;
      } else {
        this.s.updateCopy!.run(row.pending >>> 0, row.ready >>> 0, row.evicting >>> 0, row.durable >>> 0, row.verified >>> 0, locations, row.updated, row.run, row.tier);
      }
      row.dirty = false;
    }
    for (const run of w.runs.values()) if (run.dirty) touched.add(run.id);
    for (const id of touched) {
      const run = w.runs.get(id);
      this.rowCache.delete(id);
      if (this.held(w, id) === 0) {
        this.s.deleteRun!.run(id);
        w.runs.delete(id);
        w.byRun.delete(id);
        w.gone.add(id);
      } else if (run?.dirty) {
        this.s.updateRun!.run(u32Blob(run.lengths), u32Blob(run.crcs), run.crcKnown >>> 0, f64Blob(run.created), f64Blob(run.access), u32Blob(run.hits), run.id);
      }
      if (run) run.dirty = false;
      // Every row of the run is in `w` (fetch reads them all): remember them as written.
      const rows = w.byRun.get(id);
      if (rows && w.fetched.has(id)) this.cacheRows(id, rows);
    }
  }

  private cacheRows(run: number, rows: readonly CopyRow[]): void {
    if (this.rowCache.size >= ROW_CACHE_RUNS) this.rowCache.clear();
    this.rowCache.set(
      run,
      rows.map((r) => ({ ...r, locations: r.locations && [...r.locations], dirty: false, fresh: false })),
    );
  }

  /** The state bits of every copies row (a full scan: recovery and stats, not hot paths). */
  private allCopyStates(): CopyStates[] {
    return this.db.prepare('SELECT run, tier, pending, ready, evicting, durable, verified FROM copies').all() as CopyStates[];
  }

  private hint(key: string, loc: Loc): void {
    if (this.hints.size >= MAX_HINTS) this.hints.clear();
    this.hints.set(key, loc);
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
      const rows = this.allCopyStates();
      const before = new Map<number, number>();
      const after = new Map<number, number>();
      const update = this.db.prepare('UPDATE copies SET pending = 0, ready = ?, evicting = 0, durable = ?, verified = 0 WHERE run = ? AND tier = ?');
      const drop = this.db.prepare('DELETE FROM copies WHERE run = ? AND tier = ?');
      for (const r of rows) {
        const all = (r.pending | r.ready | r.evicting) >>> 0;
        before.set(r.run, ((before.get(r.run) ?? 0) | all) >>> 0);
        const t = this.tierList.find((x) => x.name === r.tier);
        if (!t || !t.persistent) {
          const n = popcount(all);
          if (t) report.droppedVolatile[r.tier] = (report.droppedVolatile[r.tier] ?? 0) + n;
          else report.droppedUnknownTier[r.tier] = (report.droppedUnknownTier[r.tier] ?? 0) + n;
          drop.run(r.run, r.tier);
          continue;
        }
        report.droppedPending += popcount(r.pending);
        report.droppedEvicting += popcount(r.evicting);
        report.droppedNotDurable += popcount(r.ready & ~r.durable);
        const ready = (r.ready & r.durable) >>> 0;
        report.unverified += popcount(ready);
        if (ready === 0) drop.run(r.run, r.tier);
        else if (ready !== r.ready || r.pending || r.evicting || r.verified || r.durable !== ready) update.run(ready, ready, r.run, r.tier);
        after.set(r.run, ((after.get(r.run) ?? 0) | ready) >>> 0);
      }
      for (const [run, bits] of before) report.orphanPages += popcount(bits & ~(after.get(run) ?? 0));
      // Runs with no copy left on any tier (and runs that never had a copies row).
      this.db.prepare('DELETE FROM runs WHERE NOT EXISTS (SELECT 1 FROM copies c WHERE c.run = runs.id)').run();
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
   * Starts storing `pages` of namespace `namespace` on `tier`: pages no tier has yet get a pending copy (invisible
   * to lookups until commitCopies); pages that already have a copy anywhere are reported as existing and left
   * alone. New pages that continue each other (parent = the previous page, next position, same key anchor) share
   * runs of up to 32. One transaction.
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
      checkKey(p.key, () => `pages[${i}].key`);
      if (seen.has(p.key)) throw invalid(`pages[${i}].key ${p.key} appears twice in the batch`);
      seen.add(p.key);
      // A chain's parent is usually the page just before it, whose key was checked one step earlier.
      if (p.parent !== null && (i === 0 || p.parent !== pages[i - 1]!.key)) checkKey(p.parent, () => `pages[${i}].parent`);
      if (!Number.isSafeInteger(p.position) || p.position < 0) checkInt(p.position, `pages[${i}].position`, 0);
      if (!Number.isSafeInteger(p.length) || p.length < 1 || p.length > 0xffffffff) checkInt(p.length, `pages[${i}].length`, 1, 0xffffffff);
      if (typeof p.location !== 'string' || p.location.length < 1 || p.location.length > 4096) {
        throw invalid(`pages[${i}].location must be a string of 1..4096 characters, got ${describeValue(p.location)}`);
      }
      if (p.crc32c !== undefined && !(Number.isSafeInteger(p.crc32c) && p.crc32c >= 0 && p.crc32c <= 0xffffffff)) checkInt(p.crc32c, `pages[${i}].crc32c`, 0, 0xffffffff);
    }
    const n = pages.length;
    if (n === 0) return { fresh: [], existing: [] };
    const now = this.now();
    const isFresh = new Uint8Array(n);
    const placed: Array<[string, Loc]> = [];
    this.tx('beginStore', () => {
      const w = this.work();
      const locs = this.locate(
        w,
        pages.map((p) => p.key),
      );
      const created: number[] = [];
      for (let i = 0; i < n; i++) {
        const loc = locs[i];
        if (!loc) {
          created.push(i);
          continue;
        }
        if (this.exists(w, loc)) continue;
        // A hole (the page was stored once, then removed everywhere): store it in its old place.
        const p = pages[i]!;
        const run = this.runOf(w, loc.run)!;
        const row = this.copyRow(w, loc.run, tier, true);
        const bit = bitOf(loc.slot);
        row.pending = (row.pending | bit) >>> 0;
        row.ready = (row.ready & ~bit) >>> 0;
        row.evicting = (row.evicting & ~bit) >>> 0;
        row.durable = (row.durable & ~bit) >>> 0;
        row.verified = (row.verified & ~bit) >>> 0;
        row.updated = now;
        row.dirty = true;
        this.setLocation(row, run, loc.slot, p.key, p.location);
        run.lengths[loc.slot] = p.length;
        run.crcs[loc.slot] = p.crc32c ?? 0;
        run.crcKnown = p.crc32c === undefined ? (run.crcKnown & ~bit) >>> 0 : (run.crcKnown | bit) >>> 0;
        run.created[loc.slot] = now;
        run.access[loc.slot] = now;
        run.hits[loc.slot] = 0;
        run.dirty = true;
        isFresh[i] = 1;
        placed.push([p.key, loc]);
      }
      this.flush(w);
      // New pages: runs of consecutive pages of one chain, inserted NEW_RUNS_CHUNK rows per statement.
      const runParams: unknown[][] = [];
      const copyParams: unknown[][] = [];
      for (let at = 0; at < created.length; ) {
        const first = pages[created[at]!]!;
        let end = at + 1;
        while (end < created.length && end - at < RUN_PAGES) {
          const p = pages[created[end]!]!;
          const prev = pages[created[end - 1]!]!;
          if (p.parent !== prev.key || p.position !== prev.position + 1 || p.key.length !== first.key.length || p.key.slice(0, 16) !== first.key.slice(0, 16)) break;
          end++;
        }
        const group = created.slice(at, end).map((i) => pages[i]!);
        const id = this.nextId++;
        const count = group.length;
        let known = 0;
        let custom = false;
        const locations: Array<string | null> = new Array(count);
        group.forEach((p, s) => {
          if (p.crc32c !== undefined) known |= bitOf(s);
          locations[s] = p.location === p.key ? null : ((custom = true), p.location);
        });
        runParams.push([
          id,
          Buffer.from(first.key.slice(0, 16), 'hex'),
          ns,
          count,
          Buffer.from(group.map((p) => p.key).join(''), 'hex'),
          first.parent === null ? null : Buffer.from(first.parent, 'hex'),
          first.position,
          u32Blob(group.map((p) => p.length)),
          u32Blob(group.map((p) => p.crc32c ?? 0)),
          known >>> 0,
          now,
        ]);
        const mask = count === 32 ? 0xffffffff : ((1 << count) - 1) >>> 0;
        copyParams.push([id, tier, mask, custom ? JSON.stringify(locations) : null, now]);
        this.cacheRows(id, [{ run: id, tier, pending: mask, ready: 0, evicting: 0, durable: 0, verified: 0, locations: custom ? locations : null, updated: now, dirty: false, fresh: false }]);
        for (let s = 0; s < count; s++) {
          isFresh[created[at + s]!] = 1;
          placed.push([group[s]!.key, { run: id, slot: s }]);
        }
        at = end;
      }
      for (let at = 0; at < runParams.length; ) {
        let size = NEW_RUNS_CHUNK;
        while (size > runParams.length - at) size >>= 1;
        const st = this.newRunsStmt(size);
        st.runs.run(runParams.slice(at, at + size).flat());
        st.copies.run(copyParams.slice(at, at + size).flat());
        at += size;
      }
    });
    for (const [key, loc] of placed) this.hint(key, loc);
    const fresh: PageKey[] = [];
    const existing: PageKey[] = [];
    for (let i = 0; i < n; i++) (isFresh[i] ? fresh : existing).push(pages[i]!.key);
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
      checkKey(e.key, () => `entries[${i}].key`);
      if (typeof e.location !== 'string' || e.location.length < 1 || e.location.length > 4096) {
        throw invalid(`entries[${i}].location must be a string of 1..4096 characters, got ${describeValue(e.location)}`);
      }
    }
    const added: PageKey[] = [];
    const existing: PageKey[] = [];
    const missing: PageKey[] = [];
    const placed: Array<[string, Loc]> = [];
    const now = this.now();
    this.tx('beginCopies', () => {
      const w = this.work();
      const locs = this.locate(
        w,
        entries.map((e) => e.key),
      );
      entries.forEach((e, i) => {
        const loc = locs[i];
        if (!loc || !this.exists(w, loc)) {
          missing.push(e.key);
          return;
        }
        const bit = bitOf(loc.slot);
        const row = this.copyRow(w, loc.run, tier, true);
        if (anyState(row) & bit) {
          existing.push(e.key);
          return;
        }
        row.pending = (row.pending | bit) >>> 0;
        row.durable = (row.durable & ~bit) >>> 0;
        row.verified = (row.verified & ~bit) >>> 0;
        row.updated = now;
        row.dirty = true;
        this.setLocation(row, this.runOf(w, loc.run)!, loc.slot, e.key, e.location);
        added.push(e.key);
        placed.push([e.key, loc]);
      });
      this.flush(w);
    });
    for (const [key, loc] of placed) this.hint(key, loc);
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
    for (let i = 0; i < batch.length; i++) {
      const e = batch[i] as CommitEntry;
      if (e === null || typeof e !== 'object') throw invalid(`batch[${i}] must be an object, got ${describeValue(e)}`);
      // Keys given a pending copy by this instance were checked then (hints hold only checked keys).
      if (typeof e.key !== 'string' || !this.hints.has(e.key)) checkKey(e.key, () => `batch[${i}].key`);
      this.checkTier(e.tier, `batch[${i}].tier`);
      if (e.durable !== undefined && typeof e.durable !== 'boolean') throw invalid(`batch[${i}].durable must be a boolean, got ${describeValue(e.durable)}`);
      if (e.crc32c !== undefined) checkInt(e.crc32c, `batch[${i}].crc32c`, 0, 0xffffffff);
    }
    const missing: PageKey[] = [];
    let committed = 0;
    if (batch.length === 0) return { committed, missing };
    const now = this.now();
    this.tx('commitCopies', () => {
      const w = this.work();
      const locs = this.locate(
        w,
        batch.map((e) => e.key),
      );
      batch.forEach((e, i) => {
        const loc = locs[i];
        const row = loc && this.copyRow(w, loc.run, e.tier);
        const bit = loc ? bitOf(loc.slot) : 0;
        if (!loc || !row || !(row.pending & bit)) {
          missing.push(e.key);
          return;
        }
        row.pending = (row.pending & ~bit) >>> 0;
        row.ready = (row.ready | bit) >>> 0;
        row.durable = e.durable ? (row.durable | bit) >>> 0 : (row.durable & ~bit) >>> 0;
        row.verified = (row.verified | bit) >>> 0;
        row.updated = now;
        row.dirty = true;
        committed++;
        if (e.crc32c !== undefined) {
          const run = this.runOf(w, loc.run)!;
          run.crcs[loc.slot] = e.crc32c;
          run.crcKnown = (run.crcKnown | bit) >>> 0;
          run.dirty = true;
        }
      });
      this.flush(w);
    });
    for (const e of batch) {
      this.cache.delete(e.key);
      this.hints.delete(e.key);
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
      const w = this.work();
      const locs = this.locate(w, keys);
      locs.forEach((loc) => {
        if (!loc) return;
        const row = this.copyRow(w, loc.run, tier);
        const bit = bitOf(loc.slot);
        if (!row || !(row.pending & bit)) return;
        row.pending = (row.pending & ~bit) >>> 0;
        row.dirty = true;
        n++;
      });
      this.flush(w);
    });
    for (const k of keys) {
      this.cache.delete(k);
      this.hints.delete(k);
    }
    return n;
  }

  /** The tiers holding a ready copy of each key (fastest first) and its length; undefined when none does. */
  private readyOf(keys: readonly PageKey[]): Array<{ tiers: string[]; length: number } | undefined> {
    const w = this.work();
    const locs = this.locate(w, keys);
    return locs.map((loc) => {
      if (!loc) return undefined;
      const bit = bitOf(loc.slot);
      const tiers: string[] = [];
      for (const row of this.tierListAll(w, loc.run)) {
        if (row.ready & bit && this.tierRank.has(row.tier)) tiers.push(row.tier);
      }
      if (!tiers.length) return undefined;
      if (tiers.length > 1) tiers.sort((a, b) => this.tierRank.get(a)! - this.tierRank.get(b)!);
      return { tiers, length: this.runOf(w, loc.run)!.lengths[loc.slot]! };
    });
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
      for (let j = 0; j < take; j++) checkKey(chunkKeys[j], () => `keys[${i + j}]`);
      const found = this.readyOf(chunkKeys);
      for (let j = 0; j < take; j++, i++) {
        const key = chunkKeys[j]!;
        const f = found[j];
        this.cacheMisses++;
        if (!f) {
          cache.set(key, ABSENT);
          return out;
        }
        const hit: PageHit = Object.freeze({ key, tiers: Object.freeze(f.tiers), length: f.length });
        cache.set(key, hit);
        out.push(hit);
      }
      size = Math.min(size * 4, MAX_LOOKUP_CHUNK);
    }
    return out;
  }

  /**
   * For each of `keys` (not only a prefix): its ready copies' tiers and length, or undefined when no tier holds a
   * ready copy. Cached answers cost no SQL; the rest are fetched by anchor.
   * @throws TierSyncError ERR_INVALID_ARGUMENT naming a malformed key.
   */
  lookupExact(keys: readonly PageKey[]): Array<PageHit | undefined> {
    this.open();
    checkKeyList(keys, 'keys');
    const out: Array<PageHit | undefined> = new Array(keys.length);
    const cache = this.cache;
    let todo: number[] | undefined;
    for (let i = 0; i < keys.length; i++) {
      const hit = cache.get(keys[i]!);
      if (hit === undefined) (todo ??= []).push(i);
      else if (hit !== ABSENT) out[i] = hit;
    }
    this.cacheHits += keys.length - (todo?.length ?? 0);
    if (!todo) return out;
    for (let at = 0; at < todo.length; at += MAX_LOOKUP_CHUNK) {
      const where = todo.slice(at, at + MAX_LOOKUP_CHUNK);
      const chunkKeys = where.map((i) => keys[i]!);
      const found = this.readyOf(chunkKeys);
      for (let j = 0; j < chunkKeys.length; j++) {
        const key = chunkKeys[j]!;
        const f = found[j];
        this.cacheMisses++;
        if (!f) {
          cache.set(key, ABSENT);
          continue;
        }
        const hit: PageHit = Object.freeze({ key, tiers: Object.freeze(f.tiers), length: f.length });
        cache.set(key, hit);
        out[where[j]!] = hit;
      }
    }
    return out;
  }

  /** Every copy of each key, fastest tier first. */
  private copiesOfChecked(keys: readonly PageKey[]): CopyRecord[][] {
    const out: CopyRecord[][] = new Array(keys.length);
    for (let i = 0; i < keys.length; i++) out[i] = [];
    if (keys.length === 0) return out;
    const w = this.work();
    const locs = this.locate(w, keys);
    const rank = (t: string) => this.tierRank.get(t) ?? 99;
    locs.forEach((loc, i) => {
      if (!loc) return;
      const bit = bitOf(loc.slot);
      const list = out[i]!;
      for (const row of this.tierListAll(w, loc.run)) {
        if (!(anyState(row) & bit)) continue;
        list.push({
          tier: row.tier,
          location: row.locations?.[loc.slot] ?? keys[i]!,
          state: row.pending & bit ? 'pending' : row.ready & bit ? 'ready' : 'evicting',
          durable: (row.durable & bit) !== 0,
          verified: (row.verified & bit) !== 0,
          updatedMs: row.updated,
        });
      }
      if (list.length > 1) list.sort((a, b) => rank(a.tier) - rank(b.tier));
    });
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
   * copiesOf()), in one transaction.
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
      if (touched.length) this.touchChecked(touched, now);
      return keys.length ? this.s.unpinOwner!.run(owner, JSON.stringify(keys)).changes : 0;
    });
  }

  /** The page record of each key, or undefined. */
  pages(keys: readonly PageKey[]): Array<PageRecord | undefined> {
    this.open();
    checkKeyList(keys, 'keys');
    const w = this.work();
    const locs = this.locate(w, keys);
    return locs.map((loc, i) => {
      if (!loc || !this.exists(w, loc)) return undefined;
      const run = this.runOf(w, loc.run)!;
      const s = loc.slot;
      return {
        key: keys[i]!,
        namespace: this.nsNames.get(run.ns) ?? '',
        parent: s > 0 ? this.keyAt(run, s - 1) : run.parent ? run.parent.toString('hex') : null,
        position: run.position + s,
        length: run.lengths[s]!,
        crc32c: run.crcKnown & bitOf(s) ? run.crcs[s]! : null,
        createdMs: run.created[s]!,
        lastAccessMs: run.access[s]!,
        hits: run.hits[s]!,
      };
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

  /**
   * Applies `change` to the copy of each key on `tier` (each key once); returns the keys it changed, in input order,
   * and the others. `change` returns false when the copy is not in the state it acts on.
   */
  private eachCopy(tier: string, keys: readonly PageKey[], change: (row: CopyRow, bit: number) => boolean): { hit: PageKey[]; missing: PageKey[] } {
    const w = this.work();
    const locs = this.locate(w, keys);
    const hit: PageKey[] = [];
    const missing: PageKey[] = [];
    const seen = new Set<string>();
    locs.forEach((loc, i) => {
      const k = keys[i]!;
      if (seen.has(k)) return;
      seen.add(k);
      const row = loc && this.copyRow(w, loc.run, tier);
      if (!loc || !row || !change(row, bitOf(loc.slot))) {
        missing.push(k);
        return;
      }
      row.dirty = true;
      hit.push(k);
    });
    this.flush(w);
    return { hit, missing };
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
      const { hit, missing } = this.eachCopy(tier, candidates, (row, bit) => {
        if (!(row.ready & bit)) return false;
        row.ready = (row.ready & ~bit) >>> 0;
        row.evicting = (row.evicting | bit) >>> 0;
        row.updated = now;
        return true;
      });
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
      const { hit, missing } = this.eachCopy(tier, candidates, (row, bit) => {
        if (!(anyState(row) & bit)) return false;
        const keep = ~bit;
        row.pending = (row.pending & keep) >>> 0;
        row.ready = (row.ready & keep) >>> 0;
        row.evicting = (row.evicting & keep) >>> 0;
        row.durable = (row.durable & keep) >>> 0;
        row.verified = (row.verified & keep) >>> 0;
        row.updated = now;
        return true;
      });
      return { removed: hit, pinned, missing };
    });
    for (const k of r.removed) {
      this.cache.delete(k);
      this.hints.delete(k);
    }
    return r;
  }

  private touchChecked(keys: readonly PageKey[], now: number): void {
    const w = this.work();
    const locs = this.locate(w, keys);
    const seen = new Set<string>();
    locs.forEach((loc, i) => {
      if (!loc || seen.has(keys[i]!) || !this.exists(w, loc)) return;
      seen.add(keys[i]!);
      const run = this.runOf(w, loc.run)!;
      run.access[loc.slot] = now;
      run.hits[loc.slot] = run.hits[loc.slot]! + 1;
      run.dirty = true;
    });
    this.flush(w);
  }

  /** Records an access to each existing page: last access time and hit count. */
  touch(keys: readonly PageKey[], now: number = this.now()): void {
    this.open();
    checkKeyList(keys, 'keys');
    checkInt(now, 'now', 0);
    if (keys.length === 0) return;
    this.tx('touch', () => this.touchChecked(keys, now));
  }

  /** Records that the ready copies of `keys` on `tier` matched their page CRC32C when read. Returns how many. */
  markVerified(tier: string, keys: readonly PageKey[]): number {
    this.open();
    this.checkTier(tier, 'tier');
    checkKeyList(keys, 'keys');
    if (keys.length === 0) return 0;
    return this.tx('markVerified', () => {
      const { hit } = this.eachCopy(tier, keys, (row, bit) => {
        if (!(row.ready & bit)) return false;
        row.verified = (row.verified | bit) >>> 0;
        return true;
      });
      return hit.length;
    });
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
      const w = this.work();
      const ids = this.s.nsRuns!.all(ns) as number[];
      this.fetch(w, ids);
      this.fetchRuns(w, ids);
      const copies: Array<{ key: PageKey; tier: string; location: string }> = [];
      const keys: string[] = [];
      let pages = 0;
      for (const run of w.runs.values()) {
        const rows = this.tierListAll(w, run.id);
        for (let s = 0; s < run.count; s++) {
          const bit = bitOf(s);
          const key = this.keyAt(run, s);
          let any = false;
          for (const row of rows) {
            if (!(anyState(row) & bit)) continue;
            any = true;
            copies.push({ key, tier: row.tier, location: row.locations?.[s] ?? key });
          }
          if (any) {
            pages++;
            keys.push(key);
          }
        }
      }
      for (let at = 0; at < keys.length; at += 4096) this.s.unpinAll!.run(JSON.stringify(keys.slice(at, at + 4096)));
      this.s.nsCopies!.run(ns);
      this.s.nsRunsDelete!.run(ns);
      this.s.nsDelete!.run(ns);
      return { pages, copies };
    });
    this.nsIds.delete(namespace);
    this.nsNames.delete(ns);
    this.cache.clear();
    this.hints.clear();
    this.rowCache.clear();
    return result;
  }

  /** Counts (O(pages): a scan; not for hot paths). */
  stats(): IndexStats {
    this.open();
    const tiers: Record<string, TierStats> = {};
    for (const t of this.tierList) tiers[t.name] = { pending: 0, ready: 0, evicting: 0, durable: 0, unverified: 0, readyBytes: 0 };
    const lengths = new Map<number, number[]>();
    for (const r of this.db.prepare('SELECT id, count, lengths FROM runs').all() as Array<{ id: number; count: number; lengths: Buffer }>) lengths.set(r.id, u32s(r.lengths, r.count));
    const held = new Map<number, number>();
    const rows = this.allCopyStates();
    for (const r of rows) {
      const t = (tiers[r.tier] ??= { pending: 0, ready: 0, evicting: 0, durable: 0, unverified: 0, readyBytes: 0 });
      t.pending += popcount(r.pending);
      t.ready += popcount(r.ready);
      t.evicting += popcount(r.evicting);
      t.durable += popcount(r.durable & (r.pending | r.ready | r.evicting));
      t.unverified += popcount(r.ready & ~r.verified);
      const len = lengths.get(r.run) ?? [];
      for (let m = r.ready >>> 0, s = 0; m; m >>>= 1, s++) if (m & 1) t.readyBytes += len[s] ?? 0;
      held.set(r.run, ((held.get(r.run) ?? 0) | r.pending | r.ready | r.evicting) >>> 0);
    }
    let pages = 0;
    let pageBytes = 0;
    for (const [run, bits] of held) {
      const len = lengths.get(run) ?? [];
      for (let m = bits, s = 0; m; m >>>= 1, s++) {
        if (!(m & 1)) continue;
        pages++;
        pageBytes += len[s] ?? 0;
      }
    }
    const one = (sql: string, ...args: unknown[]) => this.db.prepare(sql).get(...args) as Record<string, number>;
    let fileBytes = 0;
    try {
      if (this.path !== ':memory:') fileBytes = fs.statSync(this.path).size;
    } catch {
      fileBytes = 0;
    }
    return {
      namespaces: one('SELECT count(*) AS n FROM namespaces').n!,
      pages,
      pageBytes,
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
    this.hints.clear();
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
