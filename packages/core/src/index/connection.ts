/**
 * The index's SQLite connection: opening and tuning the file, migrations, prepared statements, transactions that
 * turn SQLite failures into TierSyncErrors, and WAL checkpoints kept out of commits.
 *
 * Threading: better-sqlite3 is synchronous; every call runs on the caller's thread. One Connection owns its file.
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { TierSyncError } from '@tiersync/native/errors';
import { migrate } from './schema.js';

export type Stmt = Database.Statement<unknown[], unknown>;

/** WAL checkpoints: a timer checkpoints (PASSIVE) between calls once the WAL holds this many bytes ... */
const CHECKPOINT_IDLE_BYTES = 4 << 20;
const CHECKPOINT_INTERVAL_MS = 250;
/** ... and a write transaction checkpoints inline only when the WAL grew past this (callers that never yield). */
const CHECKPOINT_INLINE_BYTES = 256 << 20;
/** Largest IN list of the fixed-arity statements (see `inList`). */
export const MAX_IN = 64;

/**
 * Throws `error` as a TierSyncError: ERR_IO, naming the full filesystem for SQLITE_FULL on a file (there is no
 * disk-full code; ERR_TIER_FULL is about tiers), ERR_NO_MEMORY for SQLITE_FULL of an in-memory index.
 * @param file the index's path, named when its filesystem is full
 */
export function wrapSqlite(error: unknown, what: string, file?: string): never {
  if (error instanceof TierSyncError) throw error;
  const code = (error as { code?: string }).code ?? '';
  const message = (error as Error).message ?? String(error);
  if (code === 'SQLITE_FULL') {
    if (file === ':memory:') throw new TierSyncError(`index: ${what} failed: the in-memory index is out of memory (${message})`, 'ERR_NO_MEMORY', { cause: error });
    const where = file === undefined ? 'the index file' : path.resolve(file);
    throw new TierSyncError(
      `index: ${what} failed: the filesystem holding ${where} is full (SQLITE_FULL: ${message}); free space there, or move index.path to a filesystem with room`,
      'ERR_IO',
      { cause: error },
    );
  }
  throw new TierSyncError(`index: ${what} failed: ${message}`, 'ERR_IO', { cause: error });
}

export interface ConnectionOptions {
  path: string;
  synchronous: 'normal' | 'full';
  sqliteCacheMiB: number;
}

export class Connection {
  readonly db: Database.Database;
  /** Schema version found in the file before migrating (0: new file). */
  readonly migratedFrom: number;
  private readonly walPath: string | undefined;
  /** The index's path (named in errors). */
  private readonly file: string;
  private readonly stmts = new Map<string, Stmt>();
  private checkpointTimer: NodeJS.Timeout | undefined;
  private writes = 0;
  private closed = false;
  private readonly full: boolean;
  private syncNormal: Stmt | undefined;
  private syncFull: Stmt | undefined;
  /** Called when a transaction rolled back (in-memory copies of rows may describe what was never committed). */
  onRollback: () => void = () => {};

  constructor(o: ConnectionOptions) {
    this.file = o.path;
    this.walPath = o.path === ':memory:' || o.path.startsWith('file:') ? undefined : `${o.path}-wal`;
    this.full = o.synchronous === 'full';
    try {
      this.db = new Database(o.path);
    } catch (e) {
      wrapSqlite(e, `opening ${o.path}`, o.path);
    }
    try {
      // One process owns an index file (its segment cache is coherent with its own writes only): hold the file's
      // lock from the first access to close. This also keeps the WAL index in this process's memory instead of a
      // shared-memory file, which saves the lock and shm system calls of every transaction (measured: a 2,048-page
      // store transaction -18 %, a one-row update -30 %, a segment read -30 %). The kernel drops the lock when the
      // process dies, so a restart after a crash is not refused.
      if (o.path !== ':memory:') this.db.pragma('locking_mode = EXCLUSIVE');
      // A process that is closing the file may hold its lock for a moment.
      this.db.pragma('busy_timeout = 2000');
      this.db.pragma('journal_mode = WAL');
      this.db.pragma(`synchronous = ${o.synchronous === 'full' ? 'FULL' : 'NORMAL'}`);
      this.db.pragma(`cache_size = ${-Math.round(o.sqliteCacheMiB * 1024)}`);
      this.db.pragma('temp_store = MEMORY');
      // SQLite's automatic checkpoint runs inside whichever commit crosses its threshold (copying and fsyncing
      // megabytes there). Checkpoints run between calls instead, from a timer (see checkpointSoon).
      this.db.pragma('wal_autocheckpoint = 0');
      this.migratedFrom = migrate(this.db);
    } catch (e) {
      this.db.close();
      if ((e as { code?: string }).code === 'SQLITE_BUSY') {
        throw new TierSyncError(`index: ${o.path} is in use by another process (an index file has one owner; close the other index or use another path)`, 'ERR_UNAVAILABLE', { cause: e });
      }
      wrapSqlite(e, `opening ${o.path}`, o.path);
    }
  }

  /** The statement for `sql`, prepared once. */
  stmt(sql: string): Stmt {
    let s = this.stmts.get(sql);
    if (!s) this.stmts.set(sql, (s = this.db.prepare(sql) as Stmt));
    return s;
  }

  /**
   * Runs `fn` for `values` in IN lists of at most MAX_IN: `sql(list)` gets a list of `?` of a power-of-two arity
   * (the last chunk padded by repeating its last value), so few statements are ever prepared.
   */
  inList<T>(values: readonly unknown[], sql: (list: string) => string, fn: (stmt: Stmt, params: unknown[]) => T): T[] {
    const out: T[] = [];
    for (let at = 0; at < values.length; at += MAX_IN) {
      const part = values.slice(at, at + MAX_IN);
      let arity = 1;
      while (arity < part.length) arity <<= 1;
      while (part.length < arity) part.push(part[part.length - 1]);
      out.push(fn(this.stmt(sql(new Array<string>(arity).fill('?').join(', '))), part));
    }
    return out;
  }

  /**
   * Runs `fn` in one transaction; a failure rolls everything back and is thrown as a TierSyncError.
   * @param durable false for a transaction whose loss in a crash recovery would undo anyway (pending copies,
   *   access times): with synchronous 'full' it commits without its own fsync. It is still made durable by the
   *   next durable commit (one fsync of the WAL covers every frame before it) and WAL order keeps it atomic.
   */
  tx<T>(what: string, fn: () => T, durable = true): T {
    let out: T;
    const relax = !durable && this.full;
    try {
      if (relax) (this.syncNormal ??= this.db.prepare('PRAGMA synchronous = NORMAL') as Stmt).run();
      out = this.db.transaction(fn)();
    } catch (e) {
      this.onRollback();
      wrapSqlite(e, what, this.file);
    } finally {
      if (relax) (this.syncFull ??= this.db.prepare('PRAGMA synchronous = FULL') as Stmt).run();
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
   * for one inline.
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

  /** Checkpoints the WAL and closes the file. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.checkpointTimer !== undefined) clearTimeout(this.checkpointTimer);
    this.checkpointTimer = undefined;
    try {
      this.db.pragma('wal_checkpoint(TRUNCATE)');
    } finally {
      this.db.close();
    }
  }
}
