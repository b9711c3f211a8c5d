/**
 * The daemon's side of framed client sessions on its Unix socket (protocol/frames.ts): the same ops through the
 * same ClientApi.serve() as over HTTP, validated by the same schemas, answered with the same statuses and bodies;
 * only HTTP's per-request parsing is gone. The tenant is identified once, by the session's first frame.
 */
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { TierSyncError } from '@tiersync/native';
import { FrameReader, ProtocolError, encodeFrame, frameAuthSchema, frameRequestSchema, type ErrorBody } from '../protocol/index.js';
import type { ClientApi } from './client-api.js';
import type { Tenant } from './tenants.js';

export interface FrameSessionOptions {
  /** Largest request frame accepted (http.maxBodyBytes). */
  maxFrameBytes: number;
  log: Logger;
  /** Counts each answered request (the daemon's request metrics). */
  onAnswered?: (op: string, status: number, seconds: number) => void;
}

function errorBody(e: unknown): { status: number; body: ErrorBody } {
  if (e instanceof ProtocolError) return { status: e.status, body: e.toBody() };
  const code = e instanceof TierSyncError ? e.code : 'ERR_IO';
  const status = code === 'ERR_INVALID_ARGUMENT' ? 400 : code === 'ERR_OUT_OF_RANGE' ? 413 : code === 'ERR_CLOSED' ? 503 : 500;
  return { status, body: { error: { code, message: (e as Error).message } } };
}

/** A framed session on an accepted socket; `first` holds the bytes read after the magic. */
export class FrameSession {
  readonly #socket: Socket;
  readonly #api: ClientApi;
  readonly #o: FrameSessionOptions;
  #tenant: Tenant | undefined;
  #inFlight = 0;
  #closing = false;

  constructor(socket: Socket, first: Buffer, api: ClientApi, options: FrameSessionOptions) {
    this.#socket = socket;
    this.#api = api;
    this.#o = options;
    socket.setNoDelay?.(true);
    const reader = new FrameReader(
      options.maxFrameBytes,
      (v) => this.#frame(v),
      (why) => this.#refuse(why),
    );
    socket.on('data', (c: Buffer) => reader.push(c));
    socket.on('error', () => socket.destroy());
    if (first.length) reader.push(first);
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  /** Stops taking requests; the socket ends once the answers in flight are written. */
  close(): void {
    this.#closing = true;
    if (!this.#inFlight) this.#socket.end();
  }

  destroy(): void {
    this.#socket.destroy();
  }

  #send(value: unknown): void {
    if (!this.#socket.destroyed) this.#socket.write(encodeFrame(value));
  }

  #refuse(why: string): void {
    this.#send({ id: 0, status: 400, body: { error: { code: 'ERR_PROTOCOL', message: why } } });
    this.#socket.end();
  }

  #frame(value: unknown): void {
    if (!this.#tenant) {
      const auth = frameAuthSchema.safeParse(value);
      if (!auth.success) return this.#refuse('the first frame must be { "token": "<bearer token>" }');
      try {
        this.#tenant = this.#api.identify(auth.data.token ? `Bearer ${auth.data.token}` : '');
      } catch (e) {
        const { status, body } = errorBody(e);
        this.#send({ id: 0, status, body });
        this.#socket.end();
        return;
      }
      void this.#answer(0, 'hello', undefined);
      return;
    }
    const req = frameRequestSchema.safeParse(value);
    if (!req.success) return this.#refuse(`a request frame is { "id": 1 or more, "op", "body"? }: ${req.error.issues[0]!.message}`);
    if (this.#closing) return this.#send({ id: req.data.id, status: 503, body: { error: { code: 'ERR_CLOSED', message: 'the daemon is shutting down' } } });
    void this.#answer(req.data.id, req.data.op, req.data.body);
  }

  async #answer(id: number, op: string, body: unknown): Promise<void> {
    const start = process.hrtime.bigint();
    this.#inFlight++;
    let status = 200;
    try {
      const r = await this.#api.serve(op, this.#tenant!, op === 'hello' ? 'GET' : 'POST', () => body);
      status = r.status;
      this.#send({ id, status, body: r.body });
    } catch (e) {
      const answer = errorBody(e);
      status = answer.status;
      if (status >= 500) this.#o.log.error({ err: e, op }, 'client request failed');
      this.#send({ id, ...answer });
    } finally {
      this.#inFlight--;
      this.#o.onAnswered?.(op, status, Number(process.hrtime.bigint() - start) / 1e9);
      if (this.#closing && !this.#inFlight) this.#socket.end();
    }
  }
}
