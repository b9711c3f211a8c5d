/**
 * PageRecorder: the block-index side of pages committed straight into host-tier slots (commitRemote), shared by
 * the daemon's same-host clients (client-api.ts) and the RESP door (resp/slot-access.ts). A committed page is in the
 * tier at once (lookups and pins answer from it); the index records it off the request's path, the commits queued
 * before a batch starts going into one `TierSync.adoptPages` call (one index transaction, not one per request) of at
 * most RECORD_BATCH_PAGES pages.
 *
 * Until then only the host tier knows such a page (no index row, no planner entry, never announced), so a delete can
 * free it there directly (`dropEarly`), and a caller short of slots can wait for the recorder (`recorded`) so the
 * planner can count and evict those pages.
 */
import type { HostTier, PageKey } from '@tiersync/tiers';
import type { TierSync } from '../hierarchy/index.js';

/** Rounds of room-making a reservation takes after the first (see reserve): pinned victims, then pages recorded meanwhile. */
const RESERVE_ROUNDS = 2;

/** A committed page the block index has yet to record. */
export interface UnrecordedPage {
  key: PageKey;
  length: number;
  crc32c: number;
}

export interface PageRecorderOptions {
  ts: TierSync;
  /** The host tier's name in the hierarchy. */
  tierName: string;
  /** When the recorder's next batch starts (default: the next event-loop turn). */
  turn?: () => Promise<void>;
  /** Called with each batch the index recorded. */
  onRecorded?: (batch: readonly UnrecordedPage[]) => void;
  /**
   * Called with each batch the index failed to record (its disk full, say). The pages stay in the tier and stay
   * unrecorded: the recorder tries them again after a pause (RETRY_MIN_MS, doubling up to RETRY_MAX_MS), so the
   * planner can count and evict them once the index works again (a restart adopts them too).
   */
  onFailed?: (batch: readonly UnrecordedPage[], error: unknown) => void;
}

/** First pause before recording a failed batch again; it doubles after each failure, up to RETRY_MAX_MS. */
const RETRY_MIN_MS = 250;
const RETRY_MAX_MS = 30_000;

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Most pages one `adoptPages` call (one index transaction) records. The transaction runs on the event loop, so a
 * request arriving meanwhile (a pin of the pages just stored, the next reserve) waits for the batch in progress:
 * with 1024-page stores it waited for a whole store's recording (15-70 ms seen for a pin here on 2 busy cores);
 * now for at most this many pages, the next batch starting on a later turn.
 */
export const RECORD_BATCH_PAGES = 256;

