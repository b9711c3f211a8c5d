/**
 * The client's control channel to a daemon: the client protocol's ops (protocol/client.ts), one small JSON request
 * each, with a deadline. Page bytes never travel here.
 *
 * - Over HTTP/1.1 (kept-alive connections), to the daemon's URL: any host.
 * - Same host: after `hello` the channel moves to a framed session on the daemon's Unix socket when it advertises one
 *   (protocol/frames.ts: the same ops and bodies, length-prefixed on one connection, no HTTP parsing per request).
 * Refusals come back as the daemon's typed error (`{ error: { code, message, field? } }`), rethrown as the
 * TierSyncError it threw.
 */
import http from 'node:http';
import net from 'node:net';
import { TierSyncError } from '@tiersync/native';
import { FRAME_MAGIC, FrameReader, clientOps, clientRoute, encodeFrame, errorFromBody, frameReplySchema, type ClientOp, type ClientRequest, type ClientResponse } from '../protocol/index.js';

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
  path: string;
}

export interface ControlOptions {
  /** Daemon HTTP URL, e.g. `http://127.0.0.1:7071`. */
  url: string;
  /** Bearer token: the tenant's token, or the daemon's http.token when it has no tenants. */
  token?: string | undefined;
  /** Deadline of each control request, ms. */
  timeoutMs: number;
}

/** The answer size a control reply may have (bounds the client's memory too). */
const MAX_REPLY_BYTES = 64 << 20;

export class ControlChannel {
  readonly #url: URL;
  readonly #timeoutMs: number;
  readonly #headers: Record<string, string>;
  readonly #token: string | undefined;
  readonly #agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
  readonly #target: { host: string; port: number | string };
  /** The framed session on the daemon's Unix socket, once opened (useSocket). */
  #frames: { socket: net.Socket; path: string } | undefined;
  readonly #pending = new Map<number, Pending>();
  #nextId = 1;
  /** Requests sent, for the benchmark's per-operation accounting. */
  requests = 0;

  constructor(options: ControlOptions) {
    let url: URL;
    try {
      url = new URL(options.url);
    } catch {
      throw new TierSyncError(`url must be an http:// URL of a tiersync daemon, got '${options.url}'`, 'ERR_INVALID_ARGUMENT');
    }
    if (url.protocol !== 'http:') throw new TierSyncError(`url must be an http:// URL of a tiersync daemon, got '${options.url}'`, 'ERR_INVALID_ARGUMENT');
    this.#url = url;
    this.#timeoutMs = options.timeoutMs;
    this.#token = options.token;
    this.#headers = options.token ? { authorization: `Bearer ${options.token}` } : {};
    this.#target = { host: this.host, port: url.port || 80 };
  }

  get host(): string {
    return this.#url.hostname.replace(/^\[|\]$/g, '');
  }

  /** Where requests go now: `unix:PATH` (framed) or the URL's origin (HTTP). */
  get endpoint(): string {
    return this.#frames ? `unix:${this.#frames.path}` : this.#url.origin;
  }

  /**
   * Sends later requests as frames on the daemon's Unix socket, once a session opens there (a socket this process
   * cannot reach, e.g. in another container, leaves the channel on HTTP). Returns whether it moved.
   */
  async useSocket(socketPath: string): Promise<boolean> {
    try {
      await this.#openFrames(socketPath);
      return true;
    } catch {
      return false;
    }
  }

