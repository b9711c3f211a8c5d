/**
 * One RESP client: reads its socket into the parser, runs its commands one at a time in order (pipelining: the
 * next command is parsed while replies of earlier ones are still queued), writes replies.
 *
 * Flow control, so a client cannot grow memory: its socket is paused while the parser holds more than half of
 * maxPendingBytes of unparsed input, and while it runs a command that waits (for the hierarchy, for staging
 * room); replies queued beyond maxOutputBytes make it wait for the client to read, up to requestTimeoutMs.
 * Values of SET and MSET stream into the hierarchy as they arrive (value-stream.ts): the client's windows in
 * flight hold at most two windows of staging (its lane).
 */
import { TierSyncError } from '@tiersync/native';
import type { DoorApi } from './door-api.js';
import { encodeError, type RespProtocol } from './encoder.js';
import { RESP_WAIT, RespParser, latin1, type BulkSink, type RespLimits } from './parser.js';
import { StagingLane, type ReplyOut, type ValueSink } from './value-stream.js';

/** What an unauthenticated client may send (as Redis 7 bounds it): small, few arguments. */
const UNAUTHENTICATED_LIMITS = { maxBulkBytes: 16 * 1024, maxArrayLength: 10 };
const MAX_AUTH_FAILURES = 10;

/**
 * What a connection uses of its socket: a net.Socket (Node engine) or the native engine's NativeSocket. The
 * optional hooks are the native engine's: `commandDone` after each command's reply is queued, `setFast` once the
 * client may SET without JavaScript receiving the value, `lastActive` for bytes this side never saw.
 */
export interface RespSocket {
  readonly destroyed: boolean;
  readonly writableLength: number;
  readonly remoteAddress?: string | undefined;
  readonly remotePort?: number | undefined;
  setNoDelay(noDelay?: boolean): unknown;
  on(event: 'data', listener: (chunk: Buffer) => void): unknown;
  on(event: 'error' | 'end' | 'close' | 'drain', listener: () => void): unknown;
  once(event: 'close' | 'drain', listener: () => void): unknown;
  off(event: 'drain', listener: () => void): unknown;
  cork(): void;
  uncork(): void;
  write(chunk: Uint8Array | string, cb?: () => void): boolean;
  end(chunk?: Uint8Array | string): unknown;
  destroy(): unknown;
  pause(): unknown;
  resume(): unknown;
  isPaused(): boolean;
  commandDone?(): void;
  /** True while writes are held and leave together anyway (the native engine's batch of events): no cork needed. */
  readonly batching?: boolean;
  /** `tenant`: the client's, whose values the native door may answer GETs of. */
  setFast?(fast: boolean, tenant?: string): void;
  lastActive?(): number;
}

/** Runs one command of a connection (commands.ts's executeCommand; handed in by the door, so no import cycle). */
export type CommandExecutor = (c: RespConnection, args: Uint8Array[]) => void | Promise<void>;

export class RespConnection implements ReplyOut {
  readonly id: number;
  readonly door: DoorApi;
  readonly #execute: CommandExecutor;
  readonly socket: RespSocket;
  readonly parser: RespParser;
  /** The tenant this client is authenticated as; undefined until AUTH when the door requires it. */
  tenant: string | undefined;
  name = '';
  /** RESP version of the replies: 2 until HELLO 3. */
  protocol: RespProtocol = 2;
  authFailures = 0;
  /** When the command now arriving began arriving (0: none), for the request deadline. */
  midSince = 0;
  lastActive = Date.now();
  readonly #limits: Partial<RespLimits>;
  /** Values of the command being parsed or run, by the handle the parser puts in its arguments. */
  readonly #writers = new Map<Uint8Array, ValueSink>();
  /** The writer the parser is filling (the one to wait for when it says RESP_WAIT). */
  #filling: ValueSink | undefined;
  readonly #lane: StagingLane;
  /** Commands parsed elsewhere (the native engine's landed SETs), run before anything the parser holds. */
  readonly #injected: Uint8Array[][] = [];
  #running = false;
  #closing = false;
  #peerEnded = false;
  #disposed = false;

