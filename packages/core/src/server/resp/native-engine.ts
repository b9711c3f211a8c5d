/**
 * The native RESP engine (resp.engine: native): the door's sockets are owned by the addon's door thread
 * (@tiersync/native RespDoorNative, cpp/resp_door.cc, which describes the design and the ordering argument), and
 * each client's commands still run in a RespConnection here, over a socket-like NativeSocket:
 * - bytes the door thread forwards (every command but a landed SET) reach the connection's parser as `data`, so
 *   every command, error, limit and per-client state behaves as with the Node engine;
 * - a `SET key value` whose value landed in granted slots arrives as a parsed command whose value argument is a
 *   LandedValue (a ValueSink whose bytes are already in the first tier's slots with their CRC32Cs): the ordinary
 *   SET command commits it in place and updates the catalog (memory: `+OK` in the same turn; durable: after the
 *   manifest is committed);
 * - replies are written by the addon from this thread (no copy when the socket takes them at once);
 * - after each command's reply is queued the connection tells the door thread (`done`), which lands a SET only
 *   when nothing earlier is unanswered.
 * The slot pool is lent from the first tier's free slots (never capacity: any allocation short of slots takes it
 * back first) and topped up after each batch of landed values.
 */
import { EventEmitter } from 'node:events';
import { RespDoorNative, TierSyncError, type RespNativeEvent } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';
import type { ResolvedRespConfig } from './config.js';
import type { RespConnection, RespSocket } from './connection.js';
import type { SlotAccess } from './slot-access.js';
import { storeFailure } from './slot-writer.js';
import type { StreamHost, ValueSink } from './value-stream.js';

const POOL_MAX_BYTES = 256 * 2 ** 20;

/** One client of the native door, as the socket its RespConnection reads and writes. */
export class NativeSocket extends EventEmitter implements RespSocket {
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** The connection running this client's commands (set by the door once accepted). */
  connection: RespConnection | undefined;
  destroyed = false;
  writableLength = 0;
  #corked = 0;
  #pending: Uint8Array[] = [];
  #callbacks: Array<() => void> = [];
  #paused = false;
  #ended = false;

  constructor(
    private readonly door: RespDoorNative,
    readonly conn: number,
    host: string,
    port: number,
  ) {
    super();
    this.remoteAddress = host;
    this.remotePort = port;
  }

  setNoDelay(): this {
    return this;
  }

  cork(): void {
    this.#corked++;
  }

