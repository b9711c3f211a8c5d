/**
 * Lookups: which pages are cached and where, from the index, with a load-time estimate from each tier's measured
 * read bandwidth. Every lookup is also recorded by the planner (its admission filter counts lookups).
 */
import type { PageKey } from '@tiersync/tiers';
import type { PageHit } from '../index/index.js';
import { ready, type HierarchyState } from './state.js';
import type { KeyLookupResult, LookupResult } from './types.js';

function estimateMs(s: HierarchyState, tier: string, length: number): number {
  const t = s.tiers.find((x) => x.name === tier);
  return (length / (t?.readBps ?? 1e9)) * 1000;
}

/** The longest prefix of `keys` present on any tier. */
export function lookupPrefix(s: HierarchyState, keys: PageKey[]): LookupResult {
  const { index, planner } = ready(s);
  planner.noteLookups(keys);
  let ms = 0;
  const pages = index.lookupPrefix(keys).map((h: PageHit) => {
    const tier = h.tiers[0]!;
    ms += estimateMs(s, tier, h.length);
    return { key: h.key, tier, tiers: h.tiers, length: h.length };
  });
  return { keys, pages, tokens: pages.length * s.tokensPerPage, estimatedLoadMs: ms };
}

/** Which of exactly `keys` are present (validated by the caller). */
export function lookupExact(s: HierarchyState, keys: readonly PageKey[]): KeyLookupResult {
  const { index, planner } = ready(s);
  planner.noteLookups(keys);
  const hits = index.lookupExact(keys);
  let ms = 0;
  const pages: LookupResult['pages'] = [];
  const indices: number[] = [];
  const present: boolean[] = new Array(keys.length);
  for (let i = 0; i < keys.length; i++) {
    const h = hits[i];
    present[i] = h !== undefined;
    if (!h) continue;
    const tier = h.tiers[0]!;
    ms += estimateMs(s, tier, h.length);
    pages.push({ key: h.key, tier, tiers: h.tiers, length: h.length });
    indices.push(i);
  }
  return { keys: [...keys], pages, tokens: 0, estimatedLoadMs: ms, present, indices };
}
