/**
 * object tier URLs:
 *   `gs://bucket/prefix?credentials=env:GCS`                       (GCS XML API with HMAC keys from GCS_ACCESS_KEY_ID
 *                                                                   and GCS_SECRET_ACCESS_KEY)
 *   `s3://bucket/prefix?region=eu-west-1`                          (AWS S3)
 *   `s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1` (MinIO, Ceph, s3rver, ...)
 * Every option is optional; see {@link ObjectTierConfig} for units and defaults. Credentials never go in the URL
 * (it is logged, shown by ps when passed as an argument, and committed in config files): without `credentials`
 * the AWS SDK's standard chain finds them (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, shared credentials files,
 * instance metadata); `credentials=env:PREFIX` reads PREFIX_ACCESS_KEY_ID and PREFIX_SECRET_ACCESS_KEY, so two
 * tiers can use different keys.
 */
import { z } from 'zod';
import { bool, configError, int, parseOptions, size, splitUrlOf } from '../url.js';

/** GCS's S3-compatible (XML API) endpoint. */
export const GCS_ENDPOINT = 'https://storage.googleapis.com';

/** A view of a HostArena may not cross 1 GiB; a staged object must fit one view with its footer. */
const MAX_OBJECT_BYTES = 512 * 2 ** 20;
const MIN_OBJECT_BYTES = 4096;
/** S3's smallest non-final multipart part. */
const MIN_PART_BYTES = 5 * 2 ** 20;

const options = z
  .object({
    /** S3 API endpoint URL. Default: AWS for s3://, https://storage.googleapis.com for gs://. */
    endpoint: z
      .string()
      .refine((s) => {
        try {
          const u = new URL(s);
          return (u.protocol === 'http:' || u.protocol === 'https:') && u.search === '' && u.hash === '' && u.username === '' && u.password === '';
        } catch {
          return false;
        }
      }, 'must be an http:// or https:// URL without query, fragment or credentials')
      .optional(),
    region: z.string().regex(/^[a-z0-9-]{1,64}$/, 'must be a region name like us-east-1 or auto').optional(),
    forcePathStyle: bool.optional(),
    signPayload: bool.optional(),
    credentials: z.string().regex(/^env:[A-Z_][A-Z0-9_]{0,63}$/, 'must be env:PREFIX (reads PREFIX_ACCESS_KEY_ID and PREFIX_SECRET_ACCESS_KEY)').optional(),
    capacity: size('a capacity').optional(),
    object: size('an object size').optional(),
    partSize: size('a part size').optional(),
    crcChunk: size('a chunk size').optional(),
    concurrency: int(1, 256).optional(),
    timeoutMs: int(1, 3_600_000).optional(),
    retries: int(0, 20).optional(),
    backoffMs: int(0, 60_000).optional(),
    backoffMaxMs: int(0, 600_000).optional(),
    breakerThreshold: int(1, 10_000).optional(),
    breakerCooldownMs: int(1, 3_600_000).optional(),
    compactBelow: z
      .string()
      .regex(/^(0(\.\d+)?|1(\.0*)?|\.\d+)$/, 'must be a fraction between 0 and 1, like 0.5')
      .transform(Number)
      .optional(),
  })
  .strict();

