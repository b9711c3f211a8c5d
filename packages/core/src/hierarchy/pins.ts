/**
 * TTL pins: the planner holds them (eviction never chooses a held page, on any tier); each is also written to the
 * index so that it survives a restart (a durable record, read back at open).
 */
import type { PageKey } from '@tiersync/tiers';
import type { PageHit } from '../index-store/index.js';
import { ready, type HierarchyState } from './state.js';

/** Holds `keys` for `owner` until `ttlMs` passes (arguments validated by the caller). Returns the keys stored now. */
export function pinKeys(s: HierarchyState, keys: readonly PageKey[], ttlMs: number, owner: string): PageKey[] {
  const { index, planner } = ready(s);
  index.pin(keys, { ttlMs, owner });
  planner.pin(keys, { owner, now: Date.now(), ttl: ttlMs });
  return index.lookupExact(keys).filter((h): h is PageHit => h !== undefined).map((h) => h.key);
}

/** Removes `owner`'s pins on `keys`. Returns how many pins were removed. */
export function unpinKeys(s: HierarchyState, keys: readonly PageKey[], owner: string): number {
  const { index, planner } = ready(s);
  const removed = planner.unpin(keys, owner);
  const rows = index.unpin(keys, { owner });
  // A pin read back from the index at open, or one the planner let expire while its row waits for cleanup.
  return Math.max(removed, rows);
}
