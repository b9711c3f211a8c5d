/**
 * Layerwise loads: pages arrive layer group by layer group, and the caller hears of range r (every page's bytes of
 * it in place and verified) before range r+1, so an engine computes layer l while layer l+1 arrives. Several
 * ranges are read at once (a bounded window), so the tiers' latency overlaps; events still come strictly in order.
 */
import { TierSyncError } from '@tiersync/native';
import type { IoOptions, PageKey, ReadOutcome } from '@tiersync/tiers';
import { forgetBroken, readOrFail, readWhole, reportIntegrity, type LoadContext } from './read.js';
import { ready, type HierarchyState } from './state.js';
import type { LayerEvent, LayerRange } from './types.js';

/**
 * Reads in flight at once by default (LoadOptions.rangesInFlight). Reads land in the caller's memory, so a deeper
 * window costs no buffers; with the first read alone, 8 kept the tiers busier than 4 (host total/whole 1.01-1.03
 * against 1.04-1.09 in alternating runs, docs/BENCHMARKS.md "Layer-wise window, session 6").
 */
export const DEFAULT_RANGES_IN_FLIGHT = 8;
/**
 * Most bytes of one page that one read covers when it merges adjacent ranges (see readPlan()): from memory tiers,
 * where a read costs little beyond its bytes; from disks and over networks, where each read is a disk operation
 * or a request whose latency a small read does not amortize (measured here on fs: 64 KiB reads of every page of a
 * load took 4-12x as long as whole pages, 1 MiB reads 1.2-1.5x).
 */
export const MERGED_READ_BYTES = { memory: 256 * 1024, io: 1024 * 1024 } as const;

/** One read of a layerwise load: ranges [from, to) of the load, adjacent in the page, read together. */
export interface RangeRead {
  from: number;
  to: number;
  offset: number;
  length: number;
}

/**
 * How a layerwise load reads its ranges: the first range alone (so the first event comes as early as it can), the
 * second alone (so the caller, busy with the first layer, soon has the next), then runs of adjacent ranges as
 * long as `maxBytes` of a page allows. Each read costs a request or a disk operation per page whatever its size,
 * so after the first two the fewest reads give the shortest load: on fs, 2 MiB pages of 32 layers read as 1, 1,
 * 16 and 14 layers took 1.08x a whole load (median of 7 runs), against 1.13x as 1, 1, 2, 4, 8, 16
 * (docs/BENCHMARKS.md, "Layer-wise reads as large as the cap"). The cap bounds how long the caller waits for the last
 * range of a read: at most `maxBytes` per page.
 */
export function readPlan(ranges: readonly LayerRange[], maxBytes: number = MERGED_READ_BYTES.memory): RangeRead[] {
  const out: RangeRead[] = [];
  for (let from = 0; from < ranges.length; ) {
    const first = ranges[from]!;
    let to = from + 1;
    let length = first.length;
    while (out.length >= 2 && to < ranges.length) {
      const r = ranges[to]!;
      if (r.offset !== first.offset + length || length + r.length > maxBytes) break;
      length += r.length;
      to++;
    }
    out.push({ from, to, offset: first.offset, length });
    from = to;
  }
  return out;
}

/**
 * The byte range of each layer group within a page, in page order (the page is the groups' parts laid out in group
 * order: keys/layout.ts). With `layersPerEvent`, groups are cut into runs of that many layers, assuming the engine
 * lays a group's part out layer-major (all tokens of layer l, then layer l+1), as vLLM's and llama.cpp's per-layer
 * KV buffers are.
 * @throws TierSyncError ERR_INVALID_ARGUMENT for a layersPerEvent that is not a positive integer.
 */
export function layerRanges(s: HierarchyState, options: { layersPerEvent?: number } = {}): LayerRange[] {
  const per = options.layersPerEvent;
  if (per !== undefined && (!Number.isSafeInteger(per) || per < 1)) throw new TierSyncError(`options.layersPerEvent must be an integer >= 1, got ${per}`, 'ERR_INVALID_ARGUMENT');
  const layout = s.namespace.layout;
  const out: LayerRange[] = [];
  let base = 0;
  for (const g of layout.groups) {
    const step = per ?? g.layers.length;
    const layerBytes = g.bytesPerTokenPerLayer * layout.tokensPerPage;
    for (let at = 0; at < g.layers.length; at += step) {
      const layers = g.layers.slice(at, at + step);
      out.push({ group: g.name, layers, offset: base + at * layerBytes, length: layers.length * layerBytes });
    }
    base += g.bytesPerPage;
  }
  return out;
}