  uncork(): void {
    if (this.#corked > 0 && --this.#corked === 0) this.#flush();
  }

  write(chunk: Uint8Array | string, cb?: () => void): boolean {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    if (this.destroyed || this.#ended) {
      if (cb) process.nextTick(cb);
      return false;
    }
    this.#pending.push(bytes);
    if (cb) this.#callbacks.push(cb);
    if (!this.#corked) this.#flush();
    return true;
  }

  /** Hands queued reply bytes to the addon; their memory may be reused once this returns (sent or copied). */
  #flush(): void {
    if (this.#pending.length) {
      const parts = this.#pending;
      this.#pending = [];
      this.writableLength = this.destroyed ? 0 : this.door.write(this.conn, parts);
    }
    if (this.#callbacks.length) {
      const cbs = this.#callbacks;
      this.#callbacks = [];
      for (const cb of cbs) cb();
    }
  }

  /** The command handed to JavaScript was answered: its reply is queued (so the next landed SET may go). */
  commandDone(): void {
    this.#flush();
    if (!this.destroyed) this.door.done(this.conn);
  }

  /** Lets (or stops) this client's `SET key value` land natively. */
  setFast(fast: boolean): void {
    if (!this.destroyed) this.door.setFast(this.conn, fast);
  }

  /** When the client last sent bytes (the door thread sees bytes this object never does). */
  lastActive(): number {
    return this.destroyed ? 0 : this.door.lastActive(this.conn);
  }

  end(chunk?: Uint8Array | string): this {
    if (chunk !== undefined) this.write(chunk);
    this.#flush();
    if (!this.#ended && !this.destroyed) this.door.end(this.conn);
    this.#ended = true;
    return this;
  }

  destroy(): this {
    if (!this.destroyed) this.door.destroy(this.conn);
    this.destroyed = true;
    return this;
  }

  pause(): this {
    if (!this.#paused && !this.destroyed) this.door.pause(this.conn, true);
    this.#paused = true;
    return this;
  }

  resume(): this {
    if (this.#paused && !this.destroyed) this.door.pause(this.conn, false);
    this.#paused = false;
    return this;
  }

  isPaused(): boolean {
    return this.#paused;
  }

  /** The door thread closed the socket. */
  closed(): void {
    this.#pending = [];
    const cbs = this.#callbacks;
    this.#callbacks = [];
    for (const cb of cbs) cb();
    this.destroyed = true;
    this.writableLength = 0;
    this.emit('close', false);
  }
}

/**
 * A SET's value that landed in first-tier slots on the door thread, CRC32C included: a ValueSink with every byte
 * present. finishNow() commits the slots as the value's pages (in place); abort() frees them, or deletes the
 * pages once committed.
 */
export class LandedValue implements ValueSink {
  readonly handle = new Uint8Array(0);
  onProgress: (() => void) | undefined;
  readonly complete = true;
  #state: 'open' | 'committed' | 'aborted' = 'open';
  #stored = false;

  constructor(
    private readonly host: StreamHost,
    private readonly slots: SlotAccess,
    readonly length: number,
    readonly pages: readonly PageKey[],
    private readonly offsets: Float64Array,
    private readonly lengths: Uint32Array,
    private readonly crcs: Uint32Array,
  ) {}

  get state(): 'open' | 'committed' | 'aborted' {
    return this.#state;
  }

  window(): never {
    throw new TierSyncError('internal: a landed value takes no more bytes', 'ERR_INVALID_ARGUMENT');
  }

  filled(): never {
    throw new TierSyncError('internal: a landed value takes no more bytes', 'ERR_INVALID_ARGUMENT');
  }

  async wait(): Promise<void> {}

  async finish(): Promise<void> {
    this.finishNow();
  }

  finishNow(): boolean {
    if (this.#state !== 'open') throw new TierSyncError('internal: a value writer finished twice', 'ERR_INVALID_ARGUMENT');
    if (this.#stored) return true;
    try {
      this.slots.commitNow(this.pages, this.offsets, this.lengths, this.crcs);
    } catch (e) {
      this.abort();
      throw storeFailure(e);
    }
    this.#stored = true;
    return true;
  }

  commit(): void {
    this.#state = 'committed';
  }

  abort(): void {
    if (this.#state !== 'open') return;
    this.#state = 'aborted';
    if (this.#stored) this.host.discard(this.pages);
    else this.slots.cancel(this.pages, this.offsets);
  }
}

/** What the engine needs of its door. */
export interface NativeEngineHost extends StreamHost {
  readonly config: ResolvedRespConfig;
  readonly requiresAuth: boolean;
  /** Runs a new client (or refuses it, closing the socket); returns its connection. */
  acceptSocket(socket: NativeSocket): RespConnection | undefined;
  /** The value that landed for `key`, as a writer the SET command commits. */
  landedValue(tenant: string, key: string, length: number, offsets: Float64Array, lengths: Uint32Array, crcs: Uint32Array): ValueSink;
}

export class NativeRespEngine {
  readonly #door: RespDoorNative;
  readonly #sockets = new Map<number, NativeSocket>();
  readonly #slots: SlotAccess;
  readonly #poolTarget: number;
  readonly #slotBytes: number;
  readonly #unhook: () => void;
  #closed = false;

  private constructor(
    private readonly host: NativeEngineHost,
    slots: SlotAccess,
  ) {
    const c = host.config;
    this.#slots = slots;
    this.#slotBytes = slots.slotBytes!;
    const capacitySlots = slots.capacitySlots ?? 0;
    this.#poolTarget = Math.max(1, Math.min(Math.floor(POOL_MAX_BYTES / this.#slotBytes), Math.floor(capacitySlots / 8)));
    this.#door = new RespDoorNative(
      slots.arena,
      {
        host: c.host,
        port: c.port ?? 0,
        pageBytes: this.#slotBytes,
        maxBulkBytes: c.maxBulkBytes,
        maxArrayLength: c.maxArrayLength,
        maxInlineBytes: c.maxInlineBytes,
        maxKeyBytes: c.maxKeyBytes,
        maxPendingBytes: c.maxPendingBytes,
        requestTimeoutMs: c.requestTimeoutMs,
        landBeforeAuth: !host.requiresAuth,
      },
      (events) => this.#onEvents(events),
    );
    // Any allocation of the tier short of slots takes the pool back first.
    this.#unhook = slots.onShortage!(() => slots.giveBack!(this.#door.takePool()));
    this.#topUp();
  }

  /**
   * Starts the door thread on config.host:config.port, or returns undefined when the first tier does not lend
   * slots (not a host tier): the Node engine serves then.
   * @throws TierSyncError ERR_UNAVAILABLE (port taken), ERR_IO
   */
  static start(host: NativeEngineHost, slots: SlotAccess | undefined): NativeRespEngine | undefined {
    if (!slots?.lend || !slots.giveBack || !slots.onShortage || !slots.slotBytes) return undefined;
    return new NativeRespEngine(host, slots);
  }

  get port(): number {
    return this.#door.port;
  }

  stats(): { pooledSlots: number; landedSets: number } {
    return this.#door.stats();
  }

  #topUp(): void {
    if (this.#closed) return;
    const have = this.#door.stats().pooledSlots;
    if (have >= this.#poolTarget / 2) return;
    const got = this.#slots.lend!(this.#poolTarget - have);
    if (got.length) this.#door.grant(got, this.#slotBytes);
  }

  #onEvents(events: RespNativeEvent[]): void {
    let landed = false;
    for (const e of events) {
      switch (e.kind) {
        case 'accept': {
          const socket = new NativeSocket(this.#door, e.conn, e.host, e.port);
          this.#sockets.set(e.conn, socket);
          socket.connection = this.host.acceptSocket(socket);
          break;
        }
        case 'data':
          this.#sockets.get(e.conn)?.emit('data', e.bytes);
          break;
        case 'end':
          this.#sockets.get(e.conn)?.emit('end');
          break;
        case 'drain': {
          const s = this.#sockets.get(e.conn);
          if (s) {
            s.writableLength = 0;
            s.emit('drain');
          }
          break;
        }
        case 'close': {
          const s = this.#sockets.get(e.conn);
          this.#sockets.delete(e.conn);
          s?.closed();
          break;
        }
        case 'set': {
          landed = true;
          this.#landed(e);
          break;
        }
      }
    }
    if (landed) this.#topUp();
  }

  #landed(e: Extract<RespNativeEvent, { kind: 'set' }>): void {
    const conn = this.#sockets.get(e.conn)?.connection;
    if (!conn || conn.socket.destroyed || !conn.tenant) {
      this.#slots.giveBack!(e.offsets);
      return;
    }
    const key = e.key.toString('latin1');
    const value = this.host.landedValue(conn.tenant, key, e.length, e.offsets, e.lengths, e.crcs);
    conn.inject([e.name, e.key, value.handle], value);
  }

  /** Stops the door thread and closes every client; the pool's slots go back to the tier. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#unhook();
    this.#door.close();
    this.#slots.giveBack!(this.#door.takePool());
    for (const s of [...this.#sockets.values()]) s.closed();
    this.#sockets.clear();
  }
}
