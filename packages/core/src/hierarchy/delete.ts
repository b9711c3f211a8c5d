/**
 * Deleting pages on request: by key (pinned pages kept and reported) or a whole namespace.
 */
import type { PageKey } from '@tiersync/tiers';
import { runMoves } from './background.js';
import { exclusive, ready, type HierarchyState } from './state.js';
import type { DeleteResult } from './types.js';

/** Removes `keys` (validated by the caller) from every tier and the index, except pinned ones. */
export function deleteKeys(s: HierarchyState, keys: readonly PageKey[]): Promise<DeleteResult> {
  const { index, planner } = ready(s);
  return exclusive(s, async () => {
    await runMoves(s, planner.expire(Date.now()));
    // The planner holds load and TTL pins; the index's durable rows also cover pins made before a restart.
    const durable = index.pinned(keys);
    const pinned = new Set(keys.filter((k, i) => planner.isPinned(k) || durable[i]));
    const candidates = keys.filter((k) => !pinned.has(k));
    const copies = index.copiesOf(candidates);
    const held = new Set<PageKey>();
    for (const t of s.tiers) {
      const here = candidates.filter((_, i) => copies[i]!.some((c) => c.tier === t.name));
      if (!here.length) continue;
      for (const k of here) held.add(k);
      // The tier first, then the index: a load that reads meanwhile finds a miss and reports the page missing.
      const r = await t.driver.delete(here);
      for (const k of r.pinned) pinned.add(k);
      const kept = new Set(r.pinned);
      const gone = here.filter((k) => !kept.has(k));
      if (gone.length) {
        index.removeCopies(t.name, gone, { force: true });
        planner.forget(t.index, gone);
        s.emit('block:evicted', { keys: gone, tier: t.name, why: 'deleted' });
      }
    }
    return {
      deleted: candidates.filter((k) => held.has(k) && !pinned.has(k)),
      pinned: keys.filter((k) => pinned.has(k)),
      missing: candidates.filter((k) => !held.has(k)),
    };
  });
}

/** Deletes every page of this hierarchy's namespace from every tier and the index. Returns the pages deleted. */
export function deleteNamespace(s: HierarchyState): Promise<number> {
  const { index, planner } = ready(s);
  return exclusive(s, async () => {
    const { pages, copies } = index.deleteNamespace(s.namespace.id);
    for (const t of s.tiers) {
      const keys = copies.filter((c) => c.tier === t.name).map((c) => c.key);
      if (keys.length) await t.driver.delete(keys);
      planner.forget(t.index, keys);
      if (keys.length) s.emit('block:evicted', { keys, tier: t.name, why: 'deleted' });
    }
    registerNamespace(s);
    return pages;
  });
}

/** Records this hierarchy's namespace in the index. */
export function registerNamespace(s: HierarchyState): void {
  const { namespace: ns } = s;
  s.index!.registerNamespace({ id: ns.id, model: ns.model, layoutFingerprint: ns.layoutFingerprint, tenant: ns.tenant, tokensPerPage: s.tokensPerPage });
}
