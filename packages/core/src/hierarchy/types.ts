/**
 * The public shapes of the hierarchy: events, options and results of TierSync's methods.
 */
import type { TierSyncError } from '@tiersync/native';
import type { PolicyError, RetentionHint } from '@tiersync/policy';
import type { PageKey } from '@tiersync/tiers';

export interface TierSyncEvents {
  'block:stored': (e: { keys: PageKey[]; tier: string }) => void;
  /**
   * Copies left a tier: `evicted` by the planner (room, pressure, a refused admission), `deleted` by a caller or a
   * peer, or `lost` (found missing or damaged on read).
   */
  'block:evicted': (e: { keys: PageKey[]; tier: string; why: 'evicted' | 'deleted' | 'lost' }) => void;
  'block:demoted': (e: { keys: PageKey[]; from: string; to: string }) => void;
  'block:promoted': (e: { keys: PageKey[]; from: string; to: string }) => void;
  /** Pages copied down in the background to a write-through or selective tier (the source keeps its copy). */
  'block:copied': (e: { keys: PageKey[]; from: string; to: string; why: 'write-through' | 'selective' }) => void;
  'transfer:completed': (e: { op: 'store' | 'load' | 'move'; tier: string; pages: number; bytes: number; seconds: number }) => void;
  'transfer:failed': (e: { op: 'store' | 'load' | 'move'; tier: string; error: TierSyncError }) => void;
  'tier:pressure': (e: { tier: string; usedPages: number; capacityPages: number; victims: number }) => void;
  'integrity:failed': (e: { key: PageKey; tier: string; error: TierSyncError }) => void;
  /**
   * A tier's eviction policy threw or broke its contract (a custom policy): the planner went on without that call
   * (victims chosen so far freed, a page it could not admit left to the tiers below).
   */
  'policy:failed': (e: { tier: string; error: PolicyError }) => void;
  'load:layer': (e: LayerEvent) => void;
}

export interface LookupResult {
  /** Keys of every full page of the tokens, in order. */
  keys: PageKey[];
  /** The cached prefix: one entry per page found, in order. */
  pages: Array<{ key: PageKey; tier: string; tiers: readonly string[]; length: number }>;
  /** Tokens covered by the cached prefix. */
  tokens: number;
  /** Estimated time to load the prefix, from each tier's measured (or nominal) read bandwidth. */
  estimatedLoadMs: number;
}

/**
 * The answer of lookupKeys(): which of exactly the given keys are present. `pages` lists the present ones in input
 * order (so load() accepts it as it accepts a prefix lookup); `indices[j]` is the position in `keys` of `pages[j]`.
 */
export interface KeyLookupResult extends LookupResult {
  /** For each input key: whether some tier holds a ready copy. */
  present: boolean[];
  /** For each entry of `pages`: its index in `keys`. */
  indices: number[];
}

export interface DeleteResult {
  /** Keys removed from every tier and from the index. */
  deleted: PageKey[];
  /** Keys kept because a pin holds them (a TTL pin, a load in progress, or a driver-level pin). */
  pinned: PageKey[];
  /** Keys no tier held. */
  missing: PageKey[];
}

/** Options of store() and storeKeys(). */
export interface StoreOptions {
  /** Eviction priority of the new pages (higher is evicted later); needs config.priorities. Default 0. */
  priority?: number;
  /** Tenant the new pages count against (config.tenantQuotas). Default: config.tenant, or 'default'. */
  tenant?: string;
  /**
   * A soft retention hint for the stored pages and for those of them already stored (a session's whole context,
   * re-hinted each turn): `{ expectedReturnMs }` when the session is expected back (waiting on a tool call),
   * `{ finished: true }` when it will not come back. Tiers whose policy is `session-aware:...` order victims by it
   * (finished first, expected back soon last); it never refuses a store or holds a page the way pin() does, and
   * other policies ignore it. Default none.
   */
  retention?: RetentionHint;
}

/** Options of load(). */
export interface LoadOptions {
  /**
   * Deliver the pages layer group by layer group: every page's group g lands (and is reported through `onLayer` and
   * the `load:layer` event) before any page's group g+1, so the caller can compute layer l while l+1 arrives.
   * Default false (whole pages, one completion).
   */
  layerwise?: boolean;
  /** With `layerwise`: report runs of this many layers of a group instead of whole groups (see layerRanges()). */
  layersPerEvent?: number;
  /** With `layerwise`: called once per range, in page order, when that range of every loaded page is in place. */
  onLayer?: (event: LayerEvent) => void;
  /**
   * With `layerwise`: how many ranges are read at once (their events still come in order). Integer 1..64,
   * default 8. Each in-flight range holds one driver call per source tier.
   */
  rangesInFlight?: number;
  /**
   * Aborts the load: reads in flight are cancelled, no layer event follows, and load() rejects with ERR_ABORTED
   * once no read of it can still write into `into`. (A layerwise load also stops with ERR_TIMEOUT when it runs
   * past config.deadlines.loadMs; a whole load gives each tier read that long instead and reports what it could
   * not read as missing.)
   */
  signal?: AbortSignal;
}

/** A byte range of every page that holds some layers of one layer group. */
export interface LayerRange {
  /** The layer group's name in the layout. */
  group: string;
  /** Model layer indices whose KV this range holds. */
  layers: readonly number[];
  /** Bytes from the start of a page. */
  offset: number;
  length: number;
}

/** One range of a layerwise load, in place in every loaded page's destination. */
export interface LayerEvent extends LayerRange {
  /** 0-based position of this range in the load's ranges. */
  index: number;
  /** How many ranges the load delivers. */
  of: number;
  /** Pages whose bytes of this range are in place (missing pages are not counted). */
  pages: number;
}


export interface StoreResult {
  keys: PageKey[];
  /** Pages written now. */
  stored: number;
  /** Pages that were already stored. */
  existing: number;
  /** Pages not stored because the first tier had no room left (pinned pages fill it). */
  dropped: number;
  /** New pages the admission filter turned away (not looked up often enough yet). */
  notAdmitted: number;
  /** Write-through copies not queued because the background queue was full (backpressure: counted, not waited for). */
  writeThroughDropped: number;
}

export interface LoadResult {
  /** Pages delivered into their destination. */
  loaded: number;
  /** Indices (into the lookup's pages) of pages found on no tier any more: recompute these. */
  missing: number[];
  bytes: number;
  /** Pages delivered per tier. */
  byTier: Record<string, number>;
}
