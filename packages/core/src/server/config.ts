/**
 * Configuration of the `tiersync serve` daemon: the library's hierarchy config (same fields, same validation) plus
 * the daemon's own sections (`http`, `peer`, `cluster`, `log`). Read from a YAML or JSON file; without one the
 * embedded default runs on this host (host RAM + an fs tier and the SQLite index under the user's data folder).
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statfsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { TierSyncError } from '@tiersync/native/errors';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { configIssuesError, parseConfig, tierSyncConfigSchema, type ResolvedConfig } from '../hierarchy/index.js';
import { respConfigSchema, withRespEnvSwitches, type ResolvedRespConfig } from './resp/config.js';
import { kvEventsConfigSchema, type ResolvedKvEventsConfig } from './kv-events/config.js';

const port = z.number().int().min(0).max(65535);
/** A secret given literally or as `env:NAME` (read from the environment when the config is parsed). */
const secret = z.string().min(1).max(4096);

export const httpConfigSchema = z
  .object({
    /** Listen address of the HTTP control plane. Default 127.0.0.1. Anything but loopback requires `token`. */
    host: z.string().min(1).default('127.0.0.1'),
    /** Port; 0 picks a free one. Default 7071. */
    port: port.default(7071),
    /** Bearer token that mutating endpoints require (literal or `env:NAME`). Default none (loopback only). */
    token: secret.optional(),
    /** Largest request body accepted, bytes. Default 8 MiB. */
    maxBodyBytes: z.number().int().min(1024).max(1 << 30).default(8 << 20),
    /** Most tokens one lookup may carry. Default 1,048,576. */
    maxLookupTokens: z.number().int().min(1).max(1 << 26).default(1 << 20),
    /** Connections open at once; more are closed on accept (bounds what many idle or slow clients can hold). Default 1024. */
    maxConnections: z.number().int().min(1).max(1 << 20).default(1024),
    /** How long shutdown waits for in-flight requests before closing their connections, ms. Default 10000. */
    shutdownGraceMs: z.number().int().min(0).max(600_000).default(10_000),
  })
  .strict();

export const peerConfigSchema = z
  .object({
    /** Serve the host tier to other hosts over the native peer protocol. Default true. */
    enabled: z.boolean().default(true),
    /** Listen address. Default 127.0.0.1; anything but loopback requires `secret`. */
    host: z.string().min(1).default('127.0.0.1'),
    /** Port; 0 picks a free one. Default 7070. */
    port: port.default(7070),
    /** Shared secret of the HMAC handshake (literal or `env:NAME`); with it every frame is authenticated (AES-256-GCM). Default none (loopback only). */
    secret: secret.optional(),
    /** With a secret: also encrypt frames, and refuse peers that do not. Default false (authenticated, not encrypted). */
    encrypt: z.boolean().default(false),
    /** Name of the host tier to serve. Default: the first tier of kind `host`. */
    tier: z.string().min(1).optional(),
    /** Deadline of every socket read/write of a request, ms. Default 30000. */
    timeoutMs: z.number().int().min(1).max(3_600_000).default(30_000),
    /** Address other hosts reach this one's peer port at (`host:port`), as published in the cluster registry. Default: host:port as bound. */
    advertise: z.string().min(3).optional(),
    /** Largest payload one peer frame may declare, bytes (bytes land in reserved slots; this bounds one request). Default 256 MiB. */
    maxPayloadBytes: z.number().int().min(4096).max(1 << 30).default(256 << 20),
    /** Peer connections served at once (a thread each); more are closed on accept and counted. Default 256. */
    maxConnections: z.number().int().min(1).max(65536).default(256),
  })
  .strict();

