/**
 * TTL pins: the planner holds them (eviction never chooses a held page, on any tier). A durable pin is also
 * written to the index, so it survives a restart (the index's row keeps the page through eviction and deletion
 * after one); a pin that need not (a same-host client's lease) costs no SQLite write.
 */
import type { PageKey } from '@tiersync/tiers';
import type { PageHit } from '../index/index.js';
import { ready, type HierarchyState } from './state.js';

/**
 * Holds `keys` for `owner` until `ttlMs` passes (arguments validated by the caller). Returns the keys stored now
 * (`present`: false skips that lookup and returns []).
 */
export function pinKeys(s: HierarchyState, keys: readonly PageKey[], ttlMs: number, owner: string, durable: boolean, present = true): PageKey[] {
  const { index, planner } = ready(s);
  if (durable) index.pin(keys, { ttlMs, owner });
  planner.pin(keys, { owner, now: Date.now(), ttl: ttlMs });
  return present ? index.lookupExact(keys).filter((h): h is PageHit => h !== undefined).map((h) => h.key) : [];
}

/** Removes `owner`'s pins on `keys` (and their index rows when `durable`). Returns how many pins were removed. */
export function unpinKeys(s: HierarchyState, keys: readonly PageKey[], owner: string, durable: boolean): number {
  const { index, planner } = ready(s);
  const removed = planner.unpin(keys, owner);
  if (!durable) return removed;
  // The index may hold a row the planner no longer does (a pin made before a restart): count what either removed.
  return Math.max(removed, index.unpin(keys, { owner }));
}
