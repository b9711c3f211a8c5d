/**
 * The daemon's side of `@tiersync/core/client`: the control messages of clients in other processes, on
 * `/v1/client/*` of the HTTP control plane. Page bytes never cross this channel:
 * - same host: the client maps the host tier's /dev/shm file; the daemon reserves slots (`reserve`), the client
 *   copies pages into them on its own native threads, computing each page's CRC32C in the same pass, and `commit`
 *   makes them visible with those checksums and records them in the block index; `pin` makes pages resident in the
 *   host tier and holds them while the client copies them out (checking their CRC32C), `release` lets go;
 * - another host: the same `pin`/`resolve` answers, with bytes moving over the native peer protocol.
 *
 * Integrity: no page is served unless its bytes match its CRC32C. With a host tier that checks its reads (the default
 * with shm=), a commit records the client's checksums without reading the bytes a second time, since the check has
 * to happen where pages are served anyway (a client mapping the file can change a slot after any commit-time check):
 * every read of the host tier (hierarchy loads, the RESP door, copies down to lower tiers) checks each page; a peer
 * checks what it receives; a same-host client checks its copy-out and names failed pages in `release`, or, when it
 * cannot checksum natively (the Python client), has the daemon check each page at `pin` (`verify`, #verifyPinned). A damaged
 * page found by any of them is dropped from the host tier and reported (`integrity:failed`, #dropDamaged). With a
 * host tier that does not check its reads, commit reads every page on native threads and refuses mismatches.
 *
 * Every request speaks for one tenant (its bearer token), and every key it names is turned into the tenant's
 * stored key (tenants.ts). Reservations and pins are leases: bounded in number and pages, undone when their
 * deadline passes, so a client that dies or stalls cannot hold slots or grow the daemon's memory.
 */
import type { IncomingMessage } from 'node:http';
import { HostArena, TierSyncError, crc32cRanges } from '@tiersync/native';
import type { HostTier, PageKey } from '@tiersync/tiers';
import type { Logger } from 'pino';
import { Counter, type Registry } from 'prom-client';
import type { RetentionHint } from '@tiersync/policy';
import type { TierSync } from '../hierarchy/index.js';
import type { ClusterRegistry } from './registry.js';
import { rendezvousOwner } from './rendezvous.js';
import { ClusterPeers } from './cluster-peers.js';
import { AccessBatch, warnRefused } from './access-batch.js';
import { PageRecorder } from './page-recorder.js';
import { crc32cLibrary } from './crc32c-library.js';
import {
  CLIENT_FEATURES,
  CLIENT_PROTOCOL_VERSION,
  ProtocolError,
  clientOps,
  isClientOp,
  parseRequest,
  type ClientOp,
  type ClientResponse,
  type CommitRequest,
  type LookupRequest,
  type PinRequest,
  type ReleaseRequest,
  type ReserveRequest,
} from '../protocol/index.js';
import { Tenants, type Tenant } from './tenants.js';

export interface ClientApiOptions {
  ts: TierSync;
  /** The served host tier (its arena is what same-host clients map). */
  hostTier: HostTier;
  hostTierName: string;
  tenants: Tenants;
  maxBatchPages: number;
  leaseMs: number;
  maxLeases: number;
  /** How other hosts reach this daemon's peer port, for remote clients; '' when peers are off. */
  peerAddress: string;
  peerSecret?: string | undefined;
  peerTimeoutMs: number;
  /**
   * Records the pages of peer PUTs acknowledged so far (PeerServer.drain): called before each request, so one
   * that follows a PUT's ack on the peer port finds its pages, whichever channel carries it.
   */
  settlePeerPuts?: () => void;
  registry?: ClusterRegistry | undefined;
  placement: 'none' | 'rendezvous';
  nodeId: string;
  /** The Unix socket the daemon also serves its HTTP API on (same-host clients), when it has one. */
  socketPath?: string | undefined;
  log: Logger;
  metrics: Registry;
}

interface Lease {
  id: number;
  kind: 'reserve' | 'pin';
  tenant: Tenant;
  keys: PageKey[];
  offsets: Float64Array;
  lengths: Uint32Array;
  expires: number;
  /** A commit is checking this reservation: no second commit or abort meanwhile. */
  busy?: boolean;
  /** Pin leases: the keys also pinned in the hierarchy (those brought up from lower tiers or peers). */
  indexPinned?: PageKey[];
  /** Pin leases: the CRC32C the tier recorded for each pinned page (what the client checks its copy against). */
  crcs?: Uint32Array;
}

/** Stored-key derivations remembered (about 150 bytes each). */
const DERIVED_KEYS = 1 << 17;

/** Native threads that check a commit's CRC32C (the host's cores are shared with the clients' copies). */
const CHECK_THREADS = 2;
/** Requests checking fewer bytes than this use one native thread (starting more costs more than it saves). */
const CHECK_SPLIT_BYTES = 64 << 20;

/**
 * Longest the recorder holds committed pages back while reservations are open (a client storing in pipelined chunks
 * has the next chunks reserved): its commits then go into one index transaction after the last one, rather than one
 * per chunk between its requests. Lookups and pins answer from the host tier meanwhile.
 */
const RECORD_HOLD_MS = 50;

/** Slots a reservation took (offset -1: the key was held already). */
function slotsIn(offsets: Float64Array): number {
  let n = 0;
  for (const o of offsets) if (o >= 0) n++;
  return n;
}

