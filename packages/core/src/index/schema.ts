/**
 * The block index's SQLite schema and its migrations. The schema version is SQLite's `user_version`; migration i
 * (1-based) takes a database from version i-1 to i inside one transaction, so a failed upgrade changes nothing.
 * Never edit a released migration: append a new one.
 *
 * Tables (schema v3; page keys are stored as BLOBs, the bytes of the lower-case hex PageKey (`unhex(key)`, 32 bytes
 * for keys made by keys/page-keys.ts); times are ms since the epoch):
 * - namespaces: one row per namespace (model fingerprint + layout fingerprint + tenant salt, hashed to `name`).
 * - pages: one row per page that has at least one copy (invariant kept by every write path), with an integer `id`
 *   (the rowid, allocated in increasing order by the index, so a store appends to the table) and a unique index on
 *   `key`; page keys of one chain share an 8-byte prefix (see keys/page-keys.ts), which keeps a context's index
 *   entries on a few B-tree pages.
 * - copies: one row per (page id, tier): where the bytes are and in which state. Only `ready` copies are visible to
 *   lookups; `pending` ones are being written, `evicting` ones are being freed. Keyed by page id, so the copies of
 *   one store are adjacent and are committed by one range UPDATE.
 * - pins: (page key, owner) -> expiry; a pinned page is not a victim on any tier until it expires or is unpinned.
 *   Keyed by key, not id: a page need not exist to be pinned.
 *
 * v1/v2 stored keys as TEXT in WITHOUT ROWID tables (about 320 bytes per page); migration 3 rebuilds them in place.
 *
 * Schema v4 replaces pages and copies with runs, because one SQLite row per page cannot meet the store
 * budget: a single-table insert of 2,048 rows alone measured 2.6-3.1 ms here (bench index; target 2 ms for the
 * whole index work), v3 needed five B-tree writes per page (pages, its key and ns indexes, a pending copy, then
 * its commit), 10-15 ms per 2,048-page store.
 * - runs: up to 32 consecutive pages of one chain that share their 8-byte key anchor (keys/page-keys.ts), in one
 *   row: `anchor` (indexed; a key is found by its first 8 bytes, then by scanning the run's keys), `keys` (the
 *   keys' bytes, concatenated, all of one length), `parent` (of the first page), `position` (of the first page),
 *   and per-page arrays as little-endian blobs: `lengths` and `crcs` (u32; bit s of `crc_known` says crcs[s] is
 *   set), `created` and `access` (f64 ms), `hits` (u32). A store leaves `created`, `access` and `hits` empty
 *   (every page created and last used at `created_ms`, no hits): a third less to write; the first change fills them. A page with no copy bit on any tier is a hole: absent, and
 *   reused when its key is stored again. Pages stored alone (keyed API) are runs of one.
 * - copies: one row per (run, tier) with five 32-bit masks, bit s for page s of the run: `pending`, `ready`,
 *   `evicting` (the states, at most one set per page), `durable`, `verified`; `locations` is a JSON array of
 *   per-page locations, or NULL when every location is the page key (as TierSync stores them).
 * A store of a 2,048-page chain writes 64 run rows and 64 copies rows, and its commit rewrites those 64 copies rows.
 *
 * Schema v5 replaces runs with segments, because v4 still missed its budgets: a store of 2,048 pages took
 * 4.7 ms (target 1 ms; 64 runs rows with their anchor and ns index entries, 64 copies rows, then 64 copies
 * updates at commit) and an uncached 2,048-page lookup 3.3 ms p50 / 11.4 ms p99 (64 rows of per-page arrays decoded
 * in JavaScript, copies masks and JSON locations read per run). v5 keeps what changes apart from what does not:
 * - segments: the pages of one store that continue each other (one chain, up to SEGMENT_PAGES), in one row whose
 *   keys never change after the insert: `keys` (the keys' bytes, all `width` long, last so that reading the other
 *   columns skips its overflow pages), `parent` (of the first page), `position` (of the first page), `ns`.
 * - anchors: (8-byte anchor, segment, first slot) for each range of a segment's keys that share an anchor, WITHOUT
 *   ROWID: a key is found by its anchor, then by comparing keys from that slot. 32 small rows per 2,048 pages.
 * - pagedata: the per-page values that change (u32 `lengths` and `crcs`, `crc_known` one byte per page or empty
 *   when all are known, f64 `created` and `access` and u32 `hits`, empty until the first touch), one row per
 *   segment, so a commit with checksums or a touch never rewrites the keys.
 * - copies: one row per (segment, tier), rowid = segment * 256 + tier code (tier_names), `states` one byte per page
 *   (copy-state.ts: the state in two bits, durable and verified flags). A commit rewrites this one small row.
 * - locations: where copies are when not at their key, JSON array per (segment, tier), same rowid as the copies row;
 *   absent when every location is the key (as TierSync stores them), so commits never rewrite it.
 * - pins: unchanged since v3; only pins that must survive a restart are rows (load pins live in memory).
 * A store of a 2,048-page chain writes 1 segments, 1 pagedata, 1 copies row and 32 anchors; its commit rewrites the
 * copies row. Migration 5 turns each v4 run into one segment (runs were already chain-ordered).
 *
 * Schema v6 (current) drops the anchors table and the segments(ns) index: anchors are random 8-byte values, so the
 * 32 anchor rows of a store landed on ~32 different B-tree leaves, and writing those leaves was most of a store
 * (measured: 32 anchor inserts plus their share of the commit ~1.4 ms of a 1.8 ms store transaction at 200k pages;
 * without them 0.3 ms). Now every row a store writes is appended (ids only grow):
 * - segments gains `anchors` (before `keys`, so it is read without the keys' overflow pages): per range of equal
 *   anchors, the 8-byte anchor and the u32le slot where the range starts (12 bytes each, ANCHOR_ENTRY). The index
 *   keeps a directory of every segment's anchors in memory (anchor-directory.ts), built at open from this column.
 * - deleteNamespace finds a namespace's segments by scanning the segments rows' small leading columns.
 * - pagedata `lengths` holds one u32le when every page of the segment has the same length (segments.ts lengthsBlob),
 *   else one per page as before (v5 rows are read unchanged).
 *
 * Schema v7 adds roots segments (`position` = ROOTS_POSITION): pages that are each a root (no parent, position 0) and
 * are recorded in one batch share a segment, as a chain's pages do, instead of one segment each. Values of the RESP
 * door and pages put by peers are such pages: recording one cost four row inserts, and replacing it four deletes.
 */
