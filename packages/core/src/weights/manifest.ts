/**
 * The manifest of one weights version: which tensors it has, where each lands in the receiver's device slot, and
 * the content-addressed chunks (SHA-256, FIPS 180-4; CRC32C, RFC 3720) their bytes are cut into. Tensors are cut
 * separately, so a tensor that changes never shifts the chunk boundaries of the others.
 */
import { createHash } from 'node:crypto';
import { TierSyncError, describeValue } from '@tiersync/native';

export const MANIFEST_FORMAT = 'tiersync-weights/1';
/** Tensors start at multiples of this in a device slot (what accelerator kernels expect of a base address). */
export const TENSOR_ALIGNMENT = 4096;
/** Default chunk size: 4 MiB. */
export const DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024;

/** Bytes per element of the dtypes tiersync knows; other dtype names are accepted with shape unchecked. */
export const DTYPE_BYTES: Readonly<Record<string, number>> = {
  f64: 8, f32: 4, f16: 2, bf16: 2, f8_e4m3: 1, f8_e5m2: 1, i64: 8, i32: 4, i16: 2, i8: 1, u8: 1, bool: 1,
};

/** Other spellings of the known dtypes: safetensors' upper case, torch and numpy names. */
const DTYPE_ALIASES: Readonly<Record<string, string>> = {
  float64: 'f64', double: 'f64', float32: 'f32', float: 'f32', float16: 'f16', half: 'f16', bfloat16: 'bf16',
  float8_e4m3fn: 'f8_e4m3', float8_e4m3: 'f8_e4m3', float8_e5m2: 'f8_e5m2', int64: 'i64', long: 'i64', int32: 'i32',
  int: 'i32', int16: 'i16', short: 'i16', int8: 'i8', uint8: 'u8', bool_: 'bool',
};

/**
 * The tiersync name of a dtype ('BF16', 'torch.bfloat16', 'bfloat16' -> 'bf16'), or the name unchanged when it is
 * none of the known ones (then its shape cannot be checked against the length).
 */
export function canonicalDtype(dtype: string): string {
  const name = dtype.toLowerCase().replace(/^(torch|numpy|np)\./, '');
  if (DTYPE_BYTES[name] !== undefined) return name;
  return DTYPE_ALIASES[name] ?? dtype;
}

export interface ManifestChunk {
  /** SHA-256 of the chunk's bytes, lowercase hex: its key everywhere. */
  hash: string;
  crc32c: number;
  length: number;
}

export interface ManifestTensor {
  name: string;
  dtype: string;
  shape: number[];
  /** Byte offset of the tensor in a device slot. */
  offset: number;
  length: number;
  /** Indexes into `chunks`, in byte order. */
  chunks: number[];
}

export interface WeightManifest {
  format: typeof MANIFEST_FORMAT;
  version: string;
  chunkBytes: number;
  /** Bytes of one device slot holding the whole version. */
  slotBytes: number;
  tensors: ManifestTensor[];
  /** Unique chunks of this version (a chunk repeated inside it is listed once and moves once). */
  chunks: ManifestChunk[];
}

const HASH = /^[0-9a-f]{64}$/;
const VERSION = /^[\x21-\x7e]{1,200}$/;

/** Checks a version name: 1 to 200 printable ASCII characters without spaces. */
export function checkVersion(version: unknown): string {
  if (typeof version !== 'string' || !VERSION.test(version)) {
    throw new TierSyncError(`version must be 1-200 printable ASCII characters without spaces, got ${describeValue(version)}`, 'ERR_INVALID_ARGUMENT');
  }
  return version;
}

/** Peer/tier key of a version's manifest: 'a0' + SHA-256 of the name (66 hex digits, never a chunk's 64). */
export function manifestKey(version: string): string {
  return `a0${createHash('sha256').update(`tiersync-weights-manifest\0${version}`).digest('hex')}`;
}

/** Key of the page naming the newest version a node serves (JSON `{"version": ...}`). */
export const LATEST_KEY = `a1${'0'.repeat(64)}`;

export function alignUp(n: number, to: number): number {
  return Math.ceil(n / to) * to;
}

function bad(what: string): TierSyncError {
  return new TierSyncError(`bad weights manifest: ${what}`, 'ERR_PROTOCOL');
}

function isNonNegativeInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/**
 * Parses and checks a manifest received from a peer or a tier: every field, every index, that tensors fit their
 * slot without overlapping and that their chunks add up to their length. Throws ERR_PROTOCOL naming the fault.
 */
