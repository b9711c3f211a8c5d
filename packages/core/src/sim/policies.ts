/**
 * Creating policies for the simulator: always through `@tiersync/policy`'s registry, so a replay runs the very
 * objects the live hierarchy runs (custom policies registered with `registerPolicy` work too).
 */
import { createPolicy, hasPolicy, ORACLE_POLICIES, parsePolicySpec, policyNames, type CapacityUnit, type EvictionPolicy } from '@tiersync/policy';
import { configError, invalid } from './errors.js';

/**
 * What an unknown policy's error adds: how a custom policy gets registered where the simulator runs it (the
 * process-wide registry of each thread: the calling one and every sweep worker).
 */
export const CUSTOM_POLICY_HINT =
  'a custom policy must be registered (registerPolicy) by a module this process loads: `tiersync sim --policy-module FILE`, ' +
  "`node --import ./FILE.mjs` (or NODE_OPTIONS='--import ./FILE.mjs') for any tiersync command, or runSweep's policyModules";

/** Capacity used for "unbounded" (`--capacity inf`): the largest safe integer, which nothing fills. */
export const UNBOUNDED = Number.MAX_SAFE_INTEGER;

/** Options of {@link makePolicy}. */
export interface MakePolicyOptions {
  /**
   * Every key the policy will see is an integer in `[0, denseKeyBound)`: the built-in policies then take the
   * dense-key fast path (`denseKeys` of `@tiersync/policy`; same decisions, no hashing). See `denseKeyBound`.
   * The registry passes it on only to factories that take it (a custom one never sees it unless registered with
   * `denseKeys: true`), so a custom factory gets here the options a live tier gives it.
   */
  denseKeyBound?: number;
}

/**
 * Creates policy `name` with `capacity` units (`Infinity` = unbounded).
 * @throws TierSyncError ERR_INVALID_ARGUMENT for an unknown name, options the policy refuses (e.g. S3-FIFO below
 * 20 objects), or any other failure of its factory (named, with the error's class), the factory's error as `cause`
 */
export function makePolicy(name: string, capacity: number, unit: CapacityUnit, options: MakePolicyOptions = {}): EvictionPolicy<number> {
  if (!hasPolicy(name)) throw invalid(`unknown policy '${name}'; known: ${policyNames().join(', ')}; ${CUSTOM_POLICY_HINT}`);
  const cap = Number.isFinite(capacity) ? capacity : UNBOUNDED;
  try {
    const dense = options.denseKeyBound;
    return createPolicy<number>(name, dense === undefined ? { capacity: cap, unit } : { capacity: cap, unit, denseKeys: { bound: dense } });
  } catch (e) {
    // A refusal reads as the factory's own message; anything else (a bug in a custom factory) says what it was.
    const why = e instanceof RangeError || !(e instanceof Error) ? String((e as Error)?.message ?? e) : `${e.name}: ${e.message}`;
    throw invalid(`policy ${name} with capacity ${capacity} ${unit}: ${why}`, e);
  }
}

/**
 * Why policy `name` (a known one) refuses `capacity` units, or undefined when it takes them: the policy's own
 * message (e.g. S3-FIFO below 2 objects), found by building it once. Building is cheap whatever the capacity (the
 * slot tables grow as keys arrive), so a sweep asks before it runs and leaves the refused points out instead of
 * failing whole, as `--mrc` does. Only a `RangeError` from the factory is a refusal (what factories throw for an
 * option out of range, see `PolicyFactory`); anything else is a failure, not a point to leave out.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming the policy for an unknown name or a factory that fails
 * otherwise (a TypeError from a bug in a custom factory, say)
 */
export function capacityRefusal(name: string, capacity: number, unit: CapacityUnit): string | undefined {
  try {
    makePolicy(name, capacity, unit);
    return undefined;
  } catch (e) {
    const cause = (e as Error).cause;
    if (cause instanceof RangeError) return cause.message;
    throw e;
  }
}

