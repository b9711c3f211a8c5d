import { native } from './addon.js';
import { HostArena } from './arena.js';
import { TierSyncError, checkInteger, describeValue } from './errors.js';

/**
 * The CRC32C of each range `[offsets[i], +lengths[i])` of a host arena, computed on `threads` native threads (default
 * 2) off the JS thread; resolves with one checksum per range. Ranges are checked against the arena before any is
 * read. The arena is held alive until the promise settles, even if closed meanwhile.
 * @throws TierSyncError ERR_INVALID_ARGUMENT, ERR_OUT_OF_RANGE, ERR_CLOSED (synchronously, before anything is queued)
 */
export function crc32cRanges(arena: HostArena, offsets: Float64Array, lengths: Uint32Array, options: { threads?: number } = {}): Promise<Uint32Array> {
  if (!(arena instanceof HostArena)) throw new TierSyncError(`arena must be a HostArena, got ${describeValue(arena)}`, 'ERR_INVALID_ARGUMENT');
  if (!(offsets instanceof Float64Array) || !(lengths instanceof Uint32Array) || offsets.length !== lengths.length) {
    throw new TierSyncError('offsets must be a Float64Array and lengths a Uint32Array of the same length', 'ERR_INVALID_ARGUMENT');
  }
  const threads = options.threads ?? 2;
  checkInteger(threads, 'threads', 1);
  if (arena.closed) throw new TierSyncError('arena is closed', 'ERR_CLOSED');
  return native.crc32cRanges(arena.native, offsets, lengths, Math.min(threads, 64));
}
