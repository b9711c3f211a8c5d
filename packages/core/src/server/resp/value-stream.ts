/**
 * Values streamed through the door's staging arena in windows, so that a value of any length up to
 * resp.maxBulkBytes (512 MiB by default, as Redis's proto-max-bulk-len) moves through bounded memory:
 *
 * - In (SET, MSET): the parser hands each value to a ValueWriter (a BulkSink) window by window. A full window is
 *   written to the hierarchy at once (its pages leave while the next window fills from the socket), and its
 *   staging slice is freed when the write lands. Each client's windows, filling and being written, hold at most
 *   2 x windowBytes of staging (its StagingLane); past that its socket is not read until a write lands.
 * - Out (GET, MGET, SET ... GET): a value longer than one window is loaded and sent window by window; at most two
 *   windows of it are held (one on its way to the kernel, one being loaded), and a window is only loaded once the
 *   one before the previous has been taken by the kernel, so a client that does not read holds no more.
 *
 * Every byte is copied once into staging (socket -> window, or tier -> window) and once out of it (window -> tier
 * by the engine, or window -> socket by the kernel): the whole value is never buffered, let alone twice.
 */
import type { HostArena } from '@tiersync/native';
import { TierSyncError } from '@tiersync/native/errors';
import type { PageKey } from '@tiersync/tiers';
import { RESP_WAIT, type BulkSink } from './parser.js';
import type { RespPageStore } from './page-store.js';
import type { StagingArea, StagingSlice } from './staging.js';

/** What a writer or a streamed read needs from the door. */
export interface StreamHost {
  readonly staging: StagingArea;
  readonly store: RespPageStore;
  /** Bytes per window: a whole number of pages. */
  readonly windowBytes: number;
  /** Deletes pages in the background (those written for a value that was not kept). */
  discard(pages: readonly PageKey[]): void;
}

/**
 * One client's share of staging for values coming in: the bytes of its windows being filled or written. A new
 * window is granted only while the share stays within `limit` bytes (or nothing is held), so a client streaming
 * a 512 MiB value holds at most two windows, while MSET of many small values still sends them in one batch.
 */
export class StagingLane {
  readonly limit: number;
  #held = 0;
  #waiters: Array<() => void> = [];

  constructor(limit: number) {
    this.limit = limit;
  }

  get heldBytes(): number {
    return this.#held;
  }

  /** Whether `bytes` more may be held now. */
  fits(bytes: number): boolean {
    return this.#held === 0 || this.#held + bytes <= this.limit;
  }

  take(bytes: number): void {
    this.#held += bytes;
  }

  give(bytes: number): void {
    this.#held -= bytes;
    const w = this.#waiters;
    this.#waiters = [];
    for (const f of w) f();
  }

  /** Resolves the next time bytes are given back, or rejects with ERR_TIMEOUT. */
  changed(timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => {
        this.#waiters = this.#waiters.filter((f) => f !== done);
        reject(new TierSyncError(`a value's writes into the hierarchy did not progress within ${timeoutMs} ms`, 'ERR_TIMEOUT'));
      }, timeoutMs);
      const done = () => {
        clearTimeout(t);
        resolve();
      };
      this.#waiters.push(done);
    });
  }
}

/**
 * A value being received for a SET or MSET: a ValueWriter (through staging windows) or a SlotWriter (slot-writer.ts:
 * straight into the first tier's slots). The parser fills it (BulkSink); the command commits or aborts it.
 */
export interface ValueSink extends BulkSink {
  /** The token the command receives in place of the value (compared by identity). */
  readonly handle: Uint8Array;
  readonly length: number;
  /** The value's page keys; empty for a sink that only drains the bytes (the command will be refused). */
  readonly pages: readonly PageKey[];
  /** Called each time a window is full (the command is making progress). */
  onProgress: (() => void) | undefined;
  /** True once every byte arrived. */
  readonly complete: boolean;
  readonly state: 'open' | 'committed' | 'aborted';
  /** Waits until window() may succeed, or rejects with ERR_TIMEOUT after `timeoutMs`. */
  wait(timeoutMs: number): Promise<void>;
  /** Waits for every page to be stored; on failure aborts and throws (ERR_TIER_FULL when the hierarchy refused pages). */
  finish(): Promise<void>;
  /**
   * finish() without waiting, where the sink can: true when every page is stored (finish() is then done), false
   * when some are still on their way (call finish()); throws as finish() does. Absent: always call finish().
   */
  finishNow?(): boolean;
  /** The pages now belong to the catalog (after finish()). */
  commit(): void;
  /** Drops the value: frees what it holds and deletes the pages it stored. Idempotent. */
  abort(): void;
}

