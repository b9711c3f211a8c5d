/**
 * Replays a trace workload through a live TierSync with real bytes, and counts what really happened: lookups'
 * prefixes from their answers, and every page move from the hierarchy's events. This is `tiersync demo`'s engine and
 * the live half of the sim/live parity check (replay/parity.ts); the simulator's half is sim/planned.ts.
 *
 * Per request, as an inference engine would: look up the prompt's cached prefix, load it into the engine's KV memory
 * (checking every loaded byte against the pattern "prefill" wrote), "prefill" the pages that were not loaded, and
 * store the whole prompt (pages already held are skipped). Background work (promotions, write-through) is drained
 * after the load and after the store (`flush()`), so moves happen in one order on every run and the simulator can
 * replay the same order.
 *
 * Kept out of `@tiersync/core/sim` (it needs the native addon and the index); the simulator stays pure.
 */
import { HostArena, TierSyncError } from '@tiersync/native';
import { TierSync, type ResolvedConfig } from '../hierarchy/index.js';
import { emptyCounters, requestTokens, type ReplayCounters, type TierCounters, type Workload } from '../sim/index.js';

/** Options of {@link replayLive}. */
export interface LiveReplayOptions {
  /** The hierarchy (as parsed by parseConfig / loadServerConfig). Its layout's tokensPerPage must be the workload's. */
  config: ResolvedConfig;
  /** Requests to replay (sim/workload.ts). */
  workload: Workload;
  /** Called after each request. */
  onRequest?: (done: number, total: number, pagesLoaded: number, pagesRequested: number) => void;
}

/** What a live replay did. */
export interface LiveReplayResult {
  counters: ReplayCounters;
  pageBytes: number;
  pagesRequested: number;
  /** Pages loaded from the hierarchy into the engine's memory. */
  pagesLoaded: number;
  /** Pages the lookups found but load() reported missing. */
  pagesMissing: number;
  loadedBytes: number;
  /** Seconds spent in load() (for a throughput figure). */
  loadSeconds: number;
  pagesStored: number;
  /** Pages loaded, per tier they were read from. */
  loadsByTier: Record<string, number>;
  /** Loaded pages whose bytes were not what prefill wrote (must be 0). */
  corruptPagesServed: number;
  integrityFailures: number;
  tiers: Array<{ name: string; usedPages: number; capacityPages: number; bytesWritten: number; bytesRead: number; checksumFailures: number }>;
  seconds: number;
}

/** What "prefill" writes for a page: a pattern derived from its key, checked again whenever the page is loaded. */
export function fillPage(view: Uint8Array, key: string): void {
  let x = Number.parseInt(key.slice(0, 8), 16) | 1;
  for (let i = 0; i < view.length; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    view[i] = x & 0xff;
  }
}

/** Whether a loaded page holds what {@link fillPage} wrote for `key`. */
export function pageMatches(view: Uint8Array, key: string): boolean {
  let x = Number.parseInt(key.slice(0, 8), 16) | 1;
  for (let i = 0; i < view.length; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    if (view[i] !== (x & 0xff)) return false;
  }
  return true;
}

/** Counts the hierarchy's page moves into per-tier counters. */
function countMoves(ts: TierSync, tiers: TierCounters[]): void {
  const at = new Map(tiers.map((t) => [t.tier, t]));
  const tier = (name: string): TierCounters => {
    const t = at.get(name);
    if (!t) throw new Error(`event names tier '${name}', which the config does not have`);
    return t;
  };
  ts.on('block:stored', (e) => (tier(e.tier).inserts += e.keys.length));
  ts.on('block:demoted', (e) => {
    tier(e.from).demotions += e.keys.length;
    tier(e.to).inserts += e.keys.length;
  });
  ts.on('block:promoted', (e) => {
    tier(e.to).promotions += e.keys.length;
    tier(e.to).inserts += e.keys.length;
  });
  // Write-through and selective copies.
  ts.on('block:copied', (e) => (tier(e.to).inserts += e.keys.length));
  ts.on('block:evicted', (e) => e.why === 'evicted' && (tier(e.tier).evictions += e.keys.length));
}

