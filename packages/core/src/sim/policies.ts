/**
 * Creating policies for the simulator: always through `@tiersync/policy`'s registry, so a replay runs the very
 * objects the live hierarchy runs (custom policies registered with `registerPolicy` work too).
 */
import { createPolicy, policyNames, type CapacityUnit, type EvictionPolicy } from '@tiersync/policy';
import { invalid } from './errors.js';

/** Capacity used for "unbounded" (`--capacity inf`): the largest safe integer, which nothing fills. */
export const UNBOUNDED = Number.MAX_SAFE_INTEGER;

/** Options of {@link makePolicy}. */
export interface MakePolicyOptions {
  /**
   * Every key the policy will see is an integer in `[0, denseKeyBound)`: the built-in policies then take the
   * dense-key fast path (`denseKeys` of `@tiersync/policy`; same decisions, no hashing). See `denseKeyBound`.
   */
  denseKeyBound?: number;
}

/**
 * Creates policy `name` with `capacity` units (`Infinity` = unbounded).
 * @throws TierSyncError ERR_INVALID_ARGUMENT for an unknown name or options the policy refuses (e.g. S3-FIFO
 * below 20 objects)
 */
export function makePolicy(name: string, capacity: number, unit: CapacityUnit, options: MakePolicyOptions = {}): EvictionPolicy<number> {
  if (!policyNames().includes(name)) throw invalid(`unknown policy '${name}'; known: ${policyNames().join(', ')}`);
  const cap = Number.isFinite(capacity) ? capacity : UNBOUNDED;
  try {
    const dense = options.denseKeyBound;
    return createPolicy<number>(name, dense === undefined ? { capacity: cap, unit } : { capacity: cap, unit, denseKeys: { bound: dense } });
  } catch (e) {
    throw invalid(`policy ${name} with capacity ${capacity} ${unit}: ${(e as Error).message}`);
  }
}

/** Checks a list of policy names. @throws TierSyncError ERR_INVALID_ARGUMENT naming the first unknown one */
export function checkPolicies(names: readonly string[]): string[] {
  if (names.length === 0) throw invalid('--policy needs at least one policy name');
  for (const n of names) if (!policyNames().includes(n)) throw invalid(`unknown policy '${n}'; known: ${policyNames().join(', ')}`);
  return [...names];
}
