/**
 * @tiersync/core: the tiersync memory hierarchy. Re-exports the native core's public API, and exports the TierSync
 * facade with its config, page keys, the block index, weight sync, trace replay through the live hierarchy, and the
 * CLI entry point. The simulator, the daemon and its client have subpaths of their own (`/sim`, `/server`,
 * `/client`, `/weights`).
 */
export * from '@tiersync/native';
export { main as runCli, UsageError as CliUsageError, type Command as CliCommand } from './cli/index.js';
export { TierSync, parseConfig, type ResolvedConfig, type TierSyncConfig, type TierSyncEvents, type LookupResult, type KeyLookupResult, type DeleteResult, type LoadOptions, type LayerRange, type LayerEvent, type StoreResult, type LoadResult } from './hierarchy/index.js';
export * from './keys/index.js';
export { BlockIndex, SCHEMA_VERSION } from './index/index.js';
export type { IndexTier, BlockIndexOptions, NamespaceRecord, StorePage, BeginStoreResult, CommitEntry, CommitResult, PageHit, CopyState, CopyRecord, PageRecord, RemoveResult, RecoveryReport, TierStats as IndexTierStats, IndexStats } from './index/index.js';
export { WeightPublisher, WeightReceiver, TierSource, PeerSource, type TensorSource, type PublishResult, type PullOptions, type PullResult, type WeightLease, type WeightManifest, type WeightEvents, type WeightMetrics, type PeerAddress } from './weights/index.js';
export { replayLive, runParity, parityConfig, parityCell, PARITY_CAPACITIES, PARITY_LAYOUT, type LiveReplayOptions, type LiveReplayResult, type ParityCapacity, type ParityCell, type ParityOptions, type ParityReport, type ParityWriteMode } from './replay/index.js';
