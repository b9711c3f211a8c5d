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
 *
 * GETs (resp.nativeGets): the door thread answers `GET key` itself for values this engine mirrors into it: every
 * catalog entry without a TTL whose pages are all in the first tier's slots when it is installed (whatever wrote
 * it: a landed SET, a SET or MSET through JavaScript, a durable commit, a key recovered at start) is put in the
 * mirror then (mirrorPut), with each page's slot and that slot's version as the tier's table says in that turn (the
 * tier bumps a slot's version on every free); any death of the entry (SET over it, DEL, FLUSHDB, eviction,
 * shutdown) drops it. An entry whose pages left the first tier and were read back into it is put again when
 * JavaScript next reads it from the slots (remirror). Changes made while a batch of events runs
 * go to the addon in the batch's flush, before its replies (so a client that read a SET's `+OK` or a DEL's reply
 * finds the new state); outside a batch they go at once, before the reply that follows them. The door thread copies
 * and checks each page (version before and after, CRC32C) and forwards the GET here when anything changed.
 *
 * Reads for eviction: the door thread notes each mirror entry it answered a GET of (once per drain window, by the
 * id given with its put; bounded, see resp_mirror.cc), and this engine drains that record every SERVED_DRAIN_MS:
 * each id still naming a live entry gives its pages to the door's access batch (server/access-batch.ts), which counts them
 * for the first tier's eviction policy. An entry dropped or replaced since is skipped.
 */
import { EventEmitter } from 'node:events';
import { RespDoorNative, RespMirrorOps, TierSyncError, type RespNativeEvent, type RespNativeStats } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';
import type { ResolvedRespConfig } from './config.js';
import type { RespConnection, RespSocket } from './connection.js';
import type { ValueEntry } from './keyspace.js';
import type { SlotAccess } from './slot-access.js';
import { storeFailure } from './slot-writer.js';
import type { StreamHost, ValueSink } from './value-stream.js';

const POOL_MAX_BYTES = 256 * 2 ** 20;

/** How often the door thread's record of the mirror entries it served is drained, ms (one addon call each). */
export const SERVED_DRAIN_MS = 200;

/**
 * Replies and answered commands held while the engine runs one batch of door events, handed to the addon in one
 * call when the batch's synchronous work is over (RespDoorNative.flush) instead of two calls per command.
 */
export class ReplyBatch {
  /** True while the engine runs a batch of events. */
  active = false;
  /** Sockets holding replies or answered commands for the batch's flush. */
  sockets: NativeSocket[] = [];
  /** Mirror changes made while the batch runs: applied by the addon before the batch's replies are written. */
  readonly mirror = new RespMirrorOps();

  constructor(private readonly door: RespDoorNative) {}

  /** Applies the mirror changes held so far (before a reply leaves outside the batch's flush, e.g. end()). */
  applyMirror(): void {
    this.door.mirror(this.mirror);
  }

