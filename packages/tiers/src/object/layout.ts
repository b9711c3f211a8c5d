/**
 * How the object tier lays pages out in a bucket (see README.md, "Object layout"):
 *
 *   <prefix>tiersync-object.json   tier descriptor: format, fingerprint, page size (written at first open)
 *   <prefix>data/<id>              pages of one write batch, back to back, then a manifest and a trailer
 *   <prefix>dead/<id>              keys deleted from data/<id> while other pages of it are still live
 *
 * A data object is written with one PUT (or one CompleteMultipartUpload), so it appears complete or not at all:
 * the footer inside it is the commit record, and no separate index can disagree with the data. Object ids sort
 * by creation time, which makes duplicate resolution at open deterministic (the oldest copy wins).
 */
import { randomBytes } from 'node:crypto';
import { crc32c } from '@tiersync/native';
import { z } from 'zod';
import { NAMESPACE_ID_PATTERN, PAGE_KEY_PATTERN, type PageKey, type PageMeta } from '../driver.js';
import type { Bucket } from './bucket.js';

/** Layout version written in tombstones and the descriptor. */
export const FORMAT = 1;
/**
 * Version of data-object manifests written now. 2: a page entry may carry its namespace, parent and position
 * (`[key, offset, length, crc, namespace, parent, position]`). 3: an entry may also carry the CRC32C of each
 * chunk of the page, so a sub-page range is verified on its own (`[key, offset, length, crc, namespace|null,
 * parent|null, position|null, chunkBytes, "<8 hex digits per chunk>"]`). Manifests of versions 1 and 2 are read
 * too (their pages have no chunk CRCs: a range read fetches and checks the whole page). A build that reads only
 * older versions skips a newer object at open (never deletes it).
 */
export const MANIFEST_FORMAT = 3;
/** Most chunk CRCs one page entry carries: a longer page gets longer chunks. */
export const MAX_CHUNKS = 256;
/** Fixed size of the trailer at the end of every data object. */
export const TRAILER_BYTES = 24;
const MAGIC = 'TSOBJv01';
/** Name of the tier descriptor under the prefix. */
export const DESCRIPTOR_NAME = 'tiersync-object.json';

const ID = /^[0-9a-z]{9}-[0-9a-f]{16}$/;

/** A new object id: base-36 milliseconds (sortable until the year 5188) and 64 random bits. */
export function newObjectId(now = Date.now()): string {
  return `${now.toString(36).padStart(9, '0')}-${randomBytes(8).toString('hex')}`;
}

/** True for names this driver generates (anything else under data/ is skipped at open). */
export function isObjectId(id: string): boolean {
  return ID.test(id);
}

/** Object names: data objects and their tombstones. */
export const dataName = (prefix: string, id: string): string => `${prefix}data/${id}`;
export const deadName = (prefix: string, id: string): string => `${prefix}dead/${id}`;

/** One page inside a data object. */
export interface ManifestPage {
  key: PageKey;
  /** Byte offset of the page in the object. */
  offset: number;
  length: number;
  crc32c: number;
  /** Namespace, parent and position the page was written with (manifest version 2); absent otherwise. */
  meta?: PageMeta | undefined;
  /**
   * Chunk size of `chunkCrcs` (manifest version 3): CRC32C of bytes [k x chunkBytes, +chunkBytes) of the page for
   * each k, the last chunk shorter. Absent for pages written without them.
   */
  chunkBytes?: number | undefined;
  chunkCrcs?: readonly number[] | undefined;
}

export interface Manifest {
  format: number;
  fingerprint: string;
  pageBytes: number;
  pages: ManifestPage[];
}

/**
 * Upper bound of the encoded footer (manifest + trailer) for `pages` pages of at most `chunks` chunk CRCs each,
 * so staging can be sized first.
 */
export function footerBound(pages: number, fingerprint: string, chunks = MAX_CHUNKS): number {
  // Per page: ["<=128 hex>",<=16 digits,<=16 digits,<=10 digits,"<=64 hex>","<=128 hex>"|null,<=10 digits,
  // <=16 digits,"8 hex per chunk"], at most ~410 bytes + 8 per chunk; the fingerprint JSON-escaped.
  return 256 + fingerprint.length * 6 + pages * (420 + 8 * chunks) + TRAILER_BYTES;
}

/** The chunk size for a page of `length` bytes: `chunk`, or longer so that at most MAX_CHUNKS cover the page. */
export function chunkBytesFor(length: number, chunk: number): number {
  if (Math.ceil(length / chunk) <= MAX_CHUNKS) return chunk;
  return Math.ceil(Math.ceil(length / MAX_CHUNKS) / 4096) * 4096;
}

const hexCrcs = (crcs: readonly number[]) => crcs.map((c) => c.toString(16).padStart(8, '0')).join('');

/**
 * Writes manifest + trailer into `into` (a view that starts right after the page bytes); returns the footer
 * length. Trailer: magic (8 bytes), u32 manifest length, u32 CRC32C of the manifest, u64 data bytes (LE).
 */
