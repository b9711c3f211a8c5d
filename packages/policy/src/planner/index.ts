/**
 * The planner: one pure home for every placement decision (admission, placement, room and victims, demotion,
 * write-through / selective copies, promotion, pins, priorities, quotas). The live hierarchy executes its moves
 * with bytes; the simulator executes them by counting.
 */
export { Planner } from './planner.js';
export { PinTable, type LoadPinId, type TtlPin } from './pins.js';
export { resolvePlannerConfig, type ResolvedPlannerConfig, type ResolvedTier } from './config.js';
export type {
  CopyReason,
  EvictReason,
  Move,
  MoveId,
  MoveOutcome,
  PlannerConfig,
  PlannerHit,
  PlannerLookup,
  PlannerOptions,
  PlannerQuotas,
  PlannerStoreOptions,
  PlannerTierConfig,
  PlannerTierView,
  RefuseReason,
  ReportedMove,
  RetentionHint,
} from './types.js';
