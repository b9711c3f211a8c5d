/**
 * Checking a {@link PlannerConfig} once, at construction, into the resolved form the planner works from.
 */
import { checkWriteMode, type WriteMode } from '../write-mode.js';
import { checkPromotionRule, type PromotionRule } from '../promotion.js';
import { checkInteger, checkNumber, checkOptions, describe } from '../internal/validate.js';
import { hasPolicy, policyNames, policyWrapperNames } from '../registry.js';
import type { AdmissionConfig } from '../admission.js';
import type { OverQuotaMode } from '../tenant-quota.js';
import type { PlannerConfig } from './types.js';

/** A tier with every default applied. */
export interface ResolvedTier {
  readonly name: string;
  readonly capacityPages: number;
  readonly highWatermark: number;
  readonly lowWatermark: number;
  readonly policy: string;
  readonly writeMode: WriteMode;
}

/** A config with every default applied. */
export interface ResolvedPlannerConfig {
  readonly tiers: readonly ResolvedTier[];
  readonly admission: AdmissionConfig;
  readonly priorities: boolean;
  readonly tenantQuotas: { readonly shares: Readonly<Record<string, number>>; readonly defaultShare: number; readonly overQuota: OverQuotaMode } | undefined;
  readonly defaultTenant: string;
  readonly promotion: PromotionRule;
}

/**
 * Applies defaults and checks every field.
 * @throws TypeError / RangeError naming the field (`config.tiers[1].lowWatermark ...`)
 */
export function resolvePlannerConfig(config: PlannerConfig): ResolvedPlannerConfig {
  checkOptions(config, 'config');
  if (!Array.isArray(config.tiers) || config.tiers.length < 1 || config.tiers.length > 16) {
    throw new RangeError(`config.tiers must be an array of 1..16 tiers, got ${describe(config.tiers)}`);
  }
  const names = new Set<string>();
  const known = policyNames();
  const tiers = config.tiers.map((t, i): ResolvedTier => {
    const at = `config.tiers[${i}]`;
    checkOptions(t, at);
    if (typeof t.name !== 'string' || t.name === '') throw new TypeError(`${at}.name must be a non-empty string, got ${describe(t.name)}`);
    if (names.has(t.name)) throw new RangeError(`${at}.name ${describe(t.name)} is used twice`);
    names.add(t.name);
    const capacityPages = checkInteger(t.capacityPages, `${at}.capacityPages`, 1);
    const highWatermark = checkNumber(t.highWatermark ?? 0.95, `${at}.highWatermark`, Number.MIN_VALUE, 1);
    const lowWatermark = checkNumber(t.lowWatermark ?? 0.85, `${at}.lowWatermark`, Number.MIN_VALUE, highWatermark);
    const policy = t.policy ?? 'lru';
    if (!hasPolicy(policy)) throw new RangeError(`${at}.policy: unknown policy ${describe(policy)} (known: ${known.join(', ')}; wrappers, as 'wrapper:policy': ${policyWrapperNames().join(', ')})`);
    const mode = t.writeMode ?? 'write-back';
    const writeMode = checkWriteMode(typeof mode === 'string' ? ({ kind: mode } as WriteMode) : mode);
    return { name: t.name, capacityPages, highWatermark, lowWatermark, policy, writeMode };
  });
  const q = config.tenantQuotas;
  let tenantQuotas: ResolvedPlannerConfig['tenantQuotas'];
  if (q !== undefined) {
    checkOptions(q, 'config.tenantQuotas');
    checkOptions(q.shares, 'config.tenantQuotas.shares');
    for (const [tenant, share] of Object.entries(q.shares)) checkNumber(share, `config.tenantQuotas.shares[${describe(tenant)}]`, 0, 1);
    const overQuota = q.overQuota ?? 'evict-own';
    if (overQuota !== 'evict-own' && overQuota !== 'refuse') throw new TypeError(`config.tenantQuotas.overQuota must be 'evict-own' or 'refuse', got ${describe(overQuota)}`);
    tenantQuotas = { shares: { ...q.shares }, defaultShare: checkNumber(q.defaultShare ?? 1, 'config.tenantQuotas.defaultShare', 0, 1), overQuota };
  }
  const defaultTenant = config.defaultTenant ?? 'default';
  if (typeof defaultTenant !== 'string' || defaultTenant === '') throw new TypeError(`config.defaultTenant must be a non-empty string, got ${describe(defaultTenant)}`);
  const p = config.promoteOnHit ?? true;
  const promotion = checkPromotionRule(p === true ? { kind: 'to-top' } : p === false ? { kind: 'never' } : p);
  if (config.priorities !== undefined && typeof config.priorities !== 'boolean') throw new TypeError(`config.priorities must be a boolean, got ${describe(config.priorities)}`);
  return { tiers, admission: config.admission ?? { kind: 'always' }, priorities: config.priorities ?? false, tenantQuotas, defaultTenant, promotion };
}