/** A parsed object tier URL. */
export interface ObjectTierConfig {
  scheme: 's3' | 'gs';
  bucket: string;
  /** Object-name prefix: '' (bucket root) or path segments ending in '/'. */
  prefix: string;
  /** S3 API endpoint; undefined means AWS (the SDK picks the regional endpoint). */
  endpoint: string | undefined;
  /** Signing region. Default 'auto' for gs://; for s3:// AWS_REGION, AWS_DEFAULT_REGION, else 'us-east-1'. */
  region: string;
  /** Path-style addressing (`endpoint/bucket/key`). Default true for gs:// and for s3:// with an endpoint. */
  forcePathStyle: boolean;
  /**
   * Sign upload bodies with SHA-256 (SigV4 payload signing). Default: true for http:// endpoints, false for
   * https:// (TLS already protects the bytes in transit; see README for the cost).
   */
  signPayload: boolean;
  /** Static credentials from `credentials=env:PREFIX` (never log them); undefined: the AWS SDK's default chain. */
  credentials: { accessKeyId: string; secretAccessKey: string } | undefined;
  /** Limit on stored page bytes (payload, not footers). Default: unlimited (Number.MAX_SAFE_INTEGER). */
  capacity: number;
  /** Most page bytes packed into one object, in bytes. Default 64 MiB; 4 KiB..512 MiB. */
  objectBytes: number;
  /** Multipart part size in bytes; larger objects are uploaded in parallel parts. Default 16 MiB; min 5 MiB. */
  partBytes: number;
  /**
   * Bytes covered by each chunk CRC32C recorded with a page (a range read fetches and checks only the chunks
   * covering the range). Default 64 KiB; a multiple of 4 KiB; longer for pages of more than 256 chunks.
   */
  crcChunk: number;
  /** Most S3 requests in flight at once. Default 16. */
  concurrency: number;
  /** Per-request attempt timeout in ms (headers and body). Default 30000. */
  timeoutMs: number;
  /** Retries of a failed request (5xx, 429, 408, timeouts, connection errors). Default 4. */
  retries: number;
  /** First backoff in ms; doubles per retry, full jitter. Default 100. */
  backoffMs: number;
  /** Backoff ceiling in ms. Default 5000. */
  backoffMaxMs: number;
  /** Consecutive failed attempts that open the circuit breaker. Default 5. */
  breakerThreshold: number;
  /** Time the breaker stays open before one probe request is let through, in ms. Default 10000. */
  breakerCooldownMs: number;
  /**
   * Rewrite an object when its live page bytes fall below this fraction of its page bytes (after a delete).
   * 0 never compacts (objects are then deleted only when all their pages are). Default 0.5.
   */
  compactBelow: number;
  /** The URL with credentials masked. */
  redacted: string;
}

const BUCKET = /^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$/;
const SEGMENT = /^[A-Za-z0-9._=+-]{1,255}$/;

/** `credentials=env:PREFIX`: both keys from the environment, or ERR_CONFIG naming the variable that is not set. */
function credentialsFromEnv(u: Parameters<typeof configError>[0], prefix: string): { accessKeyId: string; secretAccessKey: string } {
  const [id, secret] = [`${prefix}_ACCESS_KEY_ID`, `${prefix}_SECRET_ACCESS_KEY`];
  const accessKeyId = process.env[id];
  const secretAccessKey = process.env[secret];
  if (!accessKeyId || !secretAccessKey) throw configError(u, `option 'credentials=env:${prefix}': environment variable ${accessKeyId ? secret : id} is not set`);
  return { accessKeyId, secretAccessKey };
}

/**
 * Parses and validates an object tier URL.
 * @throws TierSyncError ERR_CONFIG naming the part or option that is wrong.
 */
