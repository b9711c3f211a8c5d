/**
 * The RESP door's staging memory: one host arena that values pass through on their way between sockets and the
 * tier hierarchy (the parser writes a SET's payload here; a GET's pages are loaded here and written to the socket
 * from here). It is the door's global bound on value bytes in flight: when it is full, clients wait (their sockets
 * stop being read) up to a deadline, rather than memory growing.
 *
 * First-fit allocation over a free list kept sorted by offset, with neighbours merged on free; sizes rounded up
 * to 64 bytes. The number of live slices is small (bounded by clients x pipeline), so linear scans are cheap.
 */
import { HostArena, TierSyncError } from '@tiersync/native';

const GRAIN = 64;

export interface StagingSlice {
  readonly offset: number;
  /** Bytes asked for. */
  readonly length: number;
  /** Bytes reserved (length rounded up). */
  readonly reserved: number;
  /** The slice's memory, lent by the arena (zero copy). */
  readonly bytes: Uint8Array;
}

interface Waiter {
  need: number;
  resolve: () => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

export class StagingArea {
  readonly arena: HostArena;
  readonly capacity: number;
  readonly #memory: Uint8Array;
  /** Free ranges [offset, length], sorted by offset, never adjacent. */
  #free: Array<[number, number]>;
  #used = 0;
  #waiters: Waiter[] = [];
  #closed = false;

  /** @param capacity bytes, at most 1 GiB (one arena view covers it all) */
  constructor(capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < GRAIN || capacity > 2 ** 30) throw new TierSyncError(`staging capacity must be an integer in [64, 2^30] bytes, got ${capacity}`, 'ERR_INVALID_ARGUMENT');
    this.capacity = capacity - (capacity % GRAIN);
    this.arena = HostArena.create({ capacity: this.capacity });
    this.#memory = this.arena.view(0, this.capacity);
    this.#free = [[0, this.capacity]];
  }

  get usedBytes(): number {
    return this.#used;
  }

  /** A slice of `length` bytes, or undefined when no free range is large enough now. */
  tryAllocate(length: number): StagingSlice | undefined {
    if (this.#closed) throw new TierSyncError('staging area is closed', 'ERR_CLOSED');
    const reserved = Math.max(GRAIN, Math.ceil(length / GRAIN) * GRAIN);
    for (let i = 0; i < this.#free.length; i++) {
      const range = this.#free[i]!;
      if (range[1] < reserved) continue;
      const offset = range[0];
      if (range[1] === reserved) this.#free.splice(i, 1);
      else {
        range[0] += reserved;
        range[1] -= reserved;
      }
      this.#used += reserved;
      return { offset, length, reserved, bytes: this.#memory.subarray(offset, offset + length) };
    }
    return undefined;
  }

  /** Where `bytes` starts in the arena, or -1 when it is not staging memory. */
  offsetOf(bytes: Uint8Array): number {
    if (bytes.buffer !== this.#memory.buffer) return -1;
    const at = bytes.byteOffset - this.#memory.byteOffset;
    return at >= 0 && at + bytes.length <= this.capacity ? at : -1;
  }

  /** Gives a slice back (once) and wakes waiters that may now fit. */
  release(slice: StagingSlice): void {
    const start = slice.offset;
    const end = start + slice.reserved;
    let i = 0;
    while (i < this.#free.length && this.#free[i]![0] < start) i++;
    const prev = this.#free[i - 1];
    const next = this.#free[i];
    if ((prev && prev[0] + prev[1] > start) || (next && next[0] < end)) throw new TierSyncError(`staging slice [${start}, ${end}) released twice`, 'ERR_INVALID_ARGUMENT');
    if (prev && prev[0] + prev[1] === start) {
      prev[1] += slice.reserved;
      if (next && next[0] === end) {
        prev[1] += next[1];
        this.#free.splice(i, 1);
      }
    } else if (next && next[0] === end) {
      next[0] = start;
      next[1] += slice.reserved;
    } else this.#free.splice(i, 0, [start, slice.reserved]);
    this.#used -= slice.reserved;
    this.#wake();
  }

  #largestFree(): number {
    let m = 0;
    for (const r of this.#free) if (r[1] > m) m = r[1];
    return m;
  }

  #wake(): void {
    if (!this.#waiters.length) return;
    const largest = this.#largestFree();
    const ready = this.#waiters.filter((w) => w.need <= largest);
    if (!ready.length) return;
    this.#waiters = this.#waiters.filter((w) => w.need > largest);
    for (const w of ready) {
      clearTimeout(w.timer);
      w.resolve();
    }
  }

  /**
   * Resolves when a range of `length` bytes may be free (then call tryAllocate again: another client may have
   * taken it), or rejects with ERR_TIMEOUT after `timeoutMs`.
   * @throws TierSyncError ERR_OUT_OF_RANGE when `length` can never fit
   */
  waitForRoom(length: number, timeoutMs: number): Promise<void> {
    if (this.#closed) return Promise.reject(new TierSyncError('staging area is closed', 'ERR_CLOSED'));
    if (length > this.capacity) return Promise.reject(new TierSyncError(`${length} bytes can never fit in the ${this.capacity}-byte staging area`, 'ERR_OUT_OF_RANGE'));
    if (this.#largestFree() >= length) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = {
        need: length,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#waiters = this.#waiters.filter((x) => x !== w);
          reject(new TierSyncError(`no room for ${length} bytes in the staging area within ${timeoutMs} ms`, 'ERR_TIMEOUT'));
        }, timeoutMs),
      };
      this.#waiters.push(w);
    });
  }

  /** Allocates, waiting up to `timeoutMs` for room. */
  async allocate(length: number, timeoutMs: number): Promise<StagingSlice> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const s = this.tryAllocate(length);
      if (s) return s;
      await this.waitForRoom(length, Math.max(1, until - Date.now()));
      if (Date.now() > until) throw new TierSyncError(`no room for ${length} bytes in the staging area within ${timeoutMs} ms`, 'ERR_TIMEOUT');
    }
  }

  /** Rejects waiters and releases the arena (views lent out stay valid until collected). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const w of this.#waiters) {
      clearTimeout(w.timer);
      w.reject(new TierSyncError('staging area is closed', 'ERR_CLOSED'));
    }
    this.#waiters = [];
    this.arena.close();
  }
}
