/**
 * An exclusive kernel lock on a file (flock(2) through the addon), held by an open descriptor for as long as the
 * FileLock lives. The kernel drops it when its holder closes the descriptor or dies, SIGKILL included: a restart
 * right after a crash takes the lock at once, with no pid-file guessing. Used by the fs tier for its folder.
 */
import { closeSync, constants, fstatSync, ftruncateSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { native } from './addon.js';
import { TierSyncError, describeValue } from './errors.js';

/** Attempts at taking a lock whose file is being removed and recreated by its previous holder meanwhile. */
const RACE_ATTEMPTS = 8;

const ioError = (message: string, cause: unknown): TierSyncError =>
  new TierSyncError(`${message}: ${cause instanceof Error ? cause.message : String(cause)}`, 'ERR_IO', { cause });

export class FileLock {
  readonly path: string;
  #fd: number | undefined;

  private constructor(path: string, fd: number) {
    this.path = path;
    this.#fd = fd;
  }

  /**
   * Takes the exclusive lock on `path` (created when absent) without waiting. With `note`, the file's contents are
   * replaced by it (for people and error messages: who holds it; the lock itself is the kernel's); without, the file
   * is left as it is (a data file can be its own lock). Undefined when another open file holds the lock, in this
   * process or another.
   * @throws TierSyncError ERR_INVALID_ARGUMENT (path), ERR_IO (the file cannot be created, opened or locked)
   */
  static tryAcquire(path: string, note?: string): FileLock | undefined {
    if (typeof path !== 'string' || path.length === 0) throw new TierSyncError(`path must be a non-empty string, got ${describeValue(path)}`, 'ERR_INVALID_ARGUMENT');
    for (let attempt = 0; attempt < RACE_ATTEMPTS; attempt++) {
      let fd: number;
      try {
        fd = openSync(path, constants.O_RDWR | constants.O_CREAT, 0o644);
      } catch (e) {
        throw ioError(`cannot open lock file ${path}`, e);
      }
      let locked = false;
      try {
        locked = native.tryLockFile(fd);
        if (!locked) {
          closeSync(fd);
          return undefined;
        }
        // The previous holder may have removed the file between our open and our lock (release unlinks it): a lock
        // on an unlinked file guards nothing, so take the one on the file the path names now.
        const mine = fstatSync(fd);
        let now: ReturnType<typeof statSync> | undefined;
        try {
          now = statSync(path);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
        }
        if (!now || now.ino !== mine.ino || now.dev !== mine.dev) {
          closeSync(fd);
          continue;
        }
        if (note !== undefined) {
          ftruncateSync(fd, 0);
          writeSync(fd, note, 0);
        }
        return new FileLock(path, fd);
      } catch (e) {
        if (locked) closeSync(fd);
        throw e instanceof TierSyncError ? e : ioError(`cannot lock ${path}`, e);
      }
    }
    throw new TierSyncError(`cannot lock ${path}: its file was replaced ${RACE_ATTEMPTS} times while locking it`, 'ERR_UNAVAILABLE');
  }

  /** What the holder wrote into the lock file (empty when unreadable): for error messages only, never trusted. */
  static noteOf(path: string): string {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return '';
    }
  }

  get held(): boolean {
    return this.#fd !== undefined;
  }

  /**
   * Gives the lock back. With `unlink` the file is removed first, while still locked, so nobody can take a lock
   * on a name that is about to vanish without noticing (tryAcquire checks the inode). Idempotent.
   */
  release(options: { unlink?: boolean } = {}): void {
    const fd = this.#fd;
    if (fd === undefined) return;
    this.#fd = undefined;
    if (options.unlink) {
      try {
        unlinkSync(this.path);
      } catch {
        // Already gone: nothing to remove.
      }
    }
    closeSync(fd);
  }
}
