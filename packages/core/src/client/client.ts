/**
 * TierSyncClient: store, look up and load pages through a `tiersync serve` daemon running in another process.
 *
 * Transports (the control messages always go over the daemon's HTTP control plane, kept alive):
 * - `shm` (same host): the client maps the daemon's host tier (its /dev/shm file) and moves page bytes itself,
 *   on native threads: store = reserve slots, copy in (each page's CRC32C computed in the same pass), commit (the
 *   pages become visible with those checksums); load = pin (the daemon makes the pages resident), copy out checking
 *   each page's CRC32C in the same pass, release (naming pages that failed, which the daemon checks and drops). No
 *   page byte crosses a socket, and no page is taken whose bytes do not match its checksum.
 * - `peer` (another host, or a daemon without a shared-memory host tier): page bytes go over the native peer
 *   protocol (authenticated handshake, CRC32C checked on arrival); pins and key resolution still go over HTTP.
 *
 * Keys are the client's own (16..128 lower-case hex characters); the daemon stores each under its tenant's
 * derived key, so tenants never see each other's pages.
 */
import { HostArena, PeerClient, PeerStatus, TierSyncError, TransferBatch, TransferEngine, type DeviceArena } from '@tiersync/native';
import type { CommitResponse, HelloResponse, LookupResponse, PinResponse } from '../protocol/index.js';
import { ControlChannel } from './control.js';
import { DEFAULT_WINDOW_BYTES, windowsOf } from './windows.js';

export interface PageLocation {
  arena: HostArena | DeviceArena;
  offset: number;
  length: number;
}

export interface ClientOptions {
  /** The daemon's HTTP control plane, e.g. `http://127.0.0.1:7071`. */
  url: string;
  /** The tenant's bearer token (or the daemon's http.token when it has no tenants). */
  token?: string;
  /** `auto` (default): shared memory when the daemon offers it and its file can be mapped here, else peer. */
  transport?: 'auto' | 'shm' | 'peer';
  /** Secret of the peer handshake (needed for a non-loopback daemon over `peer`). */
  peerSecret?: string;
  /** Deadline of each control request and peer request, ms. Default 30000. */
  timeoutMs?: number;
  /** Native copy threads of the client's transfer engine (shm). Default 2. */
  threads?: number;
  /**
   * Bytes per window of a large load (default 64 MiB): the daemon pins the next window while the client copies this
   * one out. A batch that fits in one window is one request each way. Stores go in windows of the daemon's
   * `maxBatchPages`.
   */
  windowBytes?: number;
}

/** What the daemon offers this client (`hello`). */
export type Hello = HelloResponse;

/**
 * A store's answer: `stored`, `existing` (pages the daemon already held), `badChecksum` (indices of pages refused
 * at commit because their bytes did not match their CRC32C; empty from a daemon with `checked-on-serve`, which
 * checks pages wherever they are served instead).
 */
export type ClientStoreResult = CommitResponse;

/** Options of {@link TierSyncClient.store}. */
export interface ClientStoreOptions {
  /**
   * A soft retention hint for the pages (and those of them the daemon already holds): the session is expected back
   * in `expectedReturnMs` (waiting on a tool call), or `finished`. The daemon's `session-aware` tiers order victims
   * by it; it never refuses a store. Needs the daemon feature `retention-hint` (ERR_UNAVAILABLE otherwise); the
   * shared-memory path carries it (a `peer` transport store, which has no commit, does not).
   */
  retention?: { expectedReturnMs: number } | { finished: true };
}

/**
 * A lookup's answer: `present`, `lengths` (0 when absent), `tiers` (null when absent), `estimatedLoadMs`; with
 * `{ cluster: true }` and a daemon in a cluster, `cluster.holders`: for each page it lacks, the ids of the live
 * nodes that hold it (the rendezvous owner first; a load pulls it from there), or `cluster.error` when Redis is down.
 */
export type ClientLookupResult = LookupResponse;

