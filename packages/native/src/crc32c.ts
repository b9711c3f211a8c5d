import { native } from './addon.js';
import { TierSyncError } from './errors.js';

/**
 * CRC32C (Castagnoli) of `data`, continuing from `seed` (a previous result; default 0). Check value:
 * crc32c("123456789") === 0xE3069283. Uses the SSE4.2 instruction when the CPU has it.
 */
export function crc32c(data: ArrayBufferView, seed = 0): number {
  if (!ArrayBuffer.isView(data)) throw new TierSyncError('data must be a TypedArray or DataView', 'ERR_INVALID_ARGUMENT');
  return native.crc32c(data instanceof DataView ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : data, seed);
}
