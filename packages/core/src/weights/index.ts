/**
 * Model weight synchronization for reinforcement learning (docs/WEIGHTS.md): content-addressed chunks, dedup
 * across versions, pipelined chain fan-out over the native peer data plane, atomic version switch in device
 * memory, staging on fs/object tiers.
 */
export { WeightPublisher, type WeightPublisherOptions, type TensorSource, type PublishResult } from './publisher.js';
export { WeightReceiver, type WeightReceiverOptions, type PullOptions, type PullResult } from './receiver.js';
export { ChunkStore, type ChunkStoreOptions, type StoredChunk, type ServeOptions } from './chunk-store.js';
export { VersionSlots, type SlotMemory, type WeightLease } from './version-slots.js';
export { PeerSource, TierSource, StoreSource, type ChunkSource, type PeerAddress, type FetchReply } from './sources.js';
export { stageVersion } from './staging.js';
export { loadSafetensors, generateTensors, changeTensors, chunksChangedPerStep, type LoadedTensors } from './tensor-sets.js';
export { emptyMetrics, type WeightEvents, type WeightMetrics } from './events.js';
export {
  MANIFEST_FORMAT, DEFAULT_CHUNK_BYTES, TENSOR_ALIGNMENT, DTYPE_BYTES, LATEST_KEY, canonicalDtype, manifestKey, parseManifest, encodeManifest, placements, checkVersion, chunkHash,
  type WeightManifest, type ManifestTensor, type ManifestChunk, type Placement,
} from './manifest.js';