export interface ClientLoadResult {
  loaded: number;
  /** Indices of pages found nowhere (recompute these), or whose copy failed its CRC32C check. */
  missing: number[];
  bytes: number;
}

export class TierSyncClient {
  readonly hello: Hello;
  readonly transport: 'shm' | 'peer';
  readonly #control: ControlChannel;
  readonly #shm: HostArena | undefined;
  readonly #engine: TransferEngine | undefined;
  readonly #peer: PeerClient | undefined;
  readonly #windowBytes: number;
  /** Host memory for pages to or from device arenas over the peer transport, kept between calls (one user at a time). */
  #staging: HostArena | undefined;
  #stagingBusy = false;
  #closed = false;

  private constructor(parts: { hello: Hello; transport: 'shm' | 'peer'; control: ControlChannel; shm?: HostArena; engine?: TransferEngine; peer?: PeerClient; windowBytes: number }) {
    this.hello = parts.hello;
    this.transport = parts.transport;
    this.#control = parts.control;
    this.#shm = parts.shm;
    this.#engine = parts.engine;
    this.#peer = parts.peer;
    this.#windowBytes = parts.windowBytes;
  }

  /**
   * Asks the daemon what it offers and sets up the transport.
   * @throws TierSyncError ERR_AUTH (wrong token), ERR_IO / ERR_TIMEOUT (daemon unreachable), ERR_UNAVAILABLE
   *   (the asked transport is not offered or cannot be set up here), ERR_GEOMETRY_MISMATCH (shm file changed)
   */
  static async connect(options: ClientOptions): Promise<TierSyncClient> {
    if (!options || typeof options !== 'object') throw new TierSyncError('options must be { url, token?, transport? }', 'ERR_INVALID_ARGUMENT');
    const want = options.transport ?? 'auto';
    if (!['auto', 'shm', 'peer'].includes(want)) throw new TierSyncError(`transport must be 'auto', 'shm' or 'peer', got '${String(want)}'`, 'ERR_INVALID_ARGUMENT');
    const timeoutMs = options.timeoutMs ?? 30_000;
    const windowBytes = options.windowBytes ?? DEFAULT_WINDOW_BYTES;
    if (!Number.isSafeInteger(windowBytes) || windowBytes < 1) throw new TierSyncError(`windowBytes must be a positive integer, got ${String(options.windowBytes)}`, 'ERR_INVALID_ARGUMENT');
    const control = new ControlChannel({ url: options.url, token: options.token, timeoutMs });
    try {
      const hello = await control.call('hello', undefined);
      let shmError: unknown;
      if (want !== 'peer' && hello.shm) {
        try {
          const shm = HostArena.create({ shmPath: hello.shm.path, capacity: hello.shm.capacity, pageSize: hello.shm.pageSize, fingerprint: hello.shm.fingerprint, create: false, attach: true });
          const engine = new TransferEngine({ threads: options.threads ?? 2 });
          // Same host: control requests go over the daemon's Unix socket when it offers one and it is reachable.
          if (hello.socket) await control.useSocket(hello.socket);
          return new TierSyncClient({ hello, transport: 'shm', control, shm, engine, windowBytes });
        } catch (e) {
          shmError = e;
          if (want === 'shm') throw e;
        }
      }
      if (want === 'shm') throw new TierSyncError(`daemon ${hello.node} offers no shared-memory host tier to tenant ${hello.tenant} (host tier without shm=, or tenant without sharedMemory)`, 'ERR_UNAVAILABLE');
      if (!hello.peer) throw new TierSyncError(`daemon ${hello.node} offers neither shared memory here nor a peer endpoint${shmError ? ` (shm: ${(shmError as Error).message})` : ''}`, 'ERR_UNAVAILABLE');
      const i = hello.peer.lastIndexOf(':');
      // The peer address is as the daemon advertises it; a loopback-bound daemon is reached at the URL's host.
      const advertised = hello.peer.slice(0, i).replace(/^\[|\]$/g, '');
      const host = advertised === '0.0.0.0' || advertised === '::' ? control.host : advertised;
      const peer = await PeerClient.connect({ host, port: Number(hello.peer.slice(i + 1)), streams: 2, timeoutMs, ...(options.peerSecret ? { secret: options.peerSecret } : {}) });
      const engine = new TransferEngine({ threads: options.threads ?? 2 });
      return new TierSyncClient({ hello, transport: 'peer', control, peer, engine, windowBytes });
    } catch (e) {
      control.close();
      throw e;
    }
  }

