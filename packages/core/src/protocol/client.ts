/**
 * The client/daemon protocol of `@tiersync/core/client`: every request and response body of `/v1/client/<op>`,
 * defined once. The daemon validates each request against these schemas at its edge (server/client-api.ts) and
 * the TypeScript client types its calls from them (client/), so neither side spells a request shape of its own.
 *
 * The wire format is plain JSON over HTTP/1.1 (TCP, or the daemon's Unix socket on the same host), one op per
 * route, so a client in any language can speak it: `clientProtocolJsonSchema()` exports the same schemas as JSON
 * Schema. Page bytes never travel here; they move through the daemon's shared-memory host tier or the native peer
 * protocol. Errors are `{ "error": { "code", "message", "field"? } }` (errors.ts).
 */
import { z } from 'zod';

/** Protocol revision, sent in `hello`; bumped when a request or response changes incompatibly. */
export const CLIENT_PROTOCOL_VERSION = 1;

/**
 * Optional capabilities a daemon lists in `hello.features` (added within a protocol revision):
 * - `commit-crc-optional`: `commit` may omit `crcs`; the daemon then records the CRC32C it computes itself;
 * - `pin-ttl`: `pin` takes `ttlMs`, the lease's own deadline;
 * - `checked-on-serve`: a `commit` with `crcs` records them without reading the bytes again; the bytes are checked
 *   wherever the page is served (every read of the host tier, a peer's receipt, a client's copy-out), so a page
 *   whose bytes do not match is never served, and `badChecksum` is empty. A client that loads must check what it
 *   copies out against `pin.crcs` (the TypeScript client always does) and name the pages that failed in `release`;
 * - `release-damaged`: `release` takes `damaged`, the pages whose copy failed its check; the daemon checks those
 *   slots itself and drops the damaged ones (an integrity failure on the host tier);
 * - `pin-verify`: `pin` takes `verify: true`; the daemon then checks each pinned page's bytes against its CRC32C on
 *   its native threads before answering, drops a page that fails (answered as not found, its index in `damaged`),
 *   and holds the rest pinned until `release`. For clients that cannot check their own copy-out natively.
 * - `retention-hint`: `commit` takes `retention` (`{ expectedReturnMs }` or `{ finished: true }`), a soft hint for
 *   the committed and already held pages that `session-aware` tiers order victims by (never a pin).
 * - `crc32c-library`: `hello.crc32cLibrary` is the absolute path of the daemon's CRC32C as a C library
 *   (libtiersync_crc32c.so, built beside the native addon: `tiersync_copy_crc32c(dst, src, n, seed)`, ABI
 *   `tiersync_crc32c_abi()` = 1), so a same-host client in a language without a native CRC32C (Python) can copy and
 *   checksum a page in one pass: it then commits with `crcs` and checks its own copy-out against `pin.crcs`.
 */
export const CLIENT_FEATURES = ['commit-crc-optional', 'pin-ttl', 'checked-on-serve', 'release-damaged', 'pin-verify', 'retention-hint', 'crc32c-library'] as const;

/** The longest lease a `pin` may ask for with `ttlMs` (1 hour). */
export const MAX_PIN_TTL_MS = 3_600_000;

/** Most keys one request may carry on the wire (a daemon's `client.maxBatchPages` may set fewer). */
export const MAX_PROTOCOL_KEYS = 65536;

/** Client keys: 16..128 lower-case hex characters (the client's own page keys; the daemon derives its stored keys). */
export const CLIENT_KEY_PATTERN = /^[0-9a-f]{16,128}$/;

const uint32 = z.number().int('must be an integer').min(0, 'must be in [0, 2^32)').max(0xffffffff, 'must be in [0, 2^32)');

/** One client page key. */
export const clientKeySchema = z.string().regex(CLIENT_KEY_PATTERN, 'must be 16..128 lower-case hex characters');

/** A non-empty list of distinct client keys. */
export const clientKeysSchema = z
  .array(clientKeySchema)
  .min(1, 'must list 1 or more page keys')
  .max(MAX_PROTOCOL_KEYS, `must list at most ${MAX_PROTOCOL_KEYS} page keys`)
  .superRefine((keys, ctx) => {
    const seen = new Set<string>();
    for (let i = 0; i < keys.length; i++) {
      if (seen.has(keys[i]!)) ctx.addIssue({ code: 'custom', path: [i], message: `${keys[i]} appears twice` });
      seen.add(keys[i]!);
    }
  });

/** A lease id (a reservation or a pin), as the daemon issued it. */
export const leaseIdSchema = z.number().int('must be an integer lease id').min(1, 'must be a lease id (1 or more)');