  #openFrames(socketPath: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const socket = net.createConnection({ path: socketPath });
      socket.setNoDelay?.(true);
      let open = false;
      const fail = (e: Error) => {
        if (!open) reject(e);
        this.#dropFrames(socket, e);
      };
      const timer = setTimeout(() => fail(new TierSyncError(`no session on ${socketPath} within ${this.#timeoutMs} ms`, 'ERR_TIMEOUT')), this.#timeoutMs);
      timer.unref();
      const reader = new FrameReader(MAX_REPLY_BYTES, (value) => {
        const reply = frameReplySchema.safeParse(value);
        if (!reply.success) return fail(new TierSyncError(`malformed reply frame from ${socketPath}`, 'ERR_PROTOCOL'));
        const { id, status, body } = reply.data;
        if (id === 0 && !open) {
          clearTimeout(timer);
          if (status >= 400) return fail(errorFromBody(body, status, `session on ${socketPath}`));
          open = true;
          this.#frames = { socket, path: socketPath };
          return resolve();
        }
        const p = this.#pending.get(id);
        if (!p) return;
        this.#pending.delete(id);
        clearTimeout(p.timer);
        if (status >= 400) p.reject(errorFromBody(body, status, p.path));
        else p.resolve(body);
      }, (why) => fail(new TierSyncError(`reply stream from ${socketPath}: ${why}`, 'ERR_PROTOCOL')));
      socket.on('data', (c: Buffer) => reader.push(c));
      socket.on('error', (e) => fail(new TierSyncError(`client socket ${socketPath}: ${e.message}`, 'ERR_IO', { cause: e })));
      socket.on('close', () => fail(new TierSyncError(`the daemon closed the client socket ${socketPath}`, 'ERR_IO')));
      // The magic and the first frame in one write: the daemon tells sessions from HTTP by the first bytes.
      socket.write(Buffer.concat([FRAME_MAGIC, encodeFrame(this.#token ? { token: this.#token } : {})]));
    });
  }

  /** A broken session: its requests fail (callers may retry), later requests go over HTTP. */
  #dropFrames(socket: net.Socket, e: Error): void {
    socket.destroy();
    if (this.#frames?.socket !== socket) return;
    this.#frames = undefined;
    for (const [id, p] of this.#pending) {
      this.#pending.delete(id);
      clearTimeout(p.timer);
      p.reject(e);
    }
  }

  /**
   * Sends one op; resolves with the daemon's answer, typed by the protocol. Rejects with the daemon's TierSyncError
   * (ERR_AUTH, ERR_INVALID_ARGUMENT naming the field, ERR_TIER_FULL...), or ERR_TIMEOUT / ERR_IO / ERR_PROTOCOL.
   */
  call<Op extends ClientOp>(op: Op, body: ClientRequest<Op>): Promise<ClientResponse<Op>> {
    this.requests++;
    const path = clientRoute(op);
    const frames = this.#frames;
    if (frames) {
      return new Promise<ClientResponse<Op>>((resolve, reject) => {
        const id = this.#nextId++;
        const timer = setTimeout(() => {
          this.#pending.delete(id);
          reject(new TierSyncError(`${path} passed its ${this.#timeoutMs} ms deadline`, 'ERR_TIMEOUT'));
        }, this.#timeoutMs);
        timer.unref();
        this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer, path });
        frames.socket.write(encodeFrame(body === undefined ? { id, op } : { id, op, body }));
      });
    }
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise<ClientResponse<Op>>((resolve, reject) => {
      const req = http.request(
        {
          ...this.#target,
          agent: this.#agent,
          method: clientOps[op].method,
          path,
          headers: payload ? { ...this.#headers, 'content-type': 'application/json', 'content-length': payload.length } : this.#headers,
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (c: Buffer) => {
            size += c.length;
            if (size > MAX_REPLY_BYTES) req.destroy(new TierSyncError(`reply to ${path} over ${MAX_REPLY_BYTES} bytes`, 'ERR_PROTOCOL'));
            else chunks.push(c);
          });
          res.on('end', () => {
            let json: unknown;
            try {
              json = JSON.parse(chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks).toString('utf8'));
            } catch {
              reject(new TierSyncError(`daemon answered ${path} with status ${res.statusCode} and no JSON`, 'ERR_PROTOCOL'));
              return;
            }
            const status = res.statusCode ?? 500;
            if (status >= 400) reject(errorFromBody(json, status, path));
            else resolve(json as ClientResponse<Op>);
          });
          res.on('error', reject);
        },
      );
      // A deadline on the whole exchange, not only on socket inactivity.
      const timer = setTimeout(() => req.destroy(new TierSyncError(`${path} passed its ${this.#timeoutMs} ms deadline`, 'ERR_TIMEOUT')), this.#timeoutMs);
      timer.unref();
      req.on('close', () => clearTimeout(timer));
      req.on('error', (e: Error) => reject(e instanceof TierSyncError ? e : new TierSyncError(`cannot reach the daemon at ${this.endpoint}: ${e.message}`, 'ERR_IO', { cause: e })));
      req.end(payload);
    });
  }

  close(): void {
    this.#agent.destroy();
    if (this.#frames) this.#dropFrames(this.#frames.socket, new TierSyncError('client is closed', 'ERR_CLOSED'));
  }
}
