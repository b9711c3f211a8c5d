/**
 * The `resp` section of the daemon config: the RESP (Redis protocol) front door. Off unless a port is given
 * (here or with `tiersync serve --resp PORT`).
 */
import { TierSyncError } from '@tiersync/native/errors';
import { z } from 'zod';

const MiB = 1024 * 1024;

/** An engine switch the environment may set (A/B runs of a suite or bench): its value, undefined when unset. */
function envSwitch<T extends string>(name: string, allowed: readonly T[]): T | undefined {
  const v = process.env[name];
  if (v === undefined || v === '') return undefined;
  if ((allowed as readonly string[]).includes(v)) return v as T;
  throw new TierSyncError(`environment variable ${name} must be ${allowed.join(' or ')}, got '${v}'`, 'ERR_CONFIG');
}

/**
 * A raw daemon config with the environment's RESP engine switches applied where its `resp` section leaves them unset:
 * TIERSYNC_RESP_ENGINE (`native`|`node`) and TIERSYNC_RESP_NATIVE_GETS (`0`|`1`), for running a suite or a bench on
 * the other engine. Applied when a config is read, not as schema defaults, so the config's JSON Schema does not
 * depend on the environment.
 * @throws TierSyncError ERR_CONFIG naming a variable set to another value
 */
export function withRespEnvSwitches(config: unknown): unknown {
  const engine = envSwitch('TIERSYNC_RESP_ENGINE', ['native', 'node']);
  const gets = envSwitch('TIERSYNC_RESP_NATIVE_GETS', ['0', '1']);
  if ((engine === undefined && gets === undefined) || config === null || typeof config !== 'object' || Array.isArray(config)) return config;
  const c = config as Record<string, unknown>;
  const resp = c.resp ?? {};
  if (resp === null || typeof resp !== 'object' || Array.isArray(resp)) return config; // the schema names what is wrong
  const r = resp as Record<string, unknown>;
  return { ...c, resp: { ...r, ...(engine !== undefined && r.engine === undefined ? { engine } : {}), ...(gets !== undefined && r.nativeGets === undefined ? { nativeGets: gets === '1' } : {}) } };
}

const tenantName = z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'a tenant (user) name is 1..64 characters of [A-Za-z0-9_.-]');

export const respConfigSchema = z
  .object({
    /** Listen address. Default 127.0.0.1; anything but loopback requires `password` or `tenants`. */
    host: z.string().min(1).default('127.0.0.1'),
    /** Port; 0 picks a free one. Default: none (the door is off). */
    port: z.number().int().min(0).max(65535).optional(),
    /** Password of the `default` user (`AUTH password`), literal or `env:NAME`; its keys are tenant `default`. */
    password: z.string().min(1).max(4096).optional(),
    /** Per-tenant users: name -> password (literal or `env:NAME`). `AUTH name password` selects the tenant's key space. */
    tenants: z.record(tenantName, z.string().min(1).max(4096)).optional(),
    /** Most clients connected at once; beyond it a new client is told so and closed. Default 1024. */
    maxClients: z.number().int().min(1).max(65536).default(1024),
    /**
     * Longest value (bulk string), bytes. Default 512 MiB, Redis's proto-max-bulk-len; at most 16 GiB. Values
     * stream through staging in windows, so this does not depend on stagingBytes.
     */
    maxBulkBytes: z.number().int().min(1).max(16384 * MiB).default(512 * MiB),
    /** Most arguments of one command. Default 65536. */
    maxArrayLength: z.number().int().min(3).max(1 << 24).default(65536),
    /** Longest inline command or protocol line, bytes. Default 64 KiB. */
    maxInlineBytes: z.number().int().min(64).max(16 * MiB).default(64 * 1024),
    /** Bytes held in JavaScript per client (unparsed input, keys and other small arguments). Default 8 MiB. */
    maxPendingBytes: z.number().int().min(256 * 1024).max(1024 * MiB).default(8 * MiB),
    /** Reply bytes queued for one client before the door stops to wait for it to read. Default 16 MiB. */
    maxOutputBytes: z.number().int().min(64 * 1024).max(1024 * MiB).default(16 * MiB),
    /** Longest key, bytes. Default 4 KiB. */
    maxKeyBytes: z.number().int().min(1).max(16 * MiB).default(4096),
    /** Most keys across all tenants; SET of a new key beyond it is refused. Default 1,000,000. */
    maxKeys: z.number().int().min(1).max(1 << 30).default(1_000_000),
    /** Most bytes of key names across all tenants (the catalog's memory). Default 256 MiB. */
    maxKeyBytesTotal: z.number().int().min(1024).max(16384 * MiB).default(256 * MiB),
    /** Host memory that values pass through (all clients together), bytes. Default 256 MiB, at most 1 GiB. */
    stagingBytes: z.number().int().min(1 * MiB).max(1024 * MiB).default(256 * MiB),
    /**
     * Bytes of one staging window (rounded down to whole pages, at least one page): a value longer than this moves
     * between socket and hierarchy window by window, holding at most two windows of staging. Default 16 MiB; at
     * most half of stagingBytes.
     */
    valueWindowBytes: z.number().int().min(64 * 1024).max(512 * MiB).default(16 * MiB),
    /** Deadline for a command to arrive once begun, for room in staging, and for a client to read its replies, ms. Default 30000. */
    requestTimeoutMs: z.number().int().min(10).max(3_600_000).default(30_000),
    /**
     * Where the catalog of keys lives. `durable`: each value's page list is also written as a small manifest page
     * through the hierarchy, after the value's pages; a restarted daemon rebuilds its keys from the manifests the
     * persistent tiers hold. A SET is acknowledged once its pages and its manifest are committed on the first tier:
     * when that tier is persistent (a host tier with shm=, fs), an acknowledged SET survives a kill -9 of the
     * daemon; with a volatile first tier, once write-through has copied both down. `memory`: keys live in the
     * daemon's memory only and its pages are deleted at shutdown (like redis-server without persistence).
     * `auto` (default): `durable` when some tier is persistent, `memory` otherwise.
     */
    catalog: z.enum(['auto', 'durable', 'memory']).default('auto'),
    /**
     * Who owns the door's sockets. `native`: a thread of the native addon reads every client, lands the value of
     * `SET key value` straight into first-tier slots (CRC32C as it lands) and hands everything else to the same
     * JavaScript command handlers as `node` (needs a host tier first; otherwise `node` serves). `node`: Node's
     * sockets and the JavaScript parser for everything. Default `native`, or the environment's
     * TIERSYNC_RESP_ENGINE (`native`|`node`) when set (withRespEnvSwitches).
     */
    engine: z.enum(['native', 'node']).default('native'),
    /**
     * With engine `native`: answer `GET key` on the door's thread for values without a TTL whose pages are all in
     * the first (host) tier's slots when they are set (by any SET or MSET, with either catalog), each page checked
     * by slot version and CRC32C as it is copied into the reply; anything else, and any mismatch, goes to
     * JavaScript as before. Default true, or false
     * when the environment's TIERSYNC_RESP_NATIVE_GETS is `0` (for A/B benchmarks).
     */
    nativeGets: z.boolean().default(true),
    /** Close a client idle this long, ms; 0: never. Default 0. */
    idleTimeoutMs: z.number().int().min(0).max(86_400_000).default(0),
  })
  .strict();

export type RespConfig = z.input<typeof respConfigSchema>;
export type ResolvedRespConfig = z.output<typeof respConfigSchema>;
