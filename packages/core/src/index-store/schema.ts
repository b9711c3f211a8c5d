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
 */
import type Database from 'better-sqlite3';
import { TierSyncError } from '@tiersync/native/errors';

/** Copy states as stored in `copies.state`. */
export const COPY_STATE = { pending: 0, ready: 1, evicting: 2 } as const;

export interface Migration {
  version: number;
  description: string;
  sql: string;
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
      db.exec(m.sql);
      db.pragma(`user_version = ${m.version}`);
    })();
  }
  return found;
}
