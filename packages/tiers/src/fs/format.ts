/**
 * The fs tier's on-disk format: the manifest (geometry + fingerprint), slot headers, slab file names and the
 * folder lock. Everything here is metadata; page bytes never pass through this module.
 */
import { randomBytes } from 'node:crypto';
import { promises as fsp, closeSync, fsyncSync, openSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { TierSyncError, crc32c } from '@tiersync/native';
import { PAGE_KEY_PATTERN, type PageKey } from '../driver.js';
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
export const VERSION = 1;

export interface Manifest {
  format: typeof FORMAT;
  version: typeof VERSION;
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
  if (m.version !== VERSION) throw mismatch(`${path}: format version is ${String(m.version)}, this build reads version ${VERSION}`);
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
// Slot header: 512 bytes, little-endian, at `slot-in-slab * 512` of its slab file.
//
//   0 u32 magic 'TSFS'      4 u16 version     6 u16 key length    8 u32 volume (low)   12 u32 volume (high)
//  16 u32 global slot      20 u32 length     24 u32 data CRC32C  28 u32 chunk bytes (0: none)  32 u32 generation (low)
//  36 u32 generation (high)  40 f64 written at (ms since 1970)  48..176 key (ASCII hex)
// 176..176+4n u32 CRC32C of each chunk of the page (n = ceil(length / chunk bytes), at most MAX_CHUNKS), rest zero
// 508 u32 CRC32C of bytes [0, 508): a torn or garbled header never validates.
//
// All zeroes = a free slot. Chunk CRCs let a sub-page range be verified without reading the whole page; headers
// written before they existed hold 0 at 28 (and zeroes after the key): such slots are read whole.

export const MAGIC = 0x53465354; // "TSFS" as little-endian bytes
const KEY_AT = 48;
const CHUNKS_AT = 176;
/** Most chunk CRCs a header holds (bytes 176..496). */
export const MAX_CHUNKS = 80;
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
}

/** Writes a complete header, self-checksum included, into `bytes` at `at` (512 bytes). */
export function encodeHeader(bytes: Uint8Array, view: DataView, at: number, volume: Volume, h: HeaderFields): void {
  bytes.fill(0, at, at + HEADER_BYTES);
  view.setUint32(at, MAGIC, true);
  view.setUint16(at + 4, VERSION, true);
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
  for (let i = 0; i < h.key.length; i++) bytes[at + KEY_AT + i] = h.key.charCodeAt(i);
  view.setUint32(at + CRC_AT, crc32c(bytes.subarray(at, at + CRC_AT)), true);
}

export type HeaderState =
  | { kind: 'empty' }
  /** Bytes present but the self-checksum fails: a header write that did not complete, or damage. */
  | { kind: 'torn' }
  /** Checksum fine but it does not belong here (another folder, another slot, impossible fields). */
  | { kind: 'invalid'; why: string }
  | { kind: 'page'; key: PageKey; length: number; crc32c: number; generation: number; chunkBytes: number; chunkCrcs: number[] };

/** Classifies the header at `at` of a slab's header area, read with node:fs. */
export function decodeHeader(buf: Buffer, view: DataView, at: number, volume: Volume, slot: number, pageBytes: number): HeaderState {
  const magic = view.getUint32(at, true);
  if (magic !== MAGIC) {
    // Only the magic, key-length and checksum words are sampled: enough to tell a zeroed slot from garbage.
    return magic === 0 && view.getUint32(at + 4, true) === 0 && view.getUint32(at + CRC_AT, true) === 0 ? { kind: 'empty' } : { kind: 'torn' };
  }
  if (crc32c(buf.subarray(at, at + CRC_AT)) !== view.getUint32(at + CRC_AT, true)) return { kind: 'torn' };
  if (view.getUint16(at + 4, true) !== VERSION) return { kind: 'invalid', why: 'version' };
  if (view.getUint32(at + 8, true) !== volume[0] || view.getUint32(at + 12, true) !== volume[1]) return { kind: 'invalid', why: 'volume' };
  if (view.getUint32(at + 16, true) !== slot) return { kind: 'invalid', why: 'slot' };
  const length = view.getUint32(at + 20, true);
  if (length < 1 || length > pageBytes) return { kind: 'invalid', why: 'length' };
  const keyLength = view.getUint16(at + 6, true);
  const key = keyLength <= 128 ? buf.toString('latin1', at + KEY_AT, at + KEY_AT + keyLength) : '';
  if (!PAGE_KEY_PATTERN.test(key)) return { kind: 'invalid', why: 'key' };
  const generation = view.getUint32(at + 32, true) + view.getUint32(at + 36, true) * 2 ** 32;
  // Chunk CRCs: absent (0) in headers written before they existed; impossible values read as absent (whole-page reads).
  let chunkBytes = view.getUint32(at + 28, true);
  const chunkCrcs: number[] = [];
  const n = chunkBytes > 0 ? Math.ceil(length / chunkBytes) : 0;
  if (chunkBytes % 4096 !== 0 || n > MAX_CHUNKS) chunkBytes = 0;
  else for (let i = 0; i < n; i++) chunkCrcs.push(view.getUint32(at + CHUNKS_AT + 4 * i, true));
  return { kind: 'page', key, length, crc32c: view.getUint32(at + 24, true), generation, chunkBytes, chunkCrcs };
}

/** Offset of a slot's header and data inside its slab file. */
export const headerOffset = (slotInSlab: number): number => slotInSlab * HEADER_BYTES;
export const dataOffset = (g: Geometry, slotInSlab: number): number => g.dataOffset + slotInSlab * g.slotStride;

// ---------------------------------------------------------------------------------------------------------------
// Folder lock: one writer per folder. Two processes allocating slots in the same slab files would overwrite each
// other's pages, so a second opener is refused while the first is alive.

const heldHere = new Set<string>();

interface LockInfo {
  pid: number;
  host: string;
  since: string;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes the folder's lock file (`lock`, with pid and host). A lock left by a process that is gone from this host
 * (or by this very process after a crash simulation) is taken over.
 * @throws TierSyncError ERR_UNAVAILABLE naming the holder, ERR_IO
 */
export function acquireLock(folder: string): void {
  const path = join(folder, LOCK);
  if (heldHere.has(folder)) {
    throw new TierSyncError(`fs tier: folder ${folder} is already open in this process`, 'ERR_UNAVAILABLE', { tier });
  }
  const mine: LockInfo = { pid: process.pid, host: hostname(), since: new Date().toISOString() };
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(path, `${JSON.stringify(mine)}\n`, { flag: 'wx' });
      heldHere.add(folder);
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw ioError(`cannot create ${path}`, e);
    }
    let other: Partial<LockInfo> = {};
    try {
      other = JSON.parse(readFileSync(path, 'utf8')) as Partial<LockInfo>;
    } catch {
      // Unreadable or half-written: its writer died between create and write. Stale.
    }
    const sameHost = other.host === mine.host;
    const stale = other.pid === undefined || (sameHost && (other.pid === process.pid || !alive(other.pid)));
    if (!stale) {
      throw new TierSyncError(
        `fs tier: folder ${folder} is in use by pid ${other.pid} on host ${other.host ?? '?'} since ${other.since ?? '?'}; ` +
          `one process per folder (if that process is gone, remove ${path})`,
        'ERR_UNAVAILABLE',
        { tier },
      );
    }
    try {
      unlinkSync(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw ioError(`cannot remove stale ${path}`, e);
    }
  }
  throw new TierSyncError(`fs tier: lost a race for ${path}; another process opened ${folder}`, 'ERR_UNAVAILABLE', { tier });
}

/** Gives the lock back; `keepFile` leaves the file behind as a crashed process would. */
export function releaseLock(folder: string, keepFile = false): void {
  if (!heldHere.delete(folder)) return;
  if (keepFile) return;
  try {
    unlinkSync(join(folder, LOCK));
  } catch {
    // Already gone: nothing to release.
  }
}