/**
 * Receives one value from the parser window by window and writes its pages to the hierarchy as windows fill.
 * The value becomes visible only when the SET that carries it commits it (door.commitValue); a writer that is
 * aborted (command refused, client gone) deletes whatever it wrote.
 */
export class ValueWriter implements ValueSink {
  /** The token the command receives in place of the value (compared by identity). */
  readonly handle = new Uint8Array(0);
  readonly length: number;
  /** The value's page keys; empty for a writer that only drains the bytes (the command will be refused). */
  readonly pages: readonly PageKey[];
  /** Called each time a window is full (the command is making progress). */
  onProgress: (() => void) | undefined;
  readonly #host: StreamHost;
  readonly #lane: StagingLane;
  readonly #stored: boolean[];
  readonly #writes: Array<Promise<void>> = [];
  #offset = 0;
  #filling: StagingSlice | undefined;
  #need = 0;
  #error: unknown;
  #state: 'open' | 'committed' | 'aborted' = 'open';

  constructor(host: StreamHost, lane: StagingLane, length: number, pages: readonly PageKey[]) {
    this.#host = host;
    this.#lane = lane;
    this.length = length;
    this.pages = pages;
    this.#stored = pages.map(() => false);
  }

  /** True once every byte arrived. */
  get complete(): boolean {
    return this.#offset === this.length;
  }