export const clusterConfigSchema = z
  .object({
    /** Redis URL of the cluster registry, e.g. `redis://10.0.0.2:6379/0`; a password as `redis://:env:NAME@host`. */
    redis: z.string().min(1),
    /** Cluster name: the prefix of every registry key, so clusters can share one Redis. Default `tiersync`. */
    name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1..64 characters of [A-Za-z0-9_.-]').default('tiersync'),
    /** This daemon's id in the registry. Default: hostname:peerPort. */
    nodeId: z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'must be 1..128 characters of [A-Za-z0-9_.:-]').optional(),
    /** Heartbeat period, ms. Default 2000. */
    heartbeatMs: z.number().int().min(50).max(600_000).default(2000),
    /** A node (and the pages it published) expires this long after its last heartbeat, ms. Default 3 x heartbeatMs. */
    ttlMs: z.number().int().min(100).max(3_600_000).optional(),
    /** Page changes are sent to Redis at most this often, ms. Default 200. */
    publishIntervalMs: z.number().int().min(10).max(60_000).default(200),
    /** Page keys per Redis command when publishing. Default 1024. */
    publishBatch: z.number().int().min(1).max(65536).default(1024),
    /** Deadline of one Redis command (and of connecting), ms. Default 1000. */
    commandTimeoutMs: z.number().int().min(10).max(60_000).default(1000),
    /**
     * `rendezvous`: each page has an owner among the live nodes, by highest-random-weight hashing (Thaler &
     * Ravishankar 1998); pages clients store here are also pushed to their owner's host tier, and loads of pages
     * held nowhere here are pulled from the owner (or any node the registry says holds them). Default `none`.
     */
    placement: z.enum(['none', 'rendezvous']).default('none'),
  })
  .strict();

export const tenantConfigSchema = z
  .object({
    /** Tenant name: part of every page key the daemon derives for it. */
    name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1..64 characters of [A-Za-z0-9_.-]'),
    /** Bearer token that identifies the tenant (literal or `env:NAME`). */
    token: secret,
    /** Whether the tenant may map the host tier's shared-memory file (same-host clients). Default true. */
    sharedMemory: z.boolean().default(true),
    /** Most pages the tenant may hold in reservations and pins at once. Default 65536. */
    maxLeasedPages: z.number().int().min(1).max(1 << 24).default(65536),
  })
  .strict();

/** The daemon's log levels (pino's), in the config and TIERSYNC_LOG_LEVEL. */
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

export const clientConfigSchema = z
  .object({
    /** Secret mixed into every tenant's key derivation (literal or `env:NAME`); default none (keys derive from the tenant name). */
    keySalt: secret.optional(),
    /** Most pages one client request may name (reserves and pins: also at most a quarter of the host tier's slots). Default 4096. */
    maxBatchPages: z.number().int().min(1).max(65536).default(4096),
    /** A reservation or pin not committed/released within this many ms is undone. Default 30000. */
    leaseMs: z.number().int().min(100).max(3_600_000).default(30_000),
    /** Most leases (reservations + pins) open at once, all tenants together. Default 1024. */
    maxLeases: z.number().int().min(1).max(1 << 20).default(1024),
    /**
     * A Unix socket the daemon also serves its HTTP API on, for same-host clients (shorter control round trips than
     * loopback TCP; same routes, auth and limits). Default `auto`: `<tmpdir>/tiersync-<pid>-<httpPort>.sock`,
     * advertised in `hello` to tenants offered shared memory; `false`: none.
     */
    socket: z.union([z.string().min(1).max(100), z.literal(false)]).default('auto'),
  })
  .strict();

export const serverConfigSchema = tierSyncConfigSchema.extend({
  http: httpConfigSchema.default(httpConfigSchema.parse({})),
  peer: peerConfigSchema.default(peerConfigSchema.parse({})),
  cluster: clusterConfigSchema.optional(),
  /** The RESP (Redis protocol) front door; off unless it has a port (or `serve --resp PORT`). See resp/config.ts. */
  resp: respConfigSchema.optional(),
  /** The KV event stream on ZeroMQ (vLLM's kv_events schema); off unless it has an endpoint (or `serve --kv-events`). See kv-events/config.ts. */
  kvEvents: kvEventsConfigSchema.optional(),
  /** Tenants of the client API: each has a token and its own key namespace. Default: one tenant `default`. */
  tenants: z.array(tenantConfigSchema).max(4096).optional(),
  client: clientConfigSchema.default(clientConfigSchema.parse({})),
  log: z
    .object({
      /** pino level: fatal, error, warn, info, debug, trace, silent. Default info. */
      level: z.enum(LOG_LEVELS).default('info'),
    })
    .strict()
    .default({ level: 'info' }),
});