export function encodeFooter(manifest: Manifest, dataBytes: number, into: Uint8Array): number {
  const json = JSON.stringify({
    format: manifest.format,
    fingerprint: manifest.fingerprint,
    pageBytes: manifest.pageBytes,
    pages: manifest.pages.map((p) => {
      if (p.chunkBytes !== undefined && p.chunkCrcs !== undefined) {
        return [p.key, p.offset, p.length, p.crc32c, p.meta?.namespace ?? null, p.meta?.parent ?? null, p.meta?.position ?? null, p.chunkBytes, hexCrcs(p.chunkCrcs)];
      }
      return p.meta ? [p.key, p.offset, p.length, p.crc32c, p.meta.namespace, p.meta.parent, p.meta.position] : [p.key, p.offset, p.length, p.crc32c];
    }),
  });
  const { written } = new TextEncoder().encodeInto(json, into);
  if (written === undefined || written + TRAILER_BYTES > into.length) throw new RangeError('footer does not fit its staging space');
  const t = new DataView(into.buffer, into.byteOffset + written, TRAILER_BYTES);
  for (let i = 0; i < 8; i++) t.setUint8(i, MAGIC.charCodeAt(i));
  t.setUint32(8, written, true);
  t.setUint32(12, crc32c(into.subarray(0, written)), true);
  t.setBigUint64(16, BigInt(dataBytes), true);
  return written + TRAILER_BYTES;
}

/** Reads a trailer (the last TRAILER_BYTES of an object); undefined when it is not one of ours. */
export function decodeTrailer(bytes: Uint8Array): { manifestBytes: number; manifestCrc: number; dataBytes: number } | undefined {
  if (bytes.length !== TRAILER_BYTES) return undefined;
  const t = new DataView(bytes.buffer, bytes.byteOffset, TRAILER_BYTES);
  for (let i = 0; i < 8; i++) if (t.getUint8(i) !== MAGIC.charCodeAt(i)) return undefined;
  const dataBytes = t.getBigUint64(16, true);
  if (dataBytes > BigInt(Number.MAX_SAFE_INTEGER)) return undefined;
  return { manifestBytes: t.getUint32(8, true), manifestCrc: t.getUint32(12, true), dataBytes: Number(dataBytes) };
}

const pageEntry = [z.string().regex(PAGE_KEY_PATTERN), z.number().int().nonnegative(), z.number().int().positive(), z.number().int().min(0).max(0xffffffff)] as const;
const metaFields = [z.string().regex(NAMESPACE_ID_PATTERN), z.string().regex(PAGE_KEY_PATTERN).nullable(), z.number().int().min(0).max(0xffffffff)] as const;
const chunkedEntry = [
  ...pageEntry,
  z.string().regex(NAMESPACE_ID_PATTERN).nullable(),
  z.string().regex(PAGE_KEY_PATTERN).nullable(),
  z.number().int().min(0).max(0xffffffff).nullable(),
  z.number().int().positive(),
  z.string().regex(/^(?:[0-9a-f]{8})+$/),
] as const;
const manifestSchema = z.union([
  z.object({ format: z.literal(1), fingerprint: z.string(), pageBytes: z.number().int().positive(), pages: z.array(z.tuple(pageEntry)) }),
  z.object({
    format: z.literal(2),
    fingerprint: z.string(),
    pageBytes: z.number().int().positive(),
    pages: z.array(z.union([z.tuple(pageEntry), z.tuple([...pageEntry, ...metaFields])])),
  }),
  z.object({
    format: z.literal(3),
    fingerprint: z.string(),
    pageBytes: z.number().int().positive(),
    pages: z.array(z.union([z.tuple(pageEntry), z.tuple([...pageEntry, ...metaFields]), z.tuple(chunkedEntry)])),
  }),
]);

/**
 * Checks and decodes a manifest read back from a bucket. Everything in it is untrusted: the CRC must match, every
 * page must lie inside the data area, and keys must match PAGE_KEY_PATTERN.
 * @returns the manifest, or a reason it was refused.
 */
