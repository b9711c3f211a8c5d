/**
 * The client's control channel to a daemon: the client protocol's ops (protocol/client.ts), one small JSON request
 * each, over kept-alive HTTP/1.1 connections, each with a deadline. Page bytes never travel here.
 *
 * Same host: after `hello` the channel moves to the daemon's Unix socket when it advertises one (same routes and
 * bodies; no TCP stack on the round trip). Refusals come back as the daemon's typed error (`{ error: { code,
 * message } }`), rethrown as the TierSyncError it threw.
 */
import http from 'node:http';
import { TierSyncError } from '@tiersync/native';
import { clientOps, clientRoute, errorFromBody, type ClientOp, type ClientRequest, type ClientResponse } from '../protocol/index.js';

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
  #agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
  #target: { host: string; port: number | string } | { socketPath: string };
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
    this.#headers = options.token ? { authorization: `Bearer ${options.token}` } : {};
    this.#target = { host: this.host, port: url.port || 80 };
  }

  get host(): string {
    return this.#url.hostname.replace(/^\[|\]$/g, '');
  }

  /** Where requests go now: `unix:PATH` or the URL's origin. */
  get endpoint(): string {
    return 'socketPath' in this.#target ? `unix:${this.#target.socketPath}` : this.#url.origin;
  }

  /**
   * Sends later requests over the daemon's Unix socket, after one round trip over it succeeds (a socket this
   * process cannot reach, e.g. in another container, leaves the channel on TCP). Returns whether it moved.
   */
  async useSocket(socketPath: string): Promise<boolean> {
    const before = this.#target;
    const agent = this.#agent;
    this.#target = { socketPath };
    this.#agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
    try {
      await this.call('hello', undefined);
      agent.destroy();
      return true;
    } catch {
      this.#agent.destroy();
      this.#target = before;
      this.#agent = agent;
      return false;
    }
  }

  /**
   * Sends one op; resolves with the daemon's answer, typed by the protocol. Rejects with the daemon's TierSyncError
   * (ERR_AUTH, ERR_INVALID_ARGUMENT naming the field, ERR_TIER_FULL...), or ERR_TIMEOUT / ERR_IO / ERR_PROTOCOL.
   */
  call<Op extends ClientOp>(op: Op, body: ClientRequest<Op>): Promise<ClientResponse<Op>> {
    this.requests++;
    const path = clientRoute(op);
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
  }
}
