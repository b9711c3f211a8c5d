/**
 * fault tier: wraps another tier's driver and injects failures, for reliability tests and fault drills.
 *
 * `fault://?inner=<percent-encoded tier URL>&seed=1&writeErrors=0.1&readErrors=0.05&...`
 *
 * The wrapper keeps the inner driver's contract: a failed write throws a TierSyncError (ERR_IO, ERR_TIER_FULL)
 * and a failed read page is an `error` outcome whose bytes were not delivered. A stalled call settles only when
 * its `timeoutMs` passes (ERR_TIMEOUT), its signal aborts (ERR_ABORTED) or the tier closes (ERR_CLOSED): it shows
 * whether callers give every wait a deadline. Faults can also be changed at run time with `inject()`.
 */
import { TierSyncError, type ErrorCode } from '@tiersync/native';
import { z } from 'zod';
import type { IoOptions, PageInfo, PageKey, PageRead, PageWrite, ReadOutcome, TierCapabilities, TierContext, TierDriver, TierStats, WriteResult } from '../driver.js';
import { configError, parseOptions, splitUrlOf } from '../url.js';

/** Probabilities (0..1) of each fault per call (writes, deletes) or per page (reads); all default 0. */
export interface FaultPlan {
  /** write() fails with ERR_IO before the inner driver sees it. */
  writeErrors: number;
  /** write() fails with ERR_IO after the inner driver stored the pages (the caller believes they were not). */
  lostWriteAcks: number;
  /** write() fails with ERR_TIER_FULL before the inner driver sees it. */
  full: number;
  /** A page of read() becomes an `error` outcome with ERR_IO (its bytes are not delivered). */
  readErrors: number;
  /** delete() fails with ERR_IO before the inner driver sees it. */
  deleteErrors: number;
  /** A call (write, read, delete) stalls until its deadline, its signal or close(). */
  stalls: number;
  /** Extra latency added to every call, ms. */
  delayMs: number;
}

export interface FaultTierConfig extends FaultPlan {
  inner: string;
  seed: number;
  redacted: string;
}

export interface FaultCounts {
  writeErrors: number;
  lostWriteAcks: number;
  full: number;
  readErrors: number;
  deleteErrors: number;
  stalls: number;
}

const probability = z
  .string()
  .regex(/^(0(\.\d+)?|1(\.0+)?)$/, 'must be a probability between 0 and 1')
  .transform(Number);

const options = z
  .object({
    inner: z.string().min(1),
    seed: z.string().regex(/^\d{1,9}$/, 'must be an integer').transform(Number).optional(),
    writeErrors: probability.optional(),
    lostWriteAcks: probability.optional(),
    full: probability.optional(),
    readErrors: probability.optional(),
    deleteErrors: probability.optional(),
    stalls: probability.optional(),
    delayMs: z.string().regex(/^\d{1,7}$/, 'must be an integer number of ms').transform(Number).optional(),
  })
  .strict();

export function parseFaultUrl(url: string): FaultTierConfig {
  const u = splitUrlOf(url, 'fault');
  if (u.host !== '' || (u.path !== '' && u.path !== '/')) throw configError(u, 'fault:// takes only options, e.g. fault://?inner=host%3A%2F%2F%3Fcapacity%3D1GiB&readErrors=0.1');
  const o = parseOptions(u, options);
  if (o.inner.startsWith('fault:')) throw configError(u, "option 'inner' must name another scheme than fault://");
  return {
    inner: o.inner,
    seed: o.seed ?? 1,
    writeErrors: o.writeErrors ?? 0,
    lostWriteAcks: o.lostWriteAcks ?? 0,
    full: o.full ?? 0,
    readErrors: o.readErrors ?? 0,
    deleteErrors: o.deleteErrors ?? 0,
    stalls: o.stalls ?? 0,
    delayMs: o.delayMs ?? 0,
    redacted: u.redacted,
  };
}

/** The URL of a fault tier around `inner` with `plan`'s probabilities. */
export function faultUrl(inner: string, plan: Partial<FaultPlan> & { seed?: number } = {}): string {
  const q = new URLSearchParams({ inner });
  for (const [k, v] of Object.entries(plan)) if (v !== undefined) q.set(k, String(v));
  return `fault://?${q.toString()}`;
}

export class FaultTier implements TierDriver {
  readonly capabilities: TierCapabilities;
  readonly url: string;
  readonly config: FaultTierConfig;
  /** The wrapped driver (its stats and white-box hooks stay reachable). */
  readonly inner: TierDriver;
  /** Faults injected so far, by kind. */
  readonly injected: FaultCounts = { writeErrors: 0, lostWriteAcks: 0, full: 0, readErrors: 0, deleteErrors: 0, stalls: 0 };
  #plan: FaultPlan;
  #seed: number;
  readonly #stalled = new Set<(e: TierSyncError) => void>();
  #closed = false;

  /**
   * @param createInner builds the wrapped driver from its URL (the tier registry's createTier), passed in so this
   *   module does not import the registry that imports it.
   */
  constructor(url: string, context: TierContext, createInner: (url: string, context: TierContext) => TierDriver) {
    this.config = parseFaultUrl(url);
    this.url = this.config.redacted;
    this.inner = createInner(this.config.inner, context);
    this.capabilities = this.inner.capabilities;
    this.#plan = { ...this.config };
    this.#seed = this.config.seed >>> 0 || 1;
  }