export class ClientApi {
  readonly #o: ClientApiOptions;
  readonly #leases = new Map<number, Lease>();
  readonly #leasedPages = new Map<string, number>();
  /** Connections to the other nodes' peer servers (cluster pulls and pushes), made on first use (#peer). */
  #peers: ClusterPeers | undefined;
  readonly #sweep: NodeJS.Timeout;
  readonly #pages: Counter<'tenant' | 'op'>;
  readonly #refused: Counter<'tenant' | 'why'>;
  /** Derived stored keys by tenant and client key. */
  readonly #derived = new DerivedKeys(DERIVED_KEYS);
  /** Open load leases holding each host-tier page (pinned in the tier driver, in memory). */
  readonly #tierPins = new Map<PageKey, number>();
  /** Pages the hierarchy evicted from the host tier while a lease held them: freed when the last lease closes. */
  readonly #evictedWhilePinned = new Set<PageKey>();
  /** Committed pages on their way to the block index (the same recorder as the RESP door's). */
  readonly #unrecorded: PageRecorder;
  /** Retention hints of committed pages waiting for the index (applied once it records them). */
  readonly #retention = new Map<PageKey, RetentionHint>();
  /**
   * Pages pin leases found already in the host tier (pinned there without the hierarchy's load()), on their way to
   * its eviction policy (TierSync.recordHits), in batches: without it a page only clients read would look cold.
   */
  readonly #accesses: AccessBatch;
  /** Host-tier pages the hierarchy found damaged on read, dropped on the next turn (#onIntegrity). */
  readonly #damagedByReads = new Set<PageKey>();
  /**
   * Damaged pages dropped while a reader still pinned them in the host tier: the index forgot them, the tier keeps
   * them until the pin goes. Deleted from the tier at each sweep until it lets go (#deleteDamaged).
   */
  readonly #damagedPinned = new Set<PageKey>();
  #nextLease = 1;
  /** Most keys of a reserve or pin (which take host-tier slots): what the hello advertises as maxBatchPages. */
  readonly #slotBatchPages: number;
  /** Open reservations (reserve leases). */
  #reservations = 0;
  /**
   * Host-tier slots taken by open reservations and bring-ups, not yet pages the hierarchy counts: each new
   * reservation asks the hierarchy for room for these too, or two in flight (a client's pipelined chunks) would
   * each find the room the other took.
   */
  #slotsInFlight = 0;
  /** Wakes the recorder held back by open reservations (#recordTurn), once the last one closes. */
  #wakeRecorder: (() => void) | undefined;

