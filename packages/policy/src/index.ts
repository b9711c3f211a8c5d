/**
 * @tiersync/policy: eviction, admission, placement and prefetch decisions for tiersync, in pure TypeScript with
 * no workspace imports, so the live hierarchy and the offline simulator run the very same decisions.
 */
export type { CapacityUnit, DenseKeys, EvictionPolicy, PageHint, PolicyKey, PolicyOptions, Retention } from './types.js';
export { PolicyError, type PolicyErrorOptions } from './errors.js';

export { ArcPolicy } from './policies/arc.js';
export { ClockPolicy } from './policies/clock.js';
export { FifoPolicy } from './policies/fifo.js';
export { LfuPolicy } from './policies/lfu.js';
export { LruPolicy } from './policies/lru.js';
export { S3FifoPolicy, type S3FifoOptions } from './policies/s3fifo.js';
export { SievePolicy } from './policies/sieve.js';
export { GdsfPolicy } from './policies/gdsf.js';
export { LfudaPolicy } from './policies/lfuda.js';
export { LirsPolicy, type LirsOptions } from './policies/lirs.js';
export { MruPolicy } from './policies/mru.js';
export { NEVER_AGAIN, nextAccessDistances, OptPolicy } from './policies/opt.js';
export { OptSizePolicy } from './policies/opt-size.js';
export { SlruPolicy, type SlruOptions } from './policies/slru.js';
export { TwoQPolicy, type TwoQOptions } from './policies/twoq.js';
export { WTinyLfuPolicy, type WTinyLfuOptions } from './policies/wtinylfu.js';

export { evictFrom, PrefixAwarePolicy, PrefixHoldPolicy, SessionAwarePolicy, type SessionAwareOptions } from './wrappers/index.js';

export {
  createPolicy,
  hasPolicy,
  ORACLE_POLICIES,
  parsePolicySpec,
  policyNames,
  policyWrapperNames,
  PolicyRegistry,
  registerPolicy,
  wrapPolicy,
  type BuiltinPolicyName,
  type BuiltinPolicyOptions,
  type BuiltinWrapperName,
  type PolicyFactory,
  type PolicyWrapperFactory,
  type RegisterOptions,
} from './registry.js';
export { replay, type ReplayOptions, type ReplayResult, type TraceRequest } from './replay.js';
export {
  AlwaysAdmit,
  createAdmissionFilter,
  LookupCountAdmission,
  type AdmissionConfig,
  type AdmissionFilter,
  type LookupCountOptions,
} from './admission.js';
export { SeededRandom } from './random.js';
export { decideWrite, checkWriteMode, type WriteAction, type WriteEvent, type WriteMode, type WriteState } from './write-mode.js';
export { checkPromotionRule, promotionTarget, type PromotionRule } from './promotion.js';
export { prefetchPlan, type PrefetchOptions } from './prefetch.js';
export { PriorityPolicy, type PriorityOptions } from './priority.js';
export { TenantQuotaPolicy, type OverQuotaMode, type TenantQuotaOptions } from './tenant-quota.js';
export type { PartitionFactory, PartitionState } from './internal/partitioned.js';
export {
  Planner,
  PinTable,
  resolvePlannerConfig,
  type CopyReason,
  type EvictReason,
  type LoadPinId,
  type Move,
  type MoveId,
  type MoveOutcome,
  type PlannerConfig,
  type PlannerHit,
  type PlannerLookup,
  type PlannerOptions,
  type PlannerQuotas,
  type PlannerStoreOptions,
  type PlannerTierConfig,
  type PlannerTierView,
  type RefuseReason,
  type ReportedMove,
  type ResolvedPlannerConfig,
  type ResolvedTier,
  type RetentionHint,
  type TtlPin,
} from './planner/index.js';
