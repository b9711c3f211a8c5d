/**
 * The one error type of tiersync. Every package throws it (the native addon included: its error class is
 * registered at load), so callers can `catch (e) { if (e instanceof TierSyncError && e.code === ...) }`.
 * A missing page is a normal answer, never an error.
 */
export type ErrorCode =
  | 'ERR_INVALID_ARGUMENT'
  | 'ERR_OUT_OF_RANGE'
  | 'ERR_OVERLAP'
  | 'ERR_CLOSED'
  | 'ERR_READ_ONLY'
  | 'ERR_MISALIGNED'
  | 'ERR_ABORTED'
  | 'ERR_TIMEOUT'
  | 'ERR_IO'
  | 'ERR_UNAVAILABLE'
  | 'ERR_UNSUPPORTED'
  | 'ERR_GEOMETRY_MISMATCH'
  | 'ERR_NO_MEMORY'
  | 'ERR_CHECKSUM'
  | 'ERR_TIER_FULL'
  | 'ERR_NOT_FOUND'
  | 'ERR_CONFIG'
  | 'ERR_PROTOCOL'
  | 'ERR_AUTH';

export interface TierSyncErrorOptions {
  /** The tier the failure happened on, when it belongs to one (`host`, `fs`, ...). */
  tier?: string;
  cause?: unknown;
}

export class TierSyncError extends Error {
  override readonly name = 'TierSyncError';
  readonly code: ErrorCode;
  readonly tier: string | undefined;

  constructor(message: string, code: ErrorCode, options: TierSyncErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.tier = options.tier;
  }
}

/** Throws ERR_INVALID_ARGUMENT naming `name` unless `value` is an integer in [min, 2^53). */
export function checkInteger(value: unknown, name: string, min = 0): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new TierSyncError(`${name} must be an integer >= ${min}, got ${describeValue(value)}`, 'ERR_INVALID_ARGUMENT');
  }
  return value;
}

export function describeValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  if (typeof value === 'bigint') return `${value}n`;
  return Object.prototype.toString.call(value);
}
