/**
 * The daemon's side of `@tiersync/core/client`: the control messages of clients in other processes, on
 * `/v1/client/*` of the HTTP control plane. Page bytes never cross this channel:
 * - same host: the client maps the host tier's /dev/shm file; the daemon reserves slots (`reserve`), the client
 *   copies pages into them on its own native threads, and `commit` checks every page's CRC32C before the page
 *   becomes visible and enters the block index; `pin` makes pages resident in the host tier and holds them while
 *   the client copies them out (checking their CRC32C), `release` lets go;
 * - another host: the same `pin`/`resolve` answers, with bytes moving over the native peer protocol.
 *
 * Every request speaks for one tenant (its bearer token), and every key it names is turned into the tenant's
 * stored key (tenants.ts). Reservations and pins are leases: bounded in number and pages, undone when their
 * deadline passes, so a client that dies or stalls cannot hold slots or grow the daemon's memory.
 */
import type { IncomingMessage } from 'node:http';
import { HostArena, PeerClient, PeerStatus, TierSyncError, crc32c } from '@tiersync/native';
import type { HostTier, PageKey } from '@tiersync/tiers';
import type { Logger } from 'pino';
import { Counter, type Registry } from 'prom-client';
import type { TierSync } from '../hierarchy/tier-sync.js';
import type { ClusterRegistry, NodeInfo } from './registry.js';
import { rendezvousOwner } from './rendezvous.js';
import { CLIENT_KEY_PATTERN, Tenants, type Tenant } from './tenants.js';

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
  registry?: ClusterRegistry | undefined;
  placement: 'none' | 'rendezvous';
  nodeId: string;
  log: Logger;
  metrics: Registry;
}

/** An error with the HTTP status the control plane answers with. */
export class ClientApiError extends TierSyncError {
  constructor(
    message: string,
    code: TierSyncError['code'],
    readonly status: number,
  ) {
    super(message, code);
  }
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
}

/** Bytes checked between yields to the event loop while verifying a commit (a few ms of CRC32C). */
const CHECK_SLICE = 16 << 20;

/** One view may not cross a 1 GiB boundary of an arena: CRC32C over such a range is computed piecewise. */
const VIEW_SPAN = 1 << 30;

function arenaCrc(arena: HostArena, offset: number, length: number): number {
  let crc = 0;
  for (let at = offset; at < offset + length; ) {
    const end = Math.min(offset + length, (Math.floor(at / VIEW_SPAN) + 1) * VIEW_SPAN);
    crc = crc32c(arena.view(at, end - at), crc);
    at = end;
  }
  return crc;
}

export class ClientApi {
  readonly #o: ClientApiOptions;
  readonly #leases = new Map<number, Lease>();
  readonly #leasedPages = new Map<string, number>();
  readonly #peers = new Map<string, Promise<PeerClient>>();
  readonly #sweep: NodeJS.Timeout;
  readonly #pages: Counter<'tenant' | 'op'>;
  readonly #refused: Counter<'tenant' | 'why'>;
  #nextLease = 1;

  constructor(options: ClientApiOptions) {
    this.#o = options;
    this.#sweep = setInterval(() => this.#expire(Date.now()), Math.min(1000, Math.max(50, options.leaseMs / 4)));
    this.#sweep.unref();
    this.#pages = new Counter({ name: 'tiersync_client_pages_total', help: 'Pages handled for clients, per tenant and operation (store, load, lookup_hit, lookup_miss, pulled, pushed).', labelNames: ['tenant', 'op'], registers: [options.metrics] });
    this.#refused = new Counter({ name: 'tiersync_client_refused_total', help: 'Client requests refused, per tenant and reason (auth, limit, checksum).', labelNames: ['tenant', 'why'], registers: [options.metrics] });
  }

  get arena(): HostArena {
    const a = this.#o.hostTier.arena;
    if (!(a instanceof HostArena)) throw new ClientApiError('the host tier is closed', 'ERR_CLOSED', 503);
    return a;
  }

