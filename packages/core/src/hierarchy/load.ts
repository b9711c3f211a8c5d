/**
 * load(): pages of a lookup into the caller's memory. The planner pins them for the load (no eviction chooses
 * them meanwhile; no SQLite row per page), they are read whole or layer by layer, and the planner then counts the
 * hits and answers promotions and selective copies, which are queued behind the caller.
 */
import type { PlannerHit } from '@tiersync/policy';
import type { PageKey, PageLocation } from '@tiersync/tiers';
import { runMoves } from './background.js';
import { layerRanges, readLayerwise } from './layerwise.js';
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
  try {
    ctx.copies = index.copiesOf(keys);
    const all = keys.map((_, i) => i);
    result.missing = ranges ? await readLayerwise(s, all, ctx, ranges, options.onLayer) : await readWhole(s, all, ctx);
  } finally {
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
