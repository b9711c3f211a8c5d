/**
 * A hierarchy config file (the one TierSync, `tiersync serve` and `tiersync demo` take) as the simulator sees it:
 * the planner's config (tiers with capacities in pages, write modes, watermarks, policies, admission, priorities,
 * quotas, promotion) plus what the TTFT model needs (page size, each tier's kind). No driver is opened.
 */
import type { PlannerConfig } from '@tiersync/policy';
import type { ResolvedConfig } from '../hierarchy/index.js';
import { kvLayout, kvLayoutPreset, type KvLayoutInput, type KvPresetName } from '../keys/index.js';
import { configError } from './errors.js';
import { parseSize } from './units.js';
import { capacityPagesOf } from '@tiersync/tiers/capacity';

/** Pages of a tier whose URL names no capacity (as the live hierarchy counts an unlimited tier). */
export const UNLIMITED_PAGES = 2 ** 31;

/** One tier of a simulated hierarchy. */
export interface SimTier {
  /** Name in counters and reports (config `name`, default the URL scheme as the live hierarchy names it). */
  name: string;
  /** URL scheme: `hbm`, `host`, `fs`, `s3`, `gs`, `peer`. */
  scheme: string;
  /** Capacity from the URL's `capacity`, bytes (0 = none given: unlimited). */
  capacityBytes: number;
  /** Pages the tier holds. */
  capacityPages: number;
}

/** A hierarchy config, resolved for the simulator. */
export interface SimHierarchy {
  /** Tokens per page of the config's layout. */
  tokensPerPage: number;
  /** Bytes per page of the config's layout. */
  pageBytes: number;
  tiers: SimTier[];
  /** What the planner runs with. */
  planner: PlannerConfig;
  /** Most pages waiting for background copies; beyond it copies are dropped (config `maxQueuedPages`). */
  maxQueuedPages: number;
}

/** Tier names as the live hierarchy gives them when the config names none: the driver kind of the scheme. */
const KIND: Record<string, string> = { s3: 'object', gs: 'object' };

/** The page geometry of a config's layout. @throws TierSyncError for a bad layout */
export function configLayout(config: ResolvedConfig): { tokensPerPage: number; pageBytes: number } {
  const layout = typeof config.layout === 'string' ? kvLayoutPreset(config.layout as KvPresetName, { tokensPerPage: config.tokensPerPage }) : kvLayout(config.layout as KvLayoutInput);
  return { tokensPerPage: layout.tokensPerPage, pageBytes: layout.bytesPerPage };
}

/**
 * Resolves a hierarchy config for the simulator. `capacityPages` overrides the pages each tier holds (default: what
 * the opened driver would hold, `capacityPagesOf`: an fs tier's slot headers included; {@link UNLIMITED_PAGES} without
 * a capacity).
 * @throws TierSyncError ERR_CONFIG for a tier URL without a scheme or with a capacity below one page
 */
export function simHierarchy(config: ResolvedConfig, capacityPages?: readonly number[]): SimHierarchy {
  const { tokensPerPage, pageBytes } = configLayout(config);
  const tiers = config.tiers.map((t, i): SimTier => {
    const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(t.url)?.[1];
    if (!scheme) throw configError(`config tiers.${i}.url: '${t.url}' is not a tier URL (scheme://...)`);
    const query = t.url.includes('?') ? new URLSearchParams(t.url.slice(t.url.indexOf('?') + 1)) : new URLSearchParams();
    const text = query.get('capacity');
    const capacityBytes = text === null ? 0 : parseSize(text, `config tiers.${i}.url capacity`);
    // As many pages as the opened driver would hold (an fs tier's slot headers included), without opening it.
    const pages = capacityPages?.[i] ?? capacityPagesOf(t.url, pageBytes) ?? UNLIMITED_PAGES;
    if (!Number.isSafeInteger(pages) || pages < 1) throw configError(`config tiers.${i}: capacity ${text ?? ''} holds no ${pageBytes}-byte page`);
    return { name: t.name ?? KIND[scheme] ?? scheme, scheme, capacityBytes, capacityPages: pages };
  });
  const planner: PlannerConfig = {
    tiers: config.tiers.map((t, i) => ({
      name: tiers[i]!.name,
      capacityPages: tiers[i]!.capacityPages,
      highWatermark: t.highWatermark,
      lowWatermark: t.lowWatermark,
      policy: t.policy,
      writeMode: t.writeMode ?? (t.writeThrough ? 'write-through' : 'write-back'),
    })),
    admission: config.admission,
    priorities: config.priorities,
    ...(config.tenantQuotas ? { tenantQuotas: config.tenantQuotas } : {}),
    defaultTenant: config.tenant || 'default',
    promoteOnHit: config.promoteOnHit,
  };
  return { tokensPerPage, pageBytes, tiers, planner, maxQueuedPages: config.maxQueuedPages };
}
