/**
 * Validation of what callers hand to TierSync: done once at the public boundary, with errors that name the bad
 * argument; the modules behind it trust their input.
 */
import { DeviceArena, HostArena, TierSyncError } from '@tiersync/native';
import type { RetentionHint } from '@tiersync/policy';
import { PAGE_KEY_PATTERN, type PageKey, type PageLocation } from '@tiersync/tiers';
import type { LoadOptions, LookupResult, StoreOptions } from './types.js';

/** Keys named by a caller: valid PageKeys, each once (`unique`, default) or repeats allowed. */
export function checkKeys(keys: readonly PageKey[], what: string, unique = true): void {
  if (!Array.isArray(keys)) throw new TierSyncError(`${what} must be an array of page keys`, 'ERR_INVALID_ARGUMENT');
  const seen = unique ? new Set<string>() : undefined;
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i];
    if (typeof k !== 'string' || !PAGE_KEY_PATTERN.test(k)) {
      throw new TierSyncError(`${what}[${i}] must be a page key (16..128 lower-case hex characters), got ${typeof k === 'string' ? `'${k.slice(0, 140)}'` : typeof k}`, 'ERR_INVALID_ARGUMENT');
    }
    if (!seen) continue;
    if (seen.has(k)) throw new TierSyncError(`${what}[${i}] ${k} appears twice`, 'ERR_INVALID_ARGUMENT');
    seen.add(k);
  }
}

/** Source pages of store(): at least `count`, each exactly the layout's page size. */
export function checkPages(pages: readonly PageLocation[], count: number, pageBytes: number, what: string): void {
  if (!Array.isArray(pages)) throw new TierSyncError(`${what} must be an array of { arena, offset, length }`, 'ERR_INVALID_ARGUMENT');
  if (pages.length < count) throw new TierSyncError(`${what}: ${count} page(s) needed, ${pages.length} given`, 'ERR_INVALID_ARGUMENT');
  for (let i = 0; i < count; i++) {
    const p = pages[i]!;
    if (!p || typeof p !== 'object' || p.length !== pageBytes) {
      throw new TierSyncError(`${what}[${i}].length must be the layout's page size ${pageBytes}, got ${p?.length}`, 'ERR_INVALID_ARGUMENT');
    }
  }
}

/** Source pages of storeKeys(): one per key, 1 byte up to the layout's page size each. */
export function checkKeyedPages(pages: readonly PageLocation[], count: number, pageBytes: number): void {
  if (!Array.isArray(pages)) throw new TierSyncError('pages must be an array of { arena, offset, length }', 'ERR_INVALID_ARGUMENT');
  if (pages.length !== count) throw new TierSyncError(`pages: ${count} page(s) needed (one per key), ${pages.length} given`, 'ERR_INVALID_ARGUMENT');
  pages.forEach((p, i) => {
    if (!p || typeof p !== 'object' || !Number.isSafeInteger(p.length) || p.length < 1 || p.length > pageBytes) {
      throw new TierSyncError(`pages[${i}].length must be an integer in [1, ${pageBytes}] (the layout's page size), got ${p?.length}`, 'ERR_INVALID_ARGUMENT');
    }
  });
}

/** Destinations of a load: each must hold its page's recorded length and at most the layout's page size. */
export function checkInto(into: readonly PageLocation[], hit: LookupResult, pageBytes: number): void {
  if (!hit || typeof hit !== 'object' || !Array.isArray(hit.pages)) throw new TierSyncError('hit must be the result of lookup() or lookupKeys()', 'ERR_INVALID_ARGUMENT');
  const n = hit.pages.length;
  if (!Array.isArray(into)) throw new TierSyncError('into must be an array of { arena, offset, length }', 'ERR_INVALID_ARGUMENT');
  if (into.length < n) throw new TierSyncError(`into: ${n} page(s) needed, ${into.length} given`, 'ERR_INVALID_ARGUMENT');
  for (let i = 0; i < n; i++) {
    const p = into[i]!;
    const need = hit.pages[i]!.length;
    if (!p || typeof p !== 'object' || typeof p.length !== 'number' || p.length < need || p.length > pageBytes) {
      throw new TierSyncError(`into[${i}].length must be in [${need}, ${pageBytes}] (the page's length, at most the layout's page size), got ${p?.length}`, 'ERR_INVALID_ARGUMENT');
    }
    checkSpan(p, `into[${i}]`);
  }
}

/**
 * A destination's arena and span: checked here so a caller's mistake throws, rather than failing the whole driver
 * batch, which a load reports as every page missing (a cache miss the caller would silently recompute).
 */
