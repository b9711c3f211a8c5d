/**
 * TierSyncServer: the `tiersync serve` daemon. It embeds one TierSync hierarchy and exposes
 * - the peer data plane: the host tier served over the native peer protocol (servePeer), so other hosts' PeerTier
 *   drivers read and write this host's RAM;
 * - an HTTP control plane (node:http): `/healthz`, `/metrics`, `/v1/stats`, `POST /v1/lookup`,
 *   `POST /v1/prefetch`, `GET /v1/cluster/nodes` and the live dashboard at `/`;
 * - with `cluster.redis`, a ClusterRegistry entry (heartbeat + the host tier's pages).
 *
 * close() is the graceful shutdown: stop accepting, let in-flight requests finish (up to shutdownGraceMs), leave
 * the registry, stop the peer listener, close the hierarchy (waits for background copies, flushes the index).
 */
import { chmodSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { timingSafeEqual } from 'node:crypto';
import { TierSyncError, type PeerServer } from '@tiersync/native';
import { HostTier, servePeer } from '@tiersync/tiers';
import { pino, type Logger } from 'pino';
import { nativeBuild, packageVersion } from '../build-info.js';
import { TierSync } from '../hierarchy/index.js';
import type { ResolvedServerConfig } from './config.js';
import { DASHBOARD_HTML } from './dashboard.js';
import { ServerMetrics } from './metrics.js';
import { ClusterRegistry, type HolderAnswer } from './registry.js';
import { RespDoor } from './resp/door.js';
import { TierSyncPageStore } from './resp/page-store.js';
import { ClientApi } from './client-api.js';
import { AccessBatch, warnRefused } from './access-batch.js';
import { FRAME_MAGIC, ProtocolError, daemonRoutes, isClientOp, parseRequest, tokensRequestSchema, type ErrorBody } from '../protocol/index.js';
import { openApiDocument } from './openapi.js';
import { FrameSession } from './client-frames.js';
import { Tenants } from './tenants.js';
import type { KvEvents } from './kv-events/index.js';

export interface ServerStartOptions {
  /** Logger to use; default: pino to stderr at the config's `log.level`. */
  logger?: Logger;
}

/** What `GET /v1/stats` returns (and the dashboard draws). */
export interface ServerStats {
  node: string;
  model: string;
  uptimeSeconds: number;
  pageBytes: number;
  tokensPerPage: number;
  tiers: Array<{ name: string; kind: string; capacityBytes: number; usedBytes: number; capacityPages: number; usedPages: number; pinned: number; hits: number; misses: number; bytesRead: number; bytesWritten: number; errors: number; checksumFailures: number }>;
  index: { pages: number; pageBytes: number; pins: number; fileBytes: number };
  counters: TierSync['counters'];
  lookups: { requests: number; pagesRequested: number; pagesHit: number };
  peer: { host: string; port: number; tier: string; connections: number; authFailures: number; refused: number; active: number } | null;
  http: { host: string; port: number; inFlight: number };
  cluster: ({ name: string } & ReturnType<ClusterRegistry['stats']>) | null;
  /** Client API leases open now (reservations + pins), the pages they hold, committed pages not yet in the index. */
  clients: { leases: number; leasedPages: number; unrecordedPages: number } | null;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Routes counted by name in the HTTP metrics (anything else is `other`, so a scan cannot grow the label set). */
const KNOWN_ROUTES = new Set([...Object.keys(daemonRoutes), '/metrics', '/openapi.json', '/', '/index.html']);

function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  res.end(text);
}

/** The typed error body (`{ error: { code, message, field? } }`, protocol/errors.ts) of any refused request. */
function errorBody(e: unknown, status: number): ErrorBody {
  if (e instanceof ProtocolError) return e.toBody();
  const code = e instanceof TierSyncError ? e.code : status === 413 ? 'ERR_OUT_OF_RANGE' : status === 400 ? 'ERR_INVALID_ARGUMENT' : status === 401 ? 'ERR_AUTH' : status === 503 ? 'ERR_UNAVAILABLE' : 'ERR_IO';
  return { error: { code, message: (e as Error).message } };
}

/** The client API's Unix socket: HTTP and framed sessions (protocol/frames.ts) on one path, told apart by their first bytes. */
interface UnixListener {
  path: string;
  net: net.Server;
  /** Serves the HTTP connections (never listens itself). */
  http: http.Server;
  /** Set by the server once its client API exists: takes a framed session's socket and the bytes after the magic. */
  frames?: (socket: net.Socket, rest: Buffer) => void;
}

/**
 * Logs the line a driver leaves on how it opened (fs `openNote`; host and object `attachNote`): at warn when it
 * dropped or skipped what it found (torn or corrupt slots, malformed records, unreadable objects), else at info.
 */
/** Least time between two log lines of failed transfers of one operation on one tier (the metric counts them all). */
const TRANSFER_WARN_EVERY_MS = 60_000;

/**
 * Logs failed transfers (a tier whose writes all fail, a bucket down under write-through) at warn level, one line
 * per operation and tier a minute with how many failed since the last: they were visible only as a counter.
 */
function warnTransferFailures(log: Logger): (e: { op: string; tier: string; error: TierSyncError }) => void {
  const last = new Map<string, { at: number; since: number }>();
  return (e) => {
    const id = `${e.op}\0${e.tier}`;
    const now = Date.now();
    const seen = last.get(id);
    if (seen && now - seen.at < TRANSFER_WARN_EVERY_MS) {
      seen.since++;
      return;
    }
    log.warn({ op: e.op, tier: e.tier, err: e.error.message, code: e.error.code, failedSinceLastLine: seen?.since ?? 0 }, 'transfer failed');
    last.set(id, { at: now, since: 0 });
  };
}

/** Runs `open` (a listener starting); its error names the config keys it listens by, e.g. which port was in use. */
function namingListener<T>(what: string, open: () => T): T {
  const named = (e: unknown): never => {
    if (e instanceof TierSyncError) throw new TierSyncError(`${what}: ${e.message}`, e.code, { cause: e });
    throw e;
  };
  try {
    const r = open();
    return (r instanceof Promise ? r.catch(named) : r) as T;
  } catch (e) {
    return named(e);
  }
}

function logOpenNote(log: Logger, tier: string, driver: object): void {
  const d = driver as { openNote?: unknown; attachNote?: unknown };
  const note = typeof d.openNote === 'string' ? d.openNote : typeof d.attachNote === 'string' ? d.attachNote : '';
  if (!note) return;
  if (/\b(dropped|skipped)\b/.test(note)) log.warn({ tier, note }, 'tier opened and dropped what it could not keep');
  else if (/\bunreachable\b/.test(note)) log.warn({ tier, note }, 'tier opened without reaching its peer');
  else log.info({ tier, note }, 'tier opened');
}

/** Removes auto-named client sockets of daemons that died without closing (SIGKILL): their pid no longer exists. */
function sweepStaleSockets(): void {
  let names: string[];
  try {
    names = readdirSync(os.tmpdir());
  } catch {
    return;
  }
  for (const name of names) {
    const pid = Number(/^tiersync-(\d+)-\d+\.sock$/.exec(name)?.[1]);
    if (!pid || pid === process.pid) continue;
    try {
      process.kill(pid, 0);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ESRCH') rmSync(path.join(os.tmpdir(), name), { force: true });
    }
  }
}

/**
 * Listens on the client API's Unix socket (config `client.socket`), unless it is off. The socket file is made for
 * this process (auto: its pid and HTTP port in the name, mode 0600) and removed by close().
 */
async function listenUnix(config: ResolvedServerConfig, httpPort: number): Promise<UnixListener | undefined> {
  const want = config.client?.socket ?? 'auto';
  if (want === false) return undefined;
  if (want === 'auto') sweepStaleSockets();
  const file = want === 'auto' ? path.join(os.tmpdir(), `tiersync-${process.pid}-${httpPort}.sock`) : path.resolve(want);
  rmSync(file, { force: true });
  const httpServer = http.createServer({ requestTimeout: 60_000, headersTimeout: 30_000, keepAliveTimeout: 5_000 });
  const listener: UnixListener = { path: file, net: net.createServer(), http: httpServer };
  listener.net.maxConnections = config.http.maxConnections;
  listener.net.on('connection', (socket) => {
    // The first bytes say which: the frame magic, or an HTTP request line.
    const sniff = (chunk: Buffer): void => {
      socket.off('data', sniff);
      socket.pause();
      if (chunk.length >= FRAME_MAGIC.length && chunk.subarray(0, FRAME_MAGIC.length).equals(FRAME_MAGIC)) {
        if (listener.frames) listener.frames(socket, chunk.subarray(FRAME_MAGIC.length));
        else socket.destroy();
      } else {
        socket.unshift(chunk);
        httpServer.emit('connection', socket);
      }
      socket.resume();
    };
    socket.on('data', sniff);
  });
  await new Promise<void>((resolve, reject) => {
    listener.net.once('error', (e: NodeJS.ErrnoException) => reject(new TierSyncError(`cannot listen on the client socket ${file}: ${e.message}`, 'ERR_IO', { cause: e })));
    listener.net.listen(file, () => resolve());
  });
  chmodSync(file, 0o600);
  return listener;
}

export class TierSyncServer {
  readonly config: ResolvedServerConfig;
  readonly ts: TierSync;
  readonly log: Logger;
  readonly metrics: ServerMetrics;
  readonly nodeId: string;
  readonly #http: http.Server;
  /** The same HTTP API, and framed client sessions, on a Unix socket (client.socket), for same-host clients. */
  readonly #unix: UnixListener | undefined;
  readonly #frameSessions = new Set<FrameSession>();
  readonly #peer: PeerServer | undefined;
  readonly #peerTier: string | undefined;
  /** Pages peers' GETs read from the served host tier, on their way to its eviction policy (TierSync.recordHits). */
  readonly #peerReads: AccessBatch | undefined;
  readonly #registry: ClusterRegistry | undefined;
  /** The RESP front door, when `resp.port` is set. */
  #resp: RespDoor | undefined;
  /** The KV event stream, when `kvEvents.endpoint` is set. */
  #kvEvents: KvEvents | undefined;
  /** The client API (`/v1/client/*`); undefined when the hierarchy has no host tier. */
  readonly #clients: ClientApi | undefined;
  readonly #startedAt = Date.now();
  readonly #lookups = { requests: 0, pagesRequested: 0, pagesHit: 0 };
  #inFlight = 0;
  #closing: Promise<void> | undefined;
  /** The OpenAPI document, built on first request (it does not change while the daemon runs). */
  #openApi: Record<string, unknown> | undefined;

  private constructor(parts: { config: ResolvedServerConfig; ts: TierSync; log: Logger; http: http.Server; unix?: UnixListener | undefined; peer: PeerServer | undefined; peerTier: string | undefined; peerReads: AccessBatch | undefined; registry: ClusterRegistry | undefined; nodeId: string; peerAddress: string }) {
    this.config = parts.config;
    this.ts = parts.ts;
    this.log = parts.log;
    this.#http = parts.http;
    this.#peer = parts.peer;
    this.#peerTier = parts.peerTier;
    this.#peerReads = parts.peerReads;
    this.#registry = parts.registry;
    this.nodeId = parts.nodeId;
    this.metrics = new ServerMetrics({
      ts: this.ts,
      lookups: () => ({ ...this.#lookups }),
      peer: () => this.#peer?.stats(),
      registry: () => this.#registry?.stats(),
    });
    this.#http.on('request', (req, res) => void this.#handle(req, res));
    this.#unix = parts.unix;
    this.#unix?.http.on('request', (req, res) => void this.#handle(req, res));
    const hostTierName = this.#peerTier ?? this.ts.stats().tiers.find((t) => t.kind === 'host')?.name;
    const hostTier = hostTierName ? this.ts.tierDriver(hostTierName) : undefined;
    const c = this.config;
    this.#clients =
      hostTier instanceof HostTier
        ? new ClientApi({
            ts: this.ts,
            hostTier,
            hostTierName: hostTierName!,
            tenants: new Tenants(c.tenants, { ...(c.client?.keySalt ? { keySalt: c.client.keySalt } : {}), ...(c.http.token ? { defaultToken: c.http.token } : {}) }),
            maxBatchPages: c.client?.maxBatchPages ?? 4096,
            leaseMs: c.client?.leaseMs ?? 30_000,
            maxLeases: c.client?.maxLeases ?? 1024,
            peerAddress: this.#peer && this.#peerTier === hostTierName ? parts.peerAddress : '',
            peerSecret: c.peer.secret,
            peerTimeoutMs: c.peer.timeoutMs,
            settlePeerPuts: () => this.#peer?.drain(),
            registry: this.#registry,
            placement: c.cluster?.placement ?? 'none',
            nodeId: this.nodeId,
            socketPath: parts.unix?.path,
            log: this.log.child({ component: 'client-api' }),
            metrics: this.metrics.registry,
          })
        : undefined;
    const clients = this.#clients;
    if (this.#unix && clients) {
      this.#unix.frames = (socket, rest) => {
        if (this.#closing) return void socket.destroy();
        const session = new FrameSession(socket, rest, clients, {
          maxFrameBytes: c.http.maxBodyBytes,
          log: this.log,
          onAnswered: (op, status, seconds) => {
            const route = isClientOp(op) ? `/v1/client/${op}` : 'other';
            this.metrics.httpRequests.inc({ route, method: 'FRAME', code: String(status) });
            this.metrics.httpDuration.observe({ route }, seconds);
          },
        });
        this.#frameSessions.add(session);
        socket.on('close', () => this.#frameSessions.delete(session));
      };
    }
  }

  /**
   * Opens the hierarchy, serves the host tier to peers, listens for HTTP and joins the cluster registry.
   * @throws TierSyncError (ERR_CONFIG, ERR_UNAVAILABLE when a port is taken, ...) after undoing what had started
   */
  static async start(config: ResolvedServerConfig, options: ServerStartOptions = {}): Promise<TierSyncServer> {
    const log = options.logger ?? pino({ level: config.log.level, base: { pid: process.pid } }, pino.destination({ dest: 2, sync: true }));
    const indexPath = config.hierarchy.index.path;
    if (indexPath !== ':memory:') mkdirSync(path.dirname(path.resolve(indexPath)), { recursive: true });
    const ts = new TierSync(config.hierarchy);
    const undo: Array<() => unknown> = [];
    try {
      await ts.open();
      undo.push(() => ts.close());
      for (const t of ts.stats().tiers) logOpenNote(log, t.name, ts.tierDriver(t.name));
      // Pages the persistent tiers held that the index did not know (a lost, stale or in-memory index): adopted, never deleted.
      // Warned when bookkeeping changed: copies the index named that a tier no longer holds, stale copies deleted.
      for (const t of ts.reconciled?.tiers ?? []) (t.indexedNotHeld || t.stale ? log.warn.bind(log) : log.info.bind(log))(t, 'tier reconciled with the index');
      ts.on('policy:failed', (e) => log.error({ tier: e.tier, err: e.error.message }, "a tier's eviction policy failed; the tier went on without that call"));
      ts.on('transfer:failed', warnTransferFailures(log));

      let peer: PeerServer | undefined;
      let peerTier: string | undefined;
      let peerReads: AccessBatch | undefined;
      if (config.peer.enabled) {
        const tiers = ts.stats().tiers;
        peerTier = config.peer.tier ?? tiers.find((t) => t.kind === 'host')?.name;
        if (!peerTier) {
          log.warn('no host tier to serve to peers; the peer endpoint is off (add a host:// tier, or set peer.enabled: false)');
        } else {
          const driver = ts.tierDriver(peerTier);
          if (!(driver instanceof HostTier)) throw new TierSyncError(`config peer.tier: '${peerTier}' is not a host:// tier; only host RAM can be served to peers`, 'ERR_CONFIG');
          const served = peerTier;
          // Peers' GETs read the tier's slots without the hierarchy's load(): counted for its eviction policy in batches.
          const reads = new AccessBatch({
            record: (keys) => ts.recordHits(served, keys),
            onFailed: warnRefused(log, 'pages peers read'),
          });
          peerReads = reads;
          undo.push(() => reads.close());
          peer = namingListener('peer.host/peer.port (the peer server)', () => servePeer(driver, {
            host: config.peer.host,
            port: config.peer.port,
            timeoutMs: config.peer.timeoutMs,
            maxPayload: config.peer.maxPayloadBytes,
            maxConnections: config.peer.maxConnections,
            ...(config.peer.secret ? { secret: config.peer.secret, encrypt: config.peer.encrypt } : {}),
            // Pages other hosts (or remote clients) put into this host tier enter the block index.
            onCommitted: (pages) => void ts.adoptPages(served, pages).catch((e: unknown) => log.error({ err: e, pages: pages.length }, 'could not record pages a peer put')),
            onDeleted: (keys) => ts.forgetPages(served, keys),
            onServed: (keys) => reads.add(keys),
          }));
          const listening = peer;
          undo.push(() => listening.close());
        }
      }

      const server = http.createServer({ requestTimeout: 60_000, headersTimeout: 30_000, keepAliveTimeout: 5_000 });
      server.maxConnections = config.http.maxConnections;
      await new Promise<void>((resolve, reject) => {
        server.once('error', (e: NodeJS.ErrnoException) =>
          reject(new TierSyncError(`cannot listen for HTTP on ${config.http.host}:${config.http.port}: ${e.message}`, e.code === 'EADDRINUSE' ? 'ERR_UNAVAILABLE' : 'ERR_IO', { cause: e })),
        );
        server.listen(config.http.port, config.http.host, () => resolve());
      });
      undo.push(() => new Promise((r) => server.close(r)));
      const httpPort = (server.address() as AddressInfo).port;

      const unix = await listenUnix(config, httpPort);
      if (unix) undo.push(() => new Promise((r) => unix.net.close(r)).finally(() => rmSync(unix.path, { force: true })));
      const peerAddress = peer ? (config.peer.advertise ?? `${config.peer.host}:${peer.port}`) : '';
      const nodeId = config.cluster?.nodeId ?? `${os.hostname()}:${peer?.port ?? httpPort}`;
      let registry: ClusterRegistry | undefined;
      if (config.cluster) {
        registry = new ClusterRegistry({
          redis: config.cluster.redis,
          cluster: config.cluster.name,
          nodeId,
          heartbeatMs: config.cluster.heartbeatMs,
          ttlMs: config.cluster.ttlMs,
          publishIntervalMs: config.cluster.publishIntervalMs,
          publishBatch: config.cluster.publishBatch,
          commandTimeoutMs: config.cluster.commandTimeoutMs,
          info: { peer: peerAddress, http: `${config.http.host}:${httpPort}`, model: config.hierarchy.model },
          logger: log,
        });
      }
      const self = new TierSyncServer({ config, ts, log, http: server, unix, peer, peerTier, peerReads, registry, nodeId, peerAddress });
      if (config.resp?.port !== undefined) {
        const respLog = log.child({ component: 'resp' });
        const door = await namingListener('resp.host/resp.port (the RESP door)', () => RespDoor.listen({ config: config.resp!, store: new TierSyncPageStore(ts, { log: respLog }), logger: respLog, metrics: self.metrics.registry }));
        self.#resp = door;
        undo.push(() => door.close());
        log.info({ resp: `${config.resp.host}:${door.port}`, respPort: door.port, auth: door.requiresAuth }, 'RESP door listening');
      }
      if (config.kvEvents?.endpoint) {
        // Loaded only when on: ZeroMQ's native addon stays out of a daemon that does not publish.
        const { KvEvents } = await import('./kv-events/index.js');
        const events = await KvEvents.start(ts, config.kvEvents, { indexPath, log: log.child({ component: 'kv-events' }) });
        self.#kvEvents = events;
        undo.push(() => events.close());
      }
      if (registry) {
        const initial: string[] = [];
        if (peerTier) for await (const p of ts.tierDriver(peerTier).list()) initial.push(p.key);
        self.#trackServedTier();
        await registry.start(initial);
      }
      log.info(
        { http: `${config.http.host}:${httpPort}`, peer: peer ? `${config.peer.host}:${peer.port}` : null, peerTier: peerTier ?? null, node: nodeId, model: config.hierarchy.model, tiers: ts.stats().tiers.map((t) => t.name), cluster: config.cluster ? config.cluster.name : null, httpPort, peerPort: peer?.port ?? null, version: packageVersion(), native: nativeBuild() },
        'tiersync serve listening',
      );
      return self;
    } catch (e) {
      for (const u of undo.reverse()) await Promise.resolve(u()).catch(() => undefined);
      if (!undo.length) await ts.close().catch(() => undefined);
      throw e;
    }
  }

  /** Keeps the registry's view of the served tier in step with the hierarchy's events. */
  #trackServedTier(): void {
    const reg = this.#registry!;
    const tier = this.#peerTier;
    if (!tier) return;
    this.ts.on('block:stored', (e) => e.tier === tier && reg.added(e.keys));
    this.ts.on('block:promoted', (e) => e.to === tier && reg.added(e.keys));
    this.ts.on('block:demoted', (e) => e.to === tier && reg.added(e.keys));
    this.ts.on('block:evicted', (e) => e.tier === tier && reg.removed(e.keys));
  }

  get httpPort(): number {
    return (this.#http.address() as AddressInfo | null)?.port ?? 0;
  }

  /** The peer data-plane port, or 0 when peers are off. */
  get peerPort(): number {
    return this.#peer?.port ?? 0;
  }

  get url(): string {
    const h = this.config.http.host.includes(':') ? `[${this.config.http.host}]` : this.config.http.host;
    return `http://${h}:${this.httpPort}`;
  }

  /** The RESP door's port, or 0 when it is off. */
  get respPort(): number {
    return this.#resp?.port ?? 0;
  }

  get resp(): RespDoor | undefined {
    return this.#resp;
  }

  /** The KV event stream, when it runs. */
  get kvEvents(): KvEvents | undefined {
    return this.#kvEvents;
  }

  get registry(): ClusterRegistry | undefined {
    return this.#registry;
  }

  stats(): ServerStats {
    const s = this.ts.stats();
    const peer = this.#peer?.stats();
    return {
      node: this.nodeId,
      model: this.config.hierarchy.model,
      uptimeSeconds: (Date.now() - this.#startedAt) / 1000,
      pageBytes: this.ts.pageBytes,
      tokensPerPage: this.ts.tokensPerPage,
      tiers: s.tiers.map((t) => ({
        name: t.name,
        kind: t.kind,
        capacityBytes: t.capacityBytes,
        usedBytes: t.usedBytes,
        capacityPages: t.capacityPages,
        usedPages: t.usedPages,
        pinned: t.pinned,
        hits: t.hits,
        misses: t.misses,
        bytesRead: t.bytesRead,
        bytesWritten: t.bytesWritten,
        errors: t.errors,
        checksumFailures: t.checksumFailures,
      })),
      index: { pages: s.index.pages, pageBytes: s.index.pageBytes, pins: s.index.pins, fileBytes: s.index.fileBytes },
      counters: s.counters,
      lookups: { ...this.#lookups },
      peer: this.#peer && peer ? { host: this.config.peer.host, port: this.#peer.port, tier: this.#peerTier!, ...peer } : null,
      http: { host: this.config.http.host, port: this.httpPort, inFlight: this.#inFlight },
      cluster: this.#registry ? { name: this.config.cluster!.name, ...this.#registry.stats() } : null,
      clients: this.#clients?.stats() ?? null,
    };
  }

  #authorized(req: http.IncomingMessage): boolean {
    const token = this.config.http.token;
    if (!token) return true;
    const given = /^Bearer (.+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
    const a = Buffer.from(given);
    const b = Buffer.from(token);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  async #body(req: http.IncomingMessage): Promise<unknown> {
    const max = this.config.http.maxBodyBytes;
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > max) throw new HttpError(413, `request body over ${max} bytes`);
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > max) throw new HttpError(413, `request body over ${max} bytes`);
      chunks.push(chunk as Buffer);
    }
    try {
      return JSON.parse(Buffer.concat(chunks).toString('utf8') || 'null');
    } catch {
      throw new HttpError(400, 'request body is not valid JSON');
    }
  }

  /** A `{ tokens, cluster? }` body (protocol/daemon.ts), validated once, bounded by http.maxLookupTokens. */
  #tokens(body: unknown, route: string): { tokens: Uint32Array; cluster: boolean | undefined } {
    const tokens = (body as { tokens?: unknown } | null)?.tokens;
    // The bound first, so an oversized body is refused without checking every token.
    if (Array.isArray(tokens) && tokens.length > this.config.http.maxLookupTokens) {
      throw new ProtocolError(`${route}: tokens: at most ${this.config.http.maxLookupTokens} tokens per request, got ${tokens.length}`, 'ERR_OUT_OF_RANGE', 413, 'tokens');
    }
    const r = parseRequest(tokensRequestSchema, body, route);
    return { tokens: Uint32Array.from(r.tokens), cluster: r.cluster };
  }

  /** `GET /readyz`: ready to serve traffic (protocol/daemon.ts readinessSchema). */
  readiness(): { ready: boolean; checks: { hierarchy: 'open' | 'closed'; shutdown: boolean; clientApi: 'on' | 'off'; registry: 'up' | 'down' | 'none' } } {
    let open = true;
    try {
      this.ts.stats();
    } catch {
      open = false;
    }
    const registry = this.#registry ? (this.#registry.stats().up ? 'up' : 'down') : 'none';
    const checks = { hierarchy: open ? ('open' as const) : ('closed' as const), shutdown: this.#closing !== undefined, clientApi: this.#clients ? ('on' as const) : ('off' as const), registry: registry as 'up' | 'down' | 'none' };
    return { ready: open && !this.#closing, checks };
  }

  async #lookup(body: unknown): Promise<unknown> {
    const { tokens, cluster: askCluster } = this.#tokens(body, '/v1/lookup');
    const hit = this.ts.lookup(tokens);
    this.#lookups.requests++;
    this.#lookups.pagesRequested += hit.keys.length;
    this.#lookups.pagesHit += hit.pages.length;
    let cluster: { holders: Array<{ node: string; peer: string; pages: number; tokens: number }> } | { error: string } | undefined;
    // Beyond the local prefix, ask the registry which hosts hold a longer one (their RAM, over the peer tier).
    if (this.#registry && askCluster !== false && hit.pages.length < hit.keys.length) {
      try {
        const holders: HolderAnswer[] = await this.#registry.whoHolds(hit.keys);
        cluster = { holders: holders.map((h) => ({ node: h.node.id, peer: h.node.peer, pages: h.pages, tokens: h.pages * this.ts.tokensPerPage })) };
      } catch (e) {
        cluster = { error: `cluster registry unreachable: ${(e as Error).message}` };
      }
    }
    return {
      pagesRequested: hit.keys.length,
      tokens: hit.tokens,
      estimatedLoadMs: hit.estimatedLoadMs,
      pages: hit.pages.map((p) => ({ key: p.key, tier: p.tier, tiers: p.tiers })),
      ...(cluster ? { cluster } : {}),
    };
  }

  async #route(req: http.IncomingMessage, res: http.ServerResponse, route: string): Promise<void> {
    const method = req.method ?? 'GET';
    const only = (m: string) => {
      if (method !== m && !(m === 'GET' && method === 'HEAD')) {
        res.setHeader('allow', m === 'GET' ? 'GET, HEAD' : m);
        throw new HttpError(405, `${route} takes ${m}`);
      }
    };
    switch (route) {
      case '/healthz':
        only('GET');
        return sendJson(res, this.#closing ? 503 : 200, { status: this.#closing ? 'closing' : 'ok', node: this.nodeId, uptimeSeconds: (Date.now() - this.#startedAt) / 1000 });
      case '/readyz': {
        only('GET');
        const r = this.readiness();
        return sendJson(res, r.ready ? 200 : 503, r);
      }
      case '/openapi.json':
        only('GET');
        return sendJson(res, 200, (this.#openApi ??= openApiDocument()));
      case '/metrics': {
        only('GET');
        const text = await this.metrics.registry.metrics();
        res.writeHead(200, { 'content-type': this.metrics.registry.contentType, 'cache-control': 'no-store' });
        return void res.end(text);
      }
      case '/v1/stats':
        only('GET');
        return sendJson(res, 200, this.stats());
      case '/v1/lookup':
        only('POST');
        return sendJson(res, 200, await this.#lookup(await this.#body(req)));
      case '/v1/prefetch': {
        only('POST');
        if (!this.#authorized(req)) throw new HttpError(401, 'missing or wrong bearer token');
        const hit = this.ts.prefetch(this.#tokens(await this.#body(req), '/v1/prefetch').tokens);
        return sendJson(res, 202, { pagesRequested: hit.keys.length, pagesQueued: hit.pages.filter((p) => p.tier !== this.ts.stats().tiers[0]!.name).length });
      }
      case '/v1/cluster/nodes': {
        only('GET');
        if (!this.#registry) throw new HttpError(404, 'no cluster configured (cluster.redis)');
        try {
          return sendJson(res, 200, { nodes: await this.#registry.nodes() });
        } catch (e) {
          throw new HttpError(503, `cluster registry unreachable: ${(e as Error).message}`);
        }
      }
      case '/':
      case '/index.html':
        only('GET');
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-length': Buffer.byteLength(DASHBOARD_HTML), 'cache-control': 'no-store' });
        return void res.end(method === 'HEAD' ? undefined : DASHBOARD_HTML);
      default: {
        if (route.startsWith('/v1/client/')) {
          if (!this.#clients) throw new HttpError(503, 'the client API needs a host:// tier');
          const r = await this.#clients.handle(route.slice('/v1/client/'.length), req, () => this.#body(req));
          return sendJson(res, r.status, r.body);
        }
        throw new HttpError(404, `no route ${route}`);
      }
    }
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const start = process.hrtime.bigint();
    this.#inFlight++;
    const route = new URL(req.url ?? '/', 'http://x').pathname;
    const known = KNOWN_ROUTES.has(route) || (route.startsWith('/v1/client/') && isClientOp(route.slice('/v1/client/'.length))) ? route : 'other';
    if (this.#closing) res.setHeader('connection', 'close');
    try {
      await this.#route(req, res, route);
    } catch (e) {
      const status = e instanceof HttpError || e instanceof ProtocolError ? e.status : e instanceof TierSyncError && (e.code === 'ERR_INVALID_ARGUMENT' || e.code === 'ERR_OUT_OF_RANGE') ? 400 : e instanceof TierSyncError && e.code === 'ERR_CLOSED' ? 503 : 500;
      if (status >= 500) this.log.error({ err: e, route }, 'request failed');
      else this.log.debug({ route, status, err: (e as Error).message }, 'request refused');
      if (!res.headersSent) {
        if (status === 413) res.setHeader('connection', 'close');
        if (status === 401) res.setHeader('www-authenticate', 'Bearer');
        sendJson(res, status, errorBody(e, status));
      } else res.destroy();
    } finally {
      this.#inFlight--;
      this.metrics.httpRequests.inc({ route: known, method: req.method ?? '', code: String(res.statusCode) });
      this.metrics.httpDuration.observe({ route: known }, Number(process.hrtime.bigint() - start) / 1e9);
    }
  }

  /**
   * Graceful shutdown: stops accepting connections, lets in-flight requests finish (closing the rest after
   * shutdownGraceMs), leaves the cluster registry, stops serving peers, closes the hierarchy (background copies
   * finish, the index is flushed). Safe to call twice.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.log.info({ inFlight: this.#inFlight }, 'shutting down');
      const unix = this.#unix?.http;
      const unixNet = this.#unix?.net;
      // The Unix socket's connections are closed like the TCP ones (HTTP) or as their answers are written (frames).
      const closed = Promise.all([new Promise<void>((resolve) => this.#http.close(() => resolve())), unixNet ? new Promise<void>((resolve) => unixNet.close(() => resolve())) : undefined]);
      for (const f of this.#frameSessions) f.close();
      this.#http.closeIdleConnections();
      unix?.closeIdleConnections();
      const grace = setTimeout(() => {
        this.log.warn({ inFlight: this.#inFlight }, 'shutdown grace period over; closing remaining connections');
        this.#http.closeAllConnections();
        unix?.closeAllConnections();
        for (const f of this.#frameSessions) f.destroy();
      }, this.config.http.shutdownGraceMs);
      grace.unref();
      // Idle keep-alive sockets that become idle after a response are closed as they go idle.
      const sweep = setInterval(() => {
        this.#http.closeIdleConnections();
        unix?.closeIdleConnections();
      }, 50);
      await closed;
      if (this.#unix) rmSync(this.#unix.path, { force: true });
      clearTimeout(grace);
      clearInterval(sweep);
      await this.#resp?.close(this.config.http.shutdownGraceMs);
      await this.#registry?.close();
      this.#peer?.close();
      this.#peerReads?.close();
      await this.#clients?.close();
      this.metrics.close();
      await this.ts.close();
      // After the hierarchy: background copies that land while it closes are still announced.
      await this.#kvEvents?.close();
      this.log.info('shut down cleanly');
    })();
    return this.#closing;
  }
}