  /** Hands every held reply and answered command to the addon, in the order the sockets first held one. */
  flush(): void {
    this.active = false;
    if (!this.sockets.length) {
      this.applyMirror();
      return;
    }
    const sockets = this.sockets;
    this.sockets = [];
    const live: NativeSocket[] = [];
    const conns: number[] = [];
    const counts: number[] = [];
    const dones: number[] = [];
    const parts: Uint8Array[] = [];
    const callbacks: Array<() => void> = [];
    for (const s of sockets) {
      const held = s.takeHeld();
      for (const cb of held.callbacks) callbacks.push(cb);
      if (s.destroyed) continue;
      live.push(s);
      conns.push(s.conn);
      counts.push(held.parts.length);
      dones.push(held.dones);
      for (const p of held.parts) parts.push(p);
    }
    if (live.length) {
      const left = this.door.flush(Float64Array.from(conns), Uint32Array.from(counts), parts, Uint32Array.from(dones), this.mirror);
      live.forEach((s, i) => {
        if (counts[i]) s.writableLength = left[i]!;
      });
    } else this.applyMirror();
    // Their bytes are sent or copied now: the memory may be reused.
    for (const cb of callbacks) cb();
  }
}

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
  /** Commands answered while a batch is active, for the batch's flush. */
  #dones = 0;
  /** In the batch's list of sockets. */
  #held = false;

  constructor(
    private readonly door: RespDoorNative,
    readonly conn: number,
    host: string,
    port: number,
    private readonly batch?: ReplyBatch,
    /** The mirror's id of a tenant (native GETs); none: GETs stay in JavaScript. */
    private readonly tenantIds?: (tenant: string) => number,
  ) {
    super();
    this.remoteAddress = host;
    this.remotePort = port;
  }

  setNoDelay(): this {
    return this;
  }

  get batching(): boolean {
    return !!this.batch?.active && !this.destroyed && !this.#corked;
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

  /**
   * Hands queued reply bytes to the addon; their memory may be reused once this returns (sent or copied). While
   * the engine runs a batch of events they are held for the batch's flush instead (`now`: not, e.g. before end()).
   */
  #flush(now = false): void {
    if (!now && this.batch?.active && !this.destroyed) {
      if ((this.#pending.length || this.#dones) && !this.#held) {
        this.#held = true;
        this.batch.sockets.push(this);
      }
      return;
    }
    if (this.#dones) {
      // Answered during a batch, flushed out of it (end()): replies first, then the door may land the next SET.
      const dones = this.#dones;
      this.#dones = 0;
      this.#flushParts();
      if (!this.destroyed) this.door.flush(Float64Array.of(this.conn), Uint32Array.of(0), [], Uint32Array.of(dones));
      return;
    }
    this.#flushParts();
  }

  /** What the socket held for a batch's flush (and no longer holds). */
  takeHeld(): { parts: Uint8Array[]; dones: number; callbacks: Array<() => void> } {
    const held = { parts: this.#pending, dones: this.#dones, callbacks: this.#callbacks };
    this.#pending = [];
    this.#callbacks = [];
    this.#dones = 0;
    this.#held = false;
    return held;
  }

  #flushParts(): void {
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
    if (this.batch?.active && !this.destroyed) {
      this.#dones++;
      this.#flush();
      return;
    }
    this.#flush();
    if (!this.destroyed) this.door.done(this.conn);
  }

  /** Lets (or stops) this client's `SET key value` land natively, and its GETs be answered from `tenant`'s mirror. */
  setFast(fast: boolean, tenant?: string): void {
    if (!this.destroyed) this.door.setFast(this.conn, fast, fast && tenant !== undefined && this.tenantIds ? this.tenantIds(tenant) : 0);
  }

  /** When the client last sent bytes (the door thread sees bytes this object never does). */
  lastActive(): number {
    return this.destroyed ? 0 : this.door.lastActive(this.conn);
  }

  end(chunk?: Uint8Array | string): this {
    if (chunk !== undefined) this.write(chunk);
    // Written now, out of the batch's flush: the mirror changes its commands made go first.
    if (this.batch?.active) this.batch.applyMirror();
    this.#flush(true);
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
    this.#dones = 0;
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
    readonly offsets: Float64Array,
    readonly lengths: Uint32Array,
    readonly crcs: Uint32Array,
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
  landedValue(tenant: string, key: string, length: number, offsets: Float64Array, lengths: Uint32Array, crcs: Uint32Array, pages?: PageKey[]): ValueSink;
  /** Page keys of a new generation for each landed value of a batch (one native call). */
  landedPageKeys(values: ReadonlyArray<{ tenant: string; key: Uint8Array; count: number }>): PageKey[][];
  /** Pages the door thread read from the first tier's slots for GETs (for the tier's eviction policy). */
  slotsRead(pages: readonly PageKey[]): void;
}

export class NativeRespEngine {
  readonly #door: RespDoorNative;
  readonly #sockets = new Map<number, NativeSocket>();
  readonly #slots: SlotAccess;
  readonly #poolTarget: number;
  readonly #slotBytes: number;
  readonly #unhook: () => void;
  readonly #batch: ReplyBatch;
  /** Native GETs are on: the tier keeps slot versions and resp.nativeGets is set. */
  readonly #mirrorOn: boolean;
  readonly #tenantIds = new Map<string, number>();
  /** Entries in the door's mirror by the id they were put with (what the door thread reports GETs of). */
  readonly #mirrored = new Map<number, ValueEntry>();
  #nextMirrorId = 0;
  readonly #drainTimer: NodeJS.Timeout | undefined;
  readonly #idOf = (tenant: string): number => {
    let id = this.#tenantIds.get(tenant);
    if (id === undefined) {
      id = this.#tenantIds.size + 1;
      this.#tenantIds.set(tenant, id);
    }
    return id;
  };
  #closed = false;

  private constructor(
    private readonly host: NativeEngineHost,
    slots: SlotAccess,
  ) {
    const c = host.config;
    this.#slots = slots;
    this.#slotBytes = slots.slotBytes!;
    const capacitySlots = slots.capacitySlots ?? 0;
    const versions = c.nativeGets && slots.locate ? slots.slotVersions : undefined;
    this.#mirrorOn = versions !== undefined;
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
        // Refused on the door thread, before any GET of the client could be answered there.
        maxClients: c.maxClients,
        landBeforeAuth: !host.requiresAuth,
        // Without AUTH every client is the default tenant from its first command (RespConnection says the same).
        ...(host.requiresAuth || !versions ? {} : { acceptTenant: this.#idOf('default') }),
        maxOutputBytes: c.maxOutputBytes,
        ...(versions ? { slotVersions: versions } : {}),
      },
      (events) => this.#onEvents(events),
    );
    this.#batch = new ReplyBatch(this.#door);
    // Any allocation of the tier short of slots takes the pool back first.
    this.#unhook = slots.onShortage!(() => slots.giveBack!(this.#door.takePool()));
    this.#topUp();
    if (this.#mirrorOn) this.#drainTimer = setInterval(() => this.drainServed(), SERVED_DRAIN_MS).unref();
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

  stats(): RespNativeStats {
    return this.#door.stats();
  }

  /** Where mirror changes go now: the running batch's (applied before its replies), or straight to the addon. */
  #mirrorOps(): { ops: RespMirrorOps; now: boolean } {
    return this.#batch.active ? { ops: this.#batch.mirror, now: false } : { ops: new RespMirrorOps(), now: true };
  }

  /**
   * Lets the door thread answer GETs of `entry`, just installed as `key`'s value, when it has no TTL and every page
   * is in the first tier's slots now, whatever wrote it (a landed SET, a SET through JavaScript, MSET, a durable
   * commit, a recovered key). Where each page is and its slot's version are read from the tier in this very turn (a
   * lookup, no pin): a slot freed at any later time has its version bumped first, and the door thread then forwards
   * the GET. Nothing remembered across an await is trusted (a durable SET's pages may have moved while its manifest
   * was written). Returns whether it was mirrored; a value with a page elsewhere is not (its GETs stay in JavaScript),
   * nor one longer than resp.maxOutputBytes: the door thread copies a whole value into each reply and queues it
   * without a deadline, while JavaScript sends a long value from its pinned slots and closes a client that does not
   * read it.
   */
  mirrorPut(tenant: string, key: string, entry: ValueEntry): boolean {
    if (!this.#mirrorOn || this.#closed || entry.dead || entry.expiresAt || !entry.pages.length) return false;
    if (entry.length > this.host.config.maxOutputBytes) return false;
    const where = this.#slots.locate!(entry.pages);
    const n = where.length;
    const offsets = new Float64Array(n);
    const lengths = new Uint32Array(n);
    const crcs = new Uint32Array(n);
    const at = new Uint32Array(n);
    const seen = new Uint32Array(n);
    const versions = this.#slots.slotVersions!;
    let total = 0;
    for (let i = 0; i < n; i++) {
      const w = where[i];
      if (!w) return false;
      offsets[i] = w.offset;
      lengths[i] = w.length;
      crcs[i] = w.crc32c;
      at[i] = w.slot;
      seen[i] = versions[w.slot]!;
      total += w.length;
    }
    // Pages that do not add up to the value (never expected): not answered from here.
    if (total !== entry.length) return false;
    if (entry.mirror) this.#mirrored.delete(entry.mirror.id);
    const tenantId = this.#idOf(tenant);
    const bytes = Buffer.from(key, 'latin1');
    const id = ++this.#nextMirrorId;
    const { ops, now } = this.#mirrorOps();
    ops.put(tenantId, bytes, entry.length, offsets, lengths, crcs, at, seen, id);
    entry.mirror = { tenant: tenantId, key: bytes, id, slots: at, versions: seen };
    this.#mirrored.set(id, entry);
    if (now) this.#door.mirror(ops);
    return true;
  }

  /**
   * `entry` was just read from the first tier's slots in JavaScript: mirrors it again when the door thread let it go
   * because a slot of its was freed since it was put (its pages left the first tier and were read back into it), or
   * when it was never mirrored, so its GETs return to the door thread. An entry the door thread still holds (or
   * dropped for bytes that failed their check, with the same slots) is left as it is.
   */
  remirror(tenant: string, key: string, entry: ValueEntry): void {
    const m = entry.mirror;
    if (m) {
      const versions = this.#slots.slotVersions!;
      let moved = false;
      for (let i = 0; i < m.slots.length && !moved; i++) moved = versions[m.slots[i]!] !== m.versions[i];
      if (!moved) return;
    }
    this.mirrorPut(tenant, key, entry);
  }

  /** `entry` stops being its key's value: out of the mirror before anything answers that. */
  mirrorDrop(entry: ValueEntry): void {
    const m = entry.mirror;
    if (!m) return;
    entry.mirror = undefined;
    this.#mirrored.delete(m.id);
    if (this.#closed) return;
    const { ops, now } = this.#mirrorOps();
    ops.drop(m.tenant, m.key);
    if (now) this.#door.mirror(ops);
  }

  /**
   * Takes the door thread's record of the mirror entries it answered GETs of since the last drain and hands the
   * pages of those still live to the door (slotsRead). Runs every SERVED_DRAIN_MS; callable at any time.
   */
  drainServed(): void {
    if (this.#closed || !this.#mirrorOn) return;
    const ids = this.#door.takeServed();
    if (!ids.length) return;
    const pages: PageKey[] = [];
    for (const id of ids) {
      // Dropped from the mirror since (replaced, deleted, evicted): its pages are not the key's any more.
      const e = this.#mirrored.get(id);
      if (e && !e.dead) for (const p of e.pages) pages.push(p);
    }
    if (pages.length) this.host.slotsRead(pages);
  }

  #topUp(): void {
    if (this.#closed) return;
    const have = this.#door.pooledSlots;
    if (have >= this.#poolTarget / 2) return;
    const got = this.#slots.lend!(this.#poolTarget - have);
    if (got.length) this.#door.grant(got, this.#slotBytes);
  }

  #onEvents(events: RespNativeEvent[]): void {
    // Replies written while the batch runs synchronously go to the addon in one call at its end.
    this.#batch.active = true;
    try {
      this.#runEvents(events);
    } finally {
      this.#batch.flush();
    }
  }

  /** Page keys for the batch's landed values whose client is authenticated now, derived in one native call. */
  #batchKeys(events: RespNativeEvent[]): Map<RespNativeEvent, { tenant: string; pages: PageKey[] }> | undefined {
    let specs: Array<{ e: RespNativeEvent; tenant: string; key: Uint8Array; count: number }> | undefined;
    for (const e of events) {
      if (e.kind !== 'set') continue;
      const tenant = this.#sockets.get(e.conn)?.connection?.tenant;
      if (tenant !== undefined) (specs ??= []).push({ e, tenant, key: e.key, count: e.offsets.length });
    }
    if (!specs) return undefined;
    const keys = this.host.landedPageKeys(specs);
    return new Map(specs.map((x, i) => [x.e, { tenant: x.tenant, pages: keys[i]! }]));
  }

  #runEvents(events: RespNativeEvent[]): void {
    let landed = false;
    const keys = this.#batchKeys(events);
    for (const e of events) {
      switch (e.kind) {
        case 'accept': {
          const socket = new NativeSocket(this.#door, e.conn, e.host, e.port, this.#batch, this.#mirrorOn ? this.#idOf : undefined);
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
          this.#landed(e, keys?.get(e));
          break;
        }
      }
    }
    if (landed) this.#topUp();
  }

  #landed(e: Extract<RespNativeEvent, { kind: 'set' }>, derived: { tenant: string; pages: PageKey[] } | undefined): void {
    const conn = this.#sockets.get(e.conn)?.connection;
    if (!conn || conn.socket.destroyed || !conn.tenant) {
      this.#slots.giveBack!(e.offsets);
      return;
    }
    const key = e.key.toString('latin1');
    // Keys derived at the batch's start serve if the client's tenant is still the same (it is: a SET lands only
    // when every earlier command of its client was answered), else they are derived again here.
    const pages = derived?.tenant === conn.tenant ? derived.pages : undefined;
    const value = this.host.landedValue(conn.tenant, key, e.length, e.offsets, e.lengths, e.crcs, pages);
    conn.inject([e.name, e.key, value.handle], value);
  }

  /** Stops the door thread and closes every client; the pool's slots go back to the tier. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#drainTimer);
    this.#mirrored.clear();
    this.#unhook();
    this.#door.close();
    this.#slots.giveBack!(this.#door.takePool());
    for (const s of [...this.#sockets.values()]) s.closed();
    this.#sockets.clear();
  }
}