  constructor(door: DoorApi, socket: RespSocket, id: number, execute: CommandExecutor) {
    this.id = id;
    this.#execute = execute;
    this.door = door;
    this.socket = socket;
    const c = door.config;
    this.#limits = { maxBulkBytes: c.maxBulkBytes, maxArrayLength: c.maxArrayLength, maxInlineBytes: c.maxInlineBytes, maxPendingBytes: c.maxPendingBytes };
    this.tenant = door.requiresAuth ? undefined : 'default';
    this.#lane = new StagingLane(2 * door.windowBytes);
    this.parser = new RespParser({
      mode: 'request',
      limits: this.tenant ? this.#limits : { ...this.#limits, ...UNAUTHENTICATED_LIMITS },
      bulkTarget: (length, index, args) => this.#bulkTarget(length, index, args),
    });
    socket.setNoDelay(true);
    if (this.tenant) socket.setFast?.(true, this.tenant);
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('error', () => undefined);
    // The client finished sending (e.g. a pipe into redis-cli, or nc): run what it sent, then close.
    socket.on('end', () => {
      this.#peerEnded = true;
      void this.#pump();
    });
  }

  /** True while a command runs. */
  get busy(): boolean {
    return this.#running;
  }

  /** Authenticated as `tenant`: lift the pre-authentication bounds. */
  authenticated(tenant: string): void {
    this.tenant = tenant;
    this.parser.setLimits(this.#limits);
    this.socket.setFast?.(true, tenant);
  }

  /** When the client last sent bytes. */
  get activeAt(): number {
    return Math.max(this.lastActive, this.socket.lastActive?.() ?? 0);
  }

  /**
   * Runs a command parsed elsewhere (the native engine's SET whose value landed in slots: `value` is its value
   * argument's writer), before any bytes the parser holds (the native engine sends one only when every earlier
   * command of this client was answered).
   */
  inject(args: Uint8Array[], value: ValueSink): void {
    if (this.#disposed || this.#closing) {
      value.abort();
      this.socket.commandDone?.();
      return;
    }
    this.#writers.set(value.handle, value);
    this.#injected.push(args);
    void this.#pump();
  }

  /**
   * Values of SET and MSET stream into the hierarchy through staging windows as they arrive (one copy from the
   * socket buffer, then the engine moves them into the hierarchy); everything else (command names, keys,
   * options) the parser keeps in small buffers.
   */
  #bulkTarget(length: number, index: number, args: readonly Uint8Array[]): BulkSink | undefined {
    if (!this.tenant || index < 2) return undefined;
    const cmd = args[0]!;
    const isSet = cmd.length === 3 && (cmd[0]! | 0x20) === 0x73 && (cmd[1]! | 0x20) === 0x65 && (cmd[2]! | 0x20) === 0x74;
    const isMset = cmd.length === 4 && (cmd[0]! | 0x20) === 0x6d && (cmd[1]! | 0x20) === 0x73 && (cmd[2]! | 0x20) === 0x65 && (cmd[3]! | 0x20) === 0x74;
    if (!((isSet && index === 2) || (isMset && index % 2 === 0))) return undefined;
    // A key the command will refuse: the writer only drains the bytes.
    const keyBytes = args[index - 1]!;
    const key = keyBytes.length <= this.door.config.maxKeyBytes ? latin1(keyBytes) : undefined;
    const w = this.door.beginValue(this.tenant, key, length, this.#lane);
    w.onProgress = () => {
      this.midSince = Date.now();
    };
    this.#writers.set(w.handle, w);
    this.#filling = w;
    return w;
  }

  /** Writers of injected commands not run yet. */
  #injectedWriters(): ValueSink[] {
    const out: ValueSink[] = [];
    for (const args of this.#injected) for (const a of args) {
      const w = this.#writers.get(a);
      if (w) out.push(w);
    }
    return out;
  }

  /** The writer that received argument `bytes`, if the parser streamed it into one. */
  writerOf(bytes: Uint8Array): ValueSink | undefined {
    return this.#writers.get(bytes);
  }

  /** Drops the values of the command that were not committed (refused command, protocol error, client gone). */
  #releaseStaged(): void {
    for (const w of this.#writers.values()) w.abort();
    this.#writers.clear();
    this.#filling = undefined;
  }

