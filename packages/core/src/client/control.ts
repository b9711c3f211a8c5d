/**
 * The client's control channel to a daemon: small JSON requests on the HTTP control plane over one kept-alive
 * connection pool (node:http Agent), each with a deadline. Page bytes never travel here.
 */
import http from 'node:http';
import { TierSyncError, type ErrorCode } from '@tiersync/native';

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
  readonly #token: string | undefined;
  readonly #timeoutMs: number;
  readonly #agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
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
    this.#token = options.token;
    this.#timeoutMs = options.timeoutMs;
  }

  get host(): string {
    return this.#url.hostname.replace(/^\[|\]$/g, '');
  }

  /** Sends one request; rejects with the daemon's TierSyncError code (ERR_AUTH, ERR_TIER_FULL...) or ERR_TIMEOUT / ERR_IO. */
  request<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
    this.requests++;
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise<T>((resolve, reject) => {
      const req = http.request(
        {
          agent: this.#agent,
          host: this.host,
          port: this.#url.port || 80,
          method,
          path,
          headers: {
            ...(payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {}),
            ...(this.#token ? { authorization: `Bearer ${this.#token}` } : {}),
          },
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
            let json: { error?: string; code?: ErrorCode } & Record<string, unknown>;
            try {
              json = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            } catch {
              reject(new TierSyncError(`daemon answered ${path} with status ${res.statusCode} and no JSON`, 'ERR_PROTOCOL'));
              return;
            }
            if ((res.statusCode ?? 500) >= 400) {
              const code: ErrorCode = json.code ?? (res.statusCode === 401 ? 'ERR_AUTH' : 'ERR_IO');
              reject(new TierSyncError(`daemon refused ${path}: ${json.error ?? res.statusCode}`, code));
            } else resolve(json as T);
          });
          res.on('error', reject);
        },
      );
      // A deadline on the whole exchange, not only on socket inactivity.
      const timer = setTimeout(() => req.destroy(new TierSyncError(`${path} passed its ${this.#timeoutMs} ms deadline`, 'ERR_TIMEOUT')), this.#timeoutMs);
      timer.unref();
      req.on('close', () => clearTimeout(timer));
      req.on('error', (e: Error) => reject(e instanceof TierSyncError ? e : new TierSyncError(`cannot reach the daemon at ${this.#url.origin}: ${e.message}`, 'ERR_IO', { cause: e })));
      req.end(payload);
    });
  }

  close(): void {
    this.#agent.destroy();
  }
}