  get pageBytes(): number {
    return this.hello.pageBytes;
  }

  /** Where control requests go: `unix:PATH` (framed session, same host) or the daemon's HTTP origin. */
  get controlEndpoint(): string {
    return this.#control.endpoint;
  }

  /** Control requests sent so far (each is one round trip on the kept-alive channel). */
  get controlRequests(): number {
    return this.#control.requests;
  }

  /** Lends a staging arena of at least `bytes`; give it back with the returned release(). */
  #borrowStaging(bytes: number): { arena: HostArena; release: () => void } {
    if (this.#stagingBusy) {
      const temp = HostArena.create({ capacity: bytes });
      return { arena: temp, release: () => temp.close() };
    }
    if (!this.#staging || this.#staging.capacity < bytes) {
      this.#staging?.close();
      this.#staging = HostArena.create({ capacity: bytes, prefault: true });
    }
    this.#stagingBusy = true;
    return { arena: this.#staging, release: () => (this.#stagingBusy = false) };
  }

  #ready(): void {
    if (this.#closed) throw new TierSyncError('client is closed', 'ERR_CLOSED');
  }

  /** Keys are checked by the daemon (the protocol's schema, one place); here only what sizes the local checks. */
  #checkKeys(keys: readonly string[]): void {
    if (!Array.isArray(keys) || keys.length === 0) throw new TierSyncError('keys must be a non-empty array of page keys', 'ERR_INVALID_ARGUMENT');
  }

  #checkPages(pages: readonly PageLocation[], n: number, what: string, exact: boolean): void {
    if (!Array.isArray(pages) || pages.length !== n) throw new TierSyncError(`${what} must be an array of ${n} { arena, offset, length } (one per key)`, 'ERR_INVALID_ARGUMENT');
    pages.forEach((p, i) => {
      if (!p || typeof p !== 'object' || !Number.isSafeInteger(p.length) || p.length < 1 || p.length > this.pageBytes || (exact && p.length < 1)) {
        throw new TierSyncError(`${what}[${i}].length must be an integer in [1, ${this.pageBytes}] (the daemon's page size), got ${p?.length}`, 'ERR_INVALID_ARGUMENT');
      }
    });
  }

  /**
   * Stores `pages[i]` under `keys[i]` (1 byte up to the daemon's page size each). Resolves once the pages are
   * visible in the daemon's host tier with the CRC32C computed as they were copied; pages it already held count as
   * `existing`. More keys than the daemon's `maxBatchPages` go in several reservations, pipelined; when one fails,
   * the pages of those committed before it stay stored (a retry finds them `existing`).
   * @throws TierSyncError ERR_INVALID_ARGUMENT, ERR_TIER_FULL (no room in the host tier), ERR_UNAVAILABLE (a lease limit), ERR_AUTH
   */
  async store(keys: readonly string[], pages: readonly PageLocation[], options: ClientStoreOptions = {}): Promise<ClientStoreResult> {
    this.#ready();
    const retention = options.retention;
    if (retention !== undefined && !this.hello.features.includes('retention-hint')) {
      throw new TierSyncError('options.retention: this daemon does not take retention hints (feature retention-hint)', 'ERR_UNAVAILABLE');
    }
    this.#checkKeys(keys);
    this.#checkPages(pages, keys.length, 'pages', true);
    if (this.transport === 'peer') return this.#storePeer(keys, pages);
    // One reservation per daemon batch (maxBatchPages), pipelined. Smaller windows gained nothing measured: the
    // daemon's per-page work (key derivation, slot records) then runs beside copies that already fill the host's cores.
    const windows = windowsOf(keys.length, this.pageBytes, this.hello.maxBatchPages, Number.MAX_SAFE_INTEGER);
    const reserve = (w: number) => {
      const [a, b] = windows[w]!;
      const call = this.#control.call('reserve', { keys: keys.slice(a, b), lengths: pages.slice(a, b).map((p) => p.length) });
      call.catch(() => undefined); // awaited below; not an unhandled rejection meanwhile
      return call;
    };
    const commits: Array<Promise<CommitResponse>> = [];
    try {
      let next = reserve(0);
      for (let w = 0; w < windows.length; w++) {
        const r = await next;
        // The daemon reserves the next window while this one is copied.
        if (w + 1 < windows.length) next = reserve(w + 1);
        let crcs: number[];
        try {
          crcs = await this.#copyIn(r.offsets, pages, windows[w]![0]);
        } catch (e) {
          await this.#control.call('abort', { lease: r.lease }).catch(() => undefined);
          if (w + 1 < windows.length) await next.then((n) => this.#control.call('abort', { lease: n.lease }), () => undefined).catch(() => undefined);
          throw e;
        }
        const commit = this.#control.call('commit', retention === undefined ? { lease: r.lease, crcs } : { lease: r.lease, crcs, retention });
        commit.catch(() => undefined);
        commits.push(commit);
      }
    } catch (e) {
      // Windows committed before the failure stay stored (a retry finds them `existing`).
      await Promise.allSettled(commits);
      throw e;
    }
    const done = await Promise.all(commits);
    const out: ClientStoreResult = { stored: 0, existing: 0, badChecksum: [] };
    done.forEach((c, w) => {
      out.stored += c.stored;
      out.existing += c.existing;
      for (const i of c.badChecksum) out.badChecksum.push(windows[w]![0] + i);
    });
    return out;
  }


  /**
   * Copies pages `pages[base + i]` into reserved slots `offsets[i]` (-1: the daemon holds that page already) on the
   * engine's threads, each page's CRC32C computed in the same pass. Returns the CRC32C per offset (0 where not copied).
   */
  async #copyIn(offsets: readonly number[], pages: readonly PageLocation[], base: number): Promise<number[]> {
    const crcs = new Array<number>(offsets.length).fill(0);
    const batch = new TransferBatch();
    const moved: number[] = [];
    offsets.forEach((o, i) => {
      if (o < 0) return;
      const p = pages[base + i]!;
      batch.add(p.arena, p.offset, this.#shm!, o, p.length);
      moved.push(i);
    });
    if (moved.length) {
      const done = await this.#engine!.submit(batch, { checksums: true, priority: 'demand' });
      moved.forEach((i, k) => (crcs[i] = done.checksums![k]!));
    }
    return crcs;
  }

  /** Which of `keys` the daemon holds (any tier), with their lengths; with `cluster`, which other hosts hold the rest. */
  async lookup(keys: readonly string[], options: { cluster?: boolean } = {}): Promise<ClientLookupResult> {
    this.#ready();
    this.#checkKeys(keys);
    return this.#control.call('lookup', { keys: [...keys], ...(options.cluster ? { cluster: true } : {}) });
  }

  /**
   * Loads `keys[i]` into `into[i]` (room for the stored length). Every page is checked against its CRC32C as it
   * is copied; pages found nowhere, or whose copy failed its check, are listed in `missing` (recompute those).
   */
  async load(keys: readonly string[], into: readonly PageLocation[]): Promise<ClientLoadResult> {
    this.#ready();
    this.#checkKeys(keys);
    this.#checkPages(into, keys.length, 'into', false);
    const windows = windowsOf(keys.length, this.pageBytes, this.hello.maxBatchPages, this.#windowBytes);
    const pin = (w: number) => {
      const [a, b] = windows[w]!;
      const call = this.#control.call('pin', { keys: keys.slice(a, b), ...(this.transport === 'peer' ? { storedKeys: true } : {}) });
      call.catch(() => undefined); // awaited below; not an unhandled rejection meanwhile
      return call;
    };
    const out: ClientLoadResult = { loaded: 0, missing: [], bytes: 0 };
    const releases: Array<Promise<unknown>> = [];
    const release = (lease: number, damaged: number[] = []) => {
      // Pages whose copy failed its CRC32C check are named, so the daemon checks and drops them at the source.
      const canName = damaged.length > 0 && this.hello.features.includes('release-damaged');
      releases.push(this.#control.call('release', canName ? { lease, damaged } : { lease }).catch(() => undefined));
    };
    let next: Promise<PinResponse> | undefined = pin(0);
    try {
      for (let w = 0; w < windows.length; w++) {
        const p: PinResponse = await next!;
        // The daemon pins the next window (bringing its pages up when needed) while this one is copied out.
        next = w + 1 < windows.length ? pin(w + 1) : undefined;
        const base = windows[w]![0];
        let damaged: number[] = [];
        try {
          const r = await this.#loadPinned(p, into.slice(base, windows[w]![1]), base);
          damaged = r.damaged;
          out.loaded += r.loaded;
          out.bytes += r.bytes;
          for (const i of r.missing) out.missing.push(base + i);
        } finally {
          release(p.lease, damaged);
        }
      }
    } catch (e) {
      if (next) void next.then((p) => release(p.lease), () => undefined);
      throw e;
    } finally {
      await Promise.all(releases);
    }
    return out;
  }

  /**
   * Copies one pin's pages out (into[i] for its i-th key; `base` numbers them in errors). Returns what arrived, the
   * indices missing (found nowhere, or failed their check), and those whose bytes did not match (`damaged`).
   */
  async #loadPinned(pin: PinResponse, into: readonly PageLocation[], base: number): Promise<ClientLoadResult & { damaged: number[] }> {
    const found: number[] = [];
    pin.offsets.forEach((o, i) => o >= 0 && found.push(i));
    for (const i of found) {
      if (into[i]!.length < pin.lengths[i]!) throw new TierSyncError(`into[${base + i}] holds ${into[i]!.length} bytes, the page has ${pin.lengths[i]}`, 'ERR_OUT_OF_RANGE');
    }
    const { bad, corrupt } = this.transport === 'shm' ? await this.#copyOut(found, pin, into) : await this.#getPeer(found, pin, into);
    const missing: number[] = [];
    pin.offsets.forEach((o, i) => (o < 0 || bad.has(i)) && missing.push(i));
    let bytes = 0;
    for (const i of found) if (!bad.has(i)) bytes += pin.lengths[i]!;
    return { loaded: found.length - bad.size, missing, bytes, damaged: corrupt };
  }

  /**
   * Copies pinned pages out of the shared arena, checking each page's CRC32C in the same pass. Returns the indices
   * not delivered (`bad`) and, among them, those whose bytes did not match (`corrupt`).
   */
  async #copyOut(found: number[], pin: PinResponse, into: readonly PageLocation[]): Promise<{ bad: Set<number>; corrupt: number[] }> {
    if (!found.length) return { bad: new Set(), corrupt: [] };
    const batch = new TransferBatch();
    for (const i of found) batch.add(this.#shm!, pin.offsets[i]!, into[i]!.arena, into[i]!.offset, pin.lengths[i]!);
    const r = await this.#engine!.submit(batch, { priority: 'demand', expected: Uint32Array.from(found, (i) => pin.crcs[i]!) });
    const corrupt = (r.mismatches ?? []).map((k) => found[k]!);
    return { bad: new Set(corrupt), corrupt };
  }

  /**
   * Peer transport: fetches pinned pages (CRC32C checked on arrival), staging through host memory for device
   * destinations. Returns the indices not delivered (`bad`) and those among them that arrived damaged (`corrupt`).
   */
  async #getPeer(found: number[], pin: PinResponse, into: readonly PageLocation[]): Promise<{ bad: Set<number>; corrupt: number[] }> {
    if (!found.length) return { bad: new Set(), corrupt: [] };
    const keys = pin.keys!;
    const direct = found.every((i) => into[i]!.arena instanceof HostArena);
    const lent = direct ? undefined : this.#borrowStaging(found.length * this.pageBytes);
    const staging = lent?.arena;
    try {
      const arena = (staging ?? into[found[0]!]!.arena) as HostArena;
      const bad = new Set<number>();
      const corrupt: number[] = [];
      // One request per destination arena (the peer protocol writes into one arena per request).
      const groups = new Map<HostArena, number[]>();
      for (const i of found) {
        const a = staging ?? (into[i]!.arena as HostArena);
        groups.set(a, [...(groups.get(a) ?? []), i]);
      }
      for (const [a, idx] of groups) {
        const r = await this.#peer!.get(
          a,
          idx.map((i) => keys[i]!),
          Float64Array.from(idx, (i, k) => (staging ? k * this.pageBytes : into[i]!.offset)),
          Uint32Array.from(idx, (i) => (staging ? this.pageBytes : into[i]!.length)),
        );
        idx.forEach((i, k) => {
          if (r.statuses[k] === PeerStatus.ok) return;
          bad.add(i);
          if (r.statuses[k] === PeerStatus.badChecksum) corrupt.push(i);
        });
      }
      if (staging) {
        const batch = new TransferBatch();
        const ok = found.filter((i) => !bad.has(i));
        ok.forEach((i) => batch.add(arena, found.indexOf(i) * this.pageBytes, into[i]!.arena, into[i]!.offset, pin.lengths[i]!));
        if (ok.length) await this.#engine!.submit(batch, { priority: 'demand' });
      }
      return { bad, corrupt };
    } finally {
      lent?.release();
    }
  }

  /** Peer transport store: the daemon names the tenant's stored keys, the bytes go over the peer protocol. */
  async #storePeer(keys: readonly string[], pages: readonly PageLocation[]): Promise<ClientStoreResult> {
    const { keys: stored } = await this.#control.call('resolve', { keys: [...keys] });
    const direct = pages.every((p) => p.arena === pages[0]!.arena && p.arena instanceof HostArena);
    const lent = direct ? undefined : this.#borrowStaging(pages.length * this.pageBytes);
    const staging = lent?.arena;
    try {
      // Staged pages get their CRC32C on the staging copy, so the peer streams need not read them again for it.
      let crcs: Uint32Array | undefined;
      if (staging) {
        const batch = new TransferBatch();
        pages.forEach((p, i) => batch.add(p.arena, p.offset, staging, i * this.pageBytes, p.length));
        crcs = (await this.#engine!.submit(batch, { priority: 'demand', checksums: true })).checksums;
      }
      const arena = staging ?? (pages[0]!.arena as HostArena);
      const r = await this.#peer!.put(
        arena,
        stored,
        Float64Array.from(pages, (p, i) => (staging ? i * this.pageBytes : p.offset)),
        Uint32Array.from(pages, (p) => p.length),
        crcs,
      );
      const st = Array.from(r.statuses);
      if (st.some((s) => s === PeerStatus.full)) throw new TierSyncError(`daemon ${this.hello.node}'s host tier has no room for ${keys.length} page(s)`, 'ERR_TIER_FULL');
      return {
        stored: st.filter((s) => s === PeerStatus.ok).length,
        existing: st.filter((s) => s === PeerStatus.existing).length,
        badChecksum: st.map((s, i) => (s === PeerStatus.badChecksum ? i : -1)).filter((i) => i >= 0),
      };
    } finally {
      lent?.release();
    }
  }

  /** Removes pages (pinned ones stay). */
  async delete(keys: readonly string[]): Promise<{ deleted: number; pinned: number; missing: number }> {
    this.#ready();
    this.#checkKeys(keys);
    return this.#control.call('delete', { keys: [...keys] });
  }

  /** Unmaps the shared arena, closes the peer connection and the control channel. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#peer?.close();
    await this.#engine?.close();
    this.#shm?.close();
    this.#staging?.close();
    this.#control.close();
  }
}
