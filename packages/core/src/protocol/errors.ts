/**
 * Errors of the client protocol: every refusal is `{ "error": { "code", "message", "field"? } }` with an HTTP status
 * that follows from the code, and the client turns it back into the TierSyncError the daemon threw.
 */
import { TierSyncError, type ErrorCode } from '@tiersync/native';
import { z } from 'zod';

/** Every TierSyncError code, as the wire spells it. */
export const ERROR_CODES = [
  'ERR_INVALID_ARGUMENT',
  'ERR_OUT_OF_RANGE',
  'ERR_OVERLAP',
  'ERR_CLOSED',
  'ERR_READ_ONLY',
  'ERR_MISALIGNED',
  'ERR_ABORTED',
  'ERR_TIMEOUT',
  'ERR_IO',
  'ERR_UNAVAILABLE',
  'ERR_UNSUPPORTED',
  'ERR_GEOMETRY_MISMATCH',
  'ERR_NO_MEMORY',
  'ERR_CHECKSUM',
  'ERR_TIER_FULL',
  'ERR_NOT_FOUND',
  'ERR_CONFIG',
  'ERR_PROTOCOL',
  'ERR_AUTH',
] as const satisfies readonly ErrorCode[];

// Compile-time: the list above names every ErrorCode (a new code must be added here too).
type Missing = Exclude<ErrorCode, (typeof ERROR_CODES)[number]>;
const everyCode: Missing extends never ? true : Missing = true;
void everyCode;

/** The body of every refused request. */
export const errorBodySchema = z.object({
  error: z.object({
    code: z.enum(ERROR_CODES),
    message: z.string(),
    /** The request field at fault, as `keys[3]`, when one is. */
    field: z.string().optional(),
  }),
});
export type ErrorBody = z.infer<typeof errorBodySchema>;

/** HTTP status of each code, when the code alone decides it (the daemon may pick a narrower one, e.g. 405). */
export const ERROR_STATUS: Partial<Record<ErrorCode, number>> = {
  ERR_INVALID_ARGUMENT: 400,
  ERR_OUT_OF_RANGE: 413,
  ERR_AUTH: 401,
  ERR_NOT_FOUND: 404,
  ERR_UNAVAILABLE: 429,
  ERR_TIER_FULL: 507,
  ERR_CLOSED: 503,
  ERR_TIMEOUT: 504,
};

/** A TierSyncError with the HTTP status it is answered with and, for a malformed request, the field at fault. */
export class ProtocolError extends TierSyncError {
  readonly status: number;
  readonly field: string | undefined;

  constructor(message: string, code: ErrorCode, status: number = ERROR_STATUS[code] ?? 500, field?: string) {
    super(message, code);
    this.status = status;
    this.field = field;
  }

  /** The wire body of this error. */
  toBody(): ErrorBody {
    return { error: { code: this.code, message: this.message, ...(this.field ? { field: this.field } : {}) } };
  }
}

/** `['keys', 3, 'x']` -> `keys[3].x`. */
export function fieldName(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out || 'body';
}

/**
 * Parses a request body against `schema`; a mismatch becomes a 400 ERR_INVALID_ARGUMENT naming the first field at
 * fault (`reserve: keys[0]: must be 16..128 lower-case hex characters`).
 */
export function parseRequest<S extends z.ZodType>(schema: S, body: unknown, what: string): z.output<S> {
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const field = fieldName(issue.path);
  const message = issue.code === 'unrecognized_keys' ? `unknown field(s) ${issue.keys.map((k) => `'${k}'`).join(', ')}` : issue.message;
  throw new ProtocolError(`${what}: ${field}: ${message}`, 'ERR_INVALID_ARGUMENT', 400, issue.code === 'unrecognized_keys' ? issue.keys[0] : field);
}

/** Turns a refused request's body back into the daemon's error (ERR_PROTOCOL when the body is not one). */
export function errorFromBody(body: unknown, status: number, what: string): TierSyncError {
  const r = errorBodySchema.safeParse(body);
  if (r.success) return new ProtocolError(`daemon refused ${what}: ${r.data.error.message}`, r.data.error.code, status, r.data.error.field);
  return new TierSyncError(`daemon refused ${what} with status ${status} and no error body`, status === 401 ? 'ERR_AUTH' : 'ERR_PROTOCOL');
}
