/**
 * Chained page keys. Page i of a token sequence is named by a hash of (namespace, key of page i-1, the page's
 * token ids), so equal keys mean equal prefixes, equal model and layout: reusable KV.
 *
 * The hash (version "TSK1"), for the page at 0-based page position p:
 *
 *   d      = SHA-256( "TSK1" || namespace id (32 bytes) || parent key (32 bytes; 32 zero bytes for p = 0)
 *                     || u32le(tokensPerPage) || token ids as u32le )
 *   anchor = d[0..8]            when p % ANCHOR_SPAN == 0
 *          = parent key[0..8]   otherwise
 *   key    = hex(anchor || d[8..32])          (64 lower-case hex characters, a PageKey)
 *
 * Why the anchor: the index's B-trees are ordered by key. With plain hashes, the 2,048 pages of one context land
 * on ~2,000 different B-tree pages and every store rewrites megabytes of the index. With the anchor, runs of
 * ANCHOR_SPAN consecutive pages of one chain share their first 8 bytes and sit side by side in the index, so
 * storing or looking up a context touches few B-tree pages. The key stays a function of (parent key, tokens,
 * namespace) alone, with 192 bits of hash after the anchor. SHA-256 because it is standardized, hardware
 * accelerated (SHA-NI/ARMv8 crypto through OpenSSL) and collision resistant, which matters when tenants share a cache.
 */
import crypto from 'node:crypto';
import os from 'node:os';
import { TierSyncError, describeValue } from '@tiersync/native/errors';
import type { Namespace } from './namespace.js';

/** Same rule as `PAGE_KEY_PATTERN` in @tiersync/tiers: lower-case hex, 16..128 characters. */
export const KEY_PATTERN = /^[0-9a-f]{16,128}$/;
/** Consecutive pages of one chain that share a key prefix (see the file comment). */
export const ANCHOR_SPAN = 64;
/** Hex characters of a key produced here. */
export const KEY_HEX_LENGTH = 64;

/** Token ids: unsigned 32-bit integers. Typed arrays are hashed without per-token work. */
export type TokenArray = Uint32Array | Int32Array | readonly number[];

export interface PageKeyOptions {
  /**
   * Key of the page just before the first page of `tokens`, to continue a chain (e.g. new turns of a
   * conversation). Requires `position`. Default: none (tokens start at the beginning of the context).
   */
  parent?: string;
  /** 0-based page position of the first page of `tokens` in its context. Required with `parent`; default 0. */
  position?: number;
}

const HEADER = 72;
const TAG = Buffer.from('TSK1', 'ascii');
const littleEndian = os.endianness() === 'LE';
const hashHex: (data: Uint8Array) => string =
  typeof (crypto as { hash?: unknown }).hash === 'function'
    ? (data) => (crypto as unknown as { hash(alg: string, d: Uint8Array, enc: string): string }).hash('sha256', data, 'hex')
    : (data) => crypto.createHash('sha256').update(data).digest('hex');

/** Validates tokens and returns them as a Uint32Array view (no copy for typed arrays). */
function asUint32(tokens: unknown): Uint32Array {
  if (tokens instanceof Uint32Array) {
    if (tokens.length === 0) throw new TierSyncError('tokens must not be empty', 'ERR_INVALID_ARGUMENT');
    return tokens;
  }
  if (tokens instanceof Int32Array) {
    if (tokens.length === 0) throw new TierSyncError('tokens must not be empty', 'ERR_INVALID_ARGUMENT');
    for (let i = 0; i < tokens.length; i++) {
      if (tokens[i]! < 0) throw new TierSyncError(`tokens[${i}] must be a token id >= 0, got ${tokens[i]}`, 'ERR_INVALID_ARGUMENT');
    }
    return new Uint32Array(tokens.buffer, tokens.byteOffset, tokens.length);
  }
  if (!Array.isArray(tokens)) {
    throw new TierSyncError(`tokens must be a Uint32Array, Int32Array or array of integers, got ${describeValue(tokens)}`, 'ERR_INVALID_ARGUMENT');
  }
  if (tokens.length === 0) throw new TierSyncError('tokens must not be empty', 'ERR_INVALID_ARGUMENT');
  const out = new Uint32Array(tokens.length);
  for (let i = 0; i < tokens.length; i++) {
    const t: unknown = tokens[i];
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      throw new TierSyncError(`tokens[${i}] must be an integer token id in [0, 2^32), got ${describeValue(t)}`, 'ERR_INVALID_ARGUMENT');
    }
    out[i] = t;
  }
  return out;
}