/** How a layerwise load is bounded. */
export interface LayerwiseLimits {
  /** Ranges whose reads may be in flight at once (>= 1). */
  window: number;
  /** Aborts every read of the load (the caller's signal, or the load's deadline). */
  signal: AbortSignal;
  /** Epoch ms by which the load must have finished. */
  deadline: number;
}

/** One range's reads, one driver batch per source tier, started together. */
interface RangeBatch {
  /** Per source tier: the pages asked for and, once settled, their outcomes. */
  tiers: Array<{ t: number; pages: number[]; outcomes: Promise<ReadOutcome[]> }>;
  settled: Promise<unknown>;
}

/**
 * A layerwise load. Pages whose fastest copy is on a tier with range reads (`capabilities.rangeReads`: memory
 * tiers that need no checksum, and fs, object and peer, which verify each range against per-chunk CRC32Cs) arrive
 * range by range (in the reads of readPlan()), up to `limits.window` reads in flight; `onLayer` / `load:layer`
 * report range r once it is in place for every page, in range order. A range that failed its checksums is never reported: the page is read
 * whole from its next copy (after its other in-flight ranges have landed, so none of them overwrites it) before
 * the event of that range, or counts as missing from then on. Pages on tiers without range reads (memory tiers
 * with verify=true) are read whole and verified before the first event. Returns the indices found nowhere.
 * @throws TierSyncError ERR_ABORTED (the caller's signal) or ERR_TIMEOUT (the load's deadline) once every read in
 *   flight has settled; no event follows the abort, and no read of this load writes into `into` after the throw.
 */