/** `GET /v1/client/hello`: what the daemon offers this tenant. */
export const helloResponseSchema = z.object({
  protocol: z.number().int(),
  node: z.string(),
  tenant: z.string(),
  model: z.string(),
  /** The daemon's page size: a page is 1..pageBytes bytes. */
  pageBytes: z.number().int().min(1),
  tokensPerPage: z.number().int().min(1),
  /**
   * Most keys a client should name in one request: client.maxBatchPages, and for reserve and pin (which take
   * host-tier slots) at most a quarter of the host tier's slots. Clients split larger calls into chunks of this.
   */
  maxBatchPages: z.number().int().min(1),
  /** Lease deadline: a reservation or pin not closed within this many ms is undone. */
  leaseMs: z.number().int().min(1),
  /** The shared-memory host tier to map (same host), or null when not offered to this tenant. */
  shm: z.object({ path: z.string(), capacity: z.number().int(), pageSize: z.number().int(), fingerprint: z.string() }).nullable(),
  /** The daemon's Unix socket for control requests (same host), or null. Same routes and bodies as over TCP. */
  socket: z.string().nullable(),
  /** The native peer endpoint `host:port` for page bytes from other hosts, or null. */
  peer: z.string().nullable(),
  /** Optional capabilities of this daemon (CLIENT_FEATURES); unknown ones are to be ignored. */
  features: z.array(z.string()),
  /**
   * Absolute path of the daemon's CRC32C C library on this host (feature `crc32c-library`), offered with `shm` only;
   * absent or null when it is not built.
   */
  crc32cLibrary: z.string().nullable().optional(),
});

/** `POST /v1/client/reserve`: room in the shared host tier for new pages. */
export const reserveRequestSchema = z
  .object({
    keys: clientKeysSchema,
    /** Each page's length in bytes, 1..pageBytes, one per key. */
    lengths: z.array(z.number().int('must be an integer').min(1, 'must be 1 or more')),
  })
  .strict();
export const reserveResponseSchema = z.object({
  lease: leaseIdSchema,
  /** Where each page goes in the shared arena; -1 for keys the daemon already holds (nothing to copy). */
  offsets: z.array(z.number().int()),
  deadlineMs: z.number().int(),
});

/**
 * `POST /v1/client/commit`: the bytes are in their slots; the daemon records each page with its CRC32C (checked
 * when served, feature `checked-on-serve`; or here, when the daemon's host tier does not check its reads).
 */
export const commitRequestSchema = z
  .object({
    lease: leaseIdSchema,
    /**
     * CRC32C of each page's bytes, one per reserved key (any value for keys answered -1). Recorded as the page's
     * checksum; every serve of the page checks its bytes against it. Omitted (feature `commit-crc-optional`): the
     * daemon reads the bytes and records the CRC32C it computes.
     */
    crcs: z.array(uint32).optional(),
    /**
     * A soft retention hint for the lease's pages, stored and already held (feature `retention-hint`): the session
     * is expected back in `expectedReturnMs`, or `finished`. Daemons without the feature refuse the field.
     */
    retention: z
      .union([z.object({ expectedReturnMs: z.number().finite().min(0, 'must be 0 or more') }).strict(), z.object({ finished: z.literal(true) }).strict()])
      .optional(),
  })
  .strict();
export const commitResponseSchema = z.object({
  stored: z.number().int(),
  /** Pages the daemon already held. */
  existing: z.number().int(),
  /**
   * Indices of pages refused at commit because their bytes did not match their CRC32C (only by a daemon that checks
   * at commit; with `checked-on-serve` such a page is recorded and refused wherever it would be served instead).
   */
  badChecksum: z.array(z.number().int()),
});

/** `POST /v1/client/abort`: gives a reservation's slots back. */
export const leaseRequestSchema = z.object({ lease: leaseIdSchema }).strict();
/** `POST /v1/client/release`: closes a pin lease. */
export const releaseRequestSchema = z
  .object({
    lease: leaseIdSchema,
    /**
     * Indices (into the pin's keys) of pages whose copy-out did not match `pin.crcs` (feature `release-damaged`):
     * the daemon checks those slots itself and drops the pages that are damaged there.
     */
    damaged: z.array(z.number().int('must be an integer index').min(0, 'must be an index (0 or more)')).max(MAX_PROTOCOL_KEYS).optional(),
  })
  .strict();
export const leaseResponseSchema = z.object({ released: z.number().int() });

/** `POST /v1/client/lookup`: which keys the daemon holds on any tier. */
export const lookupRequestSchema = z
  .object({
    keys: clientKeysSchema,
    /** Also ask the cluster registry which nodes hold the keys this daemon lacks. */
    cluster: z.boolean().optional(),
  })
  .strict();