import type Database from 'better-sqlite3';
import { TierSyncError } from '@tiersync/native/errors';


export interface Migration {
  version: number;
  description: string;
  /** The upgrade as SQL, or as a function over the database (data reshaped in JavaScript); run in one transaction. */
  sql: string | ((db: Database.Database) => void);
}

/** Pages per run (bits of a copy mask): 32, so masks are exact JavaScript bitwise values. */
export const RUN_PAGES = 32;

/**
 * Schema v4 (see the file comment): runs of pages, copies as bit masks per (run, tier). Created by migration 4.
 */
const V4_TABLES = `
  CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    anchor BLOB NOT NULL,
    ns INTEGER NOT NULL,
    count INTEGER NOT NULL,
    keys BLOB NOT NULL,
    parent BLOB,
    position INTEGER NOT NULL,
    lengths BLOB NOT NULL,
    crcs BLOB NOT NULL,
    crc_known INTEGER NOT NULL DEFAULT 0,
    created BLOB NOT NULL,
    access BLOB NOT NULL,
    hits BLOB NOT NULL,
    created_ms INTEGER NOT NULL DEFAULT 0
  );
  CREATE INDEX runs_anchor ON runs(anchor);
  CREATE INDEX runs_ns ON runs(ns);
  CREATE TABLE copies (
    run INTEGER NOT NULL,
    tier TEXT NOT NULL,
    pending INTEGER NOT NULL DEFAULT 0,
    ready INTEGER NOT NULL DEFAULT 0,
    evicting INTEGER NOT NULL DEFAULT 0,
    durable INTEGER NOT NULL DEFAULT 0,
    verified INTEGER NOT NULL DEFAULT 0,
    locations TEXT,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (run, tier)
  ) WITHOUT ROWID;
`;

