/**
 * An HTTP proxy in front of an S3-compatible server that fails requests at random: answers 503 SlowDown (S3's
 * throttling reply), resets the connection, or stalls (accepts the request and never answers). Seeded, so a run
 * can be replayed; `heal()` stops the faults and frees stalled sockets.
 */
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface S3FaultRates {
  /** Probability of a 503 SlowDown answer. */
  error503: number;
  /** Probability of a connection reset before any answer. */
  reset: number;
  /** Probability of a request left without an answer. */
  stall: number;
}

export class S3FaultProxy {
  readonly injected = { error503: 0, reset: 0, stall: 0, forwarded: 0 };
  rates: S3FaultRates = { error503: 0, reset: 0, stall: 0 };
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
    this.rates = { error503: 0, reset: 0, stall: 0 };
    for (const s of this.#stalled) s.destroy();
    this.#stalled.clear();
  }

  #random(): number {
    let x = this.#seed;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.#seed = x >>> 0 || 1;
    return this.#seed / 2 ** 32;
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const roll = this.#random();
    const { error503, reset, stall } = this.rates;
    if (roll < error503) {
      this.injected.error503++;
      req.resume();
      req.on('end', () => {
        res.writeHead(503, { 'content-type': 'application/xml' });
        res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>injected by the reliability proxy</Message></Error>');
      });
      return;
    }
    if (roll < error503 + reset) {
      this.injected.reset++;
      req.socket.destroy();
      return;
    }
    if (roll < error503 + reset + stall) {
      this.injected.stall++;
      this.#stalled.add(req.socket);
      req.resume();
      return;
    }
    this.injected.forwarded++;
    const up = request({ host: '127.0.0.1', port: this.targetPort, method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
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