export type ServerConfig = z.input<typeof serverConfigSchema>;
export interface ResolvedServerConfig {
  hierarchy: ResolvedConfig;
  http: z.output<typeof httpConfigSchema>;
  peer: z.output<typeof peerConfigSchema>;
  cluster: (z.output<typeof clusterConfigSchema> & { ttlMs: number }) | undefined;
  /** The RESP door's settings (secrets resolved); the door runs when `port` is set. */
  resp?: ResolvedRespConfig;
  /** The KV event stream's settings; it runs when `endpoint` is set. */
  kvEvents?: ResolvedKvEventsConfig;
  tenants?: Array<z.output<typeof tenantConfigSchema>> | undefined;
  client?: z.output<typeof clientConfigSchema>;
  log: { level: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent' };
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

function resolveSecret(value: string | undefined, where: string): string | undefined {
  if (value === undefined || !value.startsWith('env:')) return value;
  const name = value.slice(4);
  const v = process.env[name];
  if (!v) throw new TierSyncError(`config ${where}: names environment variable ${name}, which is not set`, 'ERR_CONFIG');
  return v;
}

/** The RESP door's secrets resolved (`env:NAME`). */
export function resolveRespConfig(resp: ResolvedRespConfig): ResolvedRespConfig {
  return {
    ...resp,
    ...(resp.password !== undefined ? { password: resolveSecret(resp.password, 'resp.password')! } : {}),
    ...(resp.tenants ? { tenants: Object.fromEntries(Object.entries(resp.tenants).map(([u, pw]) => [u, resolveSecret(pw, `resp.tenants.${u}`)!])) } : {}),
  };
}

/** @throws TierSyncError ERR_CONFIG when the RESP door would be reachable off loopback without AUTH, or a bound is inconsistent */
export function checkRespConfig(resp: ResolvedRespConfig): void {
  if (resp.port !== undefined && !isLoopback(resp.host) && !resp.password && !Object.keys(resp.tenants ?? {}).length) {
    throw new TierSyncError(`config resp.host: '${resp.host}' is not loopback; set resp.password or resp.tenants so clients must AUTH`, 'ERR_CONFIG');
  }
  // Values stream through staging in windows: two windows must fit (maxBulkBytes does not depend on staging).
  if (resp.valueWindowBytes * 2 > resp.stagingBytes) {
    throw new TierSyncError(`config resp.valueWindowBytes: ${resp.valueWindowBytes} is more than half of resp.stagingBytes (${resp.stagingBytes})`, 'ERR_CONFIG');
  }
}

/**
 * Validates a daemon config (an object as read from YAML/JSON).
 * @throws TierSyncError ERR_CONFIG naming the field and why
 */
export function parseServerConfig(config: unknown): ResolvedServerConfig {
  const r = serverConfigSchema.safeParse(withRespEnvSwitches(config));
  if (!r.success) throw configIssuesError(r.error.issues);
  const { http, peer, cluster, log, tenants, client, resp, kvEvents, ...rest } = r.data;
  const hierarchy = parseConfig(rest);
  const out: ResolvedServerConfig = {
    hierarchy,
    http: { ...http, ...(http.token !== undefined ? { token: resolveSecret(http.token, 'http.token')! } : {}) },
    peer: { ...peer, ...(peer.secret !== undefined ? { secret: resolveSecret(peer.secret, 'peer.secret')! } : {}) },
    cluster: cluster ? { ...cluster, ttlMs: cluster.ttlMs ?? 3 * cluster.heartbeatMs } : undefined,
    tenants: tenants?.map((t, i) => ({ ...t, token: resolveSecret(t.token, `tenants.${i}.token`)! })),
    client: { ...client, ...(client.keySalt !== undefined ? { keySalt: resolveSecret(client.keySalt, 'client.keySalt')! } : {}) },
    log,
    resp: resolveRespConfig(respConfigSchema.parse(resp ?? {})),
    kvEvents: kvEvents ?? kvEventsConfigSchema.parse({}),
  };
  const names = new Set<string>();
  for (const [i, t] of (out.tenants ?? []).entries()) {
    if (names.has(t.name)) throw new TierSyncError(`config tenants.${i}.name: '${t.name}' is used twice`, 'ERR_CONFIG');
    names.add(t.name);
  }
  if (out.tenants && new Set(out.tenants.map((t) => t.token)).size !== out.tenants.length) {
    throw new TierSyncError('config tenants: two tenants share a token (the token says which tenant a request is from)', 'ERR_CONFIG');
  }
  checkRespConfig(out.resp!);
  if (!isLoopback(out.http.host) && !out.http.token) {
    throw new TierSyncError(`config http.host: '${out.http.host}' is not loopback; set http.token so mutating endpoints require it`, 'ERR_CONFIG');
  }
  if (out.peer.enabled && out.peer.encrypt && !out.peer.secret) {
    throw new TierSyncError('config peer.encrypt: needs peer.secret (the frame keys derive from it)', 'ERR_CONFIG');
  }
  if (out.peer.enabled && !isLoopback(out.peer.host) && !out.peer.secret) {
    throw new TierSyncError(`config peer.host: '${out.peer.host}' is not loopback; set peer.secret for the handshake`, 'ERR_CONFIG');
  }
  if (out.cluster && out.cluster.ttlMs <= out.cluster.heartbeatMs) {
    throw new TierSyncError(`config cluster.ttlMs: must exceed heartbeatMs (${out.cluster.heartbeatMs}), got ${out.cluster.ttlMs}`, 'ERR_CONFIG');
  }
  return out;
}

/**
 * Reads a YAML (`.yaml`, `.yml`) or JSON file and validates it. Relative paths inside (the index path) stay as
 * written: they are relative to the daemon's working directory.
 * @throws TierSyncError ERR_CONFIG when the file cannot be read or parsed, or a field is wrong
 */
export function loadServerConfig(file: string): ResolvedServerConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new TierSyncError(`cannot read config file ${file}: ${(e as Error).message}`, 'ERR_CONFIG', { cause: e });
  }
  let data: unknown;
  try {
    data = /\.json$/i.test(file) ? JSON.parse(text) : parseYaml(text);
  } catch (e) {
    throw new TierSyncError(`config file ${file} is not valid ${/\.json$/i.test(file) ? 'JSON' : 'YAML'}: ${(e as Error).message}`, 'ERR_CONFIG', { cause: e });
  }
  return parseServerConfig(applyEnvOverrides(data));
}