/** Fixed-width little-endian arrays as stored in run blobs. */
export function u32Blob(values: ArrayLike<number>): Buffer {
  const b = Buffer.allocUnsafe(values.length * 4);
  for (let i = 0; i < values.length; i++) b.writeUInt32LE(values[i]! >>> 0, i * 4);
  return b;
}

export function f64Blob(values: ArrayLike<number>): Buffer {
  const b = Buffer.allocUnsafe(values.length * 8);
  for (let i = 0; i < values.length; i++) b.writeDoubleLE(values[i]!, i * 8);
  return b;
}

/** Migration 4: pages and copies of v3 regrouped into runs (chain order, same anchor, up to RUN_PAGES pages). */
function toRuns(db: Database.Database): void {
  type Page = { id: number; key: Buffer; ns: number; parent: Buffer | null; position: number; length: number; crc32c: number | null; created_ms: number; access_ms: number; hits: number };
  const pages = db.prepare('SELECT id, key, ns, parent, position, length, crc32c, created_ms, access_ms, hits FROM pages').all() as Page[];
  const copies = db.prepare('SELECT page, tier, location, state, durable, verified, updated_ms FROM copies').all() as Array<{
    page: number;
    tier: string;
    location: string;
    state: number;
    durable: number;
    verified: number;
    updated_ms: number;
  }>;
  // Chain order within an anchor: pages of one chain segment become adjacent, then runs follow parent links.
  pages.sort((a, b) => a.ns - b.ns || Buffer.compare(a.key.subarray(0, 8), b.key.subarray(0, 8)) || a.position - b.position || Buffer.compare(a.key, b.key));
  const runOf = new Map<number, { run: number; slot: number }>();
  db.exec('ALTER TABLE copies RENAME TO copies_v3; ALTER TABLE pages RENAME TO pages_v3;');
  db.exec(V4_TABLES);
  const insertRun = db.prepare(
    'INSERT INTO runs(id, anchor, ns, count, keys, parent, position, lengths, crcs, crc_known, created, access, hits, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
  );
  let id = 0;
  for (let i = 0; i < pages.length; ) {
    const first = pages[i]!;
    const run: Page[] = [first];
    for (let j = i + 1; j < pages.length && run.length < RUN_PAGES; j++) {
      const p = pages[j]!;
      const prev = run[run.length - 1]!;
      const chained = p.ns === first.ns && p.key.length === first.key.length && p.key.subarray(0, 8).equals(first.key.subarray(0, 8)) && p.position === prev.position + 1 && p.parent !== null && p.parent.equals(prev.key);
      if (!chained) break;
      run.push(p);
    }
    id++;
    let known = 0;
    run.forEach((p, s) => {
      runOf.set(p.id, { run: id, slot: s });
      if (p.crc32c !== null) known |= 1 << s;
    });
    insertRun.run(
      id,
      first.key.subarray(0, 8),
      first.ns,
      run.length,
      Buffer.concat(run.map((p) => p.key)),
      first.parent,
      first.position,
      u32Blob(run.map((p) => p.length)),
      u32Blob(run.map((p) => p.crc32c ?? 0)),
      known >>> 0,
      f64Blob(run.map((p) => p.created_ms)),
      f64Blob(run.map((p) => p.access_ms)),
      u32Blob(run.map((p) => p.hits)),
      first.created_ms,
    );
    i += run.length;
  }
  const rows = new Map<string, { run: number; tier: string; masks: number[]; locations: Array<string | null>; updated: number; count: number }>();
  const keyOf = new Map(pages.map((p) => [p.id, p.key.toString('hex')]));
  const counts = new Map<number, number>();
  for (const p of pages) {
    const r = runOf.get(p.id)!;
    counts.set(r.run, Math.max(counts.get(r.run) ?? 0, r.slot + 1));
  }
  for (const c of copies) {
    const at = runOf.get(c.page);
    if (!at) continue;
    const k = `${at.run}\u0000${c.tier}`;
    let row = rows.get(k);
    if (!row) rows.set(k, (row = { run: at.run, tier: c.tier, masks: [0, 0, 0, 0, 0], locations: new Array(counts.get(at.run)!).fill(null), updated: 0, count: counts.get(at.run)! }));
    const bit = 1 << at.slot;
    row.masks[c.state === 0 ? 0 : c.state === 1 ? 1 : 2]! |= bit;
    if (c.durable) row.masks[3]! |= bit;
    if (c.verified) row.masks[4]! |= bit;
    if (c.location !== keyOf.get(c.page)) row.locations[at.slot] = c.location;
    row.updated = Math.max(row.updated, c.updated_ms);
  }
  const insertCopy = db.prepare('INSERT INTO copies(run, tier, pending, ready, evicting, durable, verified, locations, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)');
  for (const r of rows.values()) {
    const locations = r.locations.some((l) => l !== null) ? JSON.stringify(r.locations) : null;
    insertCopy.run(r.run, r.tier, ...r.masks.map((m) => m >>> 0), locations, r.updated);
  }
  db.exec('DROP TABLE copies_v3; DROP TABLE pages_v3;');
}