  stats(): { leases: number; leasedPages: number } {
    let pages = 0;
    for (const n of this.#leasedPages.values()) pages += n;
    return { leases: this.#leases.size, leasedPages: pages };
  }

  /** Serves one `/v1/client/<op>` request. */
  async handle(op: string, req: IncomingMessage, readBody: () => Promise<unknown>): Promise<{ status: number; body: unknown }> {
    const tenant = this.#o.tenants.identify(req);
    if (!tenant) {
      this.#refused.inc({ tenant: '', why: 'auth' });
      throw new ClientApiError('missing or wrong bearer token (it names the tenant)', 'ERR_AUTH', 401);
    }
    const post = () => {
      if (req.method !== 'POST') throw new ClientApiError(`/v1/client/${op} takes POST`, 'ERR_INVALID_ARGUMENT', 405);
    };
    switch (op) {
      case 'hello':
        if (req.method !== 'GET') throw new ClientApiError('/v1/client/hello takes GET', 'ERR_INVALID_ARGUMENT', 405);
        return { status: 200, body: this.#hello(tenant) };
      case 'reserve':
        post();
        return { status: 200, body: await this.#reserve(tenant, await readBody()) };
      case 'commit':
        post();
        return { status: 200, body: await this.#commit(tenant, await readBody()) };
      case 'abort':
      case 'release':
        post();
        return { status: 200, body: this.#release(tenant, await readBody(), op === 'abort' ? 'reserve' : 'pin') };
      case 'lookup':
        post();
        return { status: 200, body: await this.#lookup(tenant, await readBody()) };
      case 'pin':
        post();
        return { status: 200, body: await this.#pin(tenant, await readBody()) };
      case 'resolve':
        post();
        return { status: 200, body: this.#resolve(tenant, await readBody()) };
      case 'delete':
        post();
        return { status: 200, body: await this.#delete(tenant, await readBody()) };
      default:
        throw new ClientApiError(`no route /v1/client/${op}`, 'ERR_NOT_FOUND', 404);
    }
  }

  #hello(tenant: Tenant): unknown {
    const arena = this.arena;
    const shm = tenant.sharedMemory && arena.shmPath ? { path: arena.shmPath, capacity: arena.capacity, pageSize: arena.pageSize, fingerprint: `${this.#o.ts.namespace.model}/${this.#o.ts.namespace.layoutFingerprint}` } : null;
    return {
      node: this.#o.nodeId,
      tenant: tenant.name,
      model: this.#o.ts.config.model,
      pageBytes: this.#o.ts.pageBytes,
      tokensPerPage: this.#o.ts.tokensPerPage,
      maxBatchPages: this.#o.maxBatchPages,
      leaseMs: this.#o.leaseMs,
      shm,
      peer: this.#o.peerAddress || null,
    };
  }

  /** `{ keys: [hex] }` -> the tenant's stored keys, checked and bounded. */
  #keys(tenant: Tenant, body: unknown): PageKey[] {
    const keys = (body as { keys?: unknown } | null)?.keys;
    if (!Array.isArray(keys) || keys.length === 0) throw new ClientApiError('body must be { "keys": [1 or more page keys] }', 'ERR_INVALID_ARGUMENT', 400);
    if (keys.length > this.#o.maxBatchPages) throw new ClientApiError(`at most ${this.#o.maxBatchPages} keys per request, got ${keys.length}`, 'ERR_OUT_OF_RANGE', 413);
    const seen = new Set<string>();
    return keys.map((k, i) => {
      if (typeof k !== 'string' || !CLIENT_KEY_PATTERN.test(k)) throw new ClientApiError(`keys[${i}] must be 16..128 lower-case hex characters`, 'ERR_INVALID_ARGUMENT', 400);
      if (seen.has(k)) throw new ClientApiError(`keys[${i}] ${k} appears twice`, 'ERR_INVALID_ARGUMENT', 400);
      seen.add(k);
      return Tenants.storedKey(tenant, k);
    });
  }

  #numbers(body: unknown, field: string, n: number, min: number, max: number): number[] {
    const v = (body as Record<string, unknown> | null)?.[field];
    if (!Array.isArray(v) || v.length !== n) throw new ClientApiError(`${field} must be an array of ${n} numbers (one per key)`, 'ERR_INVALID_ARGUMENT', 400);
    v.forEach((x, i) => {
      if (typeof x !== 'number' || !Number.isInteger(x) || x < min || x > max) throw new ClientApiError(`${field}[${i}] must be an integer in [${min}, ${max}], got ${JSON.stringify(x)}`, 'ERR_INVALID_ARGUMENT', 400);
    });
    return v as number[];
  }

  #lease(tenant: Tenant, body: unknown, kind: Lease['kind']): Lease {
    const id = (body as { lease?: unknown } | null)?.lease;
    const lease = typeof id === 'number' ? this.#leases.get(id) : undefined;
    // Another tenant's lease reads as absent: ids say nothing about what others hold.
    if (!lease || lease.tenant !== tenant || lease.kind !== kind || lease.busy) throw new ClientApiError(`no open ${kind === 'reserve' ? 'reservation' : 'pin'} ${JSON.stringify(id)} (expired after ${this.#o.leaseMs} ms, or already closed)`, 'ERR_NOT_FOUND', 404);
    return lease;
  }

  /** Claims room for `pages` more leased pages of `tenant`, or refuses (429). */
  #claim(tenant: Tenant, pages: number): void {
    const held = this.#leasedPages.get(tenant.name) ?? 0;
    if (this.#leases.size >= this.#o.maxLeases || held + pages > tenant.maxLeasedPages) {
      this.#refused.inc({ tenant: tenant.name, why: 'limit' });
      throw new ClientApiError(
        this.#leases.size >= this.#o.maxLeases
          ? `${this.#o.maxLeases} leases are open (client.maxLeases); commit or release some first`
          : `tenant ${tenant.name} holds ${held} leased page(s); ${pages} more would pass its limit of ${tenant.maxLeasedPages}`,
        'ERR_UNAVAILABLE',
        429,
      );
    }
    this.#leasedPages.set(tenant.name, held + pages);
  }

  #open(lease: Omit<Lease, 'id' | 'expires'>): Lease {
    const l: Lease = { ...lease, id: this.#nextLease++, expires: Date.now() + this.#o.leaseMs };
    this.#leases.set(l.id, l);
    return l;
  }

  /** Closes a lease: a reservation's slots become the pages `commit` accepts (with `crcs`) or free again. */
  #close(lease: Lease, commit?: { ok: (i: number) => boolean; crcs: Uint32Array }): void {
    if (!this.#leases.delete(lease.id)) return;
    this.#leasedPages.set(lease.tenant.name, Math.max(0, (this.#leasedPages.get(lease.tenant.name) ?? 0) - lease.keys.length));
    const tier = this.#o.hostTier;
    if (lease.kind === 'reserve') {
      tier.commitRemote(lease.keys, lease.offsets, lease.lengths, commit?.crcs ?? new Uint32Array(lease.keys.length), commit?.ok ?? (() => false));
    } else {
      const held = lease.keys.filter((_, i) => lease.offsets[i]! >= 0);
      tier.unpin(held);
      this.#o.ts.unpinKeys(lease.keys, `client:${lease.id}`);
    }
  }

  #expire(now: number): void {
    for (const l of [...this.#leases.values()]) {
      if (l.expires > now) continue;
      this.#o.log.warn({ lease: l.id, kind: l.kind, tenant: l.tenant.name, pages: l.keys.length }, 'client lease expired; undone');
      this.#close(l);
    }
  }

  async #reserve(tenant: Tenant, body: unknown): Promise<unknown> {
    const keys = this.#keys(tenant, body);
    const lengths = this.#numbers(body, 'lengths', keys.length, 1, this.#o.ts.pageBytes);
    this.#claim(tenant, keys.length);
    try {
      await this.#o.ts.makeRoomOn(this.#o.hostTierName, keys.length);
      const got = this.#o.hostTier.reserveRemote(keys);
      if (!got) throw new ClientApiError(`the host tier has no room for ${keys.length} page(s) (pinned pages fill it)`, 'ERR_TIER_FULL', 507);
      const lease = this.#open({ kind: 'reserve', tenant, keys, offsets: got.offsets, lengths: Uint32Array.from(lengths) });
      return { lease: lease.id, offsets: Array.from(got.offsets), deadlineMs: this.#o.leaseMs };
    } catch (e) {
      this.#leasedPages.set(tenant.name, (this.#leasedPages.get(tenant.name) ?? 0) - keys.length);
      throw e;
    }
  }

  async #commit(tenant: Tenant, body: unknown): Promise<unknown> {
    const lease = this.#lease(tenant, body, 'reserve');
    const crcs = this.#numbers(body, 'crcs', lease.keys.length, 0, 0xffffffff);
    const arena = this.arena;
    // The daemon checks the bytes itself: a page whose slot does not hold what the client declared never becomes
    // visible. The lease is held meanwhile (its deadline is pushed back), and the check yields to the event loop
    // every CHECK_SLICE bytes so a large commit does not stall other requests.
    lease.expires = Number.POSITIVE_INFINITY;
    lease.busy = true;
    const bad: number[] = [];
    const landed: Array<{ key: PageKey; length: number; crc32c: number }> = [];
    let sliced = 0;
    for (const [i, key] of lease.keys.entries()) {
      const offset = lease.offsets[i]!;
      if (offset < 0) continue;
      if (arenaCrc(arena, offset, lease.lengths[i]!) !== crcs[i]) bad.push(i);
      else landed.push({ key, length: lease.lengths[i]!, crc32c: crcs[i]! });
      sliced += lease.lengths[i]!;
      if (sliced >= CHECK_SLICE) {
        sliced = 0;
        await new Promise((r) => setImmediate(r));
      }
    }
    // Closed meanwhile (daemon shutting down): its slots are already freed.
    if (!this.#leases.has(lease.id)) throw new ClientApiError('the daemon closed this reservation while checking it', 'ERR_CLOSED', 503);
    const ok = new Set(landed.map((p) => p.key));
    this.#close(lease, { ok: (i) => ok.has(lease.keys[i]!), crcs: Uint32Array.from(crcs) });
    if (bad.length) this.#refused.inc({ tenant: tenant.name, why: 'checksum' }, bad.length);
    const adopted = landed.length ? await this.#o.ts.adoptPages(this.#o.hostTierName, landed) : [];
    this.#pages.inc({ tenant: tenant.name, op: 'store' }, landed.length);
    if (this.#o.placement === 'rendezvous' && landed.length) void this.#push(landed).catch((e: unknown) => this.#o.log.warn({ err: (e as Error).message }, 'rendezvous push failed'));
    return { stored: landed.length, existing: lease.keys.length - landed.length - bad.length, adopted: adopted.length, badChecksum: bad };
  }

  #release(tenant: Tenant, body: unknown, kind: Lease['kind']): unknown {
    const lease = this.#lease(tenant, body, kind);
    this.#close(lease);
    return { released: lease.keys.length };
  }

  /**
   * Which keys any local tier holds; with `cluster: true`, also which live nodes published each key this node lacks
   * (the rendezvous owner first), so a caller knows where a load will pull it from.
   */
  async #lookup(tenant: Tenant, body: unknown): Promise<unknown> {
    const keys = this.#keys(tenant, body);
    const hit = this.#o.ts.lookupKeys(keys);
    const lengths = new Array<number>(keys.length).fill(0);
    const tiers = new Array<string | null>(keys.length).fill(null);
    hit.indices.forEach((i, j) => {
      lengths[i] = hit.pages[j]!.length;
      tiers[i] = hit.pages[j]!.tier;
    });
    this.#pages.inc({ tenant: tenant.name, op: 'lookup_hit' }, hit.pages.length);
    this.#pages.inc({ tenant: tenant.name, op: 'lookup_miss' }, keys.length - hit.pages.length);
    let cluster: { holders: Array<string[] | null> } | { error: string } | undefined;
    if ((body as { cluster?: unknown }).cluster === true && this.#o.registry) {
      const absent = keys.map((_, i) => i).filter((i) => !hit.present[i]);
      try {
        const found = absent.length ? await this.#o.registry.locate(absent.map((i) => keys[i]!)) : [];
        const ids = this.#o.placement === 'rendezvous' ? (await this.#o.registry.nodes()).map((n) => n.id) : [];
        const holders: Array<string[] | null> = keys.map(() => null);
        absent.forEach((i, j) => {
          const owner = ids.length ? rendezvousOwner(keys[i]!, ids) : undefined;
          holders[i] = found[j]!.map((n) => n.id).sort((a, b) => Number(b === owner) - Number(a === owner) || a.localeCompare(b));
        });
        cluster = { holders };
      } catch (e) {
        cluster = { error: `cluster registry unreachable: ${(e as Error).message}` };
      }
    }
    return { present: hit.present, lengths, tiers, estimatedLoadMs: hit.estimatedLoadMs, ...(cluster ? { cluster } : {}) };
  }

  #resolve(tenant: Tenant, body: unknown): unknown {
    if (!this.#o.peerAddress) throw new ClientApiError('this daemon serves no peer endpoint (peer.enabled is false)', 'ERR_UNAVAILABLE', 503);
    return { keys: this.#keys(tenant, body), peer: this.#o.peerAddress };
  }

  async #delete(tenant: Tenant, body: unknown): Promise<unknown> {
    const r = await this.#o.ts.deleteKeys(this.#keys(tenant, body));
    return { deleted: r.deleted.length, pinned: r.pinned.length, missing: r.missing.length };
  }

  /**
   * Makes the pages resident in the host tier and pins them for the lease: pages only on lower tiers are loaded
   * up; pages held nowhere here are pulled from a node the cluster registry says holds them. Answers where each
   * page is in the shared arena (offset -1: not found anywhere), its length and CRC32C.
   */
  async #pin(tenant: Tenant, body: unknown): Promise<unknown> {
    const keys = this.#keys(tenant, body);
    this.#claim(tenant, keys.length);
    const lease = this.#open({ kind: 'pin', tenant, keys, offsets: new Float64Array(keys.length).fill(-1), lengths: new Uint32Array(keys.length) });
    const owner = `client:${lease.id}`;
    try {
      const { ts, hostTier, hostTierName } = this.#o;
      // Held in the index first, so the hierarchy does not evict what is being brought up.
      ts.pinKeys(keys, { ttlMs: this.#o.leaseMs, owner });
      const hit = ts.lookupKeys(keys);
      const below = hit.pages.filter((p) => !p.tiers.includes(hostTierName));
      if (below.length) await this.#bringUp(below);
      const absent = keys.filter((_, i) => !hit.present[i]);
      if (absent.length && this.#o.registry) await this.#pull(tenant, absent).catch((e: unknown) => this.#o.log.warn({ err: (e as Error).message }, 'pull from the cluster failed; answering from local tiers'));
      const where = hostTier.pinRemote(keys);
      const crcs = new Array<number>(keys.length).fill(0);
      where.forEach((w, i) => {
        if (!w) return;
        lease.offsets[i] = w.offset;
        lease.lengths[i] = w.length;
        crcs[i] = w.crc32c;
      });
      const found = where.filter(Boolean).length;
      this.#pages.inc({ tenant: tenant.name, op: 'load' }, found);
      // Remote clients fetch over the peer protocol, which names pages by their stored keys.
      const stored = (body as { storedKeys?: unknown }).storedKeys === true ? { keys } : {};
      return { lease: lease.id, offsets: Array.from(lease.offsets), lengths: Array.from(lease.lengths), crcs, deadlineMs: this.#o.leaseMs, ...stored };
    } catch (e) {
      this.#close(lease);
      throw e;
    }
  }

  /** Loads pages that only lower tiers hold into host-tier slots (checked on read by those tiers) and adopts them. */
  async #bringUp(pages: Array<{ key: PageKey; length: number; tier: string; tiers: readonly string[] }>): Promise<void> {
    const { ts, hostTier, hostTierName } = this.#o;
    await ts.makeRoomOn(hostTierName, pages.length);
    const got = hostTier.reserveRemote(pages.map((p) => p.key));
    if (!got) throw new ClientApiError(`the host tier has no room to load ${pages.length} page(s) into (pinned pages fill it)`, 'ERR_TIER_FULL', 507);
    const arena = this.arena;
    const want = pages.filter((_, i) => got.offsets[i]! >= 0);
    const at = new Map(pages.map((p, i) => [p.key, got.offsets[i]!]));
    let result;
    try {
      result = await ts.load({ keys: want.map((p) => p.key), pages: want, tokens: 0, estimatedLoadMs: 0 }, want.map((p) => ({ arena, offset: at.get(p.key)!, length: ts.pageBytes })));
    } catch (e) {
      hostTier.commitRemote(pages.map((p) => p.key), got.offsets, new Uint32Array(pages.length), new Uint32Array(pages.length), () => false);
      throw e;
    }
    const missing = new Set(result.missing.map((i) => want[i]!.key));
    const landed = want.filter((p) => !missing.has(p.key)).map((p) => ({ key: p.key, length: p.length, crc32c: arenaCrc(arena, at.get(p.key)!, p.length) }));
    const crcOf = new Map(landed.map((p) => [p.key, p.crc32c]));
    hostTier.commitRemote(
      pages.map((p) => p.key),
      got.offsets,
      Uint32Array.from(pages, (p) => p.length),
      Uint32Array.from(pages, (p) => crcOf.get(p.key) ?? 0),
      (i) => crcOf.has(pages[i]!.key),
    );
    if (landed.length) await ts.adoptPages(hostTierName, landed);
  }

  async #peer(address: string): Promise<PeerClient> {
    let p = this.#peers.get(address);
    if (!p) {
      const i = address.lastIndexOf(':');
      p = PeerClient.connect({ host: address.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(address.slice(i + 1)), streams: 2, timeoutMs: this.#o.peerTimeoutMs, ...(this.#o.peerSecret ? { secret: this.#o.peerSecret } : {}) });
      this.#peers.set(address, p);
      p.catch(() => this.#peers.delete(address));
    }
    return p;
  }

  /** Pulls stored keys that no local tier holds from the nodes that hold them (rendezvous owner first). */
  async #pull(tenant: Tenant, keys: PageKey[]): Promise<void> {
    const registry = this.#o.registry!;
    const holders = await registry.locate(keys);
    const nodes = await registry.nodes();
    const ids = nodes.map((n) => n.id);
    const bySource = new Map<string, { node: NodeInfo; keys: PageKey[] }>();
    keys.forEach((k, i) => {
      const list = holders[i]!.filter((n) => n.id !== this.#o.nodeId && n.peer);
      if (!list.length) return;
      const owner = this.#o.placement === 'rendezvous' ? rendezvousOwner(k, ids) : undefined;
      const from = list.find((n) => n.id === owner) ?? list[0]!;
      const group = bySource.get(from.id) ?? { node: from, keys: [] };
      group.keys.push(k);
      bySource.set(from.id, group);
    });
    const { ts, hostTier, hostTierName } = this.#o;
    for (const { node, keys: part } of bySource.values()) {
      await ts.makeRoomOn(hostTierName, part.length);
      const got = hostTier.reserveRemote(part);
      if (!got) return;
      const fetch = part.filter((_, i) => got.offsets[i]! >= 0);
      const offsets = Float64Array.from(got.offsets.filter((o) => o >= 0));
      let reply;
      try {
        const client = await this.#peer(node.peer);
        reply = fetch.length ? await client.get(this.arena, fetch, offsets, new Uint32Array(fetch.length).fill(ts.pageBytes)) : undefined;
      } catch (e) {
        hostTier.commitRemote(part, got.offsets, new Uint32Array(part.length), new Uint32Array(part.length), () => false);
        throw e;
      }
      const landed: Array<{ key: PageKey; length: number; crc32c: number }> = [];
      const lengths = new Uint32Array(part.length);
      const crcs = new Uint32Array(part.length);
      fetch.forEach((k, j) => {
        // The peer protocol checked the CRC32C on arrival (badChecksum otherwise): only intact pages are kept.
        if (reply!.statuses[j] !== PeerStatus.ok) return;
        const i = part.indexOf(k);
        lengths[i] = reply!.lengths[j]!;
        crcs[i] = reply!.crcs[j]!;
        landed.push({ key: k, length: lengths[i]!, crc32c: crcs[i]! });
      });
      const ok = new Set(landed.map((p) => p.key));
      hostTier.commitRemote(part, got.offsets, lengths, crcs, (i) => ok.has(part[i]!));
      if (landed.length) await ts.adoptPages(hostTierName, landed);
      this.#pages.inc({ tenant: tenant.name, op: 'pulled' }, landed.length);
    }
  }

  /** Rendezvous placement: pushes committed pages to their owner's host tier when that is another node. */
  async #push(pages: Array<{ key: PageKey; length: number; crc32c: number }>): Promise<void> {
    const registry = this.#o.registry;
    if (!registry) return;
    const nodes = await registry.nodes();
    const ids = nodes.map((n) => n.id);
    const byOwner = new Map<string, typeof pages>();
    for (const p of pages) {
      const owner = rendezvousOwner(p.key, ids);
      if (!owner || owner === this.#o.nodeId) continue;
      byOwner.set(owner, [...(byOwner.get(owner) ?? []), p]);
    }
    for (const [owner, part] of byOwner) {
      const node = nodes.find((n) => n.id === owner)!;
      if (!node.peer) continue;
      // Pinned while the bytes leave from their slots.
      const keys = part.map((p) => p.key);
      const where = this.#o.hostTier.pinRemote(keys);
      try {
        const have = part.filter((_, i) => where[i]);
        if (!have.length) continue;
        const client = await this.#peer(node.peer);
        const r = await client.put(
          this.arena,
          have.map((p) => p.key),
          Float64Array.from(where.filter(Boolean), (w) => w!.offset),
          Uint32Array.from(have, (p) => p.length),
          Uint32Array.from(have, (p) => p.crc32c),
        );
        const sent = Array.from(r.statuses).filter((s) => s === PeerStatus.ok || s === PeerStatus.existing).length;
        this.#pages.inc({ tenant: '', op: 'pushed' }, sent);
      } finally {
        this.#o.hostTier.unpin(keys.filter((_, i) => where[i]));
      }
    }
  }

  /** Undoes every open lease and closes peer connections. */
  close(): void {
    clearInterval(this.#sweep);
    for (const l of [...this.#leases.values()]) this.#close(l);
    for (const p of this.#peers.values()) void p.then((c) => c.close(), () => undefined);
    this.#peers.clear();
  }
}
