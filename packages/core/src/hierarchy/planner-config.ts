/**
 * The planner's config from a hierarchy config: one translation, used by TierSync and by the simulator, so both
 * plan with exactly the same rules.
 */
import type { PlannerConfig, WriteMode } from '@tiersync/policy';
import type { ResolvedConfig } from './config.js';

/** Pages of a tier whose driver reports no capacity (unbounded). */
export const UNLIMITED_PAGES = 2 ** 31;

/** A tier's write mode: `writeMode`, else the `writeThrough` shorthand, else write-back. */
export function writeModeOf(t: ResolvedConfig['tiers'][number]): WriteMode {
  if (t.writeMode === undefined) return { kind: t.writeThrough ? 'write-through' : 'write-back' };
  return typeof t.writeMode === 'string' ? { kind: t.writeMode } : t.writeMode;
}

/**
 * The planner config of a hierarchy whose tiers hold `capacityPages[i]` pages and are named `names[i]` (the
 * configured name, or the driver's kind).
 */
export function plannerConfigOf(config: ResolvedConfig, capacityPages: readonly number[], names: readonly string[]): PlannerConfig {
  return {
    tiers: config.tiers.map((t, i) => ({
      name: names[i]!,
      capacityPages: capacityPages[i]!,
      highWatermark: t.highWatermark,
      lowWatermark: t.lowWatermark,
      policy: t.policy,
      writeMode: writeModeOf(t),
    })),
    admission: config.admission,
    priorities: config.priorities,
    ...(config.tenantQuotas ? { tenantQuotas: config.tenantQuotas } : {}),
    defaultTenant: config.tenant || 'default',
    promoteOnHit: config.promoteOnHit,
  };
}
