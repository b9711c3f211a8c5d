/**
 * Page keys as the index handles them: bytes. The public API takes keys as lower-case hex strings; a batch is
 * validated and decoded here once (one join and one hex decode for the whole batch, no regular expression per
 * key), and everything inside the index compares bytes. Error messages are built only on failure.
 */
import { TierSyncError, describeValue } from '@tiersync/native/errors';

/** Bytes of the anchor: keys of one chain share their first 8 bytes (keys/page-keys.ts), the index finds keys by it. */
export const ANCHOR_BYTES = 8;

/** Keys of a batch as bytes: key i is bytes[off[i] .. off[i + 1]). */
export interface KeyBatch {
  readonly n: number;
  readonly bytes: Uint8Array;
  readonly off: Int32Array;
}

export function invalid(message: string): TierSyncError {
  return new TierSyncError(message, 'ERR_INVALID_ARGUMENT');
}

const KEY_RE = /^(?:[0-9a-f]{2}){8,64}$/;

function badKey(value: unknown, name: string): TierSyncError {
  return invalid(`${name} must be a page key (16..128 lower-case hex characters, an even count), got ${describeValue(value)}`);
}

/** Checks one key (cold paths: single keys, error reporting). */
export function checkKey(value: unknown, name: string | (() => string)): asserts value is string {
  if (typeof value !== 'string' || !KEY_RE.test(value)) throw badKey(value, typeof name === 'function' ? name() : name);
}

/**
 * Keys decoded per hex string: the batch is joined and decoded in chunks, because one string of a whole 2,048-key
 * batch (128 KiB) is a large-object allocation for V8 (measured: ~2.5x the time of 32 KiB chunks).
 */
const DECODE_CHUNK = 512;

/**
 * Validates and decodes keys[start .. end) (each a page key) into one buffer: batch key i is keys[start + i].
 * @param name names batch key i in an error message (`keys[3]`, `pages[3].key`).
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming the first bad key.
 */
export function decodeKeys(keys: readonly unknown[], name: (i: number) => string, start = 0, end = keys.length): KeyBatch {
  const n = end - start;
  const off = new Int32Array(n + 1);
  let chars = 0;
  for (let i = 0; i < n; i++) {
    const k = keys[start + i];
    if (typeof k !== 'string' || k.length < 16 || k.length > 128 || (k.length & 1) !== 0) throw badKey(k, name(i));
    chars += k.length;
    off[i + 1] = chars >> 1;
  }
  const bytes = Buffer.allocUnsafe(chars >> 1);
  let at = 0;
  let bad = false;
  for (let i = 0; i < n; i += DECODE_CHUNK) {
    const whole = start === 0 && end === keys.length && n <= DECODE_CHUNK;
    const joined = whole ? (keys as readonly string[]).join('') : (keys as readonly string[]).slice(start + i, start + Math.min(n, i + DECODE_CHUNK)).join('');
    // Buffer's hex decoder stops at the first non-hex pair and accepts upper case: both show here, once per chunk
    // (toLowerCase returns its own string when nothing changes, so the comparison is by identity then).
    const wrote = bytes.write(joined, at, 'hex');
    if (wrote * 2 !== joined.length || joined.toLowerCase() !== joined) bad = true;
    at += wrote;
  }
  if (bad) {
    for (let i = 0; i < n; i++) checkKey(keys[start + i], () => name(i));
  }
  return { n, bytes, off };
}

/** A batch of one key (cold paths). */
export function decodeKey(key: unknown, name: string): KeyBatch {
  return decodeKeys([key], () => name);
}

/** Whether a[ao..ao+w) equals b[bo..bo+w). */
export function bytesEqual(a: Uint8Array, ao: number, b: Uint8Array, bo: number, w: number): boolean {
  for (let j = 0; j < w; j++) if (a[ao + j] !== b[bo + j]) return false;
  return true;
}

/** The anchor of the key at `o` as a number (its first 6 bytes, big-endian): a map key; equal anchors give equal numbers. */
export function anchorNumber(bytes: Uint8Array, o: number): number {
  return bytes[o]! * 2 ** 40 + bytes[o + 1]! * 2 ** 32 + ((bytes[o + 2]! << 24) >>> 0) + (bytes[o + 3]! << 16) + (bytes[o + 4]! << 8) + bytes[o + 5]!;
}

/** anchorNumber of a hex key string (NaN when it does not start with 12 hex characters). */
export function anchorNumberOfHex(key: string): number {
  return Number.parseInt(key.substring(0, 12), 16);
}

/**
 * Index of the first key of `batch` that equals an earlier one, or -1. An open-addressing table of key indices in
 * a typed array, no per-key objects. The hash is two 32-bit reads of the key's last 8 bytes (hash output for keys
 * made by keys/page-keys.ts; every key is at least 8 bytes); equal hashes are settled by comparing the keys.
 */
export function firstDuplicate(batch: KeyBatch): number {
  const { n, bytes, off } = batch;
  if (n < 2) return -1;
  let size = 16;
  while (size < n * 2) size <<= 1;
  const table = new Int32Array(size).fill(-1);
  const mask = size - 1;
  for (let i = 0; i < n; i++) {
    const o = off[i]!;
    const e = off[i + 1]!;
    const w = e - o;
    const a = bytes[e - 1]! | (bytes[e - 2]! << 8) | (bytes[e - 3]! << 16) | (bytes[e - 4]! << 24);
    const b = bytes[e - 5]! | (bytes[e - 6]! << 8) | (bytes[e - 7]! << 16) | (bytes[e - 8]! << 24);
    const h = Math.imul(a ^ w, 0x9e3779b1) ^ Math.imul(b, 0x85ebca6b);
    let slot = (h ^ (h >>> 15)) & mask;
    for (;;) {
      const at = table[slot]!;
      if (at < 0) {
        table[slot] = i;
        break;
      }
      const ao = off[at]!;
      if (off[at + 1]! - ao === w && bytesEqual(bytes, ao, bytes, o, w)) return i;
      slot = (slot + 1) & mask;
    }
  }
  return -1;
}

/** Hex of `bytes[o..o+w)` (cold paths: keys the caller never named, such as parents and deleted pages). */
export function hexOf(bytes: Uint8Array, o: number, w: number): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset + o, w).toString('hex');
}