/** Checks a list of policy names. @throws TierSyncError ERR_INVALID_ARGUMENT naming the first unknown one */
export function checkPolicies(names: readonly string[]): string[] {
  if (names.length === 0) throw invalid('--policy needs at least one policy name');
  for (const n of names) {
    if (!hasPolicy(n)) throw invalid(`unknown policy '${n}'; known: ${policyNames().join(', ')}; ${CUSTOM_POLICY_HINT}`);
    if (n.includes(':') && isOracle(parsePolicySpec(n).policy)) throw invalid(`policy '${n}': an oracle policy cannot be wrapped (wrappers do not pass the next access on)`);
  }
  return [...names];
}

/**
 * Whether `name` is an oracle policy (`opt`, `opt-size`): the simulator must feed it each request's next access.
 * A wrapped oracle (`prefix-aware:opt`) is refused by {@link checkPolicies}: wrappers do not pass the future on.
 */
export function isOracle(name: string): boolean {
  return ORACLE_POLICIES.includes(name);
}

/**
 * Refuses an oracle policy where the planner runs it (tiered mode, `--config`): the planner never knows a request's
 * next access, so `opt` would silently decide as LRU.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming the policy
 */
export function refuseLiveOracle(name: string, where = ''): void {
  if (!isOracle(parsePolicySpec(name).policy)) return;
  throw invalid(
    `${where}policy '${name}' needs each request's next access, which a hierarchy's planner (tiered mode, --config) never has: ` +
      'it would run as LRU. OPT is the offline bound of exact mode (--objects or --capacity, without --model or --config)',
  );
}

/** Least capacity probed for by {@link checkTierPolicy}. */
const PROBE_LIMIT = 1 << 24;

/**
 * Checks that a tier of `pages` pages can run policy spec `policy` in the planner, so a refusal names the tier (the
 * planner's own error names only the policy's option). Unknown names are left to the planner.
 * @throws TierSyncError ERR_INVALID_ARGUMENT for an oracle policy ({@link refuseLiveOracle}); ERR_CONFIG for a tier
 * the policy refuses (too small for S3-FIFO, say), with the least page count it takes when one is found, and for
 * a policy whose factory fails otherwise (naming the tier and the policy)
 */
export function checkTierPolicy(tier: string, policy: string, pages: number): void {
  refuseLiveOracle(policy, `tier ${tier}: `);
  if (!hasPolicy(policy)) return;
  const refusalAt = (capacity: number): string | undefined => {
    try {
      return capacityRefusal(policy, capacity, 'objects');
    } catch (e) {
      throw configError(`tier ${tier}: ${(e as Error).message}`, e);
    }
  };
  const refusal = refusalAt(pages);
  if (refusal === undefined) return;
  // The least capacity it takes: policies refuse only below a minimum (doubling, then bisection).
  const fits = (capacity: number) => refusalAt(capacity) === undefined;
  let hi = Math.max(2, pages * 2);
  while (hi <= PROBE_LIMIT && !fits(hi)) hi *= 2;
  let least: number | undefined;
  if (hi <= PROBE_LIMIT) {
    let lo = pages;
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      if (fits(mid)) hi = mid;
      else lo = mid;
    }
    least = hi;
  }
  const need = least === undefined ? '' : `: it needs at least ${least} pages`;
  throw configError(`tier ${tier} holds ${pages} pages, too few for policy ${policy}${need} (${refusal})`);
}

/**
 * Whether policy spec `name` is chain-aware (a `prefix-aware:` or `prefix-hold:` wrapper anywhere in it): its
 * inserts must carry each page's parent (`PageHint.parent`), or it decides exactly as its inner policy. The one
 * test both the exact replay (exact.ts) and the planner's executor (planned.ts) use.
 */
export function isChainAware(name: string): boolean {
  return parsePolicySpec(name).wrappers.some((w) => w.startsWith('prefix-'));
}

/** The offline bound shown beside the policies of a sweep: Belady (`opt`) by objects, `opt-size` by bytes. */
export function boundPolicy(unit: CapacityUnit): 'opt' | 'opt-size' {
  return unit === 'objects' ? 'opt' : 'opt-size';
}

/**
 * The policies an exact-mode sweep runs: `policies` plus the unit's bound ({@link boundPolicy}) at the end, unless
 * an oracle policy is already among them. Every sweep and report thus shows how far each policy is from the best.
 */
export function withBound(policies: readonly string[], unit: CapacityUnit): string[] {
  return policies.some(isOracle) ? [...policies] : [...policies, boundPolicy(unit)];
}
