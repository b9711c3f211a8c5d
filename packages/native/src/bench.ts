/**
 * Baselines for benchmarks, measured in the same run as the engine: plain memcpy on N threads and a plain
 * sequential O_DIRECT pwrite/pread loop. Synchronous (they block the caller); for benchmarks only.
 */
import { native } from './addon.js';
import type { DeviceArena, HostArena } from './arena.js';

/** Seconds to memcpy `bytes` from `src` to `dst` on `threads` threads in calls of `chunk` bytes. */
export function memcpyBaseline(dst: HostArena | DeviceArena, src: HostArena | DeviceArena, bytes: number, threads: number, chunk: number): number {
  return native.benchMemcpy(dst.native, src.native, bytes, threads, chunk);
}

/** Seconds for a sequential O_DIRECT loop of `block`-byte pwrite (then one fdatasync) or pread calls over `bytes`. */
export function fileLoopBaseline(path: string, mode: 'write' | 'read', arena: HostArena, bytes: number, block: number): number {
  return native.benchFileLoop(path, mode, arena.native, bytes, block);
}

/**
 * Seconds to move `bytes` between two arenas over one TCP connection (two native threads, `chunk` bytes per call):
 * over loopback, or with `across` (root only) to a receiving thread that joins network namespace `netns` (its name
 * under /run/netns) and listens on `address` there, so the bytes cross the links that lead to it.
 */
export function tcpBaseline(src: HostArena, dst: HostArena, bytes: number, chunk: number, across?: { netns: string; address: string }): number {
  return across ? native.benchTcp(src.native, dst.native, bytes, chunk, across.netns, across.address) : native.benchTcp(src.native, dst.native, bytes, chunk);
}