export const lookupResponseSchema = z.object({
  present: z.array(z.boolean()),
  /** Stored length of each present page (0 when absent). */
  lengths: z.array(z.number().int()),
  /** The tier holding each present page (null when absent). */
  tiers: z.array(z.string().nullable()),
  estimatedLoadMs: z.number(),
  /** With `cluster: true`: per key this daemon lacks, the nodes holding it (rendezvous owner first); `error` when the registry is down. */
  cluster: z.union([z.object({ holders: z.array(z.array(z.string()).nullable()) }), z.object({ error: z.string() })]).optional(),
});

/** `POST /v1/client/pin`: makes pages resident in the shared host tier and holds them until release. */
export const pinRequestSchema = z
  .object({
    keys: clientKeysSchema,
    /** Also answer the tenant's stored keys (remote clients fetch by them over the peer protocol). */
    storedKeys: z.boolean().optional(),
    /** The lease's deadline in ms (feature `pin-ttl`); default the daemon's `leaseMs`. */
    ttlMs: z.number().int('must be an integer').min(1, 'must be 1 or more').max(MAX_PIN_TTL_MS, `must be at most ${MAX_PIN_TTL_MS}`).optional(),
    /** Check each pinned page's bytes against its CRC32C before answering (feature `pin-verify`). */
    verify: z.boolean().optional(),
  })
  .strict();
export const pinResponseSchema = z.object({
  lease: leaseIdSchema,
  /** Where each page is in the shared arena; -1 when found nowhere. */
  offsets: z.array(z.number().int()),
  lengths: z.array(z.number().int()),
  crcs: z.array(uint32),
  deadlineMs: z.number().int(),
  keys: z.array(z.string()).optional(),
  /** With `verify: true`: indices of pages whose bytes failed their CRC32C (dropped; their offset is -1). */
  damaged: z.array(z.number().int()).optional(),
});

/** `POST /v1/client/resolve`: the tenant's stored keys and the peer endpoint to put them to. */
export const resolveRequestSchema = z.object({ keys: clientKeysSchema }).strict();
export const resolveResponseSchema = z.object({ keys: z.array(z.string()), peer: z.string() });

/** `POST /v1/client/delete`: removes pages (pinned ones stay). */
export const deleteRequestSchema = z.object({ keys: clientKeysSchema }).strict();
export const deleteResponseSchema = z.object({ deleted: z.number().int(), pinned: z.number().int(), missing: z.number().int() });

/** Every op of the client API: its HTTP method and the schemas of its bodies (`request: null` takes no body). */
export const clientOps = {
  hello: { method: 'GET', request: null, response: helloResponseSchema },
  reserve: { method: 'POST', request: reserveRequestSchema, response: reserveResponseSchema },
  commit: { method: 'POST', request: commitRequestSchema, response: commitResponseSchema },
  abort: { method: 'POST', request: leaseRequestSchema, response: leaseResponseSchema },
  release: { method: 'POST', request: releaseRequestSchema, response: leaseResponseSchema },
  lookup: { method: 'POST', request: lookupRequestSchema, response: lookupResponseSchema },
  pin: { method: 'POST', request: pinRequestSchema, response: pinResponseSchema },
  resolve: { method: 'POST', request: resolveRequestSchema, response: resolveResponseSchema },
  delete: { method: 'POST', request: deleteRequestSchema, response: deleteResponseSchema },
} as const;

export type ClientOp = keyof typeof clientOps;
type Ops = typeof clientOps;
/** The body a client sends for `op` (never for `hello`). */
export type ClientRequest<Op extends ClientOp> = Ops[Op]['request'] extends z.ZodType ? z.input<Ops[Op]['request']> : undefined;
/** The body the daemon answers `op` with. */
export type ClientResponse<Op extends ClientOp> = z.output<Ops[Op]['response']>;

/** The route of `op`. */
export function clientRoute(op: ClientOp): `/v1/client/${ClientOp}` {
  return `/v1/client/${op}`;
}

/** Whether `op` names an op of the client API. */
export function isClientOp(op: string): op is ClientOp {
  return Object.hasOwn(clientOps, op);
}

export type HelloResponse = ClientResponse<'hello'>;
export type ReserveRequest = ClientRequest<'reserve'>;
export type ReserveResponse = ClientResponse<'reserve'>;
export type CommitRequest = ClientRequest<'commit'>;
export type CommitResponse = ClientResponse<'commit'>;
export type LeaseRequest = ClientRequest<'abort'>;
export type ReleaseRequest = ClientRequest<'release'>;
export type LeaseResponse = ClientResponse<'release'>;
export type LookupRequest = ClientRequest<'lookup'>;
export type LookupResponse = ClientResponse<'lookup'>;
export type PinRequest = ClientRequest<'pin'>;
export type PinResponse = ClientResponse<'pin'>;
export type ResolveRequest = ClientRequest<'resolve'>;
export type ResolveResponse = ClientResponse<'resolve'>;
export type DeleteRequest = ClientRequest<'delete'>;
export type DeleteResponse = ClientResponse<'delete'>;
