/** Argument checks shared by every driver: a bad key or range is refused before anything moves. */
import { DeviceArena, HostArena, TierSyncError, describeValue } from '@tiersync/native';
import { PAGE_KEY_PATTERN, type PageKey, type PageLocation, type PageRead, type PageWrite } from './driver.js';
import { checkMeta } from './page-meta.js';

const invalid = (message: string, tier: string) => new TierSyncError(message, 'ERR_INVALID_ARGUMENT', { tier });

export function checkKey(key: unknown, where: string, tier: string): asserts key is PageKey {
  if (typeof key !== 'string' || !PAGE_KEY_PATTERN.test(key)) {
    throw invalid(`${where}: key must be 16..128 lower-case hex characters, got ${describeValue(key)}`, tier);
  }
}

export function checkKeys(keys: readonly unknown[], tier: string): asserts keys is PageKey[] {
  if (!Array.isArray(keys)) throw invalid(`keys must be an array, got ${describeValue(keys)}`, tier);
  keys.forEach((k, i) => checkKey(k, `keys[${i}]`, tier));
}

export function checkLocation(loc: unknown, where: string, pageBytes: number, tier: string): asserts loc is PageLocation {
  if (typeof loc !== 'object' || loc === null) throw invalid(`${where} must be { arena, offset, length }`, tier);
  const { arena, offset, length } = loc as PageLocation;
  if (!(arena instanceof HostArena || arena instanceof DeviceArena)) {
    throw invalid(`${where}.arena must be a HostArena or DeviceArena, got ${describeValue(arena)}`, tier);
  }
  if (!Number.isSafeInteger(offset) || offset < 0) throw invalid(`${where}.offset must be an integer >= 0, got ${describeValue(offset)}`, tier);
  if (!Number.isSafeInteger(length) || length < 1) throw invalid(`${where}.length must be an integer >= 1, got ${describeValue(length)}`, tier);
  if (length > pageBytes) throw invalid(`${where}.length ${length} exceeds the tier's page size ${pageBytes}`, tier);
  if (offset + length > arena.capacity) {
    throw new TierSyncError(`${where}: [${offset}, +${length}) exceeds arena capacity ${arena.capacity}`, 'ERR_OUT_OF_RANGE', { tier });
  }
}

/** Checks a write batch; duplicate keys in one batch are refused (ambiguous bytes). */
export function checkWrites(pages: readonly PageWrite[], pageBytes: number, tier: string): void {
  if (!Array.isArray(pages)) throw invalid(`pages must be an array, got ${describeValue(pages)}`, tier);
  const seen = new Set<string>();
  pages.forEach((p, i) => {
    if (typeof p !== 'object' || p === null) throw invalid(`pages[${i}] must be { key, source }`, tier);
    checkKey(p.key, `pages[${i}].key`, tier);
    checkLocation(p.source, `pages[${i}].source`, pageBytes, tier);
    if (p.crc32c !== undefined && (!Number.isInteger(p.crc32c) || p.crc32c < 0 || p.crc32c > 0xffffffff)) {
      throw invalid(`pages[${i}].crc32c must be a 32-bit unsigned integer`, tier);
    }
    checkMeta(p.meta, `pages[${i}]`, tier);
    if (seen.has(p.key)) throw invalid(`pages[${i}].key ${p.key} appears twice in one write`, tier);
    seen.add(p.key);
  });
}

export function checkReads(pages: readonly PageRead[], pageBytes: number, tier: string): void {
  if (!Array.isArray(pages)) throw invalid(`pages must be an array, got ${describeValue(pages)}`, tier);
  pages.forEach((p, i) => {
    if (typeof p !== 'object' || p === null) throw invalid(`pages[${i}] must be { key, into }`, tier);
    checkKey(p.key, `pages[${i}].key`, tier);
    checkLocation(p.into, `pages[${i}].into`, pageBytes, tier);
  });
}