/**
 * The daemon's common settings that `TIERSYNC_*` environment variables override (containers and service managers
 * configure through the environment). Precedence: command-line flags, then these, then the config file.
 */
export const ENV_OVERRIDES = {
  TIERSYNC_HTTP_HOST: { field: 'http.host', kind: 'string' },
  TIERSYNC_HTTP_PORT: { field: 'http.port', kind: 'port' },
  TIERSYNC_HTTP_TOKEN: { field: 'http.token', kind: 'string' },
  TIERSYNC_PEER_HOST: { field: 'peer.host', kind: 'string' },
  TIERSYNC_PEER_PORT: { field: 'peer.port', kind: 'port' },
  TIERSYNC_PEER_SECRET: { field: 'peer.secret', kind: 'string' },
  TIERSYNC_RESP_PORT: { field: 'resp.port', kind: 'port' },
  TIERSYNC_CLUSTER_REDIS: { field: 'cluster.redis', kind: 'string' },
  TIERSYNC_INDEX_PATH: { field: 'index.path', kind: 'string' },
  TIERSYNC_LOG_LEVEL: { field: 'log.level', kind: 'level' },
} as const satisfies Record<string, { field: string; kind: 'string' | 'port' | 'level' }>;

/**
 * `config` (raw, before validation) with the TIERSYNC_* variables set in `env` applied.
 * @throws TierSyncError ERR_CONFIG naming the variable when a port is not a number or a log level not one
 */
