/**
 * The hierarchy folder's entry: the TierSync facade, its public types, and the translation of a hierarchy config
 * into the planner's (which the simulator uses to plan with the very same rules).
 */
export { TierSync } from './tier-sync.js';
export type { DeleteResult, KeyLookupResult, LayerEvent, LayerRange, LoadOptions, LoadResult, LookupResult, StoreOptions, StoreResult, TierSyncEvents } from './types.js';
export { configIssuesError, parseConfig, tierConfigSchema, tierSyncConfigSchema, type ResolvedConfig, type TierSyncConfig } from './config.js';
export { plannerConfigOf, writeModeOf, UNLIMITED_PAGES } from './planner-config.js';
export type { ReconcileReport, TierAdoption } from './reconcile.js';
