/**
 * The daemon's connections to the other nodes' peer servers, for its cluster: pulls pages no local tier holds from
 * the nodes that hold them into the served host tier, and pushes committed pages to their rendezvous owners.
 *
 * One node never stands in the way of the others:
 * - a connection that failed at the connection level (ERR_IO, ERR_TIMEOUT, ERR_PROTOCOL, ERR_AUTH: a cut link, a
 *   restarted peer, a frame that failed its tag) is dropped and the next call to that node connects again, as
 *   PeerTier does; a call that found a kept connection dead (ERR_IO or ERR_PROTOCOL: the peer restarted while it
 *   idled, and the socket answers with a reset or an end of stream) connects again at once and is tried once more;
 * - a pull tries every live holder of a key, rendezvous owner first, until one delivers it intact: a node that
 *   fails (unreachable, wrong secret) is skipped for the rest of that pull, one that misses or sends a damaged page
 *   passes the key on to the next holder;
 * - a push goes to every owner at once; one owner's failure loses only its own pages' push.
 * A node's failure is logged with its id and peer address, never thrown: the local tiers answer for what it held.
 * (The registry's and the hierarchy's errors are thrown: the caller logs them and answers from local tiers.)
 */
import { HostArena, PeerClient, PeerStatus, TierSyncError } from '@tiersync/native';
import type { HostTier, PageKey } from '@tiersync/tiers';
import type { Logger } from 'pino';
import type { TierSync } from '../hierarchy/index.js';
import type { ClusterRegistry, NodeInfo } from './registry.js';
import { rendezvousOwner } from './rendezvous.js';

/** What ClusterPeers works with: the daemon's hierarchy and served host tier, its registry and peer settings. */
export interface ClusterPeersOptions {
  ts: TierSync;
  /** The served host tier: pulled pages land in its slots, pushed pages leave from them. */
  hostTier: HostTier;
  hostTierName: string;
  registry: ClusterRegistry;
  placement: 'none' | 'rendezvous';
  /** This node's id in the registry (never contacted). */
  nodeId: string;
  /** The cluster's peer secret (every member shares it); without one only loopback peers are contacted. */
  peerSecret?: string | undefined;
  /** Deadline of connecting and of every socket read/write of a peer request, ms. */
  peerTimeoutMs: number;
  log: Logger;
}

/** A page as it is pushed: its stored key, length and CRC32C. */
export interface ClusterPage {
  key: PageKey;
  length: number;
  crc32c: number;
}

/** Parallel TCP streams per node. */
const STREAMS = 2;

/** Errors after which a connection is not used again (the same set PeerTier reconnects after). */
function connectionFailed(e: unknown): boolean {
  return e instanceof TierSyncError && (e.code === 'ERR_IO' || e.code === 'ERR_TIMEOUT' || e.code === 'ERR_PROTOCOL' || e.code === 'ERR_AUTH');
}

/** A connection to one node's peer server, shared by the calls to that node; closed once dropped and unused. */
interface Connection {
  client: Promise<PeerClient>;
  /** Calls using it now. */
  users: number;
  /** It answered a request (a later failure may be a connection that died while kept). */
  served: boolean;
  dropped: boolean;
}

/** This node's peer connections to the other nodes of its cluster, with pull and push over them (see the file's doc). */
export class ClusterPeers {
  readonly #o: ClusterPeersOptions;
  readonly #log: Logger;
  /** By peer address (`host:port`, as the registry publishes it). */
  readonly #connections = new Map<string, Connection>();
  #closed = false;

  constructor(options: ClusterPeersOptions) {
    this.#o = options;
    // The caller's logger as is (the daemon's client API names its component; a child would name it twice).
    this.#log = options.log;
  }

