/**
 * Per-tenant quotas over one shared capacity. Each tenant has its own inner policy (LRU by default) ordering its
 * victims, and a quota in units.
 *
 * - Victims come from the tenant that is furthest over its share: the largest `used / quota` among tenants with
 *   an unpinned object (a tenant over quota is therefore always chosen before any tenant within quota); ties go
 *   to the tenant whose id sorts first. A quota of 0 makes any use infinitely over.
 * - A tenant about to exceed its quota with an insert either evicts its own objects first (`'evict-own'`, the
 *   default) or is refused admission (`'refuse'`: `canAdmit` is false).
 */
import { PartitionedPolicy, type PartitionFactory, type PartitionState } from './internal/partitioned.js';
import { LruPolicy } from './policies/lru.js';
import { checkInteger, checkOptions, describe } from './internal/validate.js';
import type { PolicyKey, PolicyOptions } from './types.js';

/** What happens to an insert that would take a tenant over its quota. */
export type OverQuotaMode = 'evict-own' | 'refuse';

/** Options of {@link TenantQuotaPolicy}. */
export interface TenantQuotaOptions<K extends PolicyKey = PolicyKey> extends PolicyOptions {
  /** The tenant of a key (a non-empty string). Must be deterministic. */
  tenantOf: (key: K) => string;
  /** Quota per tenant, in units (non-negative safe integers). */
  quotas?: Readonly<Record<string, number>>;
  /** Quota of tenants missing from `quotas`, in units. Default: the whole capacity. */
  defaultQuota?: number;
  /** Default `'evict-own'`. */
  overQuota?: OverQuotaMode;
  /** Builds the inner policy of one tenant. Default: `new LruPolicy(options)`. */
  create?: PartitionFactory<string>;
}

/** Tenants sharing one capacity under quotas. */
export class TenantQuotaPolicy<K extends PolicyKey = PolicyKey> extends PartitionedPolicy<K, string> {
  override readonly name = 'tenant-quota';
  readonly overQuota: OverQuotaMode;
  readonly #tenantOf: (key: K) => string;
  readonly #quotas = new Map<string, number>();
  readonly #defaultQuota: number;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: TenantQuotaOptions<K>) {
    super({ ...options, create: options.create ?? ((o) => new LruPolicy(o)) });
    if (typeof options.tenantOf !== 'function') {
      throw new TypeError(`options.tenantOf must be a function, got ${describe(options.tenantOf)}`);
    }
    this.#tenantOf = options.tenantOf;
    this.#defaultQuota = checkInteger(options.defaultQuota ?? this.capacity, 'options.defaultQuota', 0);
    const mode = options.overQuota ?? 'evict-own';
    if (mode !== 'evict-own' && mode !== 'refuse') {
      throw new TypeError(`options.overQuota must be 'evict-own' or 'refuse', got ${describe(mode)}`);
    }
    this.overQuota = mode;
    if (options.quotas !== undefined) {
      checkOptions(options.quotas, 'options.quotas');
      for (const [tenant, quota] of Object.entries(options.quotas)) this.setQuota(tenant, quota);
    }
  }

  /** The quota of `tenant`, in units. */
  quotaOf(tenant: string): number {
    return this.#quotas.get(tenant) ?? this.#defaultQuota;
  }

  /**
   * Sets the quota of `tenant`, in units. Lowering it evicts nothing by itself: the tenant's objects become the
   * first victims, and in `'refuse'` mode its inserts are refused until it is back under.
   * @throws RangeError unless a non-negative safe integer; TypeError for an empty or non-string tenant
   */
  setQuota(tenant: string, quota: number): void {
    if (typeof tenant !== 'string' || tenant === '') {
      throw new TypeError(`tenant must be a non-empty string, got ${describe(tenant)}`);
    }
    this.#quotas.set(tenant, checkInteger(quota, `quotas[${describe(tenant)}]`, 0));
  }

  /** The tenant of a resident key, `undefined` when absent. */
  tenantOfResident(key: K): string | undefined {
    return this.partitionOf(key);
  }

  protected override partitionFor(key: K): string {
    const tenant = this.#tenantOf(key);
    if (typeof tenant !== 'string' || tenant === '') {
      throw new TypeError(`options.tenantOf must return a non-empty string, got ${describe(tenant)} for ${describe(key)}`);
    }
    return tenant;
  }

  protected override pressureFrom(state: Map<string, PartitionState>): string | undefined {
    let best: string | undefined;
    let bestRatio = -1;
    for (const [tenant, s] of state) {
      if (s.evictable === 0) continue;
      const quota = this.quotaOf(tenant);
      const ratio = quota === 0 ? Infinity : s.used / quota;
      if (ratio > bestRatio || (ratio === bestRatio && tenant < best!)) {
        best = tenant;
        bestRatio = ratio;
      }
    }
    return best;
  }

  protected override roomFrom(state: Map<string, PartitionState>, tenant: string, cost: number): string | undefined {
    const own = state.get(tenant);
    if (this.overQuota === 'evict-own' && own !== undefined && own.used + cost > this.quotaOf(tenant)) return tenant;
    return super.roomFrom(state, tenant, cost);
  }

  protected override admitsTo(tenant: string, cost: number, state: Map<string, PartitionState>): boolean {
    const own = state.get(tenant) ?? { used: 0, pinnedUsed: 0, evictable: 0 };
    const quota = this.quotaOf(tenant);
    return this.overQuota === 'refuse' ? own.used + cost <= quota : own.pinnedUsed + cost <= quota;
  }
}
