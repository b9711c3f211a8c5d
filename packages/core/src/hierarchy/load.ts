/**
 * load(): pages of a lookup into the caller's memory. The planner pins them for the load (no eviction chooses
 * them meanwhile; no SQLite row per page), they are read whole or layer by layer, and the planner then counts the
 * hits and answers promotions and selective copies, which are queued behind the caller.
 */
import type { PlannerHit } from '@tiersync/policy';
import type { PageKey, PageLocation } from '@tiersync/tiers';
import { runMoves } from './background.js';
import { TierSyncError } from '@tiersync/native';
import { abortError, DEFAULT_RANGES_IN_FLIGHT, layerRanges, readLayerwise } from './layerwise.js';
import { readWhole, type LoadContext } from './read.js';
import { ready, type HierarchyState } from './state.js';
import type { LoadOptions, LoadResult, LookupResult } from './types.js';

/** Loads the pages of `hit` into `into` (both validated by the caller). */
export async function loadPages(s: HierarchyState, hit: LookupResult, into: readonly PageLocation[], options: LoadOptions): Promise<LoadResult> {
  const { index, planner } = ready(s);
  const ranges = options.layerwise === true ? layerRanges(s, options.layersPerEvent === undefined ? {} : { layersPerEvent: options.layersPerEvent }) : undefined;
  const keys = hit.pages.map((p) => p.key);
  const pin = planner.beginLoad(keys);
  const result: LoadResult = { loaded: 0, missing: [], bytes: 0, byTier: {} };
  const ctx: LoadContext = { hit, keys, copies: [], into, result, servedBy: new Map() };
  let touched: PageKey[] = [];
  // One controller aborts every read of this load: the caller's signal, and for layerwise loads the load's
  // deadline (config.deadlines.loadMs from now; a whole load gives each tier call that long instead).
  const stop = new AbortController();
  const caller = options.signal;
  const forward = () => stop.abort(caller?.reason);
  if (caller?.aborted) forward();
  else caller?.addEventListener('abort', forward, { once: true });
  const loadMs = s.config.deadlines.loadMs;
  const deadline = Date.now() + loadMs;
  const timer = ranges ? setTimeout(() => stop.abort(new TierSyncError(`layerwise load passed its ${loadMs} ms deadline (config.deadlines.loadMs)`, 'ERR_TIMEOUT')), loadMs) : undefined;
  try {
    if (stop.signal.aborted) throw abortError(stop.signal);
    ctx.copies = index.copiesOf(keys);
    const all = keys.map((_, i) => i);
    if (ranges) {
      result.missing = await readLayerwise(s, all, ctx, ranges, options.onLayer, { window: options.rangesInFlight ?? DEFAULT_RANGES_IN_FLIGHT, signal: stop.signal, deadline });
    } else {
      result.missing = await readWhole(s, all, ctx, caller ? () => ({ signal: stop.signal, timeoutMs: loadMs }) : undefined);
      // Pages may have fallen through to nothing because of the abort: say so rather than call them missing.
      if (stop.signal.aborted) throw abortError(stop.signal);
    }
  } finally {
    clearTimeout(timer);
    caller?.removeEventListener('abort', forward);
    planner.endLoad(pin);
  }
  // Hits in page order, once every page is read: accesses, hit counts, promotions and selective copies follow the
  // same order whatever order the tiers answered in (the simulator replays exactly this).
  const hits: PlannerHit[] = [];
  for (let i = 0; i < keys.length; i++) {
    const tier = ctx.servedBy.get(i);
    if (tier !== undefined) hits.push({ key: keys[i]!, tier });
  }
  touched = hits.map((h) => h.key);
  if (touched.length) index.touch(touched);
  await runMoves(s, planner.load(hits));
  s.counters.loads++;
  s.counters.pagesLoaded += result.loaded;
  s.counters.pagesMissing += result.missing.length;
  return result;
}
