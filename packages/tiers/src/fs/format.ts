/**
 * The fs tier's on-disk format: the manifest (geometry + fingerprint), slot headers, slab file names and the
 * folder lock. Everything here is metadata; page bytes never pass through this module.
 */
import { randomBytes } from 'node:crypto';
import { promises as fsp, closeSync, fsyncSync, openSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { FileLock, TierSyncError, crc32c } from '@tiersync/native';
import { NAMESPACE_ID_PATTERN, PAGE_KEY_PATTERN, type PageKey, type PageMeta } from '../driver.js';
import { packHex, unpackHex } from '../page-meta.js';
import { HEADER_BYTES, alignUp, type Geometry } from './config.js';

const tier = 'fs';

// ---------------------------------------------------------------------------------------------------------------
// Slab files: named by number only, so a key can never become a path.

export const SLAB_PATTERN = /^slab-(\d{6})\.tsd$/;
export const slabName = (index: number): string => `slab-${String(index).padStart(6, '0')}.tsd`;
export const MANIFEST = 'manifest.json';
export const LOCK = 'lock';

// ---------------------------------------------------------------------------------------------------------------
// Manifest: written once when a folder is first used (temp file, fsync, rename, fsync folder), never rewritten.

export const FORMAT = 'tiersync-fs';
/**
 * Folder format version. 2: slot headers may be version 2 (they record the page's namespace, parent and position).
 * A version-1 folder is upgraded in place at open (its manifest rewritten, nothing else), before any version-2
 * header is written, so a build that reads only version 1 refuses the folder instead of clearing headers it does
 * not understand.
 */
export const VERSION = 2;
/** Folder versions this build opens. */
const READABLE_VERSIONS: readonly number[] = [1, 2];

export interface Manifest {
  format: typeof FORMAT;
  /** 1 (upgraded to 2 at open) or 2. */
  version: 1 | 2;
  /** 16 hex digits, random per folder; every slot header carries it, so a slab copied from elsewhere is not trusted. */
  volume: string;
  pageBytes: number;
  slotStride: number;
  slotsPerSlab: number;
  dataOffset: number;
  headerBytes: number;
  fingerprint: string;
  createdAt: string;
}

export function newManifest(g: Geometry, fingerprint: string): Manifest {
  return {
    format: FORMAT,
    version: VERSION,
    volume: randomBytes(8).toString('hex'),
    pageBytes: g.pageBytes,
    slotStride: g.slotStride,
    slotsPerSlab: g.slotsPerSlab,
    dataOffset: g.dataOffset,
    headerBytes: HEADER_BYTES,
    fingerprint,
    createdAt: new Date().toISOString(),
  };
}

const mismatch = (message: string) => new TierSyncError(`fs tier: ${message}`, 'ERR_GEOMETRY_MISMATCH', { tier });

/**
 * Reads and checks a folder's manifest; undefined when the folder has none.
 * @throws TierSyncError ERR_GEOMETRY_MISMATCH when the file is not a manifest this version understands, ERR_IO
 */
export async function readManifest(folder: string): Promise<Manifest | undefined> {
  const path = join(folder, MANIFEST);
  let text: string;
  try {
    text = await fsp.readFile(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw ioError(`cannot read ${path}`, e);
  }
  let m: Partial<Manifest>;
  try {
    m = JSON.parse(text) as Partial<Manifest>;
  } catch {
    throw mismatch(`${path} is not JSON; it is not a tiersync fs manifest (use another folder, or remove this one)`);
  }
  if (m.format !== FORMAT) throw mismatch(`${path}: format is ${JSON.stringify(m.format)}, expected '${FORMAT}'`);
  if (!READABLE_VERSIONS.includes(m.version as number)) throw mismatch(`${path}: format version is ${String(m.version)}, this build reads versions ${READABLE_VERSIONS.join(' and ')}`);
  const whole = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) > 0;
  if (
    typeof m.volume !== 'string' ||
    !/^[0-9a-f]{16}$/.test(m.volume) ||
    typeof m.fingerprint !== 'string' ||
    !whole(m.pageBytes) ||
    !whole(m.slotsPerSlab) ||
    m.slotStride !== alignUp(m.pageBytes) ||
    m.headerBytes !== HEADER_BYTES ||
    m.dataOffset !== alignUp(m.slotsPerSlab * HEADER_BYTES)
  ) {
    throw mismatch(`${path}: geometry fields are missing or inconsistent (use another folder, or remove this one)`);
  }
  return m as Manifest;
}

export async function writeManifest(folder: string, m: Manifest): Promise<void> {
  const path = join(folder, MANIFEST);
  const temp = `${path}.${process.pid}.tmp`;
  try {
    const f = await fsp.open(temp, 'w');
    try {
      await f.writeFile(`${JSON.stringify(m, null, 2)}\n`);
      await f.sync();
    } finally {
      await f.close();
    }
    await fsp.rename(temp, path);
    syncFolder(folder);
  } catch (e) {
    await fsp.rm(temp, { force: true });
    throw ioError(`cannot write ${path}`, e);
  }
}

/** fsync a folder so that names created or removed in it survive a crash. */
export function syncFolder(folder: string): void {
  const fd = openSync(folder, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export function ioError(message: string, cause: unknown): TierSyncError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new TierSyncError(`fs tier: ${message}: ${reason}`, 'ERR_IO', { tier, cause });
}

// ---------------------------------------------------------------------------------------------------------------
// Slot header: 512 bytes, little-endian, at `slot-in-slab * 512` of its slab file. Version 2 (written now):
//
//   0 u32 magic 'TSFS'      4 u16 version (2)  6 u16 key length (hex digits)   8 u32 volume (low)   12 u32 volume (high)
//  16 u32 global slot      20 u32 length     24 u32 data CRC32C  28 u32 chunk bytes (0: none)  32 u32 generation (low)
//  36 u32 generation (high)  40 f64 written at (ms since 1970)
//  48 u8 meta flag (1: bytes 49..216 hold the page's meta; 0: written without it)
//  49 u8 namespace length (hex digits, 1..64)   50 u16 parent length (hex digits; 0: no parent)   52 u32 position
//  56..120 key, 120..184 parent, 184..216 namespace: hex strings packed two digits a byte (page-meta.ts)
// 216..216+4n u32 CRC32C of each chunk of the page (n = ceil(length / chunk bytes), at most MAX_CHUNKS), rest zero
// 508 u32 CRC32C of bytes [0, 508): a torn or garbled header never validates.
//
// Version 1 (read, never written): the key as ASCII at 48..176, chunk CRCs at 176 (at most 80), no meta.
// All zeroes = a free slot. Chunk CRCs let a sub-page range be verified without reading the whole page; headers
// written before they existed hold 0 at 28 (and zeroes after the key): such slots are read whole.

export const MAGIC = 0x53465354; // "TSFS" as little-endian bytes
/** Slot header version written by this build. */
export const HEADER_VERSION = 2;
const V1_KEY_AT = 48;
const V1_CHUNKS_AT = 176;
const V1_MAX_CHUNKS = 80;
const META_AT = 48;
const KEY_AT = 56;
const PARENT_AT = 120;
const NAMESPACE_AT = 184;
const CHUNKS_AT = 216;
/** Most chunk CRCs a (version 2) header holds (bytes 216..508). */
export const MAX_CHUNKS = 73;
const CRC_AT = HEADER_BYTES - 4;

export type Volume = readonly [low: number, high: number];

export function volumeOf(hex: string): Volume {
  return [Number.parseInt(hex.slice(8, 16), 16) >>> 0, Number.parseInt(hex.slice(0, 8), 16) >>> 0];
}

export interface HeaderFields {
  key: PageKey;
  slot: number;
  length: number;
  crc32c: number;
  generation: number;
  writtenAt: number;
  /** Chunk size of `chunkCrcs` (a multiple of 4 KiB), 0 when the page has none. */
  chunkBytes: number;
  chunkCrcs: readonly number[];
  /** Namespace, parent, position; recorded when given and when the parent fits (at most 128 hex digits, as keys). */
  meta?: PageMeta | undefined;
}

/** Writes a complete (version 2) header, self-checksum included, into `bytes` at `at` (512 bytes). */
export function encodeHeader(bytes: Uint8Array, view: DataView, at: number, volume: Volume, h: HeaderFields): void {
  bytes.fill(0, at, at + HEADER_BYTES);
  view.setUint32(at, MAGIC, true);
  view.setUint16(at + 4, HEADER_VERSION, true);
  view.setUint16(at + 6, h.key.length, true);
  view.setUint32(at + 8, volume[0], true);
  view.setUint32(at + 12, volume[1], true);
  view.setUint32(at + 16, h.slot, true);
  view.setUint32(at + 20, h.length, true);
  view.setUint32(at + 24, h.crc32c, true);
  view.setUint32(at + 32, h.generation % 2 ** 32, true);
  view.setUint32(at + 36, Math.floor(h.generation / 2 ** 32), true);
  view.setFloat64(at + 40, h.writtenAt, true);
  if (h.chunkBytes > 0 && h.chunkCrcs.length === Math.ceil(h.length / h.chunkBytes) && h.chunkCrcs.length <= MAX_CHUNKS) {
    view.setUint32(at + 28, h.chunkBytes, true);
    h.chunkCrcs.forEach((c, i) => view.setUint32(at + CHUNKS_AT + 4 * i, c, true));
  }
  packHex(bytes, at + KEY_AT, h.key);
  const m = h.meta;
  if (m) {
    bytes[at + META_AT] = 1;
    bytes[at + META_AT + 1] = m.namespace.length;
    view.setUint16(at + META_AT + 2, m.parent?.length ?? 0, true);
    view.setUint32(at + META_AT + 4, m.position, true);
    if (m.parent !== null) packHex(bytes, at + PARENT_AT, m.parent);
    packHex(bytes, at + NAMESPACE_AT, m.namespace);
  }
  view.setUint32(at + CRC_AT, crc32c(bytes.subarray(at, at + CRC_AT)), true);
}

export type HeaderState =
  | { kind: 'empty' }
  /** Bytes present but the self-checksum fails: a header write that did not complete, or damage. */
  | { kind: 'torn' }
  /** Checksum fine but it does not belong here (another folder, another slot, impossible fields). */
  | { kind: 'invalid'; why: string }
  | { kind: 'page'; key: PageKey; length: number; crc32c: number; generation: number; chunkBytes: number; chunkCrcs: number[]; meta?: PageMeta };

/** Classifies the header at `at` of a slab's header area, read with node:fs. */
export function decodeHeader(buf: Buffer, view: DataView, at: number, volume: Volume, slot: number, pageBytes: number): HeaderState {
  const magic = view.getUint32(at, true);
  if (magic !== MAGIC) {
    // Only the magic, key-length and checksum words are sampled: enough to tell a zeroed slot from garbage.
    return magic === 0 && view.getUint32(at + 4, true) === 0 && view.getUint32(at + CRC_AT, true) === 0 ? { kind: 'empty' } : { kind: 'torn' };
  }
  if (crc32c(buf.subarray(at, at + CRC_AT)) !== view.getUint32(at + CRC_AT, true)) return { kind: 'torn' };
  const version = view.getUint16(at + 4, true);
  if (version !== 1 && version !== HEADER_VERSION) return { kind: 'invalid', why: 'version' };
  if (view.getUint32(at + 8, true) !== volume[0] || view.getUint32(at + 12, true) !== volume[1]) return { kind: 'invalid', why: 'volume' };
  if (view.getUint32(at + 16, true) !== slot) return { kind: 'invalid', why: 'slot' };
  const length = view.getUint32(at + 20, true);
  if (length < 1 || length > pageBytes) return { kind: 'invalid', why: 'length' };
  const keyLength = view.getUint16(at + 6, true);
  const v1 = version === 1;
  const key = keyLength > 128 ? '' : v1 ? buf.toString('latin1', at + V1_KEY_AT, at + V1_KEY_AT + keyLength) : unpackHex(buf, at + KEY_AT, keyLength);
  if (!PAGE_KEY_PATTERN.test(key)) return { kind: 'invalid', why: 'key' };
  const generation = view.getUint32(at + 32, true) + view.getUint32(at + 36, true) * 2 ** 32;
  // Chunk CRCs: absent (0) in headers written before they existed; impossible values read as absent (whole-page reads).
  let chunkBytes = view.getUint32(at + 28, true);
  const chunkCrcs: number[] = [];
  const n = chunkBytes > 0 ? Math.ceil(length / chunkBytes) : 0;
  const chunksAt = v1 ? V1_CHUNKS_AT : CHUNKS_AT;
  if (chunkBytes % 4096 !== 0 || n > (v1 ? V1_MAX_CHUNKS : MAX_CHUNKS)) chunkBytes = 0;
  else for (let i = 0; i < n; i++) chunkCrcs.push(view.getUint32(at + chunksAt + 4 * i, true));
  const page = { kind: 'page' as const, key, length, crc32c: view.getUint32(at + 24, true), generation, chunkBytes, chunkCrcs };
  if (v1 || buf[at + META_AT] !== 1) return page;
  // The self-checksum held, so impossible meta is damage that slipped past it or a bug: keep the page, not the meta.
  const nsLength = buf[at + META_AT + 1]!;
  const parentLength = view.getUint16(at + META_AT + 2, true);
  const namespace = nsLength >= 1 && nsLength <= 64 ? unpackHex(buf, at + NAMESPACE_AT, nsLength) : '';
  const parent = parentLength === 0 ? null : parentLength <= 128 ? unpackHex(buf, at + PARENT_AT, parentLength) : '';
  if (!NAMESPACE_ID_PATTERN.test(namespace) || (parent !== null && !PAGE_KEY_PATTERN.test(parent))) return page;
  return { ...page, meta: { namespace, parent, position: view.getUint32(at + META_AT + 4, true) } };
}

/** Offset of a slot's header and data inside its slab file. */
export const headerOffset = (slotInSlab: number): number => slotInSlab * HEADER_BYTES;
export const dataOffset = (g: Geometry, slotInSlab: number): number => g.dataOffset + slotInSlab * g.slotStride;

// ---------------------------------------------------------------------------------------------------------------
// Folder lock: one writer per folder. Two processes allocating slots in the same slab files would overwrite each
// other's pages, so a second opener is refused while the first holds the folder. The lock is the kernel's (flock on
// `lock`, held by an open descriptor until close): it dies with its holder, SIGKILL included, so a restart right
// after a crash opens at once. The file's text (pid, host, since) only names the holder in error messages.

const heldHere = new Map<string, FileLock>();

/**
 * Takes the folder's kernel lock (`lock`).
 * @throws TierSyncError ERR_UNAVAILABLE naming the holder (another process, or this one), ERR_IO
 */
export function acquireLock(folder: string): void {
  const path = join(folder, LOCK);
  if (heldHere.has(folder)) {
    throw new TierSyncError(`fs tier: folder ${folder} is already open in this process`, 'ERR_UNAVAILABLE', { tier });
  }
  const note = `${JSON.stringify({ pid: process.pid, host: hostname(), since: new Date().toISOString() })}\n`;
  let lock: FileLock | undefined;
  try {
    lock = FileLock.tryAcquire(path, note);
  } catch (e) {
    throw e instanceof TierSyncError && e.code !== 'ERR_IO' ? new TierSyncError(`fs tier: ${e.message}`, e.code, { tier, cause: e }) : ioError(`cannot lock ${path}`, e);
  }
  if (!lock) {
    let other: { pid?: number; host?: string; since?: string } = {};
    try {
      other = JSON.parse(FileLock.noteOf(path)) as typeof other;
    } catch {
      // Written by a holder that has not finished writing it yet: the lock is what counts.
    }
    throw new TierSyncError(
      `fs tier: folder ${folder} is in use by pid ${other.pid ?? '?'} on host ${other.host ?? '?'} since ${other.since ?? '?'} ` +
        `(it holds the kernel lock on ${path}; one process per folder, and the lock is released when that process exits)`,
      'ERR_UNAVAILABLE',
      { tier },
    );
  }
  heldHere.set(folder, lock);
}

/** Gives the lock back; `crashed` leaves the file behind and only drops the lock, as the kernel does for a killed holder. */
export function releaseLock(folder: string, crashed = false): void {
  const lock = heldHere.get(folder);
  if (!lock) return;
  heldHere.delete(folder);
  lock.release({ unlink: !crashed });
}
