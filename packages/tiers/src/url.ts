/**
 * Tier URLs: `scheme://host/path?option=value`. Each driver declares a zod schema for its options; this module
 * splits the URL and turns zod's complaints into one TierSyncError that names the part that is wrong.
 */
import { TierSyncError } from '@tiersync/native/errors';
import { z } from 'zod';

const UNITS: Record<string, number> = { '': 1, B: 1, KiB: 2 ** 10, MiB: 2 ** 20, GiB: 2 ** 30, TiB: 2 ** 40, KB: 1e3, MB: 1e6, GB: 1e9, TB: 1e12 };

/** "64GiB", "512MiB", "1.5TiB", "4096" -> bytes (binary units; KB/MB/GB/TB are decimal). */
export function parseSize(text: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$/.exec(text);
  if (!m) return undefined;
  const unit = UNITS[m[2] ?? ''];
  if (unit === undefined) return undefined;
  const bytes = Math.floor(Number(m[1]) * unit);
  return Number.isSafeInteger(bytes) ? bytes : undefined;
}

/** A zod field for a byte size written as "8GiB" or a plain number of bytes. */
export const size = (what = 'a size') =>
  z.string().transform((s, ctx) => {
    const bytes = parseSize(s);
    if (bytes === undefined || bytes <= 0) {
      ctx.addIssue({ code: 'custom', message: `must be ${what} like 64GiB, 512MiB or a byte count, got '${s}'` });
      return z.NEVER;
    }
    return bytes;
  });

export const bool = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');
export const int = (min: number, max: number) =>
  z.string().regex(/^\d+$/, 'must be an integer').transform(Number).pipe(z.number().int().min(min).max(max));

export interface SplitUrl {
  scheme: string;
  host: string;
  port: number | undefined;
  path: string;
  params: Record<string, string>;
  /** The URL with credential-like options masked, for logs and `TierDriver.url`. */
  redacted: string;
}

const SECRET_PARAMS = new Set(['secret', 'secretAccessKey', 'accessKeyId', 'token', 'password']);

export function splitUrl(url: string): SplitUrl {
  if (typeof url !== 'string' || url.length === 0) throw new TierSyncError('tier URL must be a non-empty string', 'ERR_CONFIG');
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new TierSyncError(`tier URL '${url}' is not a URL (expected scheme://host/path?options)`, 'ERR_CONFIG');
  }
  const params: Record<string, string> = {};
  for (const [k, v] of u.searchParams) {
    if (k in params) throw new TierSyncError(`tier URL '${url}': option '${k}' is given twice`, 'ERR_CONFIG');
    params[k] = v;
  }
  const masked = new URL(u.href);
  for (const k of masked.searchParams.keys()) if (SECRET_PARAMS.has(k)) masked.searchParams.set(k, '***');
  if (masked.password) masked.password = '***';
  // A stray '%' (`fs:///a%zz`) makes decodeURIComponent throw a URIError: refuse it as a config error instead.
  const decode = (part: string, what: string): string => {
    try {
      return decodeURIComponent(part);
    } catch {
      throw new TierSyncError(`tier URL '${masked.href}': the ${what} has a malformed %-escape`, 'ERR_CONFIG');
    }
  };
  return {
    scheme: u.protocol.replace(/:$/, ''),
    host: decode(u.hostname, 'host'),
    port: u.port ? Number(u.port) : undefined,
    path: decode(u.pathname, 'path'),
    params,
    redacted: masked.href,
  };
}

/** Validates `params` against a driver's zod schema; the error names the option and why. */
export function parseOptions<S extends z.ZodType>(url: SplitUrl, schema: S): z.output<S> {
  const result = schema.safeParse(url.params);
  if (!result.success) {
    // Every problem of the URL at once.
    const reasons = result.error.issues.map((issue) =>
      issue.code === 'unrecognized_keys' ? `unknown option(s) ${issue.keys.join(', ')}` : `option '${issue.path.join('.') || '(options)'}' ${issue.message}`,
    );
    throw new TierSyncError(`tier URL '${url.redacted}': ${reasons.join('; ')}`, 'ERR_CONFIG');
  }
  return result.data;
}

/** ERR_CONFIG naming the URL (secrets masked) and what is wrong with it. */
export function configError(url: SplitUrl | string, reason: string): TierSyncError {
  return new TierSyncError(`tier URL '${typeof url === 'string' ? url : url.redacted}': ${reason}`, 'ERR_CONFIG');
}

/** Splits `url` and checks its scheme. */
export function splitUrlOf(url: string, scheme: string | readonly string[]): SplitUrl {
  const u = splitUrl(url);
  const allowed = typeof scheme === 'string' ? [scheme] : scheme;
  if (!allowed.includes(u.scheme)) throw configError(u, `scheme must be ${allowed.map((s) => `${s}://`).join(' or ')}`);
  return u;
}