  window(left: number): Uint8Array | typeof RESP_WAIT {
    if (this.#state !== 'open') throw new TierSyncError('internal: a value writer was asked for memory after it ended', 'ERR_INVALID_ARGUMENT');
    const len = Math.min(this.#host.windowBytes, left);
    this.#need = len;
    if (!this.#lane.fits(len)) return RESP_WAIT;
    const slice = this.#host.staging.tryAllocate(len);
    if (!slice) return RESP_WAIT;
    this.#lane.take(slice.reserved);
    this.#filling = slice;
    return slice.bytes;
  }

  /** Waits until window() may succeed: the client's lane has room, then the staging area has. */
  async wait(timeoutMs: number): Promise<void> {
    if (!this.#lane.fits(this.#need)) await this.#lane.changed(timeoutMs);
    else await this.#host.staging.waitForRoom(this.#need, timeoutMs);
  }

  filled(window: Uint8Array): void {
    const slice = this.#filling;
    if (!slice || slice.bytes !== window) throw new TierSyncError('internal: a value writer was handed a window it did not lend', 'ERR_INVALID_ARGUMENT');
    this.#filling = undefined;
    const pageBytes = this.#host.store.pageBytes;
    const first = this.#offset / pageBytes;
    this.#offset += window.length;
    this.onProgress?.();
    if (!this.pages.length || this.#error !== undefined || this.#state !== 'open') {
      this.#free(slice);
      return;
    }
    const arena: HostArena = this.#host.staging.arena;
    const batch: Array<{ key: PageKey; source: { arena: HostArena; offset: number; length: number } }> = [];
    for (let i = 0; i * pageBytes < window.length; i++) {
      batch.push({ key: this.pages[first + i]!, source: { arena, offset: slice.offset + i * pageBytes, length: Math.min(pageBytes, window.length - i * pageBytes) } });
    }
    const p = this.#host.store.write(batch).then(
      (ok) => {
        ok.forEach((x, i) => {
          if (x) this.#stored[first + i] = true;
        });
        if (!ok.every(Boolean)) {
          this.#error ??= new TierSyncError('the tier hierarchy has no room for this value (its first tier is full of pinned pages, or its admission filter refused it)', 'ERR_TIER_FULL');
        }
      },
      (e: unknown) => {
        this.#error ??= e;
      },
    );
    this.#writes.push(p.finally(() => this.#free(slice)));
  }

  #free(slice: StagingSlice): void {
    this.#host.staging.release(slice);
    this.#lane.give(slice.reserved);
  }

  /**
   * Waits for every window's write; resolves once all pages are stored. On failure the writer is aborted (its
   * pages deleted) and the error thrown: ERR_TIER_FULL when the hierarchy refused pages.
   */
  async finish(): Promise<void> {
    if (this.#state !== 'open') throw new TierSyncError('internal: a value writer finished twice', 'ERR_INVALID_ARGUMENT');
    if (!this.complete) throw new TierSyncError('internal: a value was committed before all its bytes arrived', 'ERR_INVALID_ARGUMENT');
    await Promise.all(this.#writes);
    if (this.#error !== undefined) {
      const e = this.#error;
      this.abort();
      throw e;
    }
  }

  /** The pages now belong to the catalog (after finish()). */
  commit(): void {
    this.#state = 'committed';
  }

  /** Drops the value: frees the window being filled and deletes the pages once their writes settle. Idempotent. */
  abort(): void {
    if (this.#state !== 'open') return;
    this.#state = 'aborted';
    if (this.#filling) {
      const s = this.#filling;
      this.#filling = undefined;
      this.#free(s);
    }
    void Promise.allSettled(this.#writes).then(() => {
      const written = this.pages.filter((_, i) => this.#stored[i]);
      if (written.length) this.#host.discard(written);
    });
  }

  get state(): 'open' | 'committed' | 'aborted' {
    return this.#state;
  }
}

/** Where a streamed reply goes (the connection). */
export interface ReplyOut {
  /** Queues bytes; `onSent` runs once the kernel has them, or the connection is gone. */
  send(parts: readonly Uint8Array[], onSent?: () => void): void;
}

/**
 * Sends a value of `length` bytes stored as `pages` as one bulk string, window by window (see the file comment).
 * The pages must be held (pinned) by the caller. Throws when a page is missing or a window is not taken by the
 * client within `timeoutMs`; the reply is then cut short, so the caller must close the connection.
 */
export async function streamValue(host: StreamHost, pages: readonly PageKey[], length: number, out: ReplyOut, timeoutMs: number): Promise<void> {
  const pageBytes = host.store.pageBytes;
  out.send([Buffer.from(`$${length}\r\n`, 'latin1')]);
  const sending: Array<Promise<void>> = [];
  const sentWithin = (p: Promise<void>) =>
    new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new TierSyncError(`the client did not read a ${host.windowBytes}-byte window of a reply within ${timeoutMs} ms`, 'ERR_TIMEOUT')), timeoutMs);
      void p.then(() => {
        clearTimeout(t);
        resolve();
      });
    });
  for (let offset = 0; offset < length; offset += host.windowBytes) {
    // At most two windows held: wait until the one before the previous is with the kernel.
    while (sending.length > 1) await sentWithin(sending.shift()!);
    const len = Math.min(host.windowBytes, length - offset);
    const slice = await host.staging.allocate(len, timeoutMs);
    const first = offset / pageBytes;
    let found: boolean[];
    try {
      const reads = [];
      for (let i = 0; i * pageBytes < len; i++) reads.push({ key: pages[first + i]!, into: { arena: host.staging.arena, offset: slice.offset + i * pageBytes, length: Math.min(pageBytes, len - i * pageBytes) } });
      found = await host.store.read(reads);
    } catch (e) {
      host.staging.release(slice);
      throw e;
    }
    if (!found.every(Boolean)) {
      host.staging.release(slice);
      throw new TierSyncError(`page ${first + found.indexOf(false)} of a ${length}-byte value vanished while it was being sent`, 'ERR_NOT_FOUND');
    }
    sending.push(new Promise<void>((resolve) => out.send([slice.bytes], () => {
      host.staging.release(slice);
      resolve();
    })));
  }
  out.send([Buffer.from('\r\n', 'latin1')]);
}
