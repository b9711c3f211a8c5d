/**
 * Evicting a page a wrapper chose, through the inner policy's own rules where it has them.
 */
import type { EvictionPolicy, PolicyKey } from '../types.js';

/**
 * Evicts `key` from `policy` as a victim: through {@link EvictionPolicy.evictKey} when the policy has it (so its
 * ghost history remembers the page), else through `remove` (a policy without `evictKey` keeps no history of its
 * victims, so the two are the same to it).
 * @returns whether `key` was resident and unpinned and is now gone
 */
export function evictFrom<K extends PolicyKey>(policy: EvictionPolicy<K>, key: K): boolean {
  if (policy.evictKey !== undefined) return policy.evictKey(key);
  return policy.has(key) && policy.pinCount(key) === 0 && policy.remove(key);
}
