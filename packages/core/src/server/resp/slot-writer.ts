/**
 * SlotWriter: a SET's value received straight into the first tier's slots (slot-access.ts). As soon as the bulk
 * length is known the writer reserves slots for its first pages; the parser then copies socket chunks into them
 * directly (the only copy after the kernel's), and each group of pages is committed in place when it is full. Each
 * page's CRC32C is computed as its window is handed back, while its bytes are still in the cache (measured here: a
 * 256 KiB page costs 26 us this way; the same on native threads costs twice that in CPU, plus a thread hop). Nothing passes through staging and the engine copies nothing.
 *
 * A value reserves `groupPages` pages at a time (one window's worth), so a value longer than the tier moves down
 * the hierarchy as it arrives, as through staging. Pages committed here are pages of the tier, but no key names
 * them until the door commits the value (catalog); an aborted writer deletes them.
 */
import { crc32c } from '@tiersync/native';
import { TierSyncError } from '@tiersync/native/errors';
import type { PageKey } from '@tiersync/tiers';
import { RESP_WAIT } from './parser.js';
import type { SlotAccess } from './slot-access.js';
import type { StreamHost, ValueSink } from './value-stream.js';

/** Where the bytes of a value that is drained (refused command, failed reservation) go: read and dropped. */
const SCRATCH = new Uint8Array(64 * 1024);

interface Group {
  /** Index of the group's first page in the value. */
  first: number;
  keys: PageKey[];
  offsets: Float64Array;
  /** CRC32C of each page's bytes so far. */
  crcs: Uint32Array;
  filled: number;
}

export class SlotWriter implements ValueSink {
  readonly handle = new Uint8Array(0);
  readonly length: number;
  readonly pages: readonly PageKey[];
  onProgress: (() => void) | undefined;
  readonly #host: StreamHost;
  readonly #slots: SlotAccess;
  readonly #pageBytes: number;
  readonly #groupPages: number;
  readonly #stored: boolean[];
  #group: Group | undefined;
  #reserving: Promise<void> | undefined;
  #window: Uint8Array | undefined;
  #offset = 0;
  #error: unknown;
  #state: 'open' | 'committed' | 'aborted' = 'open';

  constructor(host: StreamHost, slots: SlotAccess, length: number, pages: readonly PageKey[]) {
    this.#host = host;
    this.#slots = slots;
    this.length = length;
    this.pages = pages;
    this.#pageBytes = host.store.pageBytes;
    this.#groupPages = Math.max(1, Math.floor(host.windowBytes / this.#pageBytes));
    this.#stored = pages.map(() => false);
    // Reserved now, while the value's bytes are still on their way.
    if (pages.length) this.#reserveNext(0);
  }

  get complete(): boolean {
    return this.#offset === this.length;
  }

  get state(): 'open' | 'committed' | 'aborted' {
    return this.#state;
  }

  /** Reserves the group of pages starting at page `first`: at once when the tier has free slots, else after making room. */
  #reserveNext(first: number): void {
    const keys = this.pages.slice(first, first + this.#groupPages);
    let offsets: Float64Array | undefined;
    try {
      offsets = this.#slots.tryReserve(keys);
    } catch (e) {
      this.#error ??= e;
      return;
    }
    if (offsets) {
      this.#group = { first, keys, offsets, crcs: new Uint32Array(keys.length), filled: 0 };
      return;
    }
    this.#reserving = this.#slots.reserve(keys).then(
      (o) => {
        this.#reserving = undefined;
        // Aborted meanwhile (client gone): the slots go back at once.
        if (this.#state !== 'open') this.#slots.cancel(keys, o);
        else this.#group = { first, keys, offsets: o, crcs: new Uint32Array(keys.length), filled: 0 };
      },
      (e: unknown) => {
        this.#reserving = undefined;
        this.#error ??= e;
      },
    );
  }