export class PageRecorder {
  readonly #o: PageRecorderOptions;
  /** Committed pages the block index has yet to record (the recorder's next batch). */
  readonly #unrecorded = new Map<PageKey, UnrecordedPage>();
  #recording: Promise<void> | undefined;
  /** Keys of the batch the recorder is writing to the block index now. */
  readonly #recordingNow = new Set<PageKey>();
  /** Callers of recorded() waiting for the recorder's next batch to finish. */
  readonly #waiters: Array<() => void> = [];
  /** Of #unrecorded, pages whose recording failed: left out of batches until the retry timer. */
  readonly #failed = new Set<PageKey>();
  #retryMs = RETRY_MIN_MS;
  #retry: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(options: PageRecorderOptions) {
    this.#o = options;
  }

  /** Pages committed and not yet recorded. */
  get size(): number {
    return this.#unrecorded.size;
  }

  has(key: PageKey): boolean {
    return this.#unrecorded.has(key);
  }

  get(key: PageKey): UnrecordedPage | undefined {
    return this.#unrecorded.get(key);
  }

  /** Forgets a page (dropped from the tier meanwhile): it will not be recorded. */
  delete(key: PageKey): void {
    this.#unrecorded.delete(key);
    this.#failed.delete(key);
  }

  /** Stops retrying failed batches (the tier is closing; its next open adopts what is left). */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#retry);
    this.#retry = undefined;
  }

  /** Queues committed pages for the block index. */
  add(pages: readonly UnrecordedPage[]): void {
    for (const p of pages) this.#unrecorded.set(p.key, p);
    this.#kick();
  }

  #kick(): void {
    this.#recording ??= (this.#o.turn ?? nextTurn)().then(async () => {
      try {
        while (this.#unrecorded.size > this.#failed.size) {
          const batch: UnrecordedPage[] = [];
          for (const p of this.#unrecorded.values()) {
            if (this.#failed.has(p.key)) continue;
            batch.push(p);
            if (batch.length === RECORD_BATCH_PAGES) break;
          }
          for (const p of batch) this.#recordingNow.add(p.key);
          let ok = true;
          try {
            await this.#o.ts.adoptPages(this.#o.tierName, batch);
            this.#o.onRecorded?.(batch);
            this.#retryMs = RETRY_MIN_MS;
          } catch (e) {
            ok = false;
            // The hierarchy closed: nothing to retry in this process (its next open adopts the pages).
            if ((e as { code?: string }).code === 'ERR_CLOSED') this.close();
            else this.#o.onFailed?.(batch, e);
          }
          for (const p of batch) {
            if (this.#unrecorded.get(p.key) !== p) continue;
            if (ok) this.#unrecorded.delete(p.key);
            else this.#failed.add(p.key);
          }
          if (!ok && !this.#closed) this.#retryLater();
          this.#recordingNow.clear();
          for (const w of this.#waiters.splice(0)) w();
          // Requests that arrived during this batch run before the next one.
          if (this.#unrecorded.size > this.#failed.size) await nextTurn();
        }
      } finally {
        this.#recording = undefined;
        this.#recordingNow.clear();
        for (const w of this.#waiters.splice(0)) w();
      }
    });
  }

  /**
   * Resolves once `keys` (default: every page committed so far) are recorded in the block index (or failed to be).
   * Pages committed later are not waited for: under a steady stream of commits the recorder never goes idle.
   */
  async recorded(keys: Iterable<PageKey> = [...this.#unrecorded.keys()]): Promise<void> {
    // Pages waiting for a retry are not waited for: the index may stay unable to record them for long.
    const pending = [...keys].filter((k) => this.#unrecorded.has(k) && !this.#failed.has(k));
    while (pending.some((k) => this.#unrecorded.has(k) && !this.#failed.has(k)) && this.#recording) {
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }

  /** Puts the failed pages back into the batches after a pause, doubling while they keep failing. */
  #retryLater(): void {
    if (this.#retry) return;
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      this.#failed.clear();
      this.#kick();
    }, this.#retryMs);
    this.#retry.unref();
    this.#retryMs = Math.min(2 * this.#retryMs, RETRY_MAX_MS);
  }

  /**
   * Reserves one slot per key in `tier` after the planner makes room (`TierSync.makeRoomOn`). Committed pages the
   * index has yet to record hold slots the planner cannot count or evict yet: when short, they are recorded first
   * and room is made once more. Slots the planner cannot see either are asked for too: `ghosts` (evicted pages a
   * lease still holds) and the tier's slots that native readers still hold after their page was deleted. When
   * that is not enough, room is asked for again with the tier's pinned pages on top: the planner does not know
   * which pages leases pin in the tier, so its victims may be such pages, whose evict is refused (after a restart,
   * when the victims' order is the tiers' listing order, often the pages a concurrent lease just pinned).
   * undefined: still no room.
   */
  async reserve(tier: HostTier, keys: readonly PageKey[], ghosts: () => number = () => 0): Promise<ReturnType<HostTier['reserveRemote']>> {
    const hidden = () => ghosts() + tier.slotsHeldByReaders;
    await this.#o.ts.makeRoomOn(this.#o.tierName, keys.length + hidden());
    let got = tier.reserveRemote(keys);
    for (let round = 0; !got && round < RESERVE_ROUNDS; round++) {
      if (this.#unrecorded.size) await this.recorded();
      await this.#o.ts.makeRoomOn(this.#o.tierName, keys.length + hidden() + tier.stats().pinned);
      got = tier.reserveRemote(keys);
    }
    return got;
  }

  /**
   * Deletes those of `keys` that are unrecorded, and not in the batch being recorded now, straight from `tier`:
   * nothing else knows them, so no index transaction is needed. `rest`: the keys it did not handle.
   */
  dropEarly(tier: HostTier, keys: readonly PageKey[]): { deleted: PageKey[]; pinned: PageKey[]; rest: PageKey[] } {
    const early = keys.filter((k) => this.#unrecorded.has(k) && !this.#recordingNow.has(k));
    if (!early.length) return { deleted: [], pinned: [], rest: [...keys] };
    const r = tier.deleteNow(early);
    for (const k of r.deleted) this.delete(k);
    const gone = new Set(early);
    return { deleted: r.deleted, pinned: r.pinned, rest: keys.filter((k) => !gone.has(k)) };
  }
}
