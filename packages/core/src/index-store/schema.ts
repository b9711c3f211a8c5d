/**
 * The block index's SQLite schema and its migrations. The schema version is SQLite's `user_version`; migration i
 * (1-based) takes a database from version i-1 to i inside one transaction, so a failed upgrade changes nothing.
 * Never edit a released migration: append a new one.
 *
 * Tables (keys are lower-case hex PageKeys stored as TEXT; times are ms since the epoch):
 * - namespaces: one row per namespace (model fingerprint + layout fingerprint + tenant salt, hashed to `name`).
 * - pages: one row per page that has at least one copy (invariant kept by every write path). WITHOUT ROWID, so
 *   rows are clustered by key; page keys of one chain share an 8-byte prefix (see keys/page-keys.ts), which keeps a
 *   context's rows on a few B-tree pages.
 * - copies: one row per (page, tier): where the bytes are and in which state. Only `ready` copies are visible to
 *   lookups; `pending` ones are being written, `evicting` ones are being freed.
 * - pins: (page, owner) -> expiry; a pinned page is not a victim on any tier until it expires or is unpinned.
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