/** Most pages per segment (bytes per segment row: 32 per page for keys, 8 in pagedata, 1 per tier in copies). */
export const SEGMENT_PAGES = 4096;
/**
 * `position` of a roots segment (schema v7): its pages do not continue each other; each is a root (no parent,
 * position 0), e.g. values of the RESP door or pages a peer put, recorded together. Such pages were one-page
 * segments before v7: four rows written per page and four deleted when it went.
 */
export const ROOTS_POSITION = -1;
/**
 * Most pages of one roots segment. A roots segment's rows go only when its last page goes, so a page that stays
 * keeps the holes of up to this many gone pages in the index; chains are dropped together and need no such bound.
 */
export const ROOTS_SEGMENT_PAGES = 64;
/** Tier codes per segment in copies/locations rowids (rowid = segment * TIER_CODES + code). */
export const TIER_CODES = 256;

/** Schema v5 (see the file comment). Created by migration 5. */
const V5_TABLES = `
  CREATE TABLE tier_names (code INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
  CREATE TABLE segments (
    id INTEGER PRIMARY KEY,
    ns INTEGER NOT NULL,
    count INTEGER NOT NULL,
    width INTEGER NOT NULL,
    position INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    parent BLOB,
    keys BLOB NOT NULL
  );
  CREATE INDEX segments_ns ON segments(ns);
  CREATE TABLE anchors (
    anchor BLOB NOT NULL,
    seg INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    PRIMARY KEY (anchor, seg, slot)
  ) WITHOUT ROWID;
  CREATE TABLE pagedata (
    seg INTEGER PRIMARY KEY,
    lengths BLOB NOT NULL,
    crcs BLOB NOT NULL,
    crc_known BLOB NOT NULL,
    created BLOB NOT NULL,
    access BLOB NOT NULL,
    hits BLOB NOT NULL
  );
  CREATE TABLE copies (id INTEGER PRIMARY KEY, states BLOB NOT NULL, updated_ms INTEGER NOT NULL);
  CREATE TABLE locations (id INTEGER PRIMARY KEY, list TEXT NOT NULL);
`;