export function parseManifest(bytes: Uint8Array, expectedVersion?: string): WeightManifest {
  let m: unknown;
  try {
    m = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'));
  } catch (e) {
    throw new TierSyncError('bad weights manifest: not JSON', 'ERR_PROTOCOL', { cause: e });
  }
  if (typeof m !== 'object' || m === null) throw bad('not an object');
  const o = m as Record<string, unknown>;
  if (o.format !== MANIFEST_FORMAT) throw bad(`format must be '${MANIFEST_FORMAT}', got ${describeValue(o.format)}`);
  if (typeof o.version !== 'string' || !VERSION.test(o.version)) throw bad(`version ${describeValue(o.version)}`);
  if (expectedVersion !== undefined && o.version !== expectedVersion) throw bad(`holds version '${o.version}', asked for '${expectedVersion}'`);
  if (!isNonNegativeInt(o.chunkBytes) || o.chunkBytes < 1 || o.chunkBytes > 0xffffffff) throw bad(`chunkBytes ${describeValue(o.chunkBytes)}`);
  if (!isNonNegativeInt(o.slotBytes)) throw bad(`slotBytes ${describeValue(o.slotBytes)}`);
  if (!Array.isArray(o.chunks) || !Array.isArray(o.tensors)) throw bad('chunks and tensors must be arrays');
  const chunkBytes = o.chunkBytes;
  const chunks: ManifestChunk[] = o.chunks.map((c: unknown, i) => {
    const x = c as Record<string, unknown> | null;
    if (typeof x !== 'object' || x === null) throw bad(`chunk ${i} is not an object`);
    if (typeof x.hash !== 'string' || !HASH.test(x.hash)) throw bad(`chunk ${i} hash ${describeValue(x.hash)}`);
    if (!isNonNegativeInt(x.crc32c) || x.crc32c > 0xffffffff) throw bad(`chunk ${i} crc32c ${describeValue(x.crc32c)}`);
    if (!isNonNegativeInt(x.length) || x.length < 1 || x.length > chunkBytes) throw bad(`chunk ${i} length ${describeValue(x.length)}`);
    return { hash: x.hash, crc32c: x.crc32c, length: x.length };
  });
  const names = new Set<string>();
  const tensors: ManifestTensor[] = o.tensors.map((t: unknown, i) => {
    const x = t as Record<string, unknown> | null;
    if (typeof x !== 'object' || x === null) throw bad(`tensor ${i} is not an object`);
    if (typeof x.name !== 'string' || x.name.length === 0 || names.has(x.name)) throw bad(`tensor ${i} name ${describeValue(x.name)} (empty or repeated)`);
    names.add(x.name);
    if (typeof x.dtype !== 'string' || x.dtype.length === 0) throw bad(`tensor '${x.name}' dtype`);
    if (!Array.isArray(x.shape) || !x.shape.every(isNonNegativeInt)) throw bad(`tensor '${x.name}' shape`);
    if (!isNonNegativeInt(x.offset) || !isNonNegativeInt(x.length) || x.offset + x.length > (o.slotBytes as number)) {
      throw bad(`tensor '${x.name}' range [${describeValue(x.offset)}, +${describeValue(x.length)}) outside slot of ${o.slotBytes} bytes`);
    }
    if (!Array.isArray(x.chunks) || !x.chunks.every((c) => isNonNegativeInt(c) && c < chunks.length)) throw bad(`tensor '${x.name}' chunk indexes`);
    const sum = (x.chunks as number[]).reduce((s, c) => s + chunks[c]!.length, 0);
    if (sum !== x.length) throw bad(`tensor '${x.name}' chunks hold ${sum} bytes, tensor has ${x.length}`);
    return { name: x.name, dtype: x.dtype, shape: x.shape as number[], offset: x.offset, length: x.length, chunks: x.chunks as number[] };
  });
  const sorted = tensors.filter((t) => t.length > 0).sort((a, b) => a.offset - b.offset); // zero-size ones overlap nothing
  for (let i = 1; i < sorted.length; i++) {
    const p = sorted[i - 1]!;
    if (p.offset + p.length > sorted[i]!.offset) throw bad(`tensors '${p.name}' and '${sorted[i]!.name}' overlap in the slot`);
  }
  return { format: MANIFEST_FORMAT, version: o.version, chunkBytes, slotBytes: o.slotBytes, tensors, chunks };
}

export function encodeManifest(m: WeightManifest): Uint8Array {
  return Buffer.from(JSON.stringify(m), 'utf8');
}

/** Where one chunk's bytes go in a slot: every (tensor offset) place it occupies. */
export interface Placement {
  chunk: number;
  slotOffset: number;
  length: number;
}

/** Every place each chunk lands in the slot, in slot order. */
export function placements(m: WeightManifest): Placement[] {
  const out: Placement[] = [];
  for (const t of m.tensors) {
    let at = t.offset;
    for (const c of t.chunks) {
      const length = m.chunks[c]!.length;
      out.push({ chunk: c, slotOffset: at, length });
      at += length;
    }
  }
  return out;
}

/**
 * SHA-256 of a chunk as lowercase hex, hashed in place (no copy). Synchronous: one 4 MiB chunk holds the event
 * loop ~2.5 ms here (SHA-NI). WebCrypto's thread-pool digest was measured 2-4x slower on this 2-core machine
 * because it copies its input first.
 */
export function chunkHash(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}