/**
 * Replays `workload` through a fresh TierSync built from `config` (its tiers should be empty: the replay assumes it
 * starts cold). Closes the hierarchy before returning.
 * @throws TierSyncError from the hierarchy (ERR_CONFIG for a bad config, ERR_TIER_FULL, ...)
 */
export async function replayLive(options: LiveReplayOptions): Promise<LiveReplayResult> {
  const { config, workload } = options;
  const ts = new TierSync(config);
  if (ts.tokensPerPage !== workload.tokensPerPage) {
    throw new TierSyncError(`the workload has ${workload.tokensPerPage}-token pages, the config's layout ${ts.tokensPerPage}`, 'ERR_CONFIG');
  }
  const started = process.hrtime.bigint();
  await ts.open();
  const counters = emptyCounters(ts.stats().tiers.map((t) => t.name));
  countMoves(ts, counters.tiers);
  const byName = new Map(counters.tiers.map((t) => [t.tier, t]));
  let integrityFailures = 0;
  ts.on('integrity:failed', () => integrityFailures++);
  const P = ts.pageBytes;
  const maxPages = Math.max(1, ...workload.pages.map((p) => p.length));
  // The engine's KV memory for one request.
  const kv = HostArena.create({ capacity: maxPages * P, prefault: true });
  const r: Omit<LiveReplayResult, 'counters' | 'tiers' | 'seconds'> = {
    pageBytes: P, pagesRequested: 0, pagesLoaded: 0, pagesMissing: 0, loadedBytes: 0, loadSeconds: 0, pagesStored: 0, loadsByTier: {}, corruptPagesServed: 0, integrityFailures: 0,
  };
  let tiers: LiveReplayResult['tiers'];
  try {
    const total = workload.pages.length;
    for (let n = 0; n < total; n++) {
      const tokens = requestTokens(workload.blocks[n]!, workload.blockTokens, workload.tokensPerPage);
      const slots = Array.from({ length: workload.pages[n]!.length }, (_, i) => ({ arena: kv, offset: i * P, length: P }));
      const hit = ts.lookup(tokens);
      counters.requests++;
      counters.lookupPages += hit.keys.length;
      counters.prefixPageHits += hit.pages.length;
      for (const p of hit.pages) byName.get(p.tier)!.hits++;
      const loaded = new Set<number>();
      if (hit.pages.length) {
        const t = process.hrtime.bigint();
        const got = await ts.load(hit, slots);
        r.loadSeconds += Number(process.hrtime.bigint() - t) / 1e9;
        r.loadedBytes += got.bytes;
        r.pagesMissing += got.missing.length;
        for (const [tier, k] of Object.entries(got.byTier)) r.loadsByTier[tier] = (r.loadsByTier[tier] ?? 0) + k;
        const missing = new Set(got.missing);
        for (let i = 0; i < hit.pages.length; i++) if (!missing.has(i)) loaded.add(i);
        for (const i of loaded) if (!pageMatches(kv.view(i * P, P), hit.keys[i]!)) r.corruptPagesServed++;
        await ts.flush();
      }
      // "Prefill" the pages that were not loaded, then store the whole prompt (pages already held are skipped).
      for (let i = 0; i < slots.length; i++) if (!loaded.has(i)) fillPage(kv.view(i * P, P), hit.keys[i]!);
      const s = await ts.store(tokens, slots);
      await ts.flush();
      r.pagesStored += s.stored;
      r.pagesRequested += slots.length;
      r.pagesLoaded += loaded.size;
      options.onRequest?.(n + 1, total, r.pagesLoaded, r.pagesRequested);
    }
    tiers = ts.stats().tiers.map((t) => ({ name: t.name, usedPages: t.usedPages, capacityPages: t.capacityPages, bytesWritten: t.bytesWritten, bytesRead: t.bytesRead, checksumFailures: t.checksumFailures }));
  } finally {
    kv.close();
    await ts.close();
  }
  return { ...r, integrityFailures, counters, tiers, seconds: Number(process.hrtime.bigint() - started) / 1e9 };
}
