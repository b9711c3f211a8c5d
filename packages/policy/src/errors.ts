/**
 * The error a misbehaving eviction policy is reported with. This package imports no workspace package (it stays
 * pure), so it cannot throw tiersync's `TierSyncError`; `PolicyError` has the same shape (a `code`, the `tier`, a
 * `cause`) and says which policy failed, in which call, and which rule it broke, so whoever catches it can tell a
 * faulty custom policy from a tiersync bug.
 */
import type { PolicyKey } from './types.js';

/** What {@link PolicyError} is built from. */
export interface PolicyErrorOptions {
  /** Registry name (or spec) of the policy. */
  policy: string;
  /** The policy method that failed: `insert`, `evict`, `access`, ... */
  call: string;
  /** The rule its answer broke; absent when the call threw. */
  rule?: string;
  /** The tier the policy runs for, when it runs in a hierarchy's planner. */
  tier?: string;
  /** What the call threw. */
  cause?: unknown;
  /**
   * Keys that left the policy during the failed call (victims it did evict, as far as could be found): the caller
   * must still free them. Empty when none did or nothing could be found out.
   */
  victims?: readonly PolicyKey[];
}

/**
 * A policy threw, or answered something the {@link EvictionPolicy} contract forbids (a victim that was never
 * resident, a capacity overrun, ...). `code` is always `'ERR_POLICY'`.
 */
export class PolicyError extends Error {
  override readonly name = 'PolicyError';
  readonly code = 'ERR_POLICY';
  readonly policy: string;
  readonly call: string;
  readonly rule: string | undefined;
  readonly tier: string | undefined;
  readonly victims: readonly PolicyKey[];

  constructor(options: PolicyErrorOptions) {
    const where = options.tier === undefined ? `policy ${options.policy}` : `policy ${options.policy} on tier ${options.tier}`;
    const what =
      options.rule !== undefined
        ? `${options.call}() broke a rule: ${options.rule}`
        : `${options.call}() threw: ${options.cause instanceof Error ? `${options.cause.name}: ${options.cause.message}` : String(options.cause)}`;
    super(`${where}: ${what}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.policy = options.policy;
    this.call = options.call;
    this.rule = options.rule;
    this.tier = options.tier;
    this.victims = options.victims ?? [];
  }

  /** The same error, attributed to tier `tier` (its victims kept). */
  onTier(tier: string): PolicyError {
    const o: PolicyErrorOptions = { policy: this.policy, call: this.call, tier, victims: this.victims };
    if (this.rule !== undefined) o.rule = this.rule;
    if (this.cause !== undefined) o.cause = this.cause;
    return new PolicyError(o);
  }
}