function checkNamespace(ns: unknown): asserts ns is Namespace {
  const n = ns as Namespace | null;
  if (n === null || typeof n !== 'object' || typeof n.id !== 'string' || !/^[0-9a-f]{64}$/.test(n.id) || typeof n.layout?.tokensPerPage !== 'number') {
    throw new TierSyncError(`namespace must be a Namespace from createNamespace(), got ${describeValue(ns)}`, 'ERR_INVALID_ARGUMENT');
  }
}

/**
 * Keys of the full pages of `tokens` in namespace `ns` (tokens per page from its layout). A partial last page
 * gets no key: it is never cached. Fewer tokens than one page give `[]`.
 * Cost: one SHA-256 of 72 + 4 * tokensPerPage bytes per page, no allocation per token (~0.7 us per 16-token
 * page here).
 * @throws TierSyncError ERR_INVALID_ARGUMENT for empty or non-integer tokens, a bad parent or position.
 */
export function pageKeys(ns: Namespace, tokens: TokenArray, options: PageKeyOptions = {}): string[] {
  checkNamespace(ns);
  const ids = asUint32(tokens);
  const { parent, position } = options ?? {};
  if (parent !== undefined && (typeof parent !== 'string' || parent.length !== KEY_HEX_LENGTH || !KEY_PATTERN.test(parent))) {
    throw new TierSyncError(`options.parent must be a ${KEY_HEX_LENGTH}-character page key, got ${describeValue(parent)}`, 'ERR_INVALID_ARGUMENT');
  }
  if (position !== undefined && (typeof position !== 'number' || !Number.isSafeInteger(position) || position < 0)) {
    throw new TierSyncError(`options.position must be an integer >= 0, got ${describeValue(position)}`, 'ERR_INVALID_ARGUMENT');
  }
  if (parent !== undefined && (position === undefined || position < 1)) {
    throw new TierSyncError('options.position must be given (>= 1) with options.parent: the page position of the first page of tokens', 'ERR_INVALID_ARGUMENT');
  }
  if (parent === undefined && position !== undefined && position !== 0) {
    throw new TierSyncError('options.parent must be given when options.position is not 0', 'ERR_INVALID_ARGUMENT');
  }
  const T = ns.layout.tokensPerPage;
  const pages = Math.floor(ids.length / T);
  const keys = new Array<string>(pages);
  if (pages === 0) return keys;

  const scratch = Buffer.alloc(HEADER + 4 * T);
  TAG.copy(scratch, 0);
  scratch.write(ns.id, 4, 'hex');
  if (parent !== undefined) scratch.write(parent, 36, 'hex');
  scratch.writeUInt32LE(T, 68);
  const words = new Uint32Array(scratch.buffer, scratch.byteOffset, scratch.length >>> 2);
  const view = new DataView(scratch.buffer, scratch.byteOffset, scratch.length);
  // scratch[36..68) always holds the previous key; its first 8 bytes are the current anchor.
  let anchor = parent === undefined ? '' : parent.slice(0, 16);
  let pos = position ?? 0;
  for (let p = 0; p < pages; p++, pos++) {
    const from = p * T;
    if (littleEndian) {
      words.set(ids.subarray(from, from + T), HEADER >>> 2);
    } else {
      for (let i = 0; i < T; i++) view.setUint32(HEADER + 4 * i, ids[from + i]!, true);
    }
    const hex = hashHex(scratch);
    if (pos % ANCHOR_SPAN === 0) {
      anchor = hex.slice(0, 16);
      keys[p] = hex;
      scratch.write(hex, 36, 'hex');
    } else {
      const tail = hex.slice(16);
      keys[p] = anchor + tail;
      scratch.write(tail, 44, 'hex');
    }
  }
  return keys;
}

/** Number of full pages (cacheable) in `tokenCount` tokens of namespace `ns`. */
export function fullPages(ns: Namespace, tokenCount: number): number {
  checkNamespace(ns);
  return Math.floor(tokenCount / ns.layout.tokensPerPage);
}
