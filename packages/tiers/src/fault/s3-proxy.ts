/**
 * An HTTP proxy in front of an S3-compatible server that fails requests on purpose, for the object tier's tests
 * and the reliability suite: answers 503 SlowDown (S3's throttling reply), resets the connection, or stalls
 * (accepts the request and never answers). Faults come from a queue (`next`, in order), a standing fault
 * (`always`), or seeded random rates (`rates`), so a run can be replayed. Every request is logged; `heal()` stops
 * the faults and frees stalled sockets.
 */
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export type S3Fault = '503' | 'reset' | 'stall';

export interface S3FaultRates {
  /** Probability of a 503 SlowDown answer. */
  error503: number;
  /** Probability of a connection reset before any answer. */
  reset: number;
  /** Probability of a request left without an answer. */
  stall: number;
}

export interface S3ProxyLogEntry {
  method: string;
  url: string;
  range: string | undefined;
  /** x-amz-content-sha256: the payload hash, or UNSIGNED-PAYLOAD. */
  sha: string | undefined;
  /** The upstream status, or -1 (reset) / -2 (stalled). */
  status: number;
  /** Response body bytes sent to the client. */
  bytes: number;
}

const NO_FAULTS: S3FaultRates = { error503: 0, reset: 0, stall: 0 };

export class S3FaultProxy {
  readonly log: S3ProxyLogEntry[] = [];
  readonly injected = { error503: 0, reset: 0, stall: 0, forwarded: 0 };
  /** Faults for the next requests, in order (before `always` and `rates`). */
  readonly next: S3Fault[] = [];
  /** A fault for every request, until cleared. */
  always: S3Fault | undefined;
  /** Random faults for requests that `next` and `always` leave alone. */
  rates: S3FaultRates = { ...NO_FAULTS };
  port = 0;
  readonly #stalled = new Set<Socket>();
  #server: Server | undefined;
  #seed: number;

  constructor(
    readonly targetPort: number,
    seed = 1,
  ) {
    this.#seed = seed >>> 0 || 1;
  }

  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    this.#server = createServer((req, res) => this.#handle(req, res));
    await new Promise<void>((resolve) => this.#server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.#server.address() as AddressInfo).port;
  }

  heal(): void {
    this.always = undefined;
    this.next.length = 0;
    this.rates = { ...NO_FAULTS };
    for (const s of this.#stalled) s.destroy();
    this.#stalled.clear();
  }

  /** xorshift32 (Marsaglia, 2003): seeded, so the same seed fails the same requests. */
  #random(): number {
    let x = this.#seed;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.#seed = x >>> 0 || 1;
    return this.#seed / 2 ** 32;
  }

  #fault(): S3Fault | undefined {
    const queued = this.always ?? this.next.shift();
    if (queued) return queued;
    const { error503, reset, stall } = this.rates;
    if (error503 + reset + stall === 0) return undefined;
    const roll = this.#random();
    if (roll < error503) return '503';
    if (roll < error503 + reset) return 'reset';
    if (roll < error503 + reset + stall) return 'stall';
    return undefined;
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const fault = this.#fault();
    const entry: S3ProxyLogEntry = { method: req.method ?? '', url: req.url ?? '', range: req.headers.range, sha: req.headers['x-amz-content-sha256'] as string | undefined, status: 0, bytes: 0 };
    this.log.push(entry);
    if (fault === '503') {
      this.injected.error503++;
      req.resume();
      req.on('end', () => {
        entry.status = 503;
        res.writeHead(503, { 'content-type': 'application/xml' });
        res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>injected by the fault proxy</Message></Error>');
      });
      return;
    }
    if (fault === 'reset') {
      this.injected.reset++;
      entry.status = -1;
      req.socket.destroy();
      return;
    }
    if (fault === 'stall') {
      this.injected.stall++;
      entry.status = -2;
      this.#stalled.add(req.socket);
      req.resume();
      return;
    }
    this.injected.forwarded++;
    const up = request({ host: '127.0.0.1', port: this.targetPort, method: req.method, path: req.url, headers: req.headers }, (r) => {
      entry.status = r.statusCode ?? 0;
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.on('data', (c: Buffer) => (entry.bytes += c.length));
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  }

  async close(): Promise<void> {
    this.heal();
    this.#server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
  }
}