  /** Changes fault probabilities from now on (fields not given keep their value). */
  inject(plan: Partial<FaultPlan>): void {
    for (const [k, v] of Object.entries(plan)) {
      if (v === undefined) continue;
      const max = k === 'delayMs' ? 1e7 : 1;
      if (typeof v !== 'number' || !(v >= 0 && v <= max)) throw new TierSyncError(`fault plan ${k} must be a number in [0, ${max}], got ${String(v)}`, 'ERR_INVALID_ARGUMENT', { tier: this.capabilities.kind });
    }
    this.#plan = { ...this.#plan, ...plan };
  }

  /** Turns every fault off. */
  heal(): void {
    this.#plan = { writeErrors: 0, lostWriteAcks: 0, full: 0, readErrors: 0, deleteErrors: 0, stalls: 0, delayMs: 0 };
  }

  /** xorshift32: a fixed seed gives the same faults for the same sequence of calls. */
  #roll(p: number): boolean {
    if (p <= 0) return false;
    let x = this.#seed;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.#seed = x >>> 0 || 1;
    return this.#seed / 2 ** 32 < p;
  }

  #fault(message: string, code: ErrorCode): TierSyncError {
    return new TierSyncError(`${this.capabilities.kind} (fault injected): ${message}`, code, { tier: this.capabilities.kind });
  }

  /** Latency, then maybe a stall that only a deadline, an abort or close() ends. */
  async #before(options: IoOptions): Promise<void> {
    if (this.#closed) throw this.#fault('tier is closed', 'ERR_CLOSED');
    if (this.#plan.delayMs > 0) await new Promise((r) => setTimeout(r, this.#plan.delayMs));
    if (!this.#roll(this.#plan.stalls)) return;
    this.injected.stalls++;
    await new Promise<void>((_, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (e: TierSyncError) => {
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
        this.#stalled.delete(done);
        reject(e);
      };
      const onAbort = () => done(this.#fault('aborted while stalled', 'ERR_ABORTED'));
      if (options.timeoutMs !== undefined) timer = setTimeout(() => done(this.#fault(`stalled past the ${options.timeoutMs} ms deadline`, 'ERR_TIMEOUT')), options.timeoutMs);
      if (options.signal?.aborted) return onAbort();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      this.#stalled.add(done);
    });
  }

  open(): Promise<void> {
    return this.inner.open();
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const release of [...this.#stalled]) release(this.#fault('tier closed while a call was stalled', 'ERR_CLOSED'));
    await this.inner.close();
  }

  async write(pages: readonly PageWrite[], options: IoOptions = {}): Promise<WriteResult> {
    await this.#before(options);
    if (this.#roll(this.#plan.full)) {
      this.injected.full++;
      throw this.#fault(`no room for ${pages.length} page(s)`, 'ERR_TIER_FULL');
    }
    if (this.#roll(this.#plan.writeErrors)) {
      this.injected.writeErrors++;
      throw this.#fault(`write of ${pages.length} page(s) failed (EIO)`, 'ERR_IO');
    }
    const result = await this.inner.write(pages, options);
    if (this.#roll(this.#plan.lostWriteAcks)) {
      this.injected.lostWriteAcks++;
      throw this.#fault(`write of ${pages.length} page(s) reported failed after it landed (EIO)`, 'ERR_IO');
    }
    return result;
  }

  async read(pages: readonly PageRead[], options: IoOptions = {}): Promise<ReadOutcome[]> {
    await this.#before(options);
    // Pages chosen to fail are not read at all, so no byte of theirs reaches the destination.
    const failing = pages.map(() => this.#roll(this.#plan.readErrors));
    const passed = pages.filter((_, i) => !failing[i]);
    const inner = passed.length ? await this.inner.read(passed, options) : [];
    let next = 0;
    return pages.map((p, i) => {
      if (!failing[i]) return inner[next++]!;
      this.injected.readErrors++;
      return { key: p.key, status: 'error', error: this.#fault(`read of page ${p.key} failed (EIO)`, 'ERR_IO') };
    });
  }

  has(keys: readonly PageKey[]): Promise<boolean[]> {
    return this.inner.has(keys);
  }

  async delete(keys: readonly PageKey[]): Promise<{ deleted: PageKey[]; pinned: PageKey[] }> {
    await this.#before({});
    if (this.#roll(this.#plan.deleteErrors)) {
      this.injected.deleteErrors++;
      throw this.#fault(`delete of ${keys.length} page(s) failed (EIO)`, 'ERR_IO');
    }
    return this.inner.delete(keys);
  }

  list(): AsyncIterable<PageInfo> {
    return this.inner.list();
  }

  pin(keys: readonly PageKey[]): void {
    this.inner.pin(keys);
  }

  unpin(keys: readonly PageKey[]): void {
    this.inner.unpin(keys);
  }

  stats(): TierStats {
    return this.inner.stats();
  }
}
