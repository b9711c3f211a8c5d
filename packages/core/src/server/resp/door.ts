/**
 * RespDoor: the RESP (Redis protocol) front door of `tiersync serve`. A TCP server whose clients (redis-cli,
 * redis-benchmark, Redis-backed KV connectors) GET and SET values that live in the tier hierarchy.
 *
 * Values: a value of L bytes becomes ceil(L / pageBytes) pages (the last one shorter) stored under page keys
 * SHA-256(door salt, tenant, Redis key, generation, page index). Keys are never used as paths; the salt is random
 * per process, so a page key cannot be computed from outside, and pages left by an earlier process can never be
 * mistaken for this one's. Every SET writes a new generation; the catalog (keyspace.ts) then points at it and the
 * old generation's pages are deleted once no GET is reading them, so a reader always sees one whole value.
 *
 * Copies: when the first tier is a host tier, a SET's payload is copied by the parser from the socket's buffers
 * straight into slots of that tier reserved as soon as the bulk length is known, and committed there in place
 * (slot-writer.ts); a GET of a value in that tier is written to the socket from its pinned slots (the kernel copies
 * it; no JavaScript copy). Otherwise (another first tier, a value only on lower tiers) values pass through staging
 * windows: the parser copies into them and the engine moves them into the hierarchy (value-stream.ts), and a GET is
 * loaded into staging and written from there.
 *
 * Catalog: in memory, and with resp.catalog `durable` also as one manifest page per value written through the
 * hierarchy after the value's pages (manifest.ts); listen() rebuilds the keys from the manifests the persistent
 * tiers hold, so keys whose pages are on a persistent tier survive a restart or a kill -9 of the daemon.
 *
 * Bounds: staging memory is global (clients wait for room, with a deadline); a value in flight holds at most two
 * windows of it (resp.valueWindowBytes each), whatever its length; each client's unparsed input and small
 * arguments are bounded by the parser; replies queued for a client that does not read are bounded
 * (maxOutputBytes, then a deadline); the catalog is bounded in keys and key bytes; clients in number.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import net from 'node:net';
import { crc32cRanges, respNativeAvailable, TierSyncError, type RespNativeStats } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';
import type { Logger } from 'pino';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { packageVersion } from '../../build-info.js';

/** RESP command latency buckets, seconds: 20 us (a GET of a small value) .. 10 s (a very large value from a bucket). */
const RESP_LATENCY_BUCKETS = [0.00002, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10];
import { AccessBatch, warnRefused } from '../access-batch.js';
import { executeCommand } from './commands.js';
import type { ResolvedRespConfig } from './config.js';
import { RespConnection, type RespSocket } from './connection.js';
import type { DoorApi, ReadValue, RespDoorStats, WriteOptions } from './door-api.js';
import { TenantKeyspace, type ValueEntry } from './keyspace.js';
import { ManifestStore } from './manifest-store.js';
import { landedPageKeys, valuePageKeys } from './page-keys.js';
import type { RespPageStore } from './page-store.js';
import { LandedValue, NativeRespEngine, type NativeSocket } from './native-engine.js';
import type { PinnedSlot } from './slot-access.js';
import { SlotWriter } from './slot-writer.js';
import { StagingArea, type StagingSlice } from './staging.js';
import { streamValue, ValueWriter, type ReplyOut, type StagingLane, type StreamHost, type ValueSink } from './value-stream.js';

export interface RespDoorOptions {
  config: ResolvedRespConfig;
  store: RespPageStore;
  logger?: Logger;
  /** prom-client registry to add the door's metrics to (the daemon's). */
  metrics?: Registry;
  /** Version string shown by INFO. */
  version?: string;
}

export type { ReadValue, RespDoorStats } from './door-api.js';

const DISCARD_RETRIES = 5;
/** How long a refused client (max clients, shutting down) may take to close its side after the error line. */
const REFUSED_LINGER_MS = 1000;
const DISCARD_RETRY_MS = 1000;
/** Longest wait between tries to delete manifests a failed DEL left (a tier down): they are tried until gone. */
const MANIFEST_RETRY_MAX_MS = 60_000;

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

export class RespDoor implements StreamHost, DoorApi {
  readonly config: ResolvedRespConfig;
  /** Bytes of one staging window: resp.valueWindowBytes rounded down to whole pages (at least one page). */
  readonly windowBytes: number;
  readonly store: RespPageStore;
  readonly staging: StagingArea;
  readonly log: Logger | undefined;
  readonly version: string;
  readonly requiresAuth: boolean;
  readonly startedAt = Date.now();
  /** The Node engine's listener; undefined with the native engine. */
  readonly #server: net.Server | undefined;
  /** The native engine (resp.engine: native), which owns the sockets. */
  #engine: NativeRespEngine | undefined;
  readonly #connections = new Set<RespConnection>();
  readonly #tenants = new Map<string, TenantKeyspace>();
  /** Writes in flight per tenant+key: the latest op wins; older ones finishing later are discarded. */
  readonly #writes = new Map<string, { latest: number; pending: number }>();
  readonly #salt = randomBytes(32);
  readonly #passwords = new Map<string, Buffer>();
  readonly #discards = new Set<Promise<void>>();
  /** Pages of replaced values to delete at the end of this turn (#discardSoon). */
  #soon: PageKey[] = [];
  /** Loads in flight, by entry: concurrent GETs of one value join the same load. */
  readonly #reading = new Map<ValueEntry, { users: number; done: Promise<StagingSlice | null> }>();
  #op = 0;
  #generation = 0;
  #pinSeq = 0;
  #sweep: NodeJS.Timeout | undefined;
  #closing: Promise<void> | undefined;
  /** Whether the catalog is also written as manifest pages (resp.catalog). */
  readonly durable: boolean;
  /** Where those manifest pages are written and read back (used only when `durable`). */
  readonly #manifests: ManifestStore;
  /**
   * Pages read straight from the first tier's slots (GETs from pinned slots, GETs the native door thread answered),
   * on their way to the tier's eviction policy; undefined when the store reads no slots or cannot record reads.
   */
  readonly #accesses: AccessBatch | undefined;
  readonly counters = { connectionsTotal: 0, rejectedConnections: 0, commandsTotal: 0, authFailures: 0, protocolErrors: 0, orphanedPages: 0, recoveredKeys: 0 };
  /**
   * Commands run in JavaScript and those answered with an error, by metrics label: a Map update per command, read
   * by tiersync_resp_commands_total and _command_errors_total when scraped (an observation through prom-client
   * costs ~0.6 us of the event loop per counter).
   */
  readonly #commandCounts = new Map<string, { calls: number; errors: number }>();
  readonly #latency: Histogram<'command'> | undefined;