/** The anchor rows of a segment's keys: (slot where a range of equal anchors starts). */
export function anchorSlots(keys: Uint8Array, width: number, count: number): number[] {
  const out: number[] = [];
  for (let s = 0; s < count; s++) {
    if (s > 0) {
      let same = true;
      for (let j = 0; j < 8; j++) {
        if (keys[s * width + j] !== keys[(s - 1) * width + j]) {
          same = false;
          break;
        }
      }
      if (same) continue;
    }
    out.push(s);
  }
  return out;
}

/** Migration 5: each v4 run becomes a segment; copies masks become one state byte per page. */
function toSegments(db: Database.Database): void {
  db.exec('ALTER TABLE copies RENAME TO copies_v4; ALTER TABLE runs RENAME TO runs_v4; DROP INDEX runs_anchor; DROP INDEX runs_ns;');
  db.exec(V5_TABLES);
  const codes = new Map<string, number>();
  const addTier = db.prepare('INSERT INTO tier_names(code, name) VALUES (?, ?)');
  const insertSeg = db.prepare('INSERT INTO segments(id, ns, count, width, position, created_ms, parent, keys) VALUES (?, ?, ?, ?, ?, ?, ?, ?)');
  const insertData = db.prepare('INSERT INTO pagedata(seg, lengths, crcs, crc_known, created, access, hits) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const insertAnchor = db.prepare('INSERT INTO anchors(anchor, seg, slot) VALUES (?, ?, ?)');
  const insertCopy = db.prepare('INSERT INTO copies(id, states, updated_ms) VALUES (?, ?, ?)');
  const insertLoc = db.prepare('INSERT INTO locations(id, list) VALUES (?, ?)');
  const countOf = db.prepare('SELECT count FROM segments WHERE id = ?');
  for (const r of db.prepare('SELECT * FROM runs_v4').all() as Array<Record<string, unknown>>) {
    const count = r.count as number;
    const keys = r.keys as Buffer;
    const width = keys.length / count;
    const id = r.id as number;
    const known = r.crc_known as number;
    const crcKnown = Buffer.alloc(count);
    for (let s = 0; s < count; s++) crcKnown[s] = (known >>> s) & 1;
    insertSeg.run(id, r.ns, count, width, r.position, r.created_ms, r.parent, keys);
    insertData.run(id, r.lengths, r.crcs, crcKnown.every((b) => b === 1) ? Buffer.alloc(0) : crcKnown, r.created, r.access, r.hits);
    for (const s of anchorSlots(keys, width, count)) insertAnchor.run(keys.subarray(s * width, s * width + 8), id, s);
  }
  for (const c of db.prepare('SELECT * FROM copies_v4').all() as Array<Record<string, number | string | null>>) {
    const tier = c.tier as string;
    let code = codes.get(tier);
    if (code === undefined) {
      code = codes.size + 1;
      codes.set(tier, code);
      addTier.run(code, tier);
    }
    const count = (countOf.get(c.run) as { count: number } | undefined)?.count;
    if (count === undefined) continue;
    const states = Buffer.alloc(count);
    for (let s = 0; s < count; s++) {
      const bit = (1 << s) >>> 0;
      const state = (c.pending as number) & bit ? 1 : (c.ready as number) & bit ? 2 : (c.evicting as number) & bit ? 3 : 0;
      if (state === 0) continue;
      states[s] = state | ((c.durable as number) & bit ? 4 : 0) | ((c.verified as number) & bit ? 8 : 0);
    }
    const rowid = (c.run as number) * TIER_CODES + code;
    insertCopy.run(rowid, states, c.updated_ms);
    if (c.locations !== null) insertLoc.run(rowid, c.locations);
  }
  db.exec('DROP TABLE copies_v4; DROP TABLE runs_v4;');
}

/** Bytes per entry of a segment's `anchors` column: the 8-byte anchor, then the u32le slot its range starts at. */
export const ANCHOR_ENTRY = 12;

/** The `anchors` column of a segment: one ANCHOR_ENTRY per range of keys that share their first 8 bytes. */
export function anchorsBlob(keys: Uint8Array, width: number, count: number): Buffer {
  const slots = anchorSlots(keys, width, count);
  const out = Buffer.allocUnsafe(slots.length * ANCHOR_ENTRY);
  slots.forEach((s, i) => {
    out.set(keys.subarray(s * width, s * width + 8), i * ANCHOR_ENTRY);
    out.writeUInt32LE(s, i * ANCHOR_ENTRY + 8);
  });
  return out;
}

/** Migration 6: segments get their anchors as a column (see the file comment); the anchors table and ns index go. */
function toAnchorColumn(db: Database.Database): void {
  db.exec(`
    DROP INDEX segments_ns;
    DROP TABLE anchors;
    ALTER TABLE segments RENAME TO segments_v5;
    CREATE TABLE segments (
      id INTEGER PRIMARY KEY,
      ns INTEGER NOT NULL,
      count INTEGER NOT NULL,
      width INTEGER NOT NULL,
      position INTEGER NOT NULL,
      created_ms INTEGER NOT NULL,
      parent BLOB,
      anchors BLOB NOT NULL,
      keys BLOB NOT NULL
    );
  `);
  const insert = db.prepare('INSERT INTO segments(id, ns, count, width, position, created_ms, parent, anchors, keys) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)');
  for (const r of db.prepare('SELECT id, ns, count, width, position, created_ms, parent, keys FROM segments_v5 ORDER BY id').all() as Array<Record<string, unknown>>) {
    const keys = r.keys as Buffer;
    insert.run(r.id, r.ns, r.count, r.width, r.position, r.created_ms, r.parent, anchorsBlob(keys, r.width as number, r.count as number), keys);
  }
  db.exec('DROP TABLE segments_v5;');
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'namespaces, pages, copies, pins',
    sql: `
      CREATE TABLE namespaces (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        model TEXT NOT NULL,
        layout TEXT NOT NULL,
        tenant TEXT NOT NULL DEFAULT '',
        tokens_per_page INTEGER NOT NULL,
        created_ms INTEGER NOT NULL
      );
      CREATE TABLE pages (
        key TEXT PRIMARY KEY,
        ns INTEGER NOT NULL,
        parent TEXT,
        position INTEGER NOT NULL,
        length INTEGER NOT NULL,
        crc32c INTEGER,
        created_ms INTEGER NOT NULL,
        access_ms INTEGER NOT NULL,
        hits INTEGER NOT NULL DEFAULT 0
      ) WITHOUT ROWID;
      CREATE INDEX pages_ns ON pages(ns);
      CREATE TABLE copies (
        key TEXT NOT NULL,
        tier TEXT NOT NULL,
        location TEXT NOT NULL,
        state INTEGER NOT NULL,
        durable INTEGER NOT NULL DEFAULT 0,
        updated_ms INTEGER NOT NULL,
        PRIMARY KEY (key, tier)
      ) WITHOUT ROWID;
      CREATE TABLE pins (
        key TEXT NOT NULL,
        owner TEXT NOT NULL,
        expires_ms INTEGER NOT NULL,
        PRIMARY KEY (key, owner)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 2,
    description: 'checksum-verified flag on copies; pin expiry index',
    sql: `
      ALTER TABLE copies ADD COLUMN verified INTEGER NOT NULL DEFAULT 0;
      CREATE INDEX pins_expiry ON pins(expires_ms);
    `,
  },
  {
    version: 3,
    description: 'integer page ids with blob keys; copies keyed by page id; blob pin keys',
    // Rebuilds the three tables in place (one transaction). Pages are renumbered in (ns, key) order, so the pages of
    // one chain segment stay together; copies and pins follow their page by key.
    sql: `
      CREATE TABLE pages_v3 (
        id INTEGER PRIMARY KEY,
        key BLOB NOT NULL,
        ns INTEGER NOT NULL,
        parent BLOB,
        position INTEGER NOT NULL,
        length INTEGER NOT NULL,
        crc32c INTEGER,
        created_ms INTEGER NOT NULL,
        access_ms INTEGER NOT NULL,
        hits INTEGER NOT NULL DEFAULT 0
      );
      INSERT INTO pages_v3(key, ns, parent, position, length, crc32c, created_ms, access_ms, hits)
        SELECT unhex(key), ns, unhex(parent), position, length, crc32c, created_ms, access_ms, hits FROM pages ORDER BY ns, key;
      CREATE UNIQUE INDEX pages_key ON pages_v3(key);
      CREATE TABLE copies_v3 (
        page INTEGER NOT NULL,
        tier TEXT NOT NULL,
        location TEXT NOT NULL,
        state INTEGER NOT NULL,
        durable INTEGER NOT NULL DEFAULT 0,
        verified INTEGER NOT NULL DEFAULT 0,
        updated_ms INTEGER NOT NULL,
        PRIMARY KEY (page, tier)
      ) WITHOUT ROWID;
      INSERT INTO copies_v3(page, tier, location, state, durable, verified, updated_ms)
        SELECT p.id, c.tier, c.location, c.state, c.durable, c.verified, c.updated_ms FROM copies c JOIN pages_v3 p ON p.key = unhex(c.key);
      CREATE TABLE pins_v3 (
        key BLOB NOT NULL,
        owner TEXT NOT NULL,
        expires_ms INTEGER NOT NULL,
        PRIMARY KEY (key, owner)
      ) WITHOUT ROWID;
      INSERT INTO pins_v3(key, owner, expires_ms) SELECT unhex(key), owner, expires_ms FROM pins;
      DROP TABLE pins;
      DROP TABLE copies;
      DROP TABLE pages;
      ALTER TABLE pages_v3 RENAME TO pages;
      ALTER TABLE copies_v3 RENAME TO copies;
      ALTER TABLE pins_v3 RENAME TO pins;
      CREATE INDEX pages_ns ON pages(ns);
      CREATE INDEX pins_expiry ON pins(expires_ms);
    `,
  },
  {
    version: 4,
    description: 'runs of up to 32 pages of one chain, copies as bit masks per (run, tier)',
    sql: toRuns,
  },
  {
    version: 5,
    description: 'segments (one row per stored chain, immutable keys), anchors, per-page data, copies as state bytes',
    sql: toSegments,
  },
  {
    version: 6,
    description: 'segments carry their anchors (appended with the segment); anchors table and segments(ns) index dropped',
    sql: toAnchorColumn,
  },
  {
    version: 7,
    description: 'roots segments: position -1 marks a segment of unrelated root pages (no rows change)',
    // Nothing to rewrite: v6 never wrote a negative position. The version keeps earlier releases, which would read
    // -1 as a chain's position, from opening a database that has roots segments.
    sql: '',
  },
];

export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/**
 * Brings `db` to schema version `target` (default: the latest). Returns the version found.
 * @throws TierSyncError ERR_UNSUPPORTED when the database is newer than this release knows.
 * @internal exported for the migration tests.
 */
export function migrate(db: Database.Database, target: number = SCHEMA_VERSION): number {
  const found = db.pragma('user_version', { simple: true }) as number;
  if (found > SCHEMA_VERSION) {
    throw new TierSyncError(
      `index database has schema version ${found}, newer than this release supports (${SCHEMA_VERSION}); upgrade tiersync or use another path`,
      'ERR_UNSUPPORTED',
    );
  }
  for (const m of MIGRATIONS) {
    if (m.version <= found || m.version > target) continue;
    db.transaction(() => {
      if (typeof m.sql === 'string') db.exec(m.sql);
      else m.sql(db);
      db.pragma(`user_version = ${m.version}`);
    })();
  }
  return found;
}
