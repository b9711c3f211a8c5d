/**
 * Reconciling the block index with what the persistent tiers hold, when a hierarchy opens.
 */
import type { EvictionPolicy } from '@tiersync/policy';
import type { TierDriver } from '@tiersync/tiers';
import type { BlockIndex } from '../index-store/index.js';

/** What reconcileTiers needs of each tier. */
export interface ReconcileTier {
  name: string;
  driver: TierDriver;
  policy: EvictionPolicy<string>;
}

/** Persistent tiers: forget index copies the tier no longer holds; let policies know what each tier holds. */
export async function reconcileTiers(index: BlockIndex, tiers: readonly ReconcileTier[]): Promise<void> {
  for (const t of tiers) {
    if (!t.driver.capabilities.persistent) continue;
    const held = new Set<string>();
    for await (const p of t.driver.list()) held.add(p.key);
    for (const key of held) if (t.policy.canAdmit(key, 1)) t.policy.insert(key, 1);
    const known = index.copiesOf([...held]);
    const stale = [...held].filter((_, i) => !known[i]!.some((c) => c.tier === t.name));
    // Pages on the tier that the index does not know (e.g. index lost): not reachable by lookup; free them.
    if (stale.length) {
      await t.driver.delete(stale);
      for (const k of stale) t.policy.remove(k);
    }
  }
}