  constructor(options: ClientApiOptions) {
    this.#o = options;
    // A reservation or pin the host tier could never take is refused by size up front, and the hello's bound tells
    // clients to split their calls so: at most a quarter of the tier's slots, so that the chunks a client pipelines
    // (one committing, one being copied, the next reserved) fit together.
    const hostPages = Math.floor(options.hostTier.stats().capacityBytes / options.ts.pageBytes);
    this.#slotBatchPages = Math.min(options.maxBatchPages, Math.max(1, Math.floor(hostPages / 4)));
    this.#unrecorded = new PageRecorder({
      ts: options.ts,
      tierName: options.hostTierName,
      turn: () => this.#recordTurn(),
      onRecorded: (batch) => this.#retainRecorded(batch),
      onFailed: (batch, e) => {
        // The bytes stay in the host tier (its slot table records them); the recorder tries again after a pause.
        this.#o.log.error({ err: (e as Error).message, pages: batch.length }, 'could not record committed client pages in the block index; retrying');
      },
    });
    this.#accesses = new AccessBatch({
      record: (keys) => options.ts.recordHits(options.hostTierName, keys),
      onFailed: warnRefused(options.log, 'client reads'),
    });
    this.#sweep = setInterval(() => this.#expire(Date.now()), Math.min(1000, Math.max(50, options.leaseMs / 4)));
    this.#sweep.unref();
    this.#pages = new Counter({ name: 'tiersync_client_pages_total', help: 'Pages handled for clients, per tenant and operation (store, load, lookup_hit, lookup_miss, pulled, pushed).', labelNames: ['tenant', 'op'], registers: [options.metrics] });
    this.#refused = new Counter({ name: 'tiersync_client_refused_total', help: 'Client requests refused, per tenant and reason (auth, limit, checksum).', labelNames: ['tenant', 'why'], registers: [options.metrics] });
    options.ts.on('block:evicted', this.#onEvicted);
    options.ts.on('integrity:failed', this.#onIntegrity);
  }

  /**
   * Whether commits record the client's CRC32C without reading the bytes again: only when the host tier checks every
   * read against it (host tier option verify, the default with shm=), so a mismatch is caught wherever it is served.
   */
  get #checkedOnServe(): boolean {
    return this.#o.hostTier.capabilities.verifiesOnRead;
  }

  /**
   * The hierarchy read a host-tier page whose bytes failed their CRC32C (a load, the RESP door, a copy down): it
   * counted and reported it, and did not serve or copy it. The page is dropped from the host tier on the next turn
   * (after the read that found it has let go of its slot).
   */
  readonly #onIntegrity = (e: { key: PageKey; tier: string }): void => {
    if (e.tier !== this.#o.hostTierName) return;
    if (!this.#damagedByReads.size) setImmediate(() => this.#dropDamaged(this.#takeDamagedByReads(), 'found by a read of the host tier'));
    this.#damagedByReads.add(e.key);
  };

  #takeDamagedByReads(): PageKey[] {
    const keys = [...this.#damagedByReads];
    this.#damagedByReads.clear();
    return keys;
  }

  /**
   * Drops host-tier pages whose bytes do not match their CRC32C: from the pages the index has yet to record, from
   * the block index and planner (when they still list the host copy; lower copies are untouched), and from the tier.
   * A slot an open load lease still pins is freed when the last such lease closes (#onEvicted, #untrackPins).
   * `report`: the damage was found here (a client's copy-out, confirmed by the daemon), so it is counted and
   * emitted as `integrity:failed` like a hierarchy read's.
   */
  #dropDamaged(keys: readonly PageKey[], why: string, report = false): void {
    if (!keys.length) return;
    const { ts, hostTier, hostTierName } = this.#o;
    for (const k of keys) {
      this.#unrecorded.delete(k);
      this.#retention.delete(k);
    }
    if (report) {
      for (const key of keys) {
        ts.counters.integrityFailures++;
        ts.emit('integrity:failed', { key, tier: hostTierName, error: new TierSyncError(`host tier: page ${key} failed its CRC32C check (${why})`, 'ERR_CHECKSUM', { tier: 'host' }) });
      }
    }
    this.#deleteDamaged(keys);
    this.#o.log.error({ pages: keys.length, why }, 'pages whose bytes did not match their CRC32C were dropped from the host tier');
  }

  /**
   * Forgets damaged pages' host copies in the block index and planner (when they still list them; lower copies are
   * untouched) and deletes them from the host tier. A page a reader still pins stays in the tier: it is kept in
   * #damagedPinned and deleted again at the next sweep, so its slot is not lost.
   */
  #deleteDamaged(keys: readonly PageKey[]): void {
    const { ts, hostTier, hostTierName } = this.#o;
    const known = ts.lookupKeys(keys);
    const listed = known.pages.filter((p) => p.tiers.includes(hostTierName)).map((p) => p.key);
    if (listed.length) ts.forgetPages(hostTierName, listed);
    try {
      const { pinned } = hostTier.deleteNow(keys);
      for (const k of keys) this.#damagedPinned.delete(k);
      for (const k of pinned) this.#damagedPinned.add(k);
    } catch {
      // The tier is closing: nothing left to serve from it.
      this.#damagedPinned.clear();
    }
  }

  /**
   * The hierarchy evicted host-tier pages. One a load lease holds in the tier (pinRemote) keeps its slot, since the
   * client may be copying out of it; the eviction is finished when the last such lease closes (#close).
   */
  readonly #onEvicted = (e: { keys: readonly PageKey[]; tier: string }): void => {
    if (e.tier !== this.#o.hostTierName || !this.#tierPins.size) return;
    for (const k of e.keys) if (this.#tierPins.has(k)) this.#evictedWhilePinned.add(k);
  };

  get arena(): HostArena {
    const a = this.#o.hostTier.arena;
    if (!(a instanceof HostArena)) throw new ProtocolError('the host tier is closed', 'ERR_CLOSED', 503);
    return a;
  }

  /** Slots of the host tier the hierarchy cannot see: kept for open load leases after an eviction, or in flight. */
  #hiddenSlots(): number {
    return this.#evictedWhilePinned.size + this.#slotsInFlight;
  }

  /** ERR_TIER_FULL for a request (of `own` pages, claimed already) the host tier found no slots for, with what holds them. */
  #noRoom(what: string, own: number): ProtocolError {
    const tier = this.#o.hostTier.stats();
    const others = Math.max(0, this.stats().leasedPages - own);
    const slots = Math.floor(tier.capacityBytes / this.#o.ts.pageBytes);
    return new ProtocolError(`the host tier has no room to ${what} now: of its ${slots} slots, ${tier.pinned} hold pinned pages and other open client leases name ${others} pages; retry once leases end`, 'ERR_TIER_FULL', 507);
  }

  /** Open leases, the pages they hold, and committed pages the block index has yet to record. */
  stats(): { leases: number; leasedPages: number; unrecordedPages: number } {
    let pages = 0;
    for (const n of this.#leasedPages.values()) pages += n;
    return { leases: this.#leases.size, leasedPages: pages, unrecordedPages: this.#unrecorded.size };
  }

  /**
   * Serves one `/v1/client/<op>` request: the tenant by its token, the method, then the body validated once against
   * the op's schema (protocol/client.ts); the handlers below receive typed, checked values.
   */
  async handle(op: string, req: IncomingMessage, readBody: () => Promise<unknown>): Promise<{ status: number; body: unknown }> {
    return this.serve(op, this.identify(req.headers.authorization ?? ''), req.method ?? '', readBody);
  }

  /** The tenant of an `Authorization` value (`Bearer <token>`), or ERR_AUTH (401). */
  identify(authorization: string): Tenant {
    const tenant = this.#o.tenants.identifyToken(/^Bearer (.+)$/i.exec(authorization)?.[1] ?? '');
    if (!tenant) {
      this.#refused.inc({ tenant: '', why: 'auth' });
      throw new ProtocolError('missing or wrong bearer token (it names the tenant)', 'ERR_AUTH', 401);
    }
    return tenant;
  }

  /** Serves one op for a known tenant, whatever carried it (HTTP, or a frame on the client socket). */
  async serve(op: string, tenant: Tenant, method: string, readBody: () => unknown): Promise<{ status: number; body: unknown }> {
    if (!isClientOp(op)) throw new ProtocolError(`no route /v1/client/${op}`, 'ERR_NOT_FOUND', 404);
    const spec = clientOps[op];
    if (method !== spec.method) throw new ProtocolError(`/v1/client/${op} takes ${spec.method}`, 'ERR_INVALID_ARGUMENT', 405, 'method');
    if (op === 'hello' || !spec.request) return { status: 200, body: this.#hello(tenant) };
    const body = parseRequest(spec.request, await readBody(), op);
    this.#o.settlePeerPuts?.();
    if ('keys' in body) {
      const n = body.keys.length;
      if (n > this.#o.maxBatchPages) throw new ProtocolError(`${op}: at most ${this.#o.maxBatchPages} keys per request (client.maxBatchPages), got ${n}`, 'ERR_OUT_OF_RANGE', 413, 'keys');
      if ((op === 'reserve' || op === 'pin') && n > this.#slotBatchPages) throw new ProtocolError(`${op}: at most ${this.#slotBatchPages} keys per request (a quarter of the host tier's slots), got ${n}`, 'ERR_OUT_OF_RANGE', 413, 'keys');
    }
    return { status: 200, body: await this.#serve(op, tenant, body) };
  }

  async #serve(op: Exclude<ClientOp, 'hello'>, tenant: Tenant, body: Exclude<ReturnType<typeof parseRequest>, undefined>): Promise<ClientResponse<typeof op>> {
    switch (op) {
      case 'reserve':
        return this.#reserve(tenant, body as ReserveRequest);
      case 'commit':
        return this.#commit(tenant, body as CommitRequest);
      case 'abort':
        return this.#release(tenant, (body as { lease: number }).lease, 'reserve');
      case 'release':
        return this.#releasePin(tenant, body as ReleaseRequest);
      case 'lookup':
        return this.#lookup(tenant, body as LookupRequest);
      case 'pin':
        return this.#pin(tenant, body as PinRequest);
      case 'resolve':
        return this.#resolve(tenant, (body as { keys: string[] }).keys);
      case 'delete':
        return this.#delete(tenant, (body as { keys: string[] }).keys);
    }
  }

  #hello(tenant: Tenant): ClientResponse<'hello'> {
    const arena = this.arena;
    const shm = tenant.sharedMemory && arena.shmPath ? { path: arena.shmPath, capacity: arena.capacity, pageSize: arena.pageSize, fingerprint: `${this.#o.ts.namespace.model}/${this.#o.ts.namespace.layoutFingerprint}` } : null;
    return {
      protocol: CLIENT_PROTOCOL_VERSION,
      node: this.#o.nodeId,
      tenant: tenant.name,
      model: this.#o.ts.config.model,
      pageBytes: this.#o.ts.pageBytes,
      tokensPerPage: this.#o.ts.tokensPerPage,
      maxBatchPages: this.#slotBatchPages,
      leaseMs: this.#o.leaseMs,
      shm,
      // The Unix socket only helps a client that shares this host's filesystem, i.e. one offered shared memory.
      socket: shm ? (this.#o.socketPath ?? null) : null,
      peer: this.#o.peerAddress || null,
      features: CLIENT_FEATURES.filter((f) => (f !== 'checked-on-serve' || this.#checkedOnServe) && (f !== 'crc32c-library' || (shm && crc32cLibrary()))),
      // Only a client that maps this host's shared memory can load a library from this host's filesystem.
      ...(shm && crc32cLibrary() ? { crc32cLibrary: crc32cLibrary() } : {}),
    };
  }

  /**
   * The tenant's stored keys of validated client keys. Derivations are remembered (DerivedKeys, bounded): a store,
   * its lookups and its loads name the same keys, and each HMAC costs microseconds.
   */
  #stored(tenant: Tenant, keys: readonly string[]): PageKey[] {
    const out = new Array<PageKey>(keys.length);
    const missing: number[] = [];
    for (let i = 0; i < keys.length; i++) {
      const k = this.#derived.get(tenant, keys[i]!);
      if (k === undefined) missing.push(i);
      else out[i] = k;
    }
    if (missing.length) {
      // New pages derive together: one native call instead of an HMAC object per key.
      const derived = Tenants.storedKeys(tenant, missing.map((i) => keys[i]!));
      missing.forEach((i, j) => {
        out[i] = derived[j]!;
        this.#derived.set(tenant, keys[i]!, derived[j]!);
      });
    }
    return out;
  }

  /** Checks a per-key array against the key count and bounds the schema cannot know (the page size, the lease). */
  #perKey(values: readonly number[], field: string, n: number, max: number): void {
    if (values.length !== n) throw new ProtocolError(`${field} must have ${n} entries (one per key), got ${values.length}`, 'ERR_INVALID_ARGUMENT', 400, field);
    for (let i = 0; i < n; i++) {
      if (values[i]! > max) throw new ProtocolError(`${field}[${i}] must be at most ${max}, got ${values[i]}`, 'ERR_INVALID_ARGUMENT', 400, `${field}[${i}]`);
    }
  }

  #lease(tenant: Tenant, id: number, kind: Lease['kind']): Lease {
    const lease = this.#leases.get(id);
    // Another tenant's lease reads as absent: ids say nothing about what others hold.
    if (!lease || lease.tenant !== tenant || lease.kind !== kind || lease.busy) throw new ProtocolError(`no open ${kind === 'reserve' ? 'reservation' : 'pin'} ${id} (expired after ${this.#o.leaseMs} ms, or already closed)`, 'ERR_NOT_FOUND', 404, 'lease');
    return lease;
  }

  /** Claims room for `pages` more leased pages of `tenant`, or refuses (429). */
  #claim(tenant: Tenant, pages: number): void {
    const held = this.#leasedPages.get(tenant.name) ?? 0;
    if (this.#leases.size >= this.#o.maxLeases || held + pages > tenant.maxLeasedPages) {
      this.#refused.inc({ tenant: tenant.name, why: 'limit' });
      throw new ProtocolError(
        this.#leases.size >= this.#o.maxLeases
          ? `${this.#o.maxLeases} leases are open (client.maxLeases); commit or release some first`
          : `tenant ${tenant.name} holds ${held} leased page(s); ${pages} more would pass its limit of ${tenant.maxLeasedPages}`,
        'ERR_UNAVAILABLE',
        429,
      );
    }
    this.#leasedPages.set(tenant.name, held + pages);
  }

  #open(lease: Omit<Lease, 'id' | 'expires'>, ttlMs = this.#o.leaseMs): Lease {
    const l: Lease = { ...lease, id: this.#nextLease++, expires: Date.now() + ttlMs };
    this.#leases.set(l.id, l);
    if (l.kind === 'reserve') {
      this.#reservations++;
      this.#slotsInFlight += slotsIn(l.offsets);
    }
    return l;
  }

  /** Closes a lease: a reservation's slots become the pages `commit` accepts (with `crcs`) or free again. */
  #close(lease: Lease, commit?: { ok: (i: number) => boolean; crcs: Uint32Array }): void {
    if (!this.#leases.delete(lease.id)) return;
    this.#leasedPages.set(lease.tenant.name, Math.max(0, (this.#leasedPages.get(lease.tenant.name) ?? 0) - lease.keys.length));
    const tier = this.#o.hostTier;
    if (lease.kind === 'reserve') {
      if (--this.#reservations === 0) this.#wakeRecorder?.();
      this.#slotsInFlight -= slotsIn(lease.offsets);
      tier.commitRemote(lease.keys, lease.offsets, lease.lengths, commit?.crcs ?? new Uint32Array(lease.keys.length), commit?.ok ?? (() => false));
    } else {
      const held = lease.keys.filter((_, i) => lease.offsets[i]! >= 0);
      tier.unpin(held);
      if (lease.indexPinned?.length) this.#o.ts.unpinKeys(lease.indexPinned, `client:${lease.id}`, { durable: false });
      this.#untrackPins(held);
    }
  }

  #trackPins(keys: readonly PageKey[]): void {
    for (const k of keys) this.#tierPins.set(k, (this.#tierPins.get(k) ?? 0) + 1);
  }

  /** Drops a lease's tier pins; finishes evictions that waited for them (unless the page was recorded again since). */
  #untrackPins(keys: readonly PageKey[]): void {
    const free: PageKey[] = [];
    for (const k of keys) {
      const n = (this.#tierPins.get(k) ?? 1) - 1;
      if (n > 0) {
        this.#tierPins.set(k, n);
        continue;
      }
      this.#tierPins.delete(k);
      if (this.#evictedWhilePinned.delete(k)) free.push(k);
    }
    if (!free.length) return;
    const known = this.#o.ts.lookupKeys(free);
    const gone = free.filter((k, i) => !known.present[i] || !known.pages[known.indices.indexOf(i)]!.tiers.includes(this.#o.hostTierName));
    if (gone.length) this.#o.hostTier.deleteNow(gone.filter((k) => !this.#unrecorded.has(k)));
  }

  #expire(now: number): void {
    if (this.#damagedPinned.size) this.#deleteDamaged([...this.#damagedPinned]);
    for (const l of [...this.#leases.values()]) {
      if (l.expires > now) continue;
      this.#o.log.warn({ lease: l.id, kind: l.kind, tenant: l.tenant.name, pages: l.keys.length }, 'client lease expired; undone');
      this.#close(l);
    }
  }

  async #reserve(tenant: Tenant, body: ReserveRequest): Promise<ClientResponse<'reserve'>> {
    const keys = this.#stored(tenant, body.keys);
    this.#perKey(body.lengths, 'lengths', keys.length, this.#o.ts.pageBytes);
    this.#claim(tenant, keys.length);
    try {
      // Slots that evicted pages keep for open load leases are invisible to the hierarchy: ask for room for them too.
      const got = await this.#unrecorded.reserve(this.#o.hostTier, keys, () => this.#hiddenSlots());
      if (!got) throw this.#noRoom(`store ${keys.length} page(s)`, keys.length);
      const lease = this.#open({ kind: 'reserve', tenant, keys, offsets: got.offsets, lengths: Uint32Array.from(body.lengths) });
      return { lease: lease.id, offsets: Array.from(got.offsets), deadlineMs: this.#o.leaseMs };
    } catch (e) {
      this.#leasedPages.set(tenant.name, (this.#leasedPages.get(tenant.name) ?? 0) - keys.length);
      throw e;
    }
  }

  async #commit(tenant: Tenant, body: CommitRequest): Promise<ClientResponse<'commit'>> {
    const lease = this.#lease(tenant, body.lease, 'reserve');
    if (body.crcs) this.#perKey(body.crcs, 'crcs', lease.keys.length, 0xffffffff);
    const copied: number[] = [];
    for (let i = 0; i < lease.keys.length; i++) if (lease.offsets[i]! >= 0) copied.push(i);
    const crcs = body.crcs ? Uint32Array.from(body.crcs) : new Uint32Array(lease.keys.length);
    const ok = new Uint8Array(lease.keys.length);
    const bad: number[] = [];
    if (body.crcs && this.#checkedOnServe) {
      // The client computed each CRC32C in the same pass as its copy: recorded as is, with no second read of the bytes
      // here. Every serve of the page checks its bytes against it (see the file's doc), so a wrong one is never served.
      for (const i of copied) ok[i] = 1;
    } else {
      const actual = await this.#checkSlots(lease, copied);
      // Without declared checksums the daemon's own become the pages' (nothing to compare them with).
      copied.forEach((i, j) => {
        if (!body.crcs) crcs[i] = actual[j]!;
        if (actual[j] === crcs[i]) ok[i] = 1;
        else bad.push(i);
      });
    }
    const landed: Array<{ key: PageKey; length: number; crc32c: number }> = [];
    for (const i of copied) if (ok[i]) landed.push({ key: lease.keys[i]!, length: lease.lengths[i]!, crc32c: crcs[i]! });
    this.#close(lease, { ok: (i) => ok[i] === 1, crcs });
    if (bad.length) this.#refused.inc({ tenant: tenant.name, why: 'checksum' }, bad.length);
    // The pages are visible in the host tier now (lookup and pin answer from it); the block index records them in
    // the recorder's next batch, off this request's path.
    if (landed.length) this.#record(landed, body.retention);
    // Pages the daemon already held take the hint now; the new ones once the index records them (#record).
    if (body.retention) {
      const held = lease.keys.filter((_, i) => lease.offsets[i]! < 0);
      if (held.length) this.#o.ts.retain(held, body.retention);
    }
    this.#pages.inc({ tenant: tenant.name, op: 'store' }, landed.length);
    if (this.#o.placement === 'rendezvous' && landed.length) void this.#push(tenant, landed).catch((e: unknown) => this.#o.log.warn({ err: (e as Error).message }, 'rendezvous push failed'));
    return { stored: landed.length, existing: lease.keys.length - copied.length, badChecksum: bad };
  }

  /**
   * The CRC32C of a lease's slots `at`, computed on native threads (the event loop keeps serving). The lease is held
   * meanwhile (no expiry, no second commit, release or abort); throws ERR_CLOSED when the daemon closed it meanwhile.
   */
  async #checkSlots(lease: Lease, at: readonly number[]): Promise<Uint32Array> {
    if (!at.length) return new Uint32Array(0);
    const arena = this.arena;
    const expires = lease.expires;
    lease.expires = Number.POSITIVE_INFINITY;
    lease.busy = true;
    let sums: Uint32Array;
    try {
      let bytes = 0;
      for (const i of at) bytes += lease.lengths[i]!;
      // A chunk of a pipelined call takes one thread (the client's copy runs beside it); a large batch takes more.
      sums = await crc32cRanges(arena, Float64Array.from(at, (i) => lease.offsets[i]!), Uint32Array.from(at, (i) => lease.lengths[i]!), { threads: bytes >= CHECK_SPLIT_BYTES ? CHECK_THREADS : 1 });
    } finally {
      lease.busy = false;
      // The time the check took is not the client's: its deadline counts from now again (never shortened).
      lease.expires = Math.max(expires, Date.now() + (lease.kind === 'reserve' ? this.#o.leaseMs : 0));
    }
    // Closed meanwhile (daemon shutting down): its slots are already freed.
    if (!this.#leases.has(lease.id)) throw new ProtocolError(`the daemon closed ${lease.kind === 'reserve' ? 'reservation' : 'pin'} ${lease.id} while checking it`, 'ERR_CLOSED', 503);
    return sums;
  }

  /** Hands the retention hints of just-recorded pages to the hierarchy, one call per hint. */
  #retainRecorded(batch: ReadonlyArray<{ key: PageKey }>): void {
    if (!this.#retention.size) return;
    const byHint = new Map<RetentionHint, PageKey[]>();
    for (const { key } of batch) {
      const hint = this.#retention.get(key);
      if (hint === undefined) continue;
      this.#retention.delete(key);
      let keys = byHint.get(hint);
      if (!keys) byHint.set(hint, (keys = []));
      keys.push(key);
    }
    for (const [hint, keys] of byHint) this.#o.ts.retain(keys, hint);
  }

  /**
   * Queues committed pages for the block index: every commit of one event-loop turn (and those landing while a batch
   * is being recorded) go into one adoptPages call, i.e. one index transaction, not one per request.
   */
  #record(pages: Array<{ key: PageKey; length: number; crc32c: number }>, retention?: RetentionHint): void {
    if (retention) for (const p of pages) this.#retention.set(p.key, retention);
    this.#unrecorded.add(pages);
  }

  /** When the recorder's next batch starts: the next turn, or once no reservation is open (RECORD_HOLD_MS at most). */
  #recordTurn(): Promise<void> {
    return new Promise<void>((resolve) => {
      if (this.#reservations === 0) return void setImmediate(resolve);
      const go = () => {
        clearTimeout(timer);
        this.#wakeRecorder = undefined;
        setImmediate(resolve);
      };
      const timer = setTimeout(go, RECORD_HOLD_MS);
      this.#wakeRecorder = go;
    });
  }

  /**
   * Resolves once `keys` (default: every page committed so far) are recorded in the block index (or failed to be).
   * Pages committed later are not waited for: under a steady stream of commits the recorder never goes idle.
   */
  recorded(keys?: Iterable<PageKey>): Promise<void> {
    return this.#unrecorded.recorded(keys);
  }

  #release(tenant: Tenant, id: number, kind: Lease['kind']): ClientResponse<'release'> {
    const lease = this.#lease(tenant, id, kind);
    this.#close(lease);
    return { released: lease.keys.length };
  }

  /**
   * Closes a pin lease. Pages the client names `damaged` (their copy-out did not match their CRC32C) are checked
   * here first, while the lease still pins their slots; those whose slot is damaged are dropped and reported. A page
   * whose slot checks out was damaged on the client's side (or on the wire): it stays.
   */
  async #releasePin(tenant: Tenant, body: ReleaseRequest): Promise<ClientResponse<'release'>> {
    const lease = this.#lease(tenant, body.lease, 'pin');
    const named = [...new Set(body.damaged ?? [])];
    for (const i of named) {
      if (i >= lease.keys.length || lease.offsets[i]! < 0) throw new ProtocolError(`damaged: ${i} is not the index of a page pin ${lease.id} found (it has ${lease.keys.length} keys)`, 'ERR_INVALID_ARGUMENT', 400, 'damaged');
    }
    if (named.length) {
      const actual = await this.#checkSlots(lease, named);
      const broken = named.filter((i, j) => actual[j] !== lease.crcs![i]).map((i) => lease.keys[i]!);
      this.#close(lease);
      this.#dropDamaged(broken, `a client's copy-out, confirmed by the daemon`, true);
    } else {
      this.#close(lease);
    }
    return { released: lease.keys.length };
  }

  /**
   * Which keys any local tier holds (committed pages the index has yet to record answer from the host tier); with
   * `cluster: true`, also which live nodes published each key this node lacks (the rendezvous owner first), so a
   * caller knows where a load will pull it from.
   */
  async #lookup(tenant: Tenant, body: LookupRequest): Promise<ClientResponse<'lookup'>> {
    const keys = this.#stored(tenant, body.keys);
    const hit = this.#o.ts.lookupKeys(keys);
    const present = hit.present;
    const lengths = new Array<number>(keys.length).fill(0);
    const tiers = new Array<string | null>(keys.length).fill(null);
    hit.indices.forEach((i, j) => {
      lengths[i] = hit.pages[j]!.length;
      tiers[i] = hit.pages[j]!.tier;
    });
    let found = hit.pages.length;
    if (this.#unrecorded.size) {
      keys.forEach((k, i) => {
        const p = present[i] ? undefined : this.#unrecorded.get(k);
        if (!p) return;
        present[i] = true;
        lengths[i] = p.length;
        tiers[i] = this.#o.hostTierName;
        found++;
      });
    }
    this.#pages.inc({ tenant: tenant.name, op: 'lookup_hit' }, found);
    this.#pages.inc({ tenant: tenant.name, op: 'lookup_miss' }, keys.length - found);
    let cluster: { holders: Array<string[] | null> } | { error: string } | undefined;
    if (body.cluster === true && this.#o.registry) {
      const absent = keys.map((_, i) => i).filter((i) => !present[i]);
      try {
        const located = absent.length ? await this.#o.registry.locate(absent.map((i) => keys[i]!)) : [];
        const ids = this.#o.placement === 'rendezvous' ? (await this.#o.registry.nodes()).map((n) => n.id) : [];
        const holders: Array<string[] | null> = keys.map(() => null);
        absent.forEach((i, j) => {
          const owner = ids.length ? rendezvousOwner(keys[i]!, ids) : undefined;
          holders[i] = located[j]!.map((n) => n.id).sort((a, b) => Number(b === owner) - Number(a === owner) || a.localeCompare(b));
        });
        cluster = { holders };
      } catch (e) {
        cluster = { error: `cluster registry unreachable: ${(e as Error).message}` };
      }
    }
    return { present, lengths, tiers, estimatedLoadMs: hit.estimatedLoadMs, ...(cluster ? { cluster } : {}) };
  }

  #resolve(tenant: Tenant, keys: readonly string[]): ClientResponse<'resolve'> {
    if (!this.#o.peerAddress) throw new ProtocolError('this daemon serves no peer endpoint (peer.enabled is false)', 'ERR_UNAVAILABLE', 503);
    return { keys: this.#stored(tenant, keys), peer: this.#o.peerAddress };
  }

  async #delete(tenant: Tenant, keys: readonly string[]): Promise<ClientResponse<'delete'>> {
    const stored = this.#stored(tenant, keys);
    // Committed pages the index has yet to record, and that its current batch does not hold: only the host tier has
    // them (no index row, no planner entry, never announced), so they are freed there, and never recorded.
    const direct = this.#unrecorded.dropEarly(this.#o.hostTier, stored);
    for (const k of direct.deleted) this.#retention.delete(k);
    const rest = direct.rest;
    // Pages in the batch being recorded would read as missing and stay behind: wait for that batch.
    if (rest.some((k) => this.#unrecorded.has(k))) await this.recorded(rest);
    const r = rest.length ? await this.#o.ts.deleteKeys(rest) : { deleted: [], pinned: [], missing: [] };
    return { deleted: direct.deleted.length + r.deleted.length, pinned: direct.pinned.length + r.pinned.length, missing: r.missing.length };
  }

  /**
   * Makes the pages resident in the host tier and pins them for the lease: pages only on lower tiers are loaded
   * up; pages held nowhere here are pulled from a node the cluster registry says holds them. Answers where each
   * page is in the shared arena (offset -1: not found anywhere), its length and CRC32C.
   *
   * Pages already in the host tier (the common case) are pinned there, in memory, and nothing else: no index
   * lookup, no index pin. Only pages that must be brought up are pinned in the hierarchy meanwhile, so it does not
   * evict their lower copies before they arrive.
   */
  async #pin(tenant: Tenant, body: PinRequest): Promise<ClientResponse<'pin'>> {
    const keys = this.#stored(tenant, body.keys);
    this.#claim(tenant, keys.length);
    const ttlMs = body.ttlMs ?? this.#o.leaseMs;
    const crcs = new Uint32Array(keys.length);
    const lease = this.#open({ kind: 'pin', tenant, keys, offsets: new Float64Array(keys.length).fill(-1), lengths: new Uint32Array(keys.length), crcs }, ttlMs);
    try {
      const { ts, hostTier } = this.#o;
      // Pinned in the tier driver from here on; tracked at once, so #close (even on an error below) undoes exactly these.
      const take = (where: ReturnType<HostTier['pinRemote']>, at: readonly number[]) =>
        where.forEach((w, j) => {
          if (!w) return;
          const i = at[j]!;
          lease.offsets[i] = w.offset;
          lease.lengths[i] = w.length;
          crcs[i] = w.crc32c;
          this.#trackPins([keys[i]!]);
        });
      take(hostTier.pinRemote(keys), keys.map((_, i) => i));
      // Read from the host tier without a load: counted for its eviction policy (pages brought up below are loads;
      // a tenant without shared memory fetches over the peer protocol, whose server counts what it sends).
      if (tenant.sharedMemory) {
        const resident = keys.filter((_, i) => lease.offsets[i]! >= 0);
        if (resident.length) this.#accesses.add(resident);
      }
      const rest = keys.map((_, i) => i).filter((i) => lease.offsets[i]! < 0);
      if (rest.length) {
        const restKeys = rest.map((i) => keys[i]!);
        // Held in the hierarchy first, so it does not evict what is being brought up.
        // In memory only (durable: false): a lease does not outlive the daemon, so no index row is written.
        ts.pinKeys(restKeys, { ttlMs, owner: `client:${lease.id}`, durable: false });
        lease.indexPinned = restKeys;
        const hit = ts.lookupKeys(restKeys);
        // Every page found, even one the index still places on the host tier: the tier does not hold it (its memory
        // was lost with a reboot, say), so the load misses there, forgets that copy and reads the next one.
        if (hit.pages.length) await this.#bringUp(hit.pages);
        const absent = restKeys.filter((_, j) => !hit.present[j]);
        if (absent.length && this.#o.registry) await this.#pull(tenant, absent).catch((e: unknown) => this.#o.log.warn({ err: (e as Error).message }, 'pull from the cluster failed; answering from local tiers'));
        take(hostTier.pinRemote(restKeys), rest);
        // Keys found nowhere are not held for the lease: a page stored under one later must stay deletable.
        const notFound = rest.filter((i) => lease.offsets[i]! < 0).map((i) => keys[i]!);
        if (notFound.length) {
          ts.unpinKeys(notFound, `client:${lease.id}`, { durable: false });
          const gone = new Set(notFound);
          lease.indexPinned = restKeys.filter((k) => !gone.has(k));
        }
      }
      const damaged = body.verify === true ? await this.#verifyPinned(lease) : undefined;
      let found = 0;
      for (let i = 0; i < keys.length; i++) if (lease.offsets[i]! >= 0) found++;
      this.#pages.inc({ tenant: tenant.name, op: 'load' }, found);
      // Remote clients fetch over the peer protocol, which names pages by their stored keys.
      return { lease: lease.id, offsets: Array.from(lease.offsets), lengths: Array.from(lease.lengths), crcs: Array.from(crcs), deadlineMs: ttlMs, ...(body.storedKeys === true ? { keys } : {}), ...(damaged ? { damaged } : {}) };
    } catch (e) {
      this.#close(lease);
      throw e;
    }
  }

  /**
   * Checks every page a pin lease holds against the CRC32C the tier recorded for it, on native threads (`pin` with
   * `verify`, for clients that cannot check their copy-out natively). A page that fails is let go by the lease
   * (answered as not found) and dropped from the host tier as damaged; returns the indices of those pages. The
   * others stay pinned until release: the daemon neither moves nor reuses a pinned slot.
   */
  async #verifyPinned(lease: Lease): Promise<number[]> {
    const at: number[] = [];
    for (let i = 0; i < lease.keys.length; i++) if (lease.offsets[i]! >= 0) at.push(i);
    const actual = await this.#checkSlots(lease, at);
    const damaged = at.filter((i, j) => actual[j] !== lease.crcs![i]);
    if (!damaged.length) return damaged;
    const keys = damaged.map((i) => lease.keys[i]!);
    for (const i of damaged) {
      lease.offsets[i] = -1;
      lease.lengths[i] = 0;
      lease.crcs![i] = 0;
    }
    this.#o.hostTier.unpin(keys);
    this.#untrackPins(keys);
    this.#refused.inc({ tenant: lease.tenant.name, why: 'checksum' }, keys.length);
    this.#dropDamaged(keys, 'found by a verified pin', true);
    return damaged;
  }

  /** Loads pages that only lower tiers hold into host-tier slots (checked on read by those tiers) and adopts them. */
  async #bringUp(pages: Array<{ key: PageKey; length: number; tier: string; tiers: readonly string[] }>): Promise<void> {
    const { ts, hostTier, hostTierName } = this.#o;
    const got = await this.#unrecorded.reserve(hostTier, pages.map((p) => p.key), () => this.#hiddenSlots());
    if (!got) throw this.#noRoom(`load ${pages.length} page(s)`, pages.length);
    const slots = slotsIn(got.offsets);
    this.#slotsInFlight += slots;
    try {
      await this.#fill(pages, got.offsets);
    } finally {
      this.#slotsInFlight -= slots;
    }
  }

  /** #bringUp's copy: reads `pages` into the host-tier slots at `offsets` (reserved), commits and adopts those that arrived. */
  async #fill(pages: Array<{ key: PageKey; length: number; tier: string; tiers: readonly string[] }>, offsets: Float64Array): Promise<void> {
    const { ts, hostTier, hostTierName } = this.#o;
    const arena = this.arena;
    const want = pages.filter((_, i) => offsets[i]! >= 0);
    const at = new Map(pages.map((p, i) => [p.key, offsets[i]!]));
    let result;
    try {
      result = await ts.load({ keys: want.map((p) => p.key), pages: want, tokens: 0, estimatedLoadMs: 0 }, want.map((p) => ({ arena, offset: at.get(p.key)!, length: ts.pageBytes })));
    } catch (e) {
      hostTier.commitRemote(pages.map((p) => p.key), offsets, new Uint32Array(pages.length), new Uint32Array(pages.length), () => false);
      throw e;
    }
    const missing = new Set(result.missing.map((i) => want[i]!.key));
    const arrived = want.filter((p) => !missing.has(p.key));
    // The pages' CRC32C: the one the index records for them when every serve from the host tier checks it (no
    // second pass over the bytes); computed on native threads otherwise, and for pages whose record has none.
    const recorded = new Map<PageKey, number>();
    if (this.#checkedOnServe && arrived.length) {
      ts.pageRecords(arrived.map((p) => p.key)).forEach((r, j) => r && r.crc32c !== null && recorded.set(arrived[j]!.key, r.crc32c));
    }
    const rest = arrived.filter((p) => !recorded.has(p.key));
    const sums = rest.length ? await crc32cRanges(arena, Float64Array.from(rest, (p) => at.get(p.key)!), Uint32Array.from(rest, (p) => p.length), { threads: CHECK_THREADS }) : new Uint32Array(0);
    rest.forEach((p, j) => recorded.set(p.key, sums[j]!));
    const landed = arrived.map((p) => ({ key: p.key, length: p.length, crc32c: recorded.get(p.key)! }));
    const crcOf = new Map(landed.map((p) => [p.key, p.crc32c]));
    hostTier.commitRemote(
      pages.map((p) => p.key),
      offsets,
      Uint32Array.from(pages, (p) => p.length),
      Uint32Array.from(pages, (p) => crcOf.get(p.key) ?? 0),
      (i) => crcOf.has(pages[i]!.key),
    );
    if (landed.length) await ts.adoptPages(hostTierName, landed);
  }

  /** The cluster's peer connections, made on the first pull or push (closed with this API). */
  #peer(registry: ClusterRegistry): ClusterPeers {
    const o = this.#o;
    this.#peers ??= new ClusterPeers({ ts: o.ts, hostTier: o.hostTier, hostTierName: o.hostTierName, registry, placement: o.placement, nodeId: o.nodeId, peerSecret: o.peerSecret, peerTimeoutMs: o.peerTimeoutMs, log: o.log });
    return this.#peers;
  }

  /** Pulls stored keys that no local tier holds from the nodes that hold them (ClusterPeers.pull). */
  async #pull(tenant: Tenant, keys: PageKey[]): Promise<void> {
    const pulled = await this.#peer(this.#o.registry!).pull(keys);
    this.#pages.inc({ tenant: tenant.name, op: 'pulled' }, pulled);
  }

  /** Rendezvous placement: pushes `tenant`'s committed pages to their owners' host tiers (ClusterPeers.push). */
  async #push(tenant: Tenant, pages: Array<{ key: PageKey; length: number; crc32c: number }>): Promise<void> {
    const registry = this.#o.registry;
    if (!registry) return;
    const pushed = await this.#peer(registry).push(pages);
    this.#pages.inc({ tenant: tenant.name, op: 'pushed' }, pushed);
  }

  /** Undoes every open lease, records committed pages in the block index, closes peer connections. */
  async close(): Promise<void> {
    clearInterval(this.#sweep);
    this.#unrecorded.close();
    this.#accesses.close();
    this.#o.ts.off('block:evicted', this.#onEvicted);
    this.#o.ts.off('integrity:failed', this.#onIntegrity);
    // Damaged pages waiting for the next turn are dropped now, while the hierarchy is still open.
    this.#dropDamaged(this.#takeDamagedByReads(), 'found by a read of the host tier');
    for (const l of [...this.#leases.values()]) this.#close(l);
    this.#peers?.close();
    await this.recorded();
  }
}

/**
 * Remembered key derivations, per tenant, bounded: two generations of plain Maps (a lookup that hits the older one
 * moves the entry to the newer; when the newer holds `max / 2` entries it becomes the older and the oldest is
 * dropped). Keys used again stay; about `max` entries are kept at most. Every keyed request looks up each of its
 * keys here: 1024 lookups took 0.43 ms (minimum; 0.67 median) in lru-cache and 0.14 ms (0.18) in a Map here.
 */
class DerivedKeys {
  readonly #half: number;
  #young = new Map<Tenant, Map<string, PageKey>>();
  #old = new Map<Tenant, Map<string, PageKey>>();
  #youngSize = 0;

  constructor(max: number) {
    this.#half = Math.max(1, max >> 1);
  }

  get(tenant: Tenant, key: string): PageKey | undefined {
    const hit = this.#young.get(tenant)?.get(key);
    if (hit !== undefined) return hit;
    const old = this.#old.get(tenant)?.get(key);
    if (old !== undefined) this.set(tenant, key, old);
    return old;
  }

  set(tenant: Tenant, key: string, stored: PageKey): void {
    if (this.#youngSize >= this.#half) {
      this.#old = this.#young;
      this.#young = new Map();
      this.#youngSize = 0;
    }
    let m = this.#young.get(tenant);
    if (!m) this.#young.set(tenant, (m = new Map()));
    if (!m.has(key)) this.#youngSize++;
    m.set(key, stored);
  }
}
