/**
 * fs tier URLs and slab geometry: `fs:///mnt/filestore/kv?capacity=2TiB&slab=8GiB&direct=auto`.
 */
import { posix } from 'node:path';
import type { DirectMode } from '@tiersync/native';
import { TierSyncError } from '@tiersync/native/errors';
import { z } from 'zod';
import { bool, configError, parseOptions, size, splitUrlOf } from '../url.js';

const options = z
  .object({
    capacity: size('a capacity'),
    slab: size('a slab file size').optional(),
    direct: z.enum(['auto', 'always', 'never']).optional(),
    verify: z.enum(['headers', 'full']).optional(),
    preallocate: bool.optional(),
    crcChunk: size('a chunk size').optional(),
  })
  .strict();

/** Settings of one fs tier, from its URL. */
export interface FsTierConfig {
  /** Absolute folder holding the manifest and the slab files; created when absent. */
  path: string;
  /** Disk budget of the slab files in bytes, slot headers included (URL `capacity`, required). */
  capacity: number;
  /**
   * Target size of one slab file in bytes (URL `slab`). Undefined: a folder that already holds a tier keeps its
   * own; a new one uses max(1 GiB, capacity / 256), at most `capacity`.
   */
  slab: number | undefined;
  /**
   * O_DIRECT for page data (URL `direct`). 'auto' (default): when the filesystem supports it and a transfer's file
   * offset, length and memory address are 4 KiB aligned; 'never': buffered (page cache), e.g. on NFS;
   * 'always': every page transfer is O_DIRECT, misaligned ones fail with ERR_MISALIGNED.
   */
  direct: DirectMode;
  /**
   * What open() checks (URL `verify`). 'headers' (default): every slot header (self-checksum, key, length);
   * 'full': also reads every stored page and drops those whose CRC32C does not match. Reads always verify.
   */
  verify: 'headers' | 'full';
  /** Reserve each slab's disk space with posix_fallocate when it is created (URL `preallocate`). Default true. */
  preallocate: boolean;
  /**
   * Size of the chunks a page is checksummed in besides its whole-page CRC32C (URL `crcChunk`, a multiple of
   * 4 KiB; default 64 KiB, 32 chunks for a 2 MiB page). A sub-page range read reads and verifies only the chunks
   * that cover it. A page with more than 80 chunks uses the smallest multiple of 4 KiB that gives at most 80.
   */
  crcChunk: number;
  /** The URL as given (no secrets in fs URLs). */
  redacted: string;
}

/**
 * Parses `fs:///absolute/folder?capacity=2TiB[&slab=8GiB][&direct=auto|always|never][&verify=headers|full]
 * [&preallocate=true|false][&crcChunk=64KiB]`.
 * @throws TierSyncError ERR_CONFIG naming the part or option that is wrong
 */
export function parseFsUrl(url: string): FsTierConfig {
  try {
    return parse(url);
  } catch (e) {
    throw e instanceof TierSyncError && e.tier === undefined ? new TierSyncError(e.message, e.code, { tier: 'fs' }) : e;
  }
}

function parse(url: string): FsTierConfig {
  const u = splitUrlOf(url, 'fs');
  if (u.host !== '') {
    throw configError(u, `fs:// takes an absolute folder after three slashes, e.g. fs:///mnt/kv?capacity=2TiB (got host '${u.host}')`);
  }
  const folder = posix.normalize(u.path).replace(/\/+$/, '');
  if (folder === '' || !folder.startsWith('/')) throw configError(u, 'fs:// needs a folder, e.g. fs:///mnt/kv?capacity=2TiB');
  const o = parseOptions(u, options);
  if (o.crcChunk !== undefined && (o.crcChunk % ALIGN !== 0 || o.crcChunk > 0xffffffff)) {
    throw configError(u, `option 'crcChunk' must be a multiple of ${ALIGN} bytes below 4GiB, got ${o.crcChunk}`);
  }
  return {
    path: folder,
    capacity: o.capacity,
    slab: o.slab,
    direct: o.direct ?? 'auto',
    verify: o.verify ?? 'headers',
    preallocate: o.preallocate ?? true,
    crcChunk: o.crcChunk ?? DEFAULT_CRC_CHUNK,
    redacted: u.redacted,
  };
}

/** Bytes of one slot header on disk: one sector, so a torn sector write damages no other slot's header. */
export const HEADER_BYTES = 512;
/** O_DIRECT alignment; slot data starts on it. */
export const ALIGN = 4096;
/** Default chunk size of the per-chunk CRC32Cs (URL `crcChunk`). */
export const DEFAULT_CRC_CHUNK = 64 * 1024;
/** More slab files than this would use too many descriptors (2 per slab, 3 with direct=always). */
export const MAX_SLABS = 1024;
const DEFAULT_SLAB_MIN = 2 ** 30;
const DEFAULT_SLABS = 256;

export const alignUp = (n: number, a = ALIGN): number => Math.ceil(n / a) * a;

/**
 * Layout of every slab file of one folder. A slab is `[headers: slotsPerSlab x 512 B, padded to 4 KiB]
 * [data: slotsPerSlab x slotStride]`, so the data of adjacent slots is adjacent on disk and one batch's pages
 * coalesce into large O_DIRECT writes.
 */
export interface Geometry {
  pageBytes: number;
  /** Distance between two slots' data: pageBytes rounded up to 4 KiB. */
  slotStride: number;
  slotsPerSlab: number;
  /** Byte offset of slot 0's data in a slab file (the header area, padded to 4 KiB). */
  dataOffset: number;
}

/** The geometry whose full slab file is at most `slabBytes`; undefined when not even one slot fits. */
export function geometryFor(pageBytes: number, slabBytes: number): Geometry | undefined {
  const slotStride = alignUp(pageBytes);
  let n = Math.floor(slabBytes / (slotStride + HEADER_BYTES));
  while (n > 0 && alignUp(n * HEADER_BYTES) + n * slotStride > slabBytes) n--;
  if (n < 1) return undefined;
  return { pageBytes, slotStride, slotsPerSlab: n, dataOffset: alignUp(n * HEADER_BYTES) };
}

/** The slab size a new folder gets when the URL names none. */
export function defaultSlabBytes(capacity: number): number {
  return Math.min(capacity, Math.max(DEFAULT_SLAB_MIN, Math.ceil(capacity / DEFAULT_SLABS)));
}

/** Bytes of a full slab file. */
export const fullSlabBytes = (g: Geometry): number => g.dataOffset + g.slotsPerSlab * g.slotStride;

/**
 * Page slots that `capacity` bytes of slab files hold: full slabs, then a shorter last slab (same header area,
 * fewer data slots) with what is left.
 */
export function slotsFor(capacity: number, g: Geometry): number {
  const full = Math.floor(capacity / fullSlabBytes(g));
  const rest = capacity - full * fullSlabBytes(g);
  const partial = rest > g.dataOffset ? Math.min(g.slotsPerSlab - 1, Math.floor((rest - g.dataOffset) / g.slotStride)) : 0;
  return full * g.slotsPerSlab + partial;
}