function checkSpan(p: PageLocation, what: string): void {
  if (!(p.arena instanceof HostArena) && !(p.arena instanceof DeviceArena)) throw new TierSyncError(`${what}.arena must be a HostArena or DeviceArena`, 'ERR_INVALID_ARGUMENT');
  if (p.arena.closed) throw new TierSyncError(`${what}.arena is closed`, 'ERR_CLOSED');
  if (!Number.isSafeInteger(p.offset) || p.offset < 0) throw new TierSyncError(`${what}.offset must be an integer >= 0, got ${String(p.offset)}`, 'ERR_INVALID_ARGUMENT');
  if (p.offset + p.length > p.arena.capacity) throw new TierSyncError(`${what}: [${p.offset}, +${p.length}) exceeds the arena's ${p.arena.capacity} bytes`, 'ERR_OUT_OF_RANGE');
}

/** store() / storeKeys() options, with defaults applied. */
export function checkStoreOptions(options: StoreOptions, priorities: boolean, defaultTenant: string): { priority: number; tenant: string; retention?: RetentionHint } {
  if (options === null || typeof options !== 'object') throw new TierSyncError('options must be { priority?, tenant?, retention? }', 'ERR_INVALID_ARGUMENT');
  const priority = options.priority ?? 0;
  if (!Number.isSafeInteger(priority)) throw new TierSyncError(`options.priority must be a safe integer, got ${String(priority)}`, 'ERR_INVALID_ARGUMENT');
  if (priority !== 0 && !priorities) throw new TierSyncError('options.priority needs config.priorities: true', 'ERR_INVALID_ARGUMENT');
  const tenant = options.tenant ?? defaultTenant;
  if (typeof tenant !== 'string' || tenant.length < 1 || tenant.length > 256) throw new TierSyncError('options.tenant must be a string of 1..256 characters', 'ERR_INVALID_ARGUMENT');
  const retention = options.retention;
  if (retention === undefined) return { priority, tenant };
  return { priority, tenant, retention: checkRetentionHint(retention, 'options.retention') };
}

/** A soft retention hint: `{ expectedReturnMs }` (a finite number >= 0) or `{ finished: true }`. */
export function checkRetentionHint(retention: unknown, name: string): RetentionHint {
  const r = retention as { expectedReturnMs?: unknown; finished?: unknown } | null;
  if (r !== null && typeof r === 'object' && r.finished === true && r.expectedReturnMs === undefined) return { finished: true };
  if (r !== null && typeof r === 'object' && r.finished === undefined && typeof r.expectedReturnMs === 'number' && Number.isFinite(r.expectedReturnMs) && r.expectedReturnMs >= 0) {
    return { expectedReturnMs: r.expectedReturnMs };
  }
  throw new TierSyncError(`${name} must be { expectedReturnMs: ms >= 0 } or { finished: true }, got ${JSON.stringify(retention)}`, 'ERR_INVALID_ARGUMENT');
}

/** load() options. */
export function checkLoadOptions(options: LoadOptions): void {
  if (options === null || typeof options !== 'object') throw new TierSyncError('options must be { layerwise?, layersPerEvent?, onLayer?, rangesInFlight?, signal? }', 'ERR_INVALID_ARGUMENT');
  if (options.onLayer !== undefined && typeof options.onLayer !== 'function') throw new TierSyncError('options.onLayer must be a function', 'ERR_INVALID_ARGUMENT');
  const w = options.rangesInFlight;
  if (w !== undefined && (!Number.isSafeInteger(w) || w < 1 || w > 64)) throw new TierSyncError(`options.rangesInFlight must be an integer 1..64, got ${String(w)}`, 'ERR_INVALID_ARGUMENT');
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) throw new TierSyncError('options.signal must be an AbortSignal', 'ERR_INVALID_ARGUMENT');
}

/** pin() / pinKeys() options. */
export function checkPinOptions(options: { ttlMs: number; owner?: string }): { ttlMs: number; owner: string } {
  if (options === null || typeof options !== 'object') throw new TierSyncError('options must be { ttlMs, owner? }', 'ERR_INVALID_ARGUMENT');
  const { ttlMs } = options;
  if (typeof ttlMs !== 'number' || !Number.isSafeInteger(ttlMs) || ttlMs < 1) throw new TierSyncError(`options.ttlMs must be an integer >= 1, got ${String(ttlMs)}`, 'ERR_INVALID_ARGUMENT');
  const owner = options.owner ?? 'user';
  if (typeof owner !== 'string' || owner.length < 1 || owner.length > 256) throw new TierSyncError('options.owner must be a string of 1..256 characters', 'ERR_INVALID_ARGUMENT');
  return { ttlMs, owner };
}
