/**
 * PageMeta (driver.ts) as the persistent tiers record it: the check every write runs, and the packing of hex
 * strings into fixed binary fields (two hex digits a byte) that the fs slot header and the host slot table use.
 */
import { TierSyncError, describeValue } from '@tiersync/native';
import { NAMESPACE_ID_PATTERN, PAGE_KEY_PATTERN, type PageMeta } from './driver.js';

/**
 * Refuses a malformed `meta` of a write entry, naming it.
 * @throws TierSyncError ERR_INVALID_ARGUMENT
 */
export function checkMeta(meta: unknown, where: string, tier: string): asserts meta is PageMeta | undefined {
  if (meta === undefined) return;
  const bad = (what: string, value: unknown) => new TierSyncError(`${where}.${what}, got ${describeValue(value)}`, 'ERR_INVALID_ARGUMENT', { tier });
  if (typeof meta !== 'object' || meta === null) throw bad('meta must be { namespace, parent, position }', meta);
  const m = meta as PageMeta;
  if (typeof m.namespace !== 'string' || !NAMESPACE_ID_PATTERN.test(m.namespace)) throw bad('meta.namespace must be 1..64 lower-case hex characters', m.namespace);
  if (m.parent !== null && (typeof m.parent !== 'string' || !PAGE_KEY_PATTERN.test(m.parent))) throw bad('meta.parent must be null or 16..128 lower-case hex characters', m.parent);
  if (!Number.isSafeInteger(m.position) || m.position < 0 || m.position > 0xffffffff) throw bad('meta.position must be an integer in [0, 2^32)', m.position);
}

/** Writes hex digits `hex` into `bytes[at, at + ceil(hex.length / 2))`, two digits a byte (an odd last digit is the high nibble). */
export function packHex(bytes: Uint8Array, at: number, hex: string): void {
  for (let i = 0; i < hex.length; i += 2) {
    const hi = Number.parseInt(hex[i]!, 16);
    const lo = i + 1 < hex.length ? Number.parseInt(hex[i + 1]!, 16) : 0;
    bytes[at + (i >> 1)] = (hi << 4) | lo;
  }
}

/** The first `digits` hex digits of `bytes` from `at`, as packHex wrote them. */
export function unpackHex(bytes: Uint8Array, at: number, digits: number): string {
  const whole = Buffer.from(bytes.buffer, bytes.byteOffset + at, Math.ceil(digits / 2)).toString('hex');
  return whole.slice(0, digits);
}
