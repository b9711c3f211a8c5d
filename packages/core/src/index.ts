/**
 * @tiersync/core: the tiersync memory hierarchy. For now it re-exports the native core's public API and the CLI
 * entry point; the hierarchy (block index, policy engine, TierSync API) builds on top.
 */
export * from '@tiersync/native';
export { main as runCli } from './cli/main.js';
export { runTransferBench, type TransferBenchReport, type TransferBenchOptions } from './bench/transfer.js';
export { TierSync, type TierSyncEvents, type LookupResult, type KeyLookupResult, type DeleteResult, type LoadOptions, type LayerRange, type LayerEvent, type StoreResult, type LoadResult } from './hierarchy/tier-sync.js';
export { parseConfig, type TierSyncConfig } from './hierarchy/config.js';
export * from './keys/index.js';
export { BlockIndex, SCHEMA_VERSION } from './index-store/index.js';
export type { IndexTier, BlockIndexOptions, NamespaceRecord, StorePage, BeginStoreResult, CommitEntry, CommitResult, PageHit, CopyState, CopyRecord, PageRecord, RemoveResult, RecoveryReport, TierStats as IndexTierStats, IndexStats } from './index-store/index.js';
export { runIndexBench, type IndexBenchReport, type IndexBenchOptions } from './bench/index-bench.js';
export { WeightPublisher, WeightReceiver, TierSource, PeerSource, type TensorSource, type PublishResult, type PullOptions, type PullResult, type WeightLease, type WeightManifest, type WeightEvents, type WeightMetrics, type PeerAddress } from './weights/index.js';