  #onData(chunk: Buffer): void {
    this.lastActive = Date.now();
    try {
      this.parser.push(chunk);
    } catch (e) {
      this.#protocolFailure(e);
      return;
    }
    if (!this.midSince) this.midSince = Date.now();
    if (this.parser.pendingBytes >= this.door.config.maxPendingBytes / 2) this.socket.pause();
    void this.#pump();
  }

  /** Queues reply bytes; `onSent` runs once the kernel has them (then their memory may be reused). */
  send(parts: readonly Uint8Array[], onSent?: () => void): void {
    if (this.socket.destroyed) {
      onSent?.();
      return;
    }
    if (this.socket.batching) {
      for (let i = 0; i < parts.length; i++) this.socket.write(parts[i]!, i === parts.length - 1 ? onSent : undefined);
      return;
    }
    this.socket.cork();
    for (let i = 0; i < parts.length; i++) this.socket.write(parts[i]!, i === parts.length - 1 ? onSent : undefined);
    // Replies written in the same tick leave in one writev.
    process.nextTick(() => this.socket.uncork());
  }

  /** Runs every complete command in order; returns when the parser needs more input. */
  async #pump(): Promise<void> {
    if (this.#running || this.#disposed) return;
    this.#running = true;
    try {
      while (!this.#disposed) {
        let args: Uint8Array[] | undefined | typeof RESP_WAIT = this.#injected.shift();
        try {
          args ??= this.parser.nextCommand();
        } catch (e) {
          this.#protocolFailure(e);
          return;
        }
        if (args === RESP_WAIT) {
          try {
            if (!this.#filling) throw new TierSyncError('internal: the parser waits with no value being received', 'ERR_INVALID_ARGUMENT');
            await this.#filling.wait(this.door.config.requestTimeoutMs);
          } catch (e) {
            this.#protocolFailure(e);
            return;
          }
          continue;
        }
        if (args === undefined) {
          if (this.#peerEnded) this.#closing = true;
          break;
        }
        this.midSince = this.parser.pendingBytes > 0 || this.parser.midValue ? Date.now() : 0;
        this.#filling = undefined;
        try {
          // A command answered in this turn returns nothing: the next one runs without a microtask hop.
          const pending = this.#execute(this, args);
          if (pending) await pending;
        } finally {
          this.#releaseStaged();
          this.socket.commandDone?.();
        }
        if (this.#closing) break;
        if (this.socket.writableLength > this.door.config.maxOutputBytes && !(await this.#drained())) return;
      }
    } finally {
      this.#running = false;
      if (this.#disposed || this.#closing) {
        this.#releaseStaged();
        // Landed values no command will run: their slots go back.
        for (const w of this.#injectedWriters()) w.abort();
        this.#injected.length = 0;
      }
    }
    if (this.#closing) {
      this.socket.end();
      return;
    }
    if (this.socket.isPaused() && this.parser.pendingBytes < this.door.config.maxPendingBytes / 2) this.socket.resume();
  }

  /** Waits for queued replies to drain; closes the client (false) when it does not read them in time. */
  async #drained(): Promise<boolean> {
    const ok = await new Promise<boolean>((resolve) => {
      const t = setTimeout(() => {
        this.socket.off('drain', done);
        resolve(false);
      }, this.door.config.requestTimeoutMs);
      const done = () => {
        clearTimeout(t);
        resolve(true);
      };
      this.socket.once('drain', done);
    });
    if (!ok) this.abort(`client did not read ${this.socket.writableLength} bytes of replies within ${this.door.config.requestTimeoutMs} ms`);
    return ok;
  }

  /** Replies with the error and closes: after a protocol error the stream cannot be followed any more. */
  #protocolFailure(e: unknown): void {
    this.door.counters.protocolErrors++;
    const message = e instanceof TierSyncError && e.code === 'ERR_PROTOCOL' ? e.message : `Protocol error: ${(e as Error).message}`;
    this.door.log?.debug({ client: this.id, err: message }, 'RESP client closed');
    this.#closing = true;
    if (!this.socket.destroyed) this.socket.end(encodeError(`ERR ${message}`));
    // A running command may still be using its staged arguments: the pump releases them when it returns.
    if (!this.#running) this.#releaseStaged();
  }

  /** Asks to close after the command now running (QUIT, shutdown). */
  shutdown(): void {
    this.#closing = true;
    if (!this.#running) this.socket.end();
  }

  /** Closes at once without another byte: a reply was cut short, so nothing after it could be parsed. */
  cut(reason: string): void {
    this.door.log?.debug({ client: this.id, reason }, 'RESP client closed mid-reply');
    this.#closing = true;
    this.socket.destroy();
  }

  /** Closes at once, saying why. */
  abort(reason: string): void {
    this.door.log?.debug({ client: this.id, reason }, 'RESP client aborted');
    this.#closing = true;
    if (!this.socket.destroyed) this.socket.end(encodeError(`ERR ${reason}`));
    setTimeout(() => this.socket.destroy(), 1000).unref();
  }

  /** The socket closed: release what the client held. */
  dispose(): void {
    this.#disposed = true;
    if (!this.#running) this.#releaseStaged();
  }

  /** A key argument as the catalog's string (one char per byte), checked against maxKeyBytes. */
  key(bytes: Uint8Array): string {
    if (bytes.length > this.door.config.maxKeyBytes) throw new TierSyncError(`ERR key of ${bytes.length} bytes is longer than the limit of ${this.door.config.maxKeyBytes}`, 'ERR_OUT_OF_RANGE');
    return latin1(bytes);
  }
}