  private constructor(options: RespDoorOptions, server: net.Server | undefined) {
    this.config = options.config;
    this.store = options.store;
    this.log = options.logger;
    this.version = options.version ?? packageVersion();
    this.#server = server;
    const pageBytes = this.store.pageBytes;
    this.windowBytes = Math.max(pageBytes, Math.floor(this.config.valueWindowBytes / pageBytes) * pageBytes);
    if (this.windowBytes * 2 > this.config.stagingBytes) {
      throw new TierSyncError(`config resp.stagingBytes (${this.config.stagingBytes}) must hold two value windows of ${this.windowBytes} bytes (resp.valueWindowBytes rounded to whole ${pageBytes}-byte pages)`, 'ERR_CONFIG');
    }
    if (this.config.password) this.#passwords.set('default', digest(this.config.password));
    for (const [user, pw] of Object.entries(this.config.tenants ?? {})) this.#passwords.set(user, digest(pw));
    this.requiresAuth = this.#passwords.size > 0;
    this.durable = this.config.catalog === 'durable' || (this.config.catalog === 'auto' && this.store.anyTierPersistent);
    if (this.config.catalog === 'durable' && !this.store.anyTierPersistent) {
      throw new TierSyncError('config resp.catalog: durable needs a persistent tier (a host tier with shm=, fs, object) for the manifests to live on', 'ERR_CONFIG');
    }
    this.staging = new StagingArea(this.config.stagingBytes);
    this.#manifests = new ManifestStore(this.store, this.staging, this.config.requestTimeoutMs, (pages) => void this.#discard(pages));
    const store = this.store;
    if (store.slots && store.recordReads) {
      this.#accesses = new AccessBatch({
        record: (keys) => store.recordReads!(keys),
        onFailed: warnRefused(this.log, 'RESP GET accesses'),
      });
    }
    if (options.metrics) this.#latency = this.#registerMetrics(options.metrics);
  }

  /**
   * Listens on config.host:config.port.
   * @throws TierSyncError ERR_CONFIG (off loopback without a password), ERR_UNAVAILABLE (port taken), ERR_IO
   */
  static async listen(options: RespDoorOptions): Promise<RespDoor> {
    const c = options.config;
    if (c.port === undefined) throw new TierSyncError('config resp.port: required to start the RESP door', 'ERR_CONFIG');
    const loopback = c.host === 'localhost' || c.host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(c.host);
    if (!loopback && !c.password && !Object.keys(c.tenants ?? {}).length) {
      throw new TierSyncError(`config resp.host: '${c.host}' is not loopback; set resp.password or resp.tenants so clients must AUTH`, 'ERR_CONFIG');
    }
    // The native engine needs a host tier first (its slots) and an addon built with it; the Node engine serves otherwise.
    if (c.engine === 'native' && options.store.slots && respNativeAvailable()) {
      const door = new RespDoor(options, undefined);
      try {
        // Keys are rebuilt before the first client is accepted.
        if (door.durable) await door.#recover();
        door.#engine = NativeRespEngine.start(door, options.store.slots);
      } catch (e) {
        door.staging.close();
        throw e;
      }
      if (door.#engine) {
        // Keys recovered from manifests whose pages are in the first tier: their GETs are answered natively too.
        for (const [tenant, ks] of door.#tenants) for (const [key, e] of ks.entries()) door.#mirror(tenant, key, e);
        door.#sweep = setInterval(() => door.#sweepClients(), 1000);
        door.#sweep.unref();
        return door;
      }
      door.staging.close();
    }
    // Half-open: a client that ends its side still gets the replies to what it sent (connection.ts closes after).
    const server = net.createServer({ noDelay: true, allowHalfOpen: true });
    const door = new RespDoor(options, server);
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', (e: NodeJS.ErrnoException) =>
          reject(new TierSyncError(`cannot listen for RESP on ${c.host}:${c.port}: ${e.message}`, e.code === 'EADDRINUSE' ? 'ERR_UNAVAILABLE' : 'ERR_IO', { cause: e })),
        );
        server.listen(c.port, c.host, () => resolve());
      });
      // Keys are rebuilt before the first client is served.
      if (door.durable) await door.#recover();
    } catch (e) {
      server.close();
      door.staging.close();
      throw e;
    }
    server.on('connection', (socket) => door.#accept(socket));
    server.on('error', (e) => door.log?.error({ err: e }, 'RESP listener error'));
    door.#sweep = setInterval(() => door.#sweepClients(), 1000);
    door.#sweep.unref();
    return door;
  }

  /** Which engine owns the door's sockets. */
  get engine(): 'native' | 'node' {
    return this.#engine ? 'native' : 'node';
  }

  /** The native engine's counters (undefined with the Node engine). */
  nativeStats(): RespNativeStats | undefined {
    return this.#engine?.stats();
  }

  get port(): number {
    if (this.#engine) return this.#engine.port;
    return (this.#server?.address() as net.AddressInfo | null | undefined)?.port ?? 0;
  }

  get clients(): number {
    return this.#connections.size;
  }

  /** A client of the native engine (NativeEngineHost): its connection, or undefined when refused. */
  acceptSocket(socket: NativeSocket): RespConnection | undefined {
    return this.#accept(socket);
  }

  /**
   * A SET's value that landed in first-tier slots on the native engine's thread, as the writer SET commits.
   * `pages`: its page keys from landedPageKeys() (a new generation), derived here when not given.
   */
  landedValue(tenant: string, key: string, length: number, offsets: Float64Array, lengths: Uint32Array, crcs: Uint32Array, pages?: PageKey[]): LandedValue {
    pages ??= this.#pageKeys(tenant, key, ++this.#generation, offsets.length);
    return new LandedValue(this, this.store.slots!, length, pages, offsets, lengths, crcs);
  }

  /**
   * Pages read straight from the first tier's slots without the hierarchy (the native door thread's GETs): counted
   * as accesses for the tier's eviction policy, in batches.
   */
  slotsRead(pages: readonly PageKey[]): void {
    this.#accesses?.add(pages);
  }

  /**
   * Records every GET access noted so far (the native door thread's record drained first) with the hierarchy's
   * eviction policy; resolves once it has them. They go on their own every ACCESS_FLUSH_MS (server/access-batch.ts); this
   * is for callers that need them counted now (tests, a benchmark's phases).
   */
  async recordAccesses(): Promise<void> {
    this.#engine?.drainServed();
    await this.#accesses?.flush();
  }

  /** Page keys of a new generation for each value that landed in one batch of the native engine's events, in one native call. */
  landedPageKeys(values: ReadonlyArray<{ tenant: string; key: Uint8Array; count: number }>): PageKey[][] {
    return landedPageKeys(
      this.#salt,
      values.map((v) => ({ tenant: v.tenant, key: v.key, count: v.count, generation: ++this.#generation })),
    );
  }

  #accept(socket: RespSocket): RespConnection | undefined {
    this.counters.connectionsTotal++;
    // The native engine bounds its clients itself, at accept (refusedClients); counting here too could refuse a
    // client it already serves, while the close of one that left is still on its way.
    const full = !this.#engine && this.#connections.size >= this.config.maxClients;
    if (this.#closing || full) {
      this.counters.rejectedConnections++;
      socket.end(Buffer.from(this.#closing ? '-ERR server is shutting down\r\n' : '-ERR max number of clients reached\r\n'));
      socket.on('error', () => undefined);
      // What it sent is read and dropped, so its end arrives and the socket closes (unread input would hold it
      // open, and the server's close with it); one that never ends its side is closed after REFUSED_LINGER_MS.
      socket.resume();
      setTimeout(() => socket.destroy(), REFUSED_LINGER_MS).unref();
      return undefined;
    }
    const conn = new RespConnection(this, socket, this.counters.connectionsTotal, executeCommand);
    this.#connections.add(conn);
    socket.once('close', () => {
      this.#connections.delete(conn);
      conn.dispose();
    });
    return conn;
  }

  /** Resolves once every client has closed (the native engine's part of close(); net.Server.close waits the same way). */
  async #clientsGone(): Promise<void> {
    while (this.#connections.size) await new Promise((resolve) => setTimeout(resolve, 20));
  }

  /** Closes clients stuck mid-command past the deadline, and idle ones when an idle timeout is set. */
  #sweepClients(): void {
    const now = Date.now();
    for (const c of this.#connections) {
      if (c.midSince && now - c.midSince > this.config.requestTimeoutMs) c.abort(`a command took longer than ${this.config.requestTimeoutMs} ms to arrive`);
      else if (this.config.idleTimeoutMs && now - c.activeAt > this.config.idleTimeoutMs && !c.busy) c.abort('idle timeout');
    }
  }

  /** The tenant of a successful AUTH, or undefined. Constant time in the password. */
  authenticate(user: string, password: string): string | undefined {
    const want = this.#passwords.get(user);
    const ok = want !== undefined && timingSafeEqual(want, digest(password));
    if (!ok) this.counters.authFailures++;
    return ok ? user : undefined;
  }

  hasPassword(user: string): boolean {
    return this.#passwords.has(user);
  }

  keyspace(tenant: string): TenantKeyspace {
    let ks = this.#tenants.get(tenant);
    if (!ks) {
      ks = new TenantKeyspace();
      this.#tenants.set(tenant, ks);
    }
    return ks;
  }

  /** Keeps the catalog's size counters right as entries come and go. */
  readonly #onDead = (e: ValueEntry): void => {
    e.dead = true;
    // Out of the native door's mirror before the death is answered or the pages go.
    if (e.mirror) this.#engine?.mirrorDrop(e);
    // The manifest goes at once (no reader needs it); a later generation, if any, is already committed.
    if (e.manifest) this.#discardSoon(e.manifest);
    if (e.readers === 0) this.#discardSoon(e.pages);
  };

  /**
   * Deletes pages at the end of this turn's synchronous work (a microtask), together with every other page
   * replaced meanwhile: a batch of SETs of the native engine replaces many values in one turn, and their old
   * generations go in one store.remove() (one tier delete, one index transaction) instead of one each.
   */
  #discardSoon(pages: readonly PageKey[]): void {
    if (!pages.length) return;
    if (!this.#soon.length) queueMicrotask(() => this.#flushDiscards());
    for (const p of pages) this.#soon.push(p);
  }

  #flushDiscards(): void {
    if (!this.#soon.length) return;
    const pages = this.#soon;
    this.#soon = [];
    void this.#discard(pages);
  }

  /** Keys and key-name bytes over all tenants (tenants are few: the configured users). */
  #catalogSize(): { keys: number; keyBytes: number } {
    let keys = 0;
    let keyBytes = 0;
    for (const ks of this.#tenants.values()) {
      keys += ks.size;
      keyBytes += ks.keyBytes;
    }
    return { keys, keyBytes };
  }

  /** Deletes pages in the background (StreamHost: pages of a value that was not kept). */
  discard(pages: readonly PageKey[]): void {
    void this.#discard(pages);
  }

  /** Deletes pages in the background; pinned ones are retried a few times, then left to eviction (and counted). */
  #discard(pages: readonly PageKey[], attempt = 0): Promise<void> {
    if (!pages.length) return Promise.resolve();
    const p = this.store
      .remove(pages)
      .then((kept) => {
        if (!kept.length) return;
        if (attempt + 1 >= DISCARD_RETRIES || this.#closing) {
          this.counters.orphanedPages += kept.length;
          return;
        }
        const t = setTimeout(() => this.#discard(kept, attempt + 1), DISCARD_RETRY_MS);
        t.unref();
      })
      .catch((e: unknown) => {
        this.counters.orphanedPages += pages.length;
        this.log?.warn({ err: e, pages: pages.length }, 'RESP door could not delete pages; eviction will reclaim them');
      })
      .finally(() => this.#discards.delete(p));
    this.#discards.add(p);
    return p;
  }

  /**
   * Deletes the manifests of deleted keys before their DEL is acknowledged. A tier that cannot delete them now (a
   * bucket down) fails the DEL (ERR_UNAVAILABLE: a restart could bring the keys back), and they are tried again in
   * the background until gone; pinned ones (read by a recovery) are retried as #discard does.
   */
  async #deleteManifests(pages: readonly PageKey[]): Promise<void> {
    try {
      const kept = await this.store.remove(pages);
      if (kept.length) void this.#discard(kept, 1);
    } catch (e) {
      this.#retryManifests(pages, DISCARD_RETRY_MS);
      throw new TierSyncError(`the deleted key(s) are gone from memory, but their catalog manifests could not be deleted now, so a restart could bring them back (${(e as Error).message}); they are retried in the background`, 'ERR_UNAVAILABLE', { cause: e });
    }
  }

  #retryManifests(pages: readonly PageKey[], delayMs: number): void {
    if (this.#closing) {
      this.counters.orphanedPages += pages.length;
      return;
    }
    const t = setTimeout(() => {
      const p = this.store
        .remove(pages)
        .then((kept) => void this.#discard(kept, 1))
        .catch(() => this.#retryManifests(pages, Math.min(2 * delayMs, MANIFEST_RETRY_MAX_MS)))
        .finally(() => this.#discards.delete(p));
      this.#discards.add(p);
    }, delayMs);
    t.unref();
  }

  #pageKeys(tenant: string, key: string, generation: number, count: number): PageKey[] {
    return valuePageKeys(this.#salt, tenant, key, generation, count);
  }

  /** Bytes of page i of a value of `length` bytes. */
  #pageLength(length: number, i: number): number {
    return Math.min(this.store.pageBytes, length - i * this.store.pageBytes);
  }

  /**
   * Stores `value` (in staging memory) as `key`'s new value. Resolves false when a condition (NX/XX) kept it
   * from being set.
   * @throws TierSyncError ERR_TIER_FULL when the hierarchy had no room (or its admission filter refused the pages), ERR_OUT_OF_RANGE past the key limits
   */
  async setValue(tenant: string, key: string, value: Uint8Array, options: { expiresAt?: number; keepTtl?: boolean; nx?: boolean; xx?: boolean } = {}): Promise<boolean> {
    const ks = this.keyspace(tenant);
    const current = this.#admit(ks, key, undefined, options);
    if (current === false) return false;
    const { id, op, w } = this.#beginWrite(tenant, key);
    let pages: PageKey[] = [];
    const generation = ++this.#generation;
    let manifest: PageKey[] | undefined;
    try {
      const count = Math.ceil(value.length / this.store.pageBytes);
      pages = this.#pageKeys(tenant, key, generation, count);
      if (count) {
        const arena = this.staging.arena;
        const base = this.staging.offsetOf(value);
        if (base < 0) throw new TierSyncError('internal: a value to store is not in staging memory', 'ERR_INVALID_ARGUMENT');
        const ok = await this.store.write(pages.map((k, i) => ({ key: k, source: { arena, offset: base + i * this.store.pageBytes, length: this.#pageLength(value.length, i) } })));
        if (ok.some((x) => !x)) {
          this.#discard(pages.filter((_, i) => ok[i]));
          throw new TierSyncError('the tier hierarchy has no room for this value (its first tier is full of pinned pages, or its admission filter refused it)', 'ERR_TIER_FULL');
        }
      }
      const expires = options.keepTtl ? (current?.expiresAt ?? 0) : (options.expiresAt ?? 0);
      if (this.durable) manifest = await this.#manifests.write({ tenant, key, generation: ++this.#generation, length: value.length, expiresAt: expires, pages }).catch((e: unknown) => {
        this.#discard(pages);
        throw e;
      });
    } catch (e) {
      this.#endWrite(id, w);
      throw e;
    }
    const latest = w.latest === op;
    this.#endWrite(id, w);
    if (!latest) {
      // A later SET or DEL of this key began meanwhile: it wins, this value was overwritten at once.
      void this.#discard(manifest ? [...manifest, ...pages] : pages);
      return true;
    }
    const expiresAt = options.keepTtl ? (ks.get(key, Date.now(), this.#onDead)?.expiresAt ?? 0) : (options.expiresAt ?? 0);
    this.#mirror(tenant, key, ks.set(key, { length: value.length, pages, expiresAt, manifest }, this.#onDead));
    return true;
  }

  /**
   * A writer for a value of `length` bytes arriving for `key` (see value-stream.ts); it writes a new generation
   * of pages as the bytes arrive, and commitValue() makes it the key's value. `key` undefined: the command will
   * be refused (e.g. a key over maxKeyBytes); the writer drains the bytes and stores nothing.
   */
  beginValue(tenant: string, key: string | undefined, length: number, lane: StagingLane): ValueSink {
    const count = Math.ceil(length / this.store.pageBytes);
    const generation = ++this.#generation;
    const pages = key === undefined ? [] : this.#pageKeys(tenant, key, generation, count);
    const slots = this.store.slots;
    return slots ? new SlotWriter(this, slots, length, pages) : new ValueWriter(this, lane, length, pages);
  }

  /**
   * Makes the value `writer` received `key`'s value once its pages are stored, as SET does (NX/XX and the key
   * limits are checked now, when the command runs: a later SET or DEL of the key wins, as in Redis). Resolves
   * false when a condition kept it from being set (its pages are then deleted).
   * @throws TierSyncError ERR_TIER_FULL when the hierarchy refused pages, ERR_OUT_OF_RANGE past the key limits
   */
  async commitValue(tenant: string, key: string, writer: ValueSink, options: WriteOptions = {}): Promise<boolean> {
    await writer.finish();
    if (!this.durable) return this.#install(tenant, key, writer, options);
    const ks = this.keyspace(tenant);
    let current = this.#admit(ks, key, writer, options);
    if (current === false) return false;
    let manifest: PageKey[] | undefined;
    // Written after every page of the value is committed, and before the key is visible or acknowledged. Its
    // generation is taken now, so manifests are numbered in the order their SETs commit.
    const { id, op, w } = this.#beginWrite(tenant, key);
    try {
      const expiresAt = options.keepTtl ? (current?.expiresAt ?? 0) : (options.expiresAt ?? 0);
      manifest = await this.#manifests.write({ tenant, key, generation: ++this.#generation, length: writer.length, expiresAt, pages: [...writer.pages] });
    } catch (e) {
      writer.abort();
      throw e;
    } finally {
      this.#endWrite(id, w);
    }
    if (w.latest !== op) {
      // A later SET or DEL of this key committed meanwhile: it wins, this value was overwritten at once.
      void this.#discard(manifest);
      writer.abort();
      return true;
    }
    current = ks.get(key, Date.now(), this.#onDead);
    // A SET of this key begun earlier and still writing loses to this one.
    this.#supersede(tenant, key);
    writer.commit();
    const expiresAt = options.keepTtl ? (current?.expiresAt ?? 0) : (options.expiresAt ?? 0);
    // Where the pages are now is looked up in this turn: they may have moved while the manifest was written.
    this.#mirror(tenant, key, ks.set(key, { length: writer.length, pages: [...writer.pages], expiresAt, manifest }, this.#onDead));
    return true;
  }

  /**
   * commitValue() in the calling turn, where nothing needs waiting for: a catalog in memory and a writer whose pages
   * are all committed already (the slot writer commits each group as its last byte arrives). undefined: not
   * possible now, call commitValue(). The guarantees are commitValue()'s: every page is in the first tier before
   * the key points at it (and before the caller acknowledges); the block index records them in the background.
   * @throws TierSyncError as commitValue()
   */
  commitValueNow(tenant: string, key: string, writer: ValueSink, options: WriteOptions = {}): boolean | undefined {
    if (this.durable || !writer.finishNow?.()) return undefined;
    return this.#install(tenant, key, writer, options);
  }

  /** NX/XX and the key limits, checked when the command runs: the live entry (or undefined), or false (condition unmet, writer aborted). */
  #admit(ks: TenantKeyspace, key: string, writer: ValueSink | undefined, options: WriteOptions): ValueEntry | undefined | false {
    const current = ks.get(key, Date.now(), this.#onDead);
    if ((options.nx && current) || (options.xx && !current)) {
      writer?.abort();
      return false;
    }
    const size = current ? undefined : this.#catalogSize();
    if (size && (size.keys >= this.config.maxKeys || size.keyBytes + key.length > this.config.maxKeyBytesTotal)) {
      writer?.abort();
      throw new TierSyncError(`key limit reached (${this.config.maxKeys} keys or ${this.config.maxKeyBytesTotal} bytes of key names)`, 'ERR_OUT_OF_RANGE');
    }
    return current;
  }

  /**
   * `e`, just installed as `key`'s value: the native door answers its GETs when it has no TTL and every page is in
   * the first tier's slots now (NativeRespEngine.mirrorPut looks them up in this turn); otherwise they stay here.
   */
  #mirror(tenant: string, key: string, e: ValueEntry): void {
    if (this.#engine && !e.expiresAt) this.#engine.mirrorPut(tenant, key, e);
  }

  /** A finished writer's value becomes `key`'s (catalog in memory: no manifest). */
  #install(tenant: string, key: string, writer: ValueSink, options: WriteOptions): boolean {
    const ks = this.keyspace(tenant);
    const current = this.#admit(ks, key, writer, options);
    if (current === false) return false;
    // A SET of this key begun earlier and still writing loses to this one.
    this.#supersede(tenant, key);
    writer.commit();
    const expiresAt = options.keepTtl ? (current?.expiresAt ?? 0) : (options.expiresAt ?? 0);
    this.#mirror(tenant, key, ks.set(key, { length: writer.length, pages: [...writer.pages], expiresAt, manifest: undefined }, this.#onDead));
    return true;
  }

  /** Rebuilds the catalog from the manifests the persistent tiers hold (ManifestStore.recover); drops what no key names. */
  async #recover(): Promise<void> {
    const r = await this.#manifests.recover();
    this.#generation = Math.max(this.#generation, r.maxGeneration);
    for (const { m, manifestPages } of r.values) {
      this.keyspace(m.tenant).set(m.key, { length: m.length, pages: m.pages, expiresAt: m.expiresAt, manifest: manifestPages }, () => undefined);
      this.counters.recoveredKeys++;
    }
    void this.#discard(r.drop);
    if (r.manifests || r.orphans) this.log?.info({ keys: this.counters.recoveredKeys, dropped: r.drop.length }, 'RESP door catalog recovered from manifests');
  }

  /** Marks a write of `key` as begun (and the latest): a later SET or DEL of it makes `w.latest` differ from `op`. */
  #beginWrite(tenant: string, key: string): { id: string; op: number; w: { latest: number; pending: number } } {
    const id = `${tenant}\0${key}`;
    const op = ++this.#op;
    const w = this.#writes.get(id) ?? { latest: 0, pending: 0 };
    w.latest = op;
    w.pending++;
    this.#writes.set(id, w);
    return { id, op, w };
  }

  #endWrite(id: string, w: { latest: number; pending: number }): void {
    if (--w.pending === 0) this.#writes.delete(id);
  }

  /** Marks later-finishing writes of `key` as superseded (DEL wins over a SET begun before it). */
  #supersede(tenant: string, key: string): void {
    const w = this.#writes.get(`${tenant}\0${key}`);
    if (w) w.latest = ++this.#op;
  }

  /**
   * Removes keys; resolves with how many existed. With a durable catalog it resolves once their manifests are
   * deleted, so an acknowledged DEL does not come back after a restart.
   * @throws TierSyncError ERR_UNAVAILABLE when a tier could not delete the manifests (the keys are gone here, but
   *   not durably until the background retries succeed)
   */
  async deleteKeys(tenant: string, keys: readonly string[]): Promise<number> {
    const ks = this.keyspace(tenant);
    let n = 0;
    const now = Date.now();
    const manifests: PageKey[] = [];
    const onDead = (e: ValueEntry): void => {
      e.dead = true;
      if (e.mirror) this.#engine?.mirrorDrop(e);
      if (e.manifest) manifests.push(...e.manifest);
      if (e.readers === 0) void this.#discard(e.pages);
    };
    for (const key of keys) {
      this.#supersede(tenant, key);
      if (!ks.get(key, now, onDead)) continue;
      ks.delete(key, onDead);
      n++;
    }
    if (manifests.length) await this.#deleteManifests(manifests);
    return n;
  }

  /** Removes every key of a tenant. */
  flush(tenant: string): Promise<number> {
    const ks = this.keyspace(tenant);
    const keys = [...ks.entries()].map(([k]) => k);
    return this.deleteKeys(tenant, keys);
  }

  /** The live entry of a key whose pages are all still present somewhere (an evicted value is dropped). */
  entry(tenant: string, key: string): ValueEntry | undefined {
    const ks = this.keyspace(tenant);
    const e = ks.get(key, Date.now(), this.#onDead);
    if (!e || !e.pages.length) return e;
    if (this.store.has(e.pages).every(Boolean)) return e;
    this.#evicted(tenant, key, e);
    return undefined;
  }

  /** The hierarchy evicted (part of) a value: the key is gone; its remaining pages go too. */
  #evicted(tenant: string, key: string, e: ValueEntry): void {
    const ks = this.keyspace(tenant);
    if (ks.get(key, Date.now(), this.#onDead) === e) ks.delete(key, this.#onDead);
  }

  /** How many of `keys` exist (a key named twice counts twice, as in Redis). */
  exists(tenant: string, keys: readonly string[]): number {
    let n = 0;
    for (const k of keys) if (this.entry(tenant, k)) n++;
    return n;
  }

  scan(tenant: string, cursor: number, count: number, match: string | undefined): { cursor: number; keys: string[] } {
    const ks = this.keyspace(tenant);
    const r = ks.scan(cursor, count, match, Date.now(), this.#onDead);
    // Keys whose pages were evicted are dropped here rather than listed.
    return { cursor: r.cursor, keys: r.keys.filter((k) => this.entry(tenant, k)) };
  }

  /**
   * Reads values through the hierarchy. A value up to one window is loaded into staging memory; concurrent reads
   * of one value share one load (and one staging slice): a hot key read by 50 clients at once costs one read of
   * its pages. Loads of different values requested together leave as one batch (the page store coalesces them).
   * A longer value is pinned and kept (a SET or DEL meanwhile does not delete its pages) and is sent later by
   * its stream(). null for a key that is absent, expired or whose pages were evicted. Call `release()` of each
   * value once its bytes are sent.
   * @throws TierSyncError ERR_OUT_OF_RANGE when the values loaded whole together exceed half the staging area
   */
  async getValues(tenant: string, keys: readonly string[]): Promise<Array<ReadValue | null>> {
    const ks = this.keyspace(tenant);
    const now = Date.now();
    const entries = keys.map((k) => ks.get(k, now, this.#onDead) ?? null);
    // Values whose pages are all in the first tier are sent from their pinned slots; the rest go through staging.
    const slots = this.store.slots;
    const pinned = !slots ? [] : slots.verifiesOnRead ? await Promise.all(entries.map((e) => (e && e.length ? this.#pinVerified(e) : undefined))) : entries.map((e) => (e && e.length ? this.#pinEntry(e) : undefined));
    if (!pinned.some(Boolean)) return this.#stagedValues(tenant, keys, entries);
    if (this.#engine) for (let i = 0; i < entries.length; i++) if (pinned[i] && !entries[i]!.expiresAt) this.#engine.remirror(tenant, keys[i]!, entries[i]!);
    const rest = entries.map((e, i) => (pinned[i] ? null : e));
    let others: Array<ReadValue | null>;
    try {
      others = rest.some(Boolean) ? await this.#stagedValues(tenant, keys, rest) : [];
    } catch (err) {
      for (const v of pinned) v?.release();
      throw err;
    }
    return entries.map((_, i) => pinned[i] ?? others[i] ?? null);
  }

  /** Reads `entries` (of `keys`; null: absent) through staging: whole up to one window, held for streaming beyond. */
  async #stagedValues(tenant: string, keys: readonly string[], entries: ReadonlyArray<ValueEntry | null>): Promise<Array<ReadValue | null>> {
    let total = 0;
    for (const e of entries) if (e && e.length <= this.windowBytes) total += e.length;
    if (total > this.staging.capacity / 2) throw new TierSyncError(`ERR the values asked for total ${total} bytes, more than half the ${this.staging.capacity}-byte staging area`, 'ERR_OUT_OF_RANGE');
    for (const e of entries) if (e) e.readers++;
    try {
      const settled = await Promise.allSettled(entries.map((e, i) => (!e ? null : e.length > this.windowBytes ? this.#holdEntry(tenant, keys[i]!, e) : this.#readEntry(tenant, keys[i]!, e))));
      const failed = settled.find((r) => r.status === 'rejected');
      if (failed) {
        for (const r of settled) if (r.status === 'fulfilled') r.value?.release();
        throw (failed as PromiseRejectedResult).reason;
      }
      return settled.map((r) => (r as PromiseFulfilledResult<ReadValue | null>).value);
    } finally {
      for (const e of entries) {
        if (!e) continue;
        e.readers--;
        if (e.dead && e.readers === 0) this.#discard(e.pages);
      }
    }
  }

  /**
   * #pinEntry, for a tier that checks its reads (shm): the same check here, on native threads. A mismatch falls
   * back to the hierarchy's read, which reports the damage.
   */
  async #pinVerified(e: ValueEntry): Promise<ReadValue | undefined> {
    const v = this.#pinEntry(e);
    if (!v) return undefined;
    const slots = this.store.slots!;
    const at = v.slots!;
    const sums = await crc32cRanges(slots.arena, Float64Array.from(at, (w) => w.offset), Uint32Array.from(at, (w) => w.length)).catch(() => undefined);
    if (!sums || at.some((w, i) => sums[i] !== w.crc32c)) {
      v.release();
      return undefined;
    }
    return v;
  }

  /**
   * A value whose pages are all in the first tier, pinned there (its slots are not freed or reused) until release();
   * undefined when a page is not there.
   */
  #pinEntry(e: ValueEntry): (ReadValue & { slots: PinnedSlot[] }) | undefined {
    const slots = this.store.slots!;
    const where = slots.pin(e.pages);
    const held = e.pages.filter((_, i) => where[i]);
    if (held.length < e.pages.length) {
      slots.unpin(held);
      return undefined;
    }
    const at = where as PinnedSlot[];
    e.readers++;
    // Read without the hierarchy's load(): its eviction policy hears of it through the access batch.
    this.#accesses?.add(e.pages);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      slots.unpin(e.pages);
      e.readers--;
      if (e.dead && e.readers === 0) this.#discard(e.pages);
    };
    return { length: e.length, bytes: undefined, parts: at.map((w) => slots.arena.view(w.offset, w.length)), release, slots: at };
  }

  /** A long value, held for streaming: pinned on every tier, and kept (one more reader) until release(). */
  async #holdEntry(tenant: string, key: string, e: ValueEntry): Promise<ReadValue | null> {
    const owner = `resp:${++this.#pinSeq}`;
    const windows = Math.ceil(e.length / this.windowBytes);
    // Each window must reach the client within requestTimeoutMs, so the pin outlives any stream that is not cut.
    const present = this.store.pin(e.pages, owner, this.config.requestTimeoutMs * (windows + 2));
    if (present < e.pages.length) {
      this.store.unpin(e.pages, owner);
      this.#evicted(tenant, key, e);
      return null;
    }
    e.readers++;
    let released = false;
    return {
      length: e.length,
      bytes: undefined,
      stream: (out) => streamValue(this, e.pages, e.length, out, this.config.requestTimeoutMs),
      release: () => {
        if (released) return;
        released = true;
        this.store.unpin(e.pages, owner);
        e.readers--;
        if (e.dead && e.readers === 0) this.#discard(e.pages);
      },
    };
  }

  /** One value's read, shared by everyone asking for it while it runs. */
  async #readEntry(tenant: string, key: string, e: ValueEntry): Promise<ReadValue | null> {
    if (!e.length) return { length: 0, bytes: new Uint8Array(0), release: () => undefined };
    let shared = this.#reading.get(e);
    if (!shared) {
      const created = { users: 0, done: this.#loadEntry(tenant, key, e) };
      shared = created;
      this.#reading.set(e, created);
      void created.done.then(
        () => this.#reading.delete(e),
        () => this.#reading.delete(e),
      );
    }
    const s = shared;
    s.users++;
    let slice: StagingSlice | null;
    try {
      slice = await s.done;
    } catch (err) {
      s.users--;
      throw err;
    }
    if (!slice) {
      s.users--;
      return null;
    }
    let released = false;
    return {
      length: e.length,
      bytes: slice.bytes,
      release: () => {
        if (released) return;
        released = true;
        if (--s.users === 0) this.staging.release(slice);
      },
    };
  }

  /**
   * Loads a value's pages into a new staging slice; null (and the key dropped) when a page is gone.
   * @throws TierSyncError ERR_UNAVAILABLE when a page could not be read although a tier still holds it (a peer or
   *   bucket down for now): the key stays, and a GET once the tier is back finds it
   */
  async #loadEntry(tenant: string, key: string, e: ValueEntry): Promise<StagingSlice | null> {
    const slice = await this.staging.allocate(e.length, this.config.requestTimeoutMs);
    let found: boolean[];
    try {
      found = await this.store.read(e.pages.map((k, p) => ({ key: k, into: { arena: this.staging.arena, offset: slice.offset + p * this.store.pageBytes, length: this.#pageLength(e.length, p) } })));
    } catch (err) {
      this.staging.release(slice);
      throw err;
    }
    if (found.every(Boolean)) return slice;
    this.staging.release(slice);
    // A read that failed without proving the page gone (a transient error) leaves its copy recorded.
    const unread = e.pages.filter((_, p) => !found[p]);
    if (this.store.has(unread).every(Boolean)) {
      throw new TierSyncError(`${unread.length} page(s) of key '${key}' could not be read now (a tier holding them failed); the key is kept, try again`, 'ERR_UNAVAILABLE');
    }
    this.#evicted(tenant, key, e);
    return null;
  }

  #registerMetrics(r: Registry): Histogram<'command'> {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const door = this;
    new Gauge({
      name: 'tiersync_resp_clients',
      help: 'Clients connected to the RESP door.',
      registers: [r],
      collect() {
        this.set(door.clients);
      },
    });
    new Gauge({
      name: 'tiersync_resp_keys',
      help: 'Keys held by the RESP door (all tenants).',
      registers: [r],
      collect() {
        this.set(door.#catalogSize().keys);
      },
    });
    new Gauge({
      name: 'tiersync_resp_staging_used_bytes',
      help: 'Bytes of the RESP door staging arena in use (values in flight).',
      registers: [r],
      collect() {
        this.set(door.staging.usedBytes);
      },
    });
    const counter = (name: string, help: string, pick: () => number) =>
      new Counter({
        name,
        help,
        registers: [r],
        collect() {
          this.reset();
          this.inc(pick());
        },
      });
    counter('tiersync_resp_connections_total', 'Connections accepted by the RESP door (refused ones included).', () => this.#connectionCounts().total);
    counter('tiersync_resp_rejected_connections_total', 'Connections refused (max clients, shutting down).', () => this.#connectionCounts().rejected);
    counter('tiersync_resp_auth_failures_total', 'Failed AUTH attempts on the RESP door.', () => this.counters.authFailures);
    counter('tiersync_resp_protocol_errors_total', 'Clients closed for a protocol error or an exceeded bound.', () => this.counters.protocolErrors);
    counter('tiersync_resp_orphaned_pages_total', 'Pages the door could not delete (left to eviction).', () => this.counters.orphanedPages);
    const counts = this.#commandCounts;
    new Counter({
      name: 'tiersync_resp_commands_total',
      help: 'RESP commands executed, by command (GET, MGET and EXISTS the native engine answered on its thread included).',
      labelNames: ['command'],
      registers: [r],
      collect() {
        this.reset();
        for (const [command, c] of counts) this.inc({ command }, c.calls);
        const native = door.nativeStats();
        if (native?.nativeGets) this.inc({ command: 'get' }, native.nativeGets);
        if (native?.nativeExists) this.inc({ command: 'exists' }, native.nativeExists);
        if (native?.nativeMgets) this.inc({ command: 'mget' }, native.nativeMgets);
      },
    });
    new Counter({
      name: 'tiersync_resp_command_errors_total',
      help: 'RESP commands answered with an error, by command.',
      labelNames: ['command'],
      registers: [r],
      collect() {
        this.reset();
        for (const [command, c] of counts) if (c.errors) this.inc({ command }, c.errors);
      },
    });
    // From the parsed command to its reply queued (a store's or load's bytes included), as Redis's latency stats.
    // Commands run in JavaScript only: the native engine's GETs are not timed.
    return new Histogram({ name: 'tiersync_resp_command_duration_seconds', help: 'RESP command latency, seconds, by command (commands run in JavaScript).', labelNames: ['command'], buckets: RESP_LATENCY_BUCKETS, registers: [r] });
  }

  /** Counts a command and its latency for metrics (names outside the known set are counted as `other`). */
  countCommand(name: string, failed: boolean, seconds: number): void {
    this.counters.commandsTotal++;
    let c = this.#commandCounts.get(name);
    if (!c) this.#commandCounts.set(name, (c = { calls: 0, errors: 0 }));
    c.calls++;
    if (failed) c.errors++;
    this.#latency?.observe({ command: name }, seconds);
  }

  /** Connections received and refused, those the native engine refused before JavaScript saw them included. */
  #connectionCounts(native = this.#engine?.stats()): { total: number; rejected: number } {
    const refused = native?.refusedClients ?? 0;
    return { total: this.counters.connectionsTotal + refused, rejected: this.counters.rejectedConnections + refused };
  }

  stats(): RespDoorStats {
    let bytes = 0;
    for (const ks of this.#tenants.values()) bytes += ks.bytes;
    const native = this.#engine?.stats(); // one native call for the counters below
    const connections = this.#connectionCounts(native);
    return {
      host: this.config.host,
      port: this.port,
      clients: this.#connections.size,
      connectionsTotal: connections.total,
      rejectedConnections: connections.rejected,
      commandsTotal: this.counters.commandsTotal,
      authFailures: this.counters.authFailures,
      protocolErrors: this.counters.protocolErrors,
      keys: this.#catalogSize().keys,
      valueBytes: bytes,
      stagingUsedBytes: this.staging.usedBytes,
      stagingCapacityBytes: this.staging.capacity,
      orphanedPages: this.counters.orphanedPages,
      unrecordedReads: this.#accesses?.dropped ?? 0,
      engine: this.engine,
      ...(native ?? {}),
    };
  }

  /**
   * Stops accepting; lets each client finish the command it is running (closing the rest after `graceMs`); with a
   * catalog in memory, deletes the door's pages from the hierarchy (the catalog that names them dies with the
   * process); a durable catalog's pages and manifests stay for the next start.
   */
  close(graceMs = 5000): Promise<void> {
    this.#closing ??= (async () => {
      clearInterval(this.#sweep);
      const server = this.#server;
      const listening = server ? new Promise<void>((resolve) => server.close(() => resolve())) : this.#clientsGone();
      for (const c of this.#connections) c.shutdown();
      const deadline = setTimeout(() => {
        for (const c of this.#connections) c.abort('server shutting down');
      }, graceMs);
      await listening;
      clearTimeout(deadline);
      this.#engine?.close();
      this.#accesses?.close();
      // A catalog in memory dies with the process: its pages go. A durable one is kept, with its pages, for the next start.
      if (!this.durable) {
        for (const ks of this.#tenants.values()) {
          for (const [key, e] of [...ks.entries()]) {
            ks.delete(key, () => undefined);
            if (e.pages.length) void this.#discard(e.pages);
          }
        }
      }
      this.#flushDiscards();
      while (this.#discards.size) await Promise.allSettled([...this.#discards]);
      this.staging.close();
    })();
    return this.#closing;
  }
}
