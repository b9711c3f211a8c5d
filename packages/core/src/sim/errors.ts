/**
 * Error helpers of the simulator. Every failure is a {@link TierSyncError}: `ERR_INVALID_ARGUMENT` for bad options
 * and bad trace contents (naming the file, the line or record, and the reason), `ERR_CONFIG` for inconsistent
 * model or tier settings. A policy that fails (a custom one that throws or breaks the `EvictionPolicy` contract:
 * `PolicyError`) stops the run with one of those two codes, naming the policy, the call and (in tiered and
 * `--config` runs) the tier.
 */
import { TierSyncError } from '@tiersync/native/errors';
import { PolicyError } from '@tiersync/policy';

/** A bad option or argument; `cause` is the refusal it reports, when there is one. */
export function invalid(message: string, cause?: unknown): TierSyncError {
  return new TierSyncError(message, 'ERR_INVALID_ARGUMENT', cause === undefined ? {} : { cause });
}

/** An inconsistent model / tier configuration. */
export function configError(message: string, cause?: unknown): TierSyncError {
  return new TierSyncError(message, 'ERR_CONFIG', cause === undefined ? {} : { cause });
}

/**
 * A malformed trace. `where` is e.g. `line 12` or `record 7 (byte 168)`.
 * The message reads `FILE: line 12: REASON`, so a user can open the file at the spot.
 */
export function traceError(file: string, where: string, reason: string, cause?: unknown): TierSyncError {
  return new TierSyncError(`${file}: ${where}: ${reason}`, 'ERR_INVALID_ARGUMENT', cause === undefined ? {} : { cause });
}

/**
 * `e` as the simulator reports it: a `PolicyError` (a policy that threw or broke its contract) becomes a
 * TierSyncError with `code` (`ERR_INVALID_ARGUMENT` where the policy was named by an option, `ERR_CONFIG` where a
 * hierarchy config runs it), its message naming the policy, the tier and the call, the PolicyError as its cause.
 * Anything else is answered unchanged.
 */
export function policyFailure(e: unknown, code: 'ERR_INVALID_ARGUMENT' | 'ERR_CONFIG'): unknown {
  if (!(e instanceof PolicyError)) return e;
  return new TierSyncError(e.message, code, e.tier === undefined ? { cause: e } : { tier: e.tier, cause: e });
}
