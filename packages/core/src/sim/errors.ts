/**
 * Error helpers of the simulator. Every failure is a {@link TierSyncError}: `ERR_INVALID_ARGUMENT` for bad options
 * and bad trace contents (naming the file, the line or record, and the reason), `ERR_CONFIG` for inconsistent
 * model or tier settings.
 */
import { TierSyncError } from '@tiersync/native/errors';

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