export function parseObjectUrl(url: string): ObjectTierConfig {
  const u = splitUrlOf(url, ['s3', 'gs']);
  const scheme = u.scheme as 's3' | 'gs';
  if (!BUCKET.test(u.host) || u.host.includes('..')) {
    throw configError(u, `bucket '${u.host}' is not a valid bucket name (3-222 characters: a-z, 0-9, '.', '-', '_'; starts and ends with a letter or digit)`);
  }
  if (u.port !== undefined) throw configError(u, `${scheme}:// takes a bucket name, not host:port; use ?endpoint=http://host:port for a custom server`);
  const prefix = parsePrefix(url, u.path, u);
  for (const secret of ['accessKeyId', 'secretAccessKey']) {
    if (secret in u.params) {
      throw configError(u, `option '${secret}': credentials never go in a tier URL; leave them to the SDK's chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...) or give credentials=env:PREFIX`);
    }
  }
  const o = parseOptions(u, options);
  const credentials = o.credentials ? credentialsFromEnv(u, o.credentials.slice(4)) : undefined;
  const objectBytes = o.object ?? 64 * 2 ** 20;
  if (objectBytes < MIN_OBJECT_BYTES || objectBytes > MAX_OBJECT_BYTES) {
    throw configError(u, `option 'object' must be between 4KiB and 512MiB, got ${objectBytes} bytes`);
  }
  const partBytes = o.partSize ?? 16 * 2 ** 20;
  if (partBytes < MIN_PART_BYTES || partBytes > MAX_OBJECT_BYTES) {
    throw configError(u, `option 'partSize' must be between 5MiB (S3's smallest part) and 512MiB, got ${partBytes} bytes`);
  }
  const crcChunk = o.crcChunk ?? 64 * 1024;
  if (crcChunk < 4096 || crcChunk % 4096 !== 0 || crcChunk > MAX_OBJECT_BYTES) {
    throw configError(u, `option 'crcChunk' must be a multiple of 4KiB between 4KiB and 512MiB, got ${crcChunk} bytes`);
  }
  const backoffMs = o.backoffMs ?? 100;
  const backoffMaxMs = o.backoffMaxMs ?? Math.max(5000, backoffMs);
  if (backoffMaxMs < backoffMs) throw configError(u, `option 'backoffMaxMs' (${backoffMaxMs}) must be >= backoffMs (${backoffMs})`);
  const endpoint = o.endpoint ?? (scheme === 'gs' ? GCS_ENDPOINT : undefined);
  return {
    scheme,
    bucket: u.host,
    prefix,
    endpoint: endpoint?.replace(/\/+$/, ''),
    region: o.region ?? (scheme === 'gs' ? 'auto' : (process.env['AWS_REGION'] ?? process.env['AWS_DEFAULT_REGION'] ?? 'us-east-1')),
    forcePathStyle: o.forcePathStyle ?? endpoint !== undefined,
    signPayload: o.signPayload ?? endpoint?.startsWith('http:') ?? false,
    credentials,
    capacity: o.capacity ?? Number.MAX_SAFE_INTEGER,
    objectBytes,
    partBytes,
    crcChunk,
    concurrency: o.concurrency ?? 16,
    timeoutMs: o.timeoutMs ?? 30_000,
    retries: o.retries ?? 4,
    backoffMs,
    backoffMaxMs,
    breakerThreshold: o.breakerThreshold ?? 5,
    breakerCooldownMs: o.breakerCooldownMs ?? 10_000,
    compactBelow: o.compactBelow ?? 0.5,
    redacted: u.redacted,
  };
}

/**
 * The path of the URL as an object-name prefix. The raw text is checked too: URL parsing silently resolves
 * `.`/`..` segments, and a prefix must never be something other than what the user wrote.
 */
function parsePrefix(raw: string, path: string, u: Parameters<typeof configError>[0]): string {
  const rawPath = /^[a-z0-9+.-]+:\/\/[^/?#]*([^?#]*)/i.exec(raw)?.[1] ?? '';
  const trimmed = path.replace(/^\//, '').replace(/\/$/, '');
  if (trimmed === '') return '';
  if (trimmed.length > 512) throw configError(u, `prefix is ${trimmed.length} characters long; at most 512`);
  for (const seg of [...trimmed.split('/'), ...rawPath.replace(/^\//, '').replace(/\/$/, '').split('/').map(safeDecode)]) {
    if (seg === '.' || seg === '..' || !SEGMENT.test(seg)) {
      throw configError(u, `prefix segment '${seg}' is not allowed (use A-Z a-z 0-9 . _ = + -, no empty, '.' or '..' segments)`);
    }
  }
  return `${trimmed}/`;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
