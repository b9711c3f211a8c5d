import { native } from './addon.js';
import { TierSyncError } from './errors.js';

/**
 * CRC32C (Castagnoli) of `data`, continuing from `seed` (a previous result; default 0). Check value:
 * crc32c("123456789") === 0xE3069283. Uses the fastest implementation the CPU offers (see
 * {@link crc32cImplementations}): three interleaved CRC32 instruction streams joined by carry-less multiplication
 * on x86-64 (SSE4.2 + PCLMULQDQ), the ARMv8 CRC32 instructions on aarch64 builds for targets that have them, and
 * slicing-by-8 tables otherwise.
 */
export function crc32c(data: ArrayBufferView, seed = 0): number {
  if (!ArrayBuffer.isView(data)) throw new TierSyncError('data must be a TypedArray or DataView', 'ERR_INVALID_ARGUMENT');
  return native.crc32c(data instanceof DataView ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : data, seed);
}

/** Reflected CRC32C polynomial (Castagnoli). */
const POLY = 0x82f63b78;
const shifts = new Map<number, Uint32Array>();

/** `mat` (a 32x32 matrix over GF(2), one column per word) times `vec`. */
function gf2Times(mat: Uint32Array, vec: number): number {
  let sum = 0;
  for (let i = 0; vec !== 0; i++, vec >>>= 1) if (vec & 1) sum ^= mat[i]!;
  return sum >>> 0;
}

function gf2Compose(a: Uint32Array, b: Uint32Array): Uint32Array {
  const out = new Uint32Array(32);
  for (let n = 0; n < 32; n++) out[n] = gf2Times(a, b[n]!);
  return out;
}

/** The operator that appends `bytes` zero bytes to a CRC32C register (zlib's crc32_combine construction). */
function shiftOperator(bytes: number): Uint32Array {
  const cached = shifts.get(bytes);
  if (cached) return cached;
  let op: Uint32Array = new Uint32Array(32);
  op[0] = POLY;
  for (let n = 1; n < 32; n++) op[n] = (1 << (n - 1)) >>> 0;
  op = gf2Compose(op, op); // 2 zero bits
  op = gf2Compose(op, op); // 4
  op = gf2Compose(op, op); // 8 = one zero byte
  let result: Uint32Array | undefined;
  for (let len = bytes; len > 0; len = Math.floor(len / 2)) {
    if (len & 1) result = result ? gf2Compose(op, result) : op;
    if (len > 1) op = gf2Compose(op, op);
  }
  result ??= Uint32Array.from({ length: 32 }, (_, n) => (1 << n) >>> 0);
  if (shifts.size < 64) shifts.set(bytes, result);
  return result;
}

/**
 * CRC32C of A followed by B, from crc32c(A), crc32c(B) and B's length: lets per-chunk checksums (computed by the
 * engine while copying) give a page's whole checksum without another pass over its bytes. Operators are cached
 * per length, so combining equal-sized chunks costs one 32-step matrix-vector product each.
 */
export function crc32cCombine(crcA: number, crcB: number, lengthB: number): number {
  if (!Number.isSafeInteger(lengthB) || lengthB < 0) throw new TierSyncError(`lengthB must be a non-negative integer, got ${lengthB}`, 'ERR_INVALID_ARGUMENT');
  if (lengthB === 0) return crcA >>> 0;
  return (gf2Times(shiftOperator(lengthB), crcA >>> 0) ^ crcB) >>> 0;
}

/** Names of the native CRC32C implementations: all compute the same function. */
export type Crc32cImplementation = 'table' | 'hw1' | 'hw3' | 'hw3-clmul';

/**
 * The CRC32C implementations this CPU and build can run, and the one {@link crc32c} (and every checksum the
 * engine and tiers compute) uses: `hw3-clmul` (x86-64 with SSE4.2 and PCLMULQDQ), `hw3` (three streams joined by
 * a portable multiply: aarch64 with the CRC32 extension, x86-64 without PCLMULQDQ), `hw1` (one instruction
 * stream), `table`. `folding`: the selected one also folds with VPCLMULQDQ (x86-64 with AVX2), for copies and for
 * checksums of 20 KiB and more.
 */
export function crc32cImplementations(): { selected: Crc32cImplementation; available: Crc32cImplementation[]; folding: boolean } {
  const { selected, available, folding } = native.crc32cImpls;
  return { selected: selected as Crc32cImplementation, available: [...available] as Crc32cImplementation[], folding };
}

/**
 * CRC32C of `data` through one named implementation (tests and benchmarks compare them). With `copyTo`, the bytes
 * are copied there in the same pass (the engine's copy-and-checksum path).
 * @throws TierSyncError ERR_UNSUPPORTED when the implementation is not available here, ERR_OUT_OF_RANGE when
 *   `copyTo` is shorter than `data`
 */
export function crc32cWith(implementation: Crc32cImplementation, data: Uint8Array, seed = 0, copyTo?: Uint8Array): number {
  if (!(data instanceof Uint8Array)) throw new TierSyncError('data must be a Uint8Array', 'ERR_INVALID_ARGUMENT');
  return native.crc32c(data, seed, implementation, copyTo);
}
