/**
 * @tiersync/native: the native transfer core. Arenas (host, device), open files, the transfer engine that moves
 * bytes between them on native threads, CRC32C, and machine probes.
 */
export { TierSyncError, checkInteger, describeValue, type ErrorCode, type TierSyncErrorOptions } from './errors.js';
export { HostArena, DeviceArena, cudaStatus, type HostArenaOptions, type DeviceArenaOptions } from './arena.js';
export { FileHandle, probeDirect, DIRECT_ALIGNMENT, type DirectMode, type FileHandleOptions } from './file.js';
export {
  TransferBatch,
  TransferEngine,
  type Endpoint,
  type Priority,
  type SubmitOptions,
  type TransferResult,
  type TransferStats,
  type TransferEngineOptions,
} from './engine.js';
export { PageAllocator, type Slot } from './page-allocator.js';
export { crc32c, crc32cCombine, crc32cImplementations, crc32cWith, type Crc32cImplementation } from './crc32c.js';
export { crc32cRanges } from './checksum-ranges.js';
export { hmacSha256Hex } from './hmac.js';
export { formatCrc32c, formatPeerFrames, probeMachine, type MachineReport } from './probe.js';
export { PeerServer, PeerClient, PeerStatus, peerFrames, peerFrameCrypto, type PeerServerRequest, type PeerPlan, type PeerCommitBatch, type PeerCommitAnswer, type PeerSlotTable, type PeerPageLocations, type PeerServerOptions, type PeerClientOptions, type PeerReply, type PeerStatusCode } from './peer.js';
export type { PeerFrameCrypto, PeerServerStats } from './addon.js';
export { FileLock } from './file-lock.js';
export { RespDoorNative, RespMirrorOps, respNativeAvailable, respPageKeys, type RespNativeEvent, type RespNativeOptions, type RespNativeStats, type RespPageKeySpec } from './resp.js';
