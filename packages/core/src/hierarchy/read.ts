/**
 * Reading pages out of the tiers for a load: each page from its fastest ready copy, one driver batch per tier,
 * falling through to the next copy on a miss or a failed checksum. Shared by whole and layerwise loads.
 */
import { TierSyncError } from '@tiersync/native';
import type { IoOptions, PageKey, PageLocation, PageRead, ReadOutcome } from '@tiersync/tiers';
import type { CopyRecord } from '../index/index.js';
import { ready, type HierarchyState, type TierState } from './state.js';
import type { LoadResult, LookupResult } from './types.js';

/** One load in progress. */
export interface LoadContext {
  hit: LookupResult;
  keys: PageKey[];
  /** Every copy of each page, from the index at the start of the load (pruned as copies fail). */
  copies: CopyRecord[][];
  into: readonly PageLocation[];
  result: LoadResult;
  /** For each page delivered: the tier number that served it (the planner counts the hit there). */
  servedBy: Map<number, number>;
}

/** Counts and reports pages whose checksum failed. */
export function reportIntegrity(s: HierarchyState, outcomes: readonly ReadOutcome[], tier: string): void {
  for (const o of outcomes) {
    if (o.status === 'error' && o.error.code === 'ERR_CHECKSUM') {
      s.counters.integrityFailures++;
      s.emit('integrity:failed', { key: o.key, tier, error: o.error });
    }
  }
}

/**
 * One driver read batch; a failure of the whole call becomes an error outcome per page (their copies stay
 * recorded). Never rejects. `options` default to the configured load deadline for this one call.
 */
export async function readOrFail(s: HierarchyState, tier: TierState, reads: PageRead[], options?: IoOptions): Promise<ReadOutcome[]> {
  try {
    return await tier.driver.read(reads, options ?? { timeoutMs: s.config.deadlines.loadMs });
  } catch (e) {
    // The whole call failed (deadline, closed tier, I/O): every page falls through to its next copy; the copies
    // stay recorded, since nothing proves them gone.
    const error = e instanceof TierSyncError ? e : new TierSyncError(`tier '${tier.name}' read failed: ${(e as Error).message}`, 'ERR_IO', { cause: e });
    s.emit('transfer:failed', { op: 'load', tier: tier.name, error });
    return reads.map((r) => ({ key: r.key, status: 'error', error }));
  }
}

/**
 * Copies the index promised on `tier` that the tier no longer has, or has damaged: forgotten by the index and by
 * the planner.
 */
export function forgetBroken(s: HierarchyState, tier: TierState, broken: readonly PageKey[]): void {
  if (!broken.length) return;
  const { index, planner } = ready(s);
  index.removeCopies(tier.name, broken, { force: true });
  planner.forget(tier.index, broken);
  s.emit('block:evicted', { keys: [...broken], tier: tier.name, why: 'lost' });
}

/**
 * Reads pages `indices` of a load whole, each from its fastest ready copy; a miss or a bad checksum falls through
 * to the next tier holding the page. `io` gives each driver call its limits (default: the configured load deadline
 * per call). Returns the indices found nowhere.
 */
export async function readWhole(s: HierarchyState, indices: readonly number[], ctx: LoadContext, io?: () => IoOptions): Promise<number[]> {
  const { index } = ready(s);
  const { hit, keys, copies, into, result } = ctx;
  let pending = [...indices];
  if (!pending.length) return pending;
  for (const tier of s.tiers) {
    const here = pending.filter((i) => copies[i]!.some((c) => c.tier === tier.name && c.state === 'ready'));
    if (!here.length) continue;
    const start = process.hrtime.bigint();
    const outcomes = await readOrFail(s, tier, here.map((i) => ({ key: keys[i]!, into: into[i]! })), io?.());
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    reportIntegrity(s, outcomes, tier.name);
    const done = new Set<number>();
    const broken: PageKey[] = [];
    outcomes.forEach((o, k) => {
      const i = here[k]!;
      if (o.status === 'hit') {
        done.add(i);
        result.loaded++;
        result.bytes += o.length;
        result.byTier[tier.name] = (result.byTier[tier.name] ?? 0) + 1;
        ctx.servedBy.set(i, tier.index);
      } else if (o.status === 'miss' || o.error.code === 'ERR_CHECKSUM') {
        // Only a miss or a failed checksum proves the copy gone or damaged; a transient error (ERR_IO,
        // ERR_TIMEOUT) leaves it recorded, or a durable page would be forgotten and freed at the next open.
        broken.push(keys[i]!);
      }
    });
    forgetBroken(s, tier, broken);
    let bytes = 0;
    for (const i of done) bytes += hit.pages[i]!.length;
    if (bytes > 0 && seconds > 0) tier.readBps = 0.8 * tier.readBps + 0.2 * (bytes / seconds);
    const verified = here.filter((i) => done.has(i)).map((i) => keys[i]!);
    if (tier.driver.capabilities.verifiesOnRead && verified.length) index.markVerified(tier.name, verified);
    s.emit('transfer:completed', { op: 'load', tier: tier.name, pages: done.size, bytes, seconds });
    pending = pending.filter((i) => !done.has(i));
    if (!pending.length) break;
  }
  return pending;
}
