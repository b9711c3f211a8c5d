/**
 * Host memory that object uploads and device-bound downloads are staged in. An upload body must be one
 * contiguous buffer that JavaScript can hand to the HTTP client, while a write batch's pages sit anywhere in any
 * arena (device arenas are not viewable at all), so the native engine first gathers them here (computing their
 * CRC32C in the same pass) and the SDK then sends a zero-copy view of this memory.
 *
 * Arenas of the standard size are kept for reuse (a fresh mmap costs a page fault per 4 KiB on first touch);
 * at most `limit` are out at once, which bounds staging memory to `limit` x (object size + footer).
 */
import { HostArena } from '@tiersync/native';

export interface Staged {
  arena: HostArena;
  /** Gives the arena back to the pool (or frees a one-off). Call exactly once. */
  release(): void;
}

export class StagingPool {
  readonly #idle: HostArena[] = [];
  readonly #waiters: Array<() => void> = [];
  #out = 0;
  #closed = false;

  constructor(
    /** Capacity of pooled arenas in bytes. */
    readonly standardBytes: number,
    /** Most arenas out at once. */
    readonly limit: number,
  ) {}

  /** An arena of at least `bytes`; waits while `limit` are out. Larger requests get a one-off arena. */
  async acquire(bytes: number): Promise<Staged> {
    while (this.#out >= this.limit) await new Promise<void>((resolve) => this.#waiters.push(resolve));
    this.#out++;
    try {
      const standard = bytes <= this.standardBytes;
      const arena = (standard ? this.#idle.pop() : undefined) ?? HostArena.create({ capacity: standard ? this.standardBytes : bytes });
      let released = false;
      return {
        arena,
        release: () => {
          if (released) return;
          released = true;
          if (standard && !this.#closed && this.#idle.length < this.limit) this.#idle.push(arena);
          else arena.close();
          this.#done();
        },
      };
    } catch (e) {
      this.#done();
      throw e;
    }
  }

  #done(): void {
    this.#out--;
    this.#waiters.shift()?.();
  }

  /** Frees the idle arenas; arenas still out are freed when released. */
  close(): void {
    this.#closed = true;
    for (const a of this.#idle.splice(0)) a.close();
  }
}