export async function readLayerwise(
  s: HierarchyState,
  indices: readonly number[],
  ctx: LoadContext,
  ranges: readonly LayerRange[],
  onLayer: ((e: LayerEvent) => void) | undefined,
  limits: LayerwiseLimits,
): Promise<number[]> {
  const { hit, keys, copies, into, result } = ctx;
  const tierOf = (i: number) => s.tiers.findIndex((t) => copies[i]!.some((c) => c.tier === t.name && c.state === 'ready'));
  /** Pages read range by range, and the tier (number) each comes from. A page whose range failed leaves it. */
  const source = new Map<number, number>();
  for (const i of indices) {
    const t = tierOf(i);
    if (t >= 0 && s.tiers[t]!.driver.capabilities.rangeReads === true && hit.pages[i]!.length === s.pageBytes) source.set(i, t);
  }
  const io = (): IoOptions => ({ signal: limits.signal, timeoutMs: Math.max(1, limits.deadline - Date.now()) });
  const rest = indices.filter((i) => !source.has(i));
  const wholeDone = readWhole(s, rest, ctx, io);
  wholeDone.catch(() => undefined); // awaited below; a rejection before then must not go unhandled

  const launch = (range: RangeRead): RangeBatch => {
    const byTier = new Map<number, number[]>();
    for (const [i, t] of source) {
      let list = byTier.get(t);
      if (!list) byTier.set(t, (list = []));
      list.push(i);
    }
    const tiers = [...byTier].map(([t, pages]) => ({
      t,
      pages,
      outcomes: readOrFail(
        s,
        s.tiers[t]!,
        pages.map((i) => ({ key: keys[i]!, into: { arena: into[i]!.arena, offset: into[i]!.offset + range.offset, length: range.length }, range: { offset: range.offset, length: range.length } })),
        io(),
      ),
    }));
    return { tiers, settled: Promise.all(tiers.map((b) => b.outcomes)) };
  };
  // One plan for the load: the largest cap among the tiers it reads from.
  const slowReads = [...new Set(source.values())].some((t) => {
    const c = s.tiers[t]!.driver.capabilities;
    return c.persistent || c.remote;
  });
  const plan = readPlan(ranges, slowReads ? MERGED_READ_BYTES.io : MERGED_READ_BYTES.memory);
  const inFlight: RangeBatch[] = [];
  let next = 0;
  const fill = (window: number) => {
    while (next < plan.length && inFlight.length < window && !limits.signal.aborted) inFlight.push(launch(plan[next++]!));
  };
  /** Resolves once no read of this load is running (readOrFail never rejects). */
  const drain = async () => {
    await Promise.all(inFlight.map((b) => b.settled));
    await wholeDone.catch(() => undefined);
  };
  const stopIfAborted = async () => {
    if (!limits.signal.aborted) return;
    await drain();
    throw abortError(limits.signal);
  };

  const missing: number[] = [];
  const started = process.hrtime.bigint();
  // The first read goes alone: building the others (a descriptor per page each) would hold the JavaScript thread
  // while the first completes, and the first event waits on that thread. The window opens after its events.
  fill(1);
  for (const [n, read] of plan.entries()) {
    const batch = inFlight[0]!;
    await batch.settled;
    await stopIfAborted();
    const failed: number[] = [];
    for (const b of batch.tiers) {
      const tier = s.tiers[b.t]!;
      // Only pages still read range by range count: one that failed an earlier range is already whole elsewhere.
      const outcomes: ReadOutcome[] = [];
      const pages: number[] = [];
      (await b.outcomes).forEach((o, k) => {
        if (source.get(b.pages[k]!) !== b.t) return;
        outcomes.push(o);
        pages.push(b.pages[k]!);
      });
      // A range that failed its chunk checksums is reported like a page.
      reportIntegrity(s, outcomes, tier.name);
      const broken: PageKey[] = [];
      outcomes.forEach((o, k) => {
        if (o.status === 'hit') return;
        const i = pages[k]!;
        failed.push(i);
        if (o.status === 'miss' || o.error.code === 'ERR_CHECKSUM') broken.push(keys[i]!);
        // The rest of this page comes whole from its next copy.
        copies[i] = copies[i]!.filter((c) => c.tier !== tier.name);
      });
      forgetBroken(s, tier, broken);
    }
    inFlight.shift();
    for (const i of failed) source.delete(i);
    // Later ranges of failed pages may be in flight (and a failing range may have landed unverified bytes): their
    // whole read waits for those, so nothing lands over it. Reads started from here on leave them out.
    if (failed.length) {
      await Promise.all(inFlight.map((b) => b.settled));
      await stopIfAborted();
      missing.push(...(await readWhole(s, failed, ctx, io)));
    }
    if (n === 0) missing.push(...(await wholeDone));
    await stopIfAborted();
    for (let r = read.from; r < read.to; r++) {
      const range = ranges[r]!;
      const event: LayerEvent = { index: r, of: ranges.length, group: range.group, layers: range.layers, offset: range.offset, length: range.length, pages: indices.length - missing.length };
      s.emit('load:layer', event);
      onLayer?.(event);
      // A listener may abort the load: no further event then (an abort after the last event changes nothing).
      if (r < ranges.length - 1) await stopIfAborted();
    }
    // The freed slot is refilled after the events: building a read costs the JavaScript thread time (a descriptor
    // per page) that the caller's first layers should not wait for, and the other reads keep the tiers busy.
    fill(limits.window);
  }
  if (!ranges.length) missing.push(...(await wholeDone));
  // Pages that arrived range by range: counted once all their ranges are in place.
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const perTier = new Map<number, number[]>();
  for (const [i, t] of source) {
    let list = perTier.get(t);
    if (!list) perTier.set(t, (list = []));
    list.push(i);
  }
  for (const [t, list] of perTier) {
    const tier = s.tiers[t]!;
    let bytes = 0;
    for (const i of list) {
      bytes += hit.pages[i]!.length;
      ctx.servedBy.set(i, t);
    }
    result.loaded += list.length;
    result.bytes += bytes;
    result.byTier[tier.name] = (result.byTier[tier.name] ?? 0) + list.length;
    // Every range of these pages passed its chunk checksums, and the ranges cover the page.
    if (tier.driver.capabilities.verifiesOnRead) ready(s).index.markVerified(tier.name, list.map((i) => keys[i]!));
    s.emit('transfer:completed', { op: 'load', tier: tier.name, pages: list.length, bytes, seconds });
  }
  return missing.sort((a, b) => a - b);
}

/** The error a stopped load throws: the signal's own TierSyncError (the deadline's), else ERR_ABORTED. */
export function abortError(signal: AbortSignal): TierSyncError {
  const reason: unknown = signal.reason;
  if (reason instanceof TierSyncError) return reason;
  return new TierSyncError(`load aborted${reason instanceof Error ? `: ${reason.message}` : ''}`, 'ERR_ABORTED', reason === undefined ? {} : { cause: reason });
}