  get #arena(): HostArena {
    const a = this.#o.hostTier.arena;
    if (!(a instanceof HostArena)) throw new TierSyncError('the host tier is closed', 'ERR_CLOSED');
    return a;
  }

  /**
   * Pulls `keys` (stored keys no local tier holds) from the live nodes that published them into the host tier,
   * records them in the block index, and returns how many arrived. A key no holder delivered stays absent.
   */
  async pull(keys: readonly PageKey[]): Promise<number> {
    const { registry, ts, hostTier, hostTierName, nodeId } = this.#o;
    const [holders, nodes] = await Promise.all([registry.locate(keys), registry.nodes()]);
    const ids = nodes.map((n) => n.id);
    // Each wanted key with the nodes to ask, in order: its rendezvous owner first, then the registry's order.
    const want: PageKey[] = [];
    const sources: NodeInfo[][] = [];
    keys.forEach((k, i) => {
      const list = holders[i]!.filter((n) => n.id !== nodeId && n.peer);
      if (!list.length) return;
      const owner = this.#o.placement === 'rendezvous' ? rendezvousOwner(k, ids) : undefined;
      want.push(k);
      sources.push([...list.filter((n) => n.id === owner), ...list.filter((n) => n.id !== owner)]);
    });
    if (!want.length) return 0;
    await ts.makeRoomOn(hostTierName, want.length);
    const got = hostTier.reserveRemote(want);
    if (!got) {
      this.#log.warn({ pages: want.length }, 'no room in the host tier for pages held by other nodes; not pulled');
      return 0;
    }
    const arena = this.#arena;
    const lengths = new Uint32Array(want.length);
    const crcs = new Uint32Array(want.length);
    const arrived = new Uint8Array(want.length);
    try {
      // Nodes that failed during this pull: not asked again for its other keys.
      const failed = new Set<string>();
      let pending = want.map((_, i) => i).filter((i) => got.offsets[i]! >= 0);
      while (pending.length) {
        const byNode = new Map<string, { node: NodeInfo; at: number[] }>();
        for (const i of pending) {
          let node = sources[i]!.shift();
          while (node && failed.has(node.id)) node = sources[i]!.shift();
          if (!node) continue;
          const group = byNode.get(node.id) ?? { node, at: [] };
          group.at.push(i);
          byNode.set(node.id, group);
        }
        const again: number[] = [];
        await Promise.all(
          [...byNode.values()].map(async ({ node, at }) => {
            try {
              const reply = await this.#call(node, (client) => client.get(arena, at.map((i) => want[i]!), Float64Array.from(at, (i) => got.offsets[i]!), new Uint32Array(at.length).fill(ts.pageBytes)));
              at.forEach((i, j) => {
                // Checked against its CRC32C on arrival (badChecksum otherwise): only intact pages are kept.
                if (reply.statuses[j] !== PeerStatus.ok) return void again.push(i);
                lengths[i] = reply.lengths[j]!;
                crcs[i] = reply.crcs[j]!;
                arrived[i] = 1;
              });
            } catch (e) {
              failed.add(node.id);
              again.push(...at);
              this.#log.warn({ node: node.id, peer: node.peer, pages: at.length, err: (e as Error).message }, 'could not pull pages from a cluster node; asking their other holders');
            }
          }),
        );
        pending = again;
      }
    } finally {
      hostTier.commitRemote(want, got.offsets, lengths, crcs, (i) => arrived[i] === 1);
    }
    const landed = want.flatMap((key, i) => (arrived[i] ? [{ key, length: lengths[i]!, crc32c: crcs[i]! }] : []));
    if (landed.length) await ts.adoptPages(hostTierName, landed);
    return landed.length;
  }

  /**
   * Rendezvous placement: pushes `pages` (committed to the host tier) to their owner's host tier where the owner is
   * another node, every owner at once. Returns how many each owner stored or held already, in all; pages an owner
   * refused or could not be sent stay local only.
   */
  async push(pages: readonly ClusterPage[]): Promise<number> {
    const nodes = await this.#o.registry.nodes();
    const ids = nodes.map((n) => n.id);
    const byOwner = new Map<string, ClusterPage[]>();
    for (const p of pages) {
      const owner = rendezvousOwner(p.key, ids);
      if (!owner || owner === this.#o.nodeId) continue;
      const list = byOwner.get(owner);
      if (list) list.push(p);
      else byOwner.set(owner, [p]);
    }
    const sent = await Promise.all(
      [...byOwner].map(([owner, part]) => {
        const node = nodes.find((n) => n.id === owner);
        return node?.peer ? this.#pushTo(node, part) : 0;
      }),
    );
    return sent.reduce((a, b) => a + b, 0);
  }

  /** Pushes `part` to `node`; returns how many it stored or held already (0 when the push failed, logged). */
  async #pushTo(node: NodeInfo, part: readonly ClusterPage[]): Promise<number> {
    const { hostTier } = this.#o;
    // Pinned while the bytes leave from their slots.
    const keys = part.map((p) => p.key);
    const where = hostTier.pinRemote(keys);
    try {
      const have = part.filter((_, i) => where[i]);
      if (!have.length) return 0;
      const arena = this.#arena;
      const r = await this.#call(node, (client) =>
        client.put(
          arena,
          have.map((p) => p.key),
          Float64Array.from(where.filter((w) => w !== undefined), (w) => w.offset),
          Uint32Array.from(have, (p) => p.length),
          Uint32Array.from(have, (p) => p.crc32c),
        ),
      );
      const statuses = Array.from(r.statuses);
      const stored = statuses.filter((s) => s === PeerStatus.ok || s === PeerStatus.existing).length;
      if (stored < have.length) {
        const outOfRange = statuses.filter((s) => s === PeerStatus.outOfRange).length;
        const why = outOfRange ? "the owner's host tier slots are smaller than these pages (the nodes' page sizes differ)" : "the owner's host tier refused them (full, or damaged on the way)";
        this.#log.warn({ node: node.id, peer: node.peer, pages: have.length, refused: have.length - stored, outOfRange }, `some pages were not pushed to their owner: ${why}`);
      }
      return stored;
    } catch (e) {
      this.#log.warn({ node: node.id, peer: node.peer, pages: part.length, err: (e as Error).message }, 'could not push pages to their owner; they stay local only');
      return 0;
    } finally {
      hostTier.unpin(keys.filter((_, i) => where[i]));
    }
  }

  /**
   * Runs one request on `node`'s connection. A connection-level failure drops the connection (the next call
   * connects again); where a connection that served earlier calls turned out dead (the node restarted while it
   * idled: ERR_IO for a reset, ERR_PROTOCOL for an end of stream), the request is tried once more on a fresh one:
   * GET and PUT are safe to repeat (a page that landed the first time is `existing`). Not after ERR_TIMEOUT (a node
   * that does not answer would cost a second deadline) or ERR_AUTH.
   */
  async #call<T>(node: NodeInfo, fn: (client: PeerClient) => Promise<T>): Promise<T> {
    const first = this.#connection(node.peer);
    try {
      return await this.#on(node.peer, first, fn);
    } catch (e) {
      if (!first.served || !(e instanceof TierSyncError) || (e.code !== 'ERR_IO' && e.code !== 'ERR_PROTOCOL')) throw e;
      this.#log.info({ node: node.id, peer: node.peer, err: e.message }, 'connection to a cluster node was lost; connecting again');
      return this.#on(node.peer, this.#connection(node.peer), fn);
    }
  }

  /** The connection to `address`, made if there is none. */
  #connection(address: string): Connection {
    if (this.#closed) throw new TierSyncError('cluster peer connections are closed', 'ERR_CLOSED');
    let c = this.#connections.get(address);
    if (!c) {
      c = { client: this.#connect(address), users: 0, served: false, dropped: false };
      c.client.catch(() => undefined); // observed in #on, by every caller
      this.#connections.set(address, c);
    }
    return c;
  }

  /** `fn` on `c`; a failure to connect or a connection-level failure drops it. */
  async #on<T>(address: string, c: Connection, fn: (client: PeerClient) => Promise<T>): Promise<T> {
    c.users++;
    try {
      let client: PeerClient;
      try {
        client = await c.client;
      } catch (e) {
        this.#drop(address, c);
        throw e;
      }
      const out = await fn(client);
      c.served = true;
      return out;
    } catch (e) {
      if (connectionFailed(e)) this.#drop(address, c);
      throw e;
    } finally {
      c.users--;
      if (c.dropped && c.users === 0) void c.client.then((client) => client.close(), () => undefined);
    }
  }

  #connect(address: string): Promise<PeerClient> {
    const i = address.lastIndexOf(':');
    const { peerSecret, peerTimeoutMs } = this.#o;
    return PeerClient.connect({ host: address.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(address.slice(i + 1)), streams: STREAMS, timeoutMs: peerTimeoutMs, ...(peerSecret ? { secret: peerSecret } : {}) });
  }

  /** Stops handing out `c`; it is closed once the calls using it are done (those on its healthy streams finish). */
  #drop(address: string, c: Connection): void {
    c.dropped = true;
    if (this.#connections.get(address) === c) this.#connections.delete(address);
  }

  /** Closes every connection; requests in flight fail with ERR_CLOSED, later calls too. */
  close(): void {
    this.#closed = true;
    for (const c of this.#connections.values()) void c.client.then((client) => client.close(), () => undefined);
    this.#connections.clear();
  }
}