export function decodeManifest(bytes: Uint8Array, trailer: { manifestCrc: number; dataBytes: number }): Manifest | string {
  if (crc32c(bytes) !== trailer.manifestCrc) return 'manifest CRC32C mismatch';
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    return 'manifest is not JSON';
  }
  const parsed = manifestSchema.safeParse(raw);
  if (!parsed.success) return `manifest is malformed (${parsed.error.issues[0]?.message ?? 'invalid'})`;
  const m = parsed.data;
  const pages: ManifestPage[] = [];
  for (const entry of m.pages) {
    const [key, offset, length, crc] = entry;
    if (offset + length > trailer.dataBytes) return `page ${key} lies outside the object's data`;
    if (length > m.pageBytes) return `page ${key} is longer than the page size ${m.pageBytes}`;
    if (entry.length === 9) {
      const [, , , , namespace, parent, position, chunkBytes, hex] = entry;
      // Meta is all there or all absent; the chunk CRCs cover the page exactly.
      if ((namespace === null) !== (position === null) || (namespace === null && parent !== null)) return `page ${key} has partial meta`;
      if (hex.length !== 8 * Math.ceil(length / chunkBytes)) return `page ${key} has ${hex.length / 8} chunk CRCs, its ${length} bytes need ${Math.ceil(length / chunkBytes)}`;
      const chunkCrcs: number[] = [];
      for (let at = 0; at < hex.length; at += 8) chunkCrcs.push(Number.parseInt(hex.slice(at, at + 8), 16));
      const meta = namespace !== null && position !== null ? { namespace, parent, position } : undefined;
      pages.push({ key, offset, length, crc32c: crc, meta, chunkBytes, chunkCrcs });
      continue;
    }
    pages.push(entry.length === 7 ? { key, offset, length, crc32c: crc, meta: { namespace: entry[4], parent: entry[5], position: entry[6] } } : { key, offset, length, crc32c: crc });
  }
  return { format: m.format, fingerprint: m.fingerprint, pageBytes: m.pageBytes, pages };
}

/** Least bytes read from the end of an object at open. */
const TAIL_MIN_BYTES = 16 * 1024;

/**
 * Reads and checks the footer of one data object: one ranged GET of its tail, sized for the manifest an object
 * of this size usually has (up to ~300 bytes a page with meta), and a second GET only when the manifest is larger.
 * @returns the pages, or why the object is not usable (it is then skipped, never deleted).
 * @throws TierSyncError when the GETs fail (open cannot guess what the object holds).
 */
export async function fetchFooter(
  bucket: Bucket,
  name: string,
  size: number,
  expect: { fingerprint: string; pageBytes: number },
): Promise<{ dataBytes: number; pages: ManifestPage[] } | string> {
  if (size < TRAILER_BYTES) return 'too small to be a tiersync object';
  // ~300 bytes of entry a page, plus 8 per chunk CRC at the default 64 KiB chunks.
  const perPage = 300 + 8 * Math.min(MAX_CHUNKS, Math.ceil(expect.pageBytes / 65_536));
  const tail = Math.min(size, TAIL_MIN_BYTES + expect.fingerprint.length * 6 + Math.ceil(size / expect.pageBytes) * perPage);
  const bytes = await bucket.getBytes(name, size - tail, tail);
  const trailer = decodeTrailer(bytes.subarray(tail - TRAILER_BYTES));
  if (!trailer) return 'no tiersync trailer';
  if (trailer.dataBytes + trailer.manifestBytes + TRAILER_BYTES !== size) return `size ${size} does not match its trailer`;
  const manifestBytes =
    trailer.manifestBytes + TRAILER_BYTES <= tail
      ? bytes.subarray(tail - TRAILER_BYTES - trailer.manifestBytes, tail - TRAILER_BYTES)
      : await bucket.getBytes(name, trailer.dataBytes, trailer.manifestBytes);
  const m = decodeManifest(manifestBytes, trailer);
  if (typeof m === 'string') return m;
  if (m.fingerprint !== expect.fingerprint) return `written under fingerprint '${m.fingerprint}'`;
  if (m.pageBytes !== expect.pageBytes) return `written with page size ${m.pageBytes}`;
  return { dataBytes: trailer.dataBytes, pages: m.pages };
}

/** Tier descriptor: written once per prefix, checked at every open. */
export interface Descriptor {
  format: number;
  fingerprint: string;
  pageBytes: number;
}

const descriptorSchema = z.object({ format: z.number().int(), fingerprint: z.string(), pageBytes: z.number().int().positive() });

/** Checks a descriptor read back from the bucket; a string says why it was refused. */
export function decodeDescriptor(bytes: Uint8Array): Descriptor | string {
  try {
    const parsed = descriptorSchema.safeParse(JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)));
    return parsed.success ? parsed.data : `malformed (${parsed.error.issues[0]?.message ?? 'invalid'})`;
  } catch {
    return 'not JSON';
  }
}

const tombstoneSchema = z.object({ format: z.literal(FORMAT), dead: z.array(z.string().regex(PAGE_KEY_PATTERN)) });

/** The tombstone of an object: its deleted keys, sorted (JSON). */
export function encodeTombstone(dead: Iterable<PageKey>): Uint8Array {
  return new TextEncoder().encode(JSON.stringify({ format: FORMAT, dead: [...dead].sort() }));
}

/** Keys listed as deleted; undefined when the tombstone is unreadable (its pages then count as live). */
export function decodeTombstone(bytes: Uint8Array): PageKey[] | undefined {
  try {
    const parsed = tombstoneSchema.safeParse(JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)));
    return parsed.success ? parsed.data.dead : undefined;
  } catch {
    return undefined;
  }
}