export function applyEnvOverrides(config: unknown, env: NodeJS.ProcessEnv = process.env): unknown {
  if (config === null || typeof config !== 'object' || Array.isArray(config)) return config;
  const out = structuredClone(config) as Record<string, unknown>;
  for (const [name, { field, kind }] of Object.entries(ENV_OVERRIDES)) {
    const text = env[name];
    if (text === undefined || text === '') continue;
    let value: string | number = text;
    if (kind === 'port') {
      value = Number(text);
      if (!/^\d+$/.test(text) || value > 65535) throw new TierSyncError(`${name} must be a port number 0..65535, got '${text}'`, 'ERR_CONFIG');
    } else if (kind === 'level' && !(LOG_LEVELS as readonly string[]).includes(text)) {
      throw new TierSyncError(`${name} must be one of ${LOG_LEVELS.join(', ')}, got '${text}'`, 'ERR_CONFIG');
    }
    const [section, key] = field.split('.') as [string, string];
    const current = out[section];
    out[section] = { ...(current !== null && typeof current === 'object' ? current : {}), [key]: value };
  }
  return out;
}

/**
 * The JSON Schema (draft 2020-12) of the daemon's config file, generated from the zod schema the daemon validates
 * with, so editors validate YAML and JSON configs as the daemon will. `packages/core/schema/config.schema.json` holds
 * it (`tiersync schema config` prints it; a test keeps the file current).
 */
export function configJsonSchema(): Record<string, unknown> {
  const generated = z.toJSONSchema(serverConfigSchema, { io: 'input', unrepresentable: 'any', target: 'draft-2020-12' }) as Record<string, unknown>;
  return { ...generated, title: 'tiersync daemon and hierarchy config', description: 'The config of `tiersync serve --config FILE` and of a TierSync hierarchy (docs/SERVE.md). Secrets may be written as env:NAME.' };
}

/** The user's data folder for tiersync: $XDG_DATA_HOME/tiersync, else ~/.local/share/tiersync. */
export function defaultDataDir(): string {
  const base = process.env.XDG_DATA_HOME || path.join(os.homedir(), '.local', 'share');
  return path.join(base, 'tiersync');
}

const DEFAULT_HOST_BYTES = 2 * 1024 ** 3;

/** Whether /dev/shm can hold `bytes` more (or already holds our file from an earlier run). */
function shmHas(bytes: number, file: string): boolean {
  try {
    if (existsSync(file)) return true;
    const s = statfsSync('/dev/shm');
    return s.bavail * s.bsize >= bytes;
  } catch {
    return false;
  }
}

/**
 * The embedded default: host RAM (2 GiB, in a /dev/shm file named after `dataDir`, so same-host clients map it and
 * move pages without a socket, and a restarted daemon reattaches it) over an fs tier (64 GiB) in `dataDir`, the
 * SQLite index there, HTTP on 127.0.0.1:7071, peer on 127.0.0.1:7070, no Redis. Pages are keyed for model
 * `tiersync-default` with the llama-3-8b layout; a real deployment names its model and layout in a config file.
 */
export function defaultServerConfig(dataDir: string = defaultDataDir()): ServerConfig {
  const shm = `/dev/shm/tiersync-${createHash('sha256').update(path.resolve(dataDir)).digest('hex').slice(0, 16)}`;
  return {
    model: 'tiersync-default',
    layout: 'llama-3-8b',
    tiers: [
      // Containers often mount a small /dev/shm (64 MiB in Docker): then plain anonymous memory.
      { url: shmHas(DEFAULT_HOST_BYTES, shm) ? `host://?capacity=2GiB&shm=${shm}` : 'host://?capacity=2GiB', name: 'host' },
      { url: `fs://${path.join(dataDir, 'pages')}?capacity=64GiB`, name: 'fs' },
    ],
    index: { path: path.join(dataDir, 'index.sqlite') },
  };
}
