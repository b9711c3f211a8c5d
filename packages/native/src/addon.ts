/**
 * Loads the compiled addon (built by node-gyp at install) and hands it the TierSyncError class, so native code
 * throws the same typed errors as TypeScript. Internal: the public API wraps these raw classes.
 */
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TierSyncError } from './errors.js';

/** Raw native classes and functions; see cpp/*.cc. */
export interface NativeAddon {
  HostArena: new (options: object) => NativeHostArena;
  DeviceArena: new (options: object) => NativeDeviceArena;
  FileHandle: new (options: object) => NativeFile;
  TransferEngine: new (options: object) => NativeEngine;
  setErrorClass(cls: unknown): void;
  /** impl: true = the table path, or an implementation's name (crc32cImpls); copyTo: copy the data there while checksumming. */
  crc32c(data: ArrayBufferView, seed?: number, impl?: boolean | string, copyTo?: ArrayBufferView): number;
  crc32cImpls: { selected: string; available: string[]; folding: boolean };
  cudaStatus(): { available: boolean; devices: number; runtimeVersion: number; library: string; reason?: string };
  ioUringStatus(): { available: boolean; reason?: string };
  probeDirect(dir: string): { supported: boolean; reason?: string };
  benchMemcpy(dst: NativeEndpoint, src: NativeEndpoint, bytes: number, threads: number, chunk: number): number;
  benchFileLoop(path: string, mode: 'write' | 'read', arena: NativeEndpoint, bytes: number, block: number): number;
  benchTcp(src: NativeEndpoint, dst: NativeEndpoint, bytes: number, chunk: number, netns?: string, address?: string): number;
  PeerServer: new (options: object, arena: NativeEndpoint, plan: (request: never) => unknown, commit?: (batch: never) => unknown) => NativePeerServer;
  connectPeer(options: object): Promise<NativePeerClient>;
  decodePeerFrame(bytes: Uint8Array): NativePeerFrame;
  peerFrameCrypto(): PeerFrameCrypto;
  encodePeerFrame(op: number, requestId: number, entries: object[], payloadBytes: number): Uint8Array;
  tryLockFile(fd: number, shared?: boolean): boolean;
  crc32cRanges(arena: NativeEndpoint, offsets: Float64Array, lengths: Uint32Array, threads?: number): Promise<Uint32Array>;
  hmacSha256Hex(key: Uint8Array, messages: string[]): string[];
}
/** Which library seals peer frames (documented at peerFrameCrypto). */
export interface PeerFrameCrypto {
  source: 'ipsec-mb' | 'system' | 'node';
  version: string;
}
/** What a peer server counted (documented at PeerServer.stats). */
export interface PeerServerStats {
  connections: number;
  authFailures: number;
  refused: number;
  active: number;
  putRequests: number;
  getRequests: number;
  hasRequests: number;
  deleteRequests: number;
  pooledPuts: number;
  pooledSlots: number;
  heldKeys: number;
  getsPlannedHere: number;
  hasAnsweredHere: number;
  rangesByChunk: number;
  rangesWhole: number;
  rangesAnnounced: number;
}
export interface NativePeerServer {
  port(): number;
  stats(): PeerServerStats;
  close(): void;
  grant(offsets: Float64Array, slotBytes: number): void;
  takePool(): Float64Array;
  holdKeys(keys: string[], where?: { offsets: Float64Array; lengths: Uint32Array; crcs: Uint32Array; slots: Uint32Array; versions: Uint32Array }): void;
  shareSlots(versions: Uint32Array, pins: Int32Array, dataOffset: number): void;
  dropKeys(keys: string[]): void;
  drain(): void;
  keepSlotRecords(dataOffset: number, recordBytes: number): void;
}
export interface NativePeerClient {
  request(op: string, arena: NativeEndpoint | null, keys: string[], offsets?: Float64Array, lengths?: Uint32Array, crcs?: Uint32Array, computeCrc?: boolean, rangeOffsets?: Float64Array, rangeLengths?: Uint32Array): Promise<{ statuses: Uint8Array; lengths: Uint32Array; crcs: Uint32Array }>;
  streams(): number;
  close(): void;
}
export interface NativePeerFrame {
  op: number;
  requestId: number;
  count: number;
  payloadBytes: number;
  entries: Array<{ key: string; status: number; length: number; crc32c: number }>;
}
export interface NativeHostArena {
  view(offset: number, length: number): Uint8Array;
  close(): void;
  info(): { capacity: number; pageSize: number; attached: boolean; attachNote: string; locked: boolean; closed: boolean };
}
export interface NativeDeviceArena {
  close(): void;
  info(): { capacity: number; backend: 'sim' | 'cuda'; device: number; closed: boolean };
}
export interface NativeFile {
  close(): void;
  size(): number;
  info(): { path: string; writable: boolean; direct: boolean; closed: boolean };
}
export type NativeEndpoint = NativeHostArena | NativeDeviceArena | NativeFile;
export interface NativeEngine {
  submit(
    endpoints: NativeEndpoint[],
    descriptors: Float64Array,
    options: object,
  ): { id: number; promise: Promise<NativeBatchResult> };
  cancel(id: number, reason: 'abort' | 'timeout'): boolean;
  stats(): NativeEngineStats;
  close(): Promise<void>;
}
/** What a completed transfer batch reports (TransferResult). */
export interface NativeBatchResult {
  id: number;
  bytes: number;
  descriptors: number;
  /** Time from submission to completion, in seconds (queueing included). */
  seconds: number;
  /** With `checksums` or `expected`: CRC32C per descriptor, in the order they were added. */
  checksums?: Uint32Array;
  /** With `expected`: indices of descriptors whose CRC32C differed, ascending. */
  mismatches?: number[];
}
export interface NativeEngineStats {
  paths: Record<string, { bytes: number; ops: number }>;
  queued: { demand: number; prefetch: number; writeBack: number };
  running: number;
  /** Groups of prefetch or write-back batches being executed (at most `backgroundThreads`). */
  runningBackground: number;
  inflightBatches: number;
  completedBatches: number;
  failedBatches: number;
  cancelledBatches: number;
  timedOutBatches: number;
  checksumMismatches: number;
  busyMs: number;
  directOps: number;
  bufferedOps: number;
  threads: number;
  /** Most workers that run prefetch and write-back groups at once. */
  backgroundThreads: number;
  io: 'io_uring' | 'sync';
}

function load(): NativeAddon {
  const here = dirname(fileURLToPath(import.meta.url));
  // src/ and dist/ both sit one level below the package root, where node-gyp puts build/.
  const root = join(here, '..');
  // TIERSYNC_NATIVE_ADDON points at another build (the sanitizer script's), else the package's own.
  const override = process.env.TIERSYNC_NATIVE_ADDON;
  const candidates = override ? [override] : [join(root, 'build', 'Release', 'tiersync_native.node'), join(root, 'build', 'Debug', 'tiersync_native.node')];
  const found = candidates.find((p) => existsSync(p));
  if (!found) {
    throw new TierSyncError(
      `the tiersync native addon is not built (looked for ${candidates.join(', ')}); run \`pnpm --filter @tiersync/native rebuild\``,
      'ERR_UNAVAILABLE',
    );
  }
  const addon = createRequire(import.meta.url)(found) as NativeAddon;
  addon.setErrorClass(TierSyncError);
  return addon;
}

export const native: NativeAddon = load();
