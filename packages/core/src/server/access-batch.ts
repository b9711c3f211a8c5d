/**
 * AccessBatch: pages read straight from the host tier's slots, without the hierarchy's load(), on their way to its
 * eviction policy (TierSync.recordHits): the RESP door's GETs (sent from pinned slots, or answered by the native door
 * thread; through RespPageStore.recordReads), same-host clients' pin leases on pages already in the host tier
 * (client-api.ts), and peers' GETs served from it (the peer server's onServed). Only loads through the hierarchy
 * count accesses by themselves; without this a page read only these ways would be evicted as if it were cold.
 *
 * Batched: a GET adds its pages to a set (a page read again moves to the end, so the batch keeps the order of last
 * reads); the set goes to the hierarchy in one call per ACCESS_FLUSH_MS (at most ACCESS_BATCH_PAGES pages a call),
 * not one per GET. The set is bounded (ACCESS_MAX_PAGES): pages read while it is full are not recorded (`dropped`).
 * Accesses are recorded when the batch goes, so within one interval they count as a little later than they were.
 */
import { TierSyncError } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';

/** How long reads wait to be recorded, ms. */
export const ACCESS_FLUSH_MS = 100;
/** Pages held for the next batch at most; reads of further pages in that interval are dropped (and counted). */
export const ACCESS_MAX_PAGES = 65536;
/** Pages per hierarchy call: each is one index transaction on the event loop (the rest follow on later turns). */
export const ACCESS_BATCH_PAGES = 4096;

export interface AccessBatchOptions {
  /** Records a batch of accesses (RespPageStore.recordReads). */
  record: (keys: readonly PageKey[]) => Promise<unknown>;
  /** A batch the hierarchy refused (e.g. it is closing): those accesses are lost. */
  onFailed?: (error: unknown, pages: number) => void;
}

/**
 * An onFailed that logs a refused batch as a warning naming `what` was read. Lost accesses only cost eviction
 * accuracy, and a closing hierarchy refuses them as a matter of course (ERR_CLOSED: not logged).
 */
export function warnRefused(log: { warn(fields: object, message: string): void } | undefined, what: string): NonNullable<AccessBatchOptions['onFailed']> {
  return (e, pages) => {
    if (!(e instanceof TierSyncError && e.code === 'ERR_CLOSED')) log?.warn({ err: e, pages }, `could not record ${what} for eviction`);
  };
}

export class AccessBatch {
  readonly #o: AccessBatchOptions;
  #pending = new Set<PageKey>();
  #timer: NodeJS.Timeout | undefined;
  /** The batch being recorded now: one at a time. */
  #running: Promise<void> | undefined;
  #closed = false;
  /** Page reads dropped because the pending set was full. */
  dropped = 0;

  constructor(options: AccessBatchOptions) {
    this.#o = options;
  }

  /** Pages waiting for the next batch. */
  get size(): number {
    return this.#pending.size;
  }

  /** Notes a read of `keys`. */
  add(keys: readonly PageKey[]): void {
    if (this.#closed || !keys.length) return;
    const pending = this.#pending;
    for (const k of keys) {
      if (pending.delete(k)) pending.add(k);
      else if (pending.size < ACCESS_MAX_PAGES) pending.add(k);
      else this.dropped++;
    }
    this.#timer ??= setTimeout(() => void this.flush(), ACCESS_FLUSH_MS).unref();
  }

  /** Records every read noted so far; resolves once the hierarchy has them (or refused them). */
  async flush(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    while (this.#running) await this.#running;
    if (!this.#pending.size) return;
    const keys = [...this.#pending];
    this.#pending = new Set();
    this.#running = this.#record(keys).finally(() => (this.#running = undefined));
    await this.#running;
  }

  async #record(keys: PageKey[]): Promise<void> {
    for (let at = 0; at < keys.length; at += ACCESS_BATCH_PAGES) {
      const part = keys.slice(at, at + ACCESS_BATCH_PAGES);
      try {
        await this.#o.record(part);
      } catch (e) {
        this.#o.onFailed?.(e, part.length);
      }
    }
  }

  /** Stops noting reads; those pending are dropped. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#pending.clear();
  }
}
