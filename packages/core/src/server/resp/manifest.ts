/**
 * The RESP door's durable catalog entries: one small manifest page per value, stored through the hierarchy like the
 * value's own pages (so it lives where they live: a persistent tier keeps both), written only after every page of
 * the value is committed. A restarted door lists the persistent tiers' pages, reads the manifests and rebuilds its
 * keys from the newest generation of each (manifest-store.ts, recover()).
 *
 * Page keys say what they are by their form, so recovery needs no other record:
 * - value pages: `72737076` ('rspv') + 64 hex digits (SHA-256 of the door's per-process salt, tenant, key,
 *   generation, page index): 72 digits;
 * - manifests: `7273706d` ('rspm') + 32 hex digits of SHA-256(tenant, key) + the generation as 16 hex digits:
 *   56 digits. The generation grows with every SET and across restarts (recovery resumes after the largest found).
 *   A manifest longer than one page continues on parts: the manifest's key + the part number as 4 hex digits
 *   (60 digits), parts 1, 2, ...; the first page says how long the whole is.
 * KV pages' keys are 64 digits, so neither form can be mistaken for one.
 *
 * Manifest bytes (little-endian): 0 u32 magic 'RSPM', 4 u16 version (1), 6 u16 tenant bytes, 8 u32 key bytes,
 * 12 u32 page count, 16 f64 generation, 24 f64 value length, 32 f64 expiry (Unix ms, 0: none), 40 the value pages'
 * 32-byte hashes, then the tenant (UTF-8) and the key (raw bytes), then u32 CRC32C of everything before it.
 */
import { createHash } from 'node:crypto';
import { crc32c } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';

export const VALUE_PAGE_TAG = '72737076';
export const MANIFEST_TAG = '7273706d';
const MAGIC = 0x4d505352; // 'RSPM'
const VERSION = 1;
const HEAD = 40;
const HASH = 32;

/** What a manifest records of one value. */
export interface Manifest {
  tenant: string;
  key: string;
  generation: number;
  length: number;
  expiresAt: number;
  pages: PageKey[];
}

/** The 32 hex digits naming (tenant, key) in manifest keys. */
function keyHash(tenant: string, key: string): string {
  const t = Buffer.from(tenant, 'utf8');
  const head = Buffer.alloc(4);
  head.writeUInt32BE(t.length, 0);
  return createHash('sha256').update(head).update(t).update(Buffer.from(key, 'latin1')).digest('hex').slice(0, 32);
}

export function manifestKey(tenant: string, key: string, generation: number): PageKey {
  return `${MANIFEST_TAG}${keyHash(tenant, key)}${generation.toString(16).padStart(16, '0')}`;
}

export function isManifestKey(k: string): boolean {
  return k.length === 56 && k.startsWith(MANIFEST_TAG);
}

export function isManifestPartKey(k: string): boolean {
  return k.length === 60 && k.startsWith(MANIFEST_TAG);
}

/** The keys of a manifest's pages: its own key, then its parts. */
export function manifestPageKeys(head: PageKey, size: number, pageBytes: number): PageKey[] {
  const out = [head];
  for (let i = 1; i * pageBytes < size; i++) out.push(`${head}${i.toString(16).padStart(4, '0')}`);
  return out;
}

export function isValuePageKey(k: string): boolean {
  return k.length === 72 && k.startsWith(VALUE_PAGE_TAG);
}

/** (tenant, key) group and generation of a manifest key. */
export function parseManifestKey(k: string): { group: string; generation: number } {
  return { group: k.slice(8, 40), generation: Number.parseInt(k.slice(40), 16) };
}

/** Bytes of the manifest of a value of `pages` pages. */
export function manifestBytes(tenant: string, key: string, pages: number): number {
  return HEAD + pages * HASH + Buffer.byteLength(tenant, 'utf8') + key.length + 4;
}

/** Encodes a manifest into `out` (at least manifestBytes() long); returns the bytes written. */
export function encodeManifest(m: Manifest, out: Uint8Array): number {
  const t = Buffer.from(m.tenant, 'utf8');
  const k = Buffer.from(m.key, 'latin1');
  const size = manifestBytes(m.tenant, m.key, m.pages.length);
  const b = Buffer.from(out.buffer, out.byteOffset, size);
  b.writeUInt32LE(MAGIC, 0);
  b.writeUInt16LE(VERSION, 4);
  b.writeUInt16LE(t.length, 6);
  b.writeUInt32LE(k.length, 8);
  b.writeUInt32LE(m.pages.length, 12);
  b.writeDoubleLE(m.generation, 16);
  b.writeDoubleLE(m.length, 24);
  b.writeDoubleLE(m.expiresAt, 32);
  let at = HEAD;
  for (const p of m.pages) {
    b.write(p.slice(VALUE_PAGE_TAG.length), at, HASH, 'hex');
    at += HASH;
  }
  at += t.copy(b, at);
  at += k.copy(b, at);
  b.writeUInt32LE(crc32c(b.subarray(0, at)), at);
  return size;
}

/** Bytes of a whole manifest, from its first page's header (at least 16 bytes); 0 when it is not a manifest. */
export function manifestSize(first: Uint8Array): number {
  if (first.length < 16) return 0;
  const b = Buffer.from(first.buffer, first.byteOffset, first.length);
  if (b.readUInt32LE(0) !== MAGIC || b.readUInt16LE(4) !== VERSION) return 0;
  return HEAD + b.readUInt32LE(12) * HASH + b.readUInt16LE(6) + b.readUInt32LE(8) + 4;
}

/** Decodes a manifest read from the page `pageKey`; undefined when it is malformed, damaged or not that key's. */
export function decodeManifest(pageKey: string, bytes: Uint8Array): Manifest | undefined {
  if (bytes.length < HEAD + 4) return undefined;
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
  if (b.readUInt32LE(0) !== MAGIC || b.readUInt16LE(4) !== VERSION) return undefined;
  const tLen = b.readUInt16LE(6);
  const kLen = b.readUInt32LE(8);
  const count = b.readUInt32LE(12);
  const size = HEAD + count * HASH + tLen + kLen + 4;
  if (size > b.length) return undefined;
  if (crc32c(b.subarray(0, size - 4)) !== b.readUInt32LE(size - 4)) return undefined;
  const pages: PageKey[] = [];
  for (let i = 0; i < count; i++) pages.push(`${VALUE_PAGE_TAG}${b.toString('hex', HEAD + i * HASH, HEAD + (i + 1) * HASH)}`);
  const tenant = b.toString('utf8', HEAD + count * HASH, HEAD + count * HASH + tLen);
  const key = b.toString('latin1', HEAD + count * HASH + tLen, size - 4);
  const m: Manifest = { tenant, key, generation: b.readDoubleLE(16), length: b.readDoubleLE(24), expiresAt: b.readDoubleLE(32), pages };
  return manifestKey(tenant, key, m.generation) === pageKey ? m : undefined;
}