  window(left: number): Uint8Array | typeof RESP_WAIT {
    if (this.#state !== 'open') throw new TierSyncError('internal: a value writer was asked for memory after it ended', 'ERR_INVALID_ARGUMENT');
    // Nothing to keep (a refused command), or nowhere to keep it (no room): the bytes are read and dropped.
    if (!this.pages.length || this.#error !== undefined) return (this.#window = SCRATCH.subarray(0, Math.min(SCRATCH.length, left)));
    if (this.#reserving) return RESP_WAIT;
    const page = Math.floor(this.#offset / this.#pageBytes);
    if (!this.#group) {
      this.#reserveNext(page);
      if (this.#error !== undefined) return this.window(left);
      if (!this.#group) return RESP_WAIT;
    }
    const g = this.#group;
    const within = this.#offset - page * this.#pageBytes;
    const len = Math.min(this.#pageBytes - within, left);
    this.#window = this.#slots.arena.view(g.offsets[page - g.first]! + within, len);
    return this.#window;
  }

  async wait(timeoutMs: number): Promise<void> {
    const r = this.#reserving;
    if (!r) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      r,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new TierSyncError(`no room in the first tier for a value's pages within ${timeoutMs} ms`, 'ERR_TIMEOUT')), timeoutMs);
      }),
    ]).finally(() => clearTimeout(timer));
  }

  filled(window: Uint8Array): void {
    if (window !== this.#window) throw new TierSyncError('internal: a value writer was handed a window it did not lend', 'ERR_INVALID_ARGUMENT');
    this.#window = undefined;
    this.#offset += window.length;
    this.onProgress?.();
    const g = this.#group;
    if (!g || window.buffer === SCRATCH.buffer) return;
    const at = Math.floor((this.#offset - 1) / this.#pageBytes) - g.first;
    g.crcs[at] = crc32c(window, g.crcs[at]);
    // A page is full when its last byte arrived (the parser may hand a page over in several windows).
    const pageEnd = Math.min(this.length, (Math.floor((this.#offset - 1) / this.#pageBytes) + 1) * this.#pageBytes);
    if (this.#offset < pageEnd) return;
    g.filled++;
    if (g.filled < g.keys.length) return;
    this.#group = undefined;
    const lengths = Uint32Array.from(g.keys, (_, i) => Math.min(this.#pageBytes, this.length - (g.first + i) * this.#pageBytes));
    // Committed now (the CRC32Cs are known): no promise per group, and finishNow() can answer in this turn.
    try {
      this.#slots.commitNow(g.keys, g.offsets, lengths, g.crcs);
      for (let i = 0; i < g.keys.length; i++) this.#stored[g.first + i] = true;
    } catch (e) {
      this.#error ??= e;
    }
    // The next group is reserved before its bytes arrive.
    if (this.#offset < this.length) this.#reserveNext(g.first + g.keys.length);
  }

  async finish(): Promise<void> {
    this.finishNow();
  }

  /** finish(), now: every group was committed synchronously as it filled, so nothing is ever pending here. */
  finishNow(): boolean {
    if (this.#state !== 'open') throw new TierSyncError('internal: a value writer finished twice', 'ERR_INVALID_ARGUMENT');
    if (!this.complete) throw new TierSyncError('internal: a value was committed before all its bytes arrived', 'ERR_INVALID_ARGUMENT');
    if (this.#error !== undefined) {
      const e = this.#error;
      this.abort();
      throw storeFailure(e);
    }
    return true;
  }

  commit(): void {
    this.#state = 'committed';
  }

  abort(): void {
    if (this.#state !== 'open') return;
    this.#state = 'aborted';
    this.#window = undefined;
    if (this.#group) {
      this.#slots.cancel(this.#group.keys, this.#group.offsets);
      this.#group = undefined;
    }
    const written = this.pages.filter((_, i) => this.#stored[i]);
    if (written.length) this.#host.discard(written);
  }
}

/** Why a value's slots could not be stored, as its SET reports it: ERR_TIER_FULL, naming the cause. */
export function storeFailure(e: unknown): TierSyncError {
  return e instanceof TierSyncError && e.code === 'ERR_TIER_FULL' ? e : new TierSyncError(`the value could not be stored: ${(e as Error).message}`, 'ERR_TIER_FULL', { cause: e });
}
