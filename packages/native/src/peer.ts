/**
 * The peer data plane: one host's host arena served to other hosts over TCP. Framed, versioned protocol with an
 * HMAC-SHA256 challenge-response handshake and, with a secret, AES-256-GCM authenticated (optionally encrypted)
 * frames (see cpp/peer_protocol.h for the wire format); page bytes move
 * socket <-> arena on native threads, several streams per peer.
 */
import { native, type NativePeerClient, type NativePeerFrame, type NativePeerServer, type PeerFrameCrypto, type PeerServerStats } from './addon.js';
import type { HostArena } from './arena.js';
import { TierSyncError, checkInteger } from './errors.js';

/** Per-page status codes on the wire. */
export const PeerStatus = { ok: 0, miss: 1, existing: 2, full: 3, badChecksum: 4, failed: 5, pinned: 6, outOfRange: 7 } as const;
export type PeerStatusCode = (typeof PeerStatus)[keyof typeof PeerStatus];

/** A request batch as the server's control plane sees it. */
export interface PeerServerRequest {
  /** Unique per server; the same for a batch's plan and finish. */
  id: number;
  op: 'put' | 'get' | 'has' | 'delete';
  /** 'plan': say where each page's bytes go / come from. 'finish': the bytes moved; commit or release. */
  phase: 'plan' | 'finish';
  /** finish only: the connection failed; release everything the plan reserved or pinned. */
  failed: boolean;
  keys: string[];
  /** put: page lengths and CRC32C the client declared. */
  lengths: Uint32Array;
  crcs: Uint32Array;
  /** finish of a put: per page, PeerStatus.ok if the bytes arrived intact, else why not. */
  outcome?: Uint8Array;
  /** finish: the statuses the plan gave. */
  planned?: Uint8Array;
}

export interface PeerPlan {
  /** Arena offset of each page (-1: no bytes move for it). */
  offsets: Float64Array;
  statuses: Uint8Array;
  /** get: stored length and CRC32C of each page. */
  lengths?: Uint32Array;
  crcs?: Uint32Array;
}

export interface PeerServerOptions {
  /** Listen address. Default 127.0.0.1. Without a secret only loopback addresses are allowed. */
  host?: string;
  /** Default 0 (any free port; see `port`). */
  port?: number;
  /**
   * Shared secret for the HMAC handshake. Default none (loopback only). With a secret every frame after the
   * handshake is authenticated (AES-256-GCM with per-connection keys and counter nonces): a frame changed, replayed
   * or reordered on the path is refused and the connection dropped.
   */
  secret?: string;
  /** With a secret: refuse clients that do not encrypt frames. Default false (authenticated, not encrypted). */
  encrypt?: boolean;
  /** Deadline of every socket read/write inside a request and of each control-plane answer, ms. Default 30000. */
  timeoutMs?: number;
  /** Largest payload one frame may declare, bytes. Default 1 GiB. */
  maxPayload?: number;
  /** Connections served at once (one thread each); further ones are closed on accept and counted. Default 256. */
  maxConnections?: number;
}

/**
 * Pages of PUTs stored into granted slots and acknowledged, handed to the control plane afterwards (batched), and
 * what the GETs planned on the data plane sent meanwhile.
 */
export interface PeerCommitBatch {
  keys: string[];
  /** Arena offset of each page's slot (one the control plane granted). */
  offsets: Float64Array;
  lengths: Uint32Array;
  /** CRC32C of each page, checked (or computed) as it landed. */
  crcs: Uint32Array;
  /**
   * What GETs planned on the data plane sent: the pages' keys (once per GET; at most 65,536 per batch, the rest
   * only counted), how many pages and bytes, and how many keys they missed.
   */
  served: string[];
  servedPages: number;
  servedBytes: number;
  misses: number;
}

/** Where pages of the served tier are: arena offset, length, CRC32C, slot and the slot's version now. */
export interface PeerPageLocations {
  offsets: Float64Array;
  lengths: Uint32Array;
  crcs: Uint32Array;
  slots: Uint32Array;
  versions: Uint32Array;
}

/** What `commit` answers: slots to grant in place of those the batch used. */
export interface PeerCommitAnswer {
  grant?: Float64Array;
}

/**
 * The slot table shared with the data plane: with it, a PUT needs no plan and waits on nothing. Slots granted in
 * advance (`grant`) are filled by the connection threads as the pages arrive (checked, tag and CRC32C), and each
 * PUT is acknowledged there: ok, or existing for a key the tier holds (mirrored into the server with
 * `holdKeys`/`dropKeys`) or that an earlier PUT claimed (its slot goes back to the pool). The pages of every PUT
 * acknowledged meanwhile, on any connection, then reach `commit` in one call, before any later plan (and at
 * `drain()`), which records them in the tier: a key the tier gained meanwhile by another path keeps its page there,
 * and `commit` frees the slot. The same call carries what GETs planned on the data plane sent meanwhile
 * (`served`: see shareSlots), for the tier's counters and eviction policy. `commit` may grant slots in place of
 * those used, and must not throw. `release` gets the slots still granted when the server closes.
 */
export interface PeerSlotTable {
  commit(batch: PeerCommitBatch): PeerCommitAnswer;
  release(offsets: Float64Array): void;
  /** The server closed (after its pool's slots were released): the table stops lending to it. */
  closed?(): void;
}

/**
 * Serves `arena` to peers. `plan` runs on the JS thread once per request batch and phase, and must answer
 * synchronously (it is the host tier's page table); throwing refuses the batch. With `slots`, PUTs skip `plan`
 * while granted slots last.
 */
export class PeerServer {
  readonly #native: NativePeerServer;
  readonly #slots: PeerSlotTable | undefined;
  #closed = false;

  constructor(arena: HostArena, plan: (request: PeerServerRequest) => PeerPlan | void, options: PeerServerOptions = {}, slots?: PeerSlotTable) {
    if (options.port !== undefined) checkInteger(options.port, 'port');
    if (options.secret !== undefined) native.peerFrameCrypto(); // a bad TIERSYNC_PEER_FRAME_CRYPTO fails here, not per handshake
    this.#slots = slots;
    this.#native = new native.PeerServer(options, arena.native, plan as (request: never) => unknown, slots ? ((batch: PeerCommitBatch) => slots.commit(batch)) as (batch: never) => unknown : undefined);
  }

  /** Takes back every granted slot still free (the caller frees them); PUTs then go through `plan` until the next grant. */
  takePool(): Float64Array {
    return this.#native.takePool();
  }

  /**
   * The served tier's table gained keys (or they moved): pooled PUTs of them are acknowledged `existing`, and with
   * `where` (and shareSlots) GETs of them are planned on the data plane. Call synchronously with every change to
   * the table, so the data plane's answers are the table's.
   */
  holdKeys(keys: string[], where?: PeerPageLocations): void {
    this.#native.holdKeys(keys, where);
  }

  /**
   * Shares the served tier's slot words (one per slot, each on a SharedArrayBuffer): `versions`, which the tier
   * bumps before it frees a slot, and `pins`, which GETs planned on the data plane hold while they send. The tier
   * must bump a slot's version before it reads the slot's pins, and keep a pinned slot (Atomics, both sides): then
   * a slot is never freed under a send. GETs of keys held with `where` are planned on the data plane from then on,
   * and so are GETs of pages pooled PUTs landed before the tier records them (`dataOffset`: the arena offset of
   * slot 0, so the data plane knows a granted slot's index): the tier must not free a landed slot before it records
   * its page, and must respect pins when it frees one it does not keep.
   */
  shareSlots(versions: Uint32Array, pins: Int32Array, dataOffset = 0): void {
    this.#native.shareSlots(versions, pins, dataOffset);
  }

  /** The served tier's table lost keys (deleted, evicted). */
  dropKeys(keys: string[]): void {
    this.#native.dropKeys(keys);
  }

  /**
   * Hands the pages of every PUT acknowledged so far to `slots.commit` now. Plans do this themselves; a control
   * channel outside the data plane calls it before each request, so a request that follows a PUT's ack finds its
   * pages.
   */
  drain(): void {
    if (!this.#closed) this.#native.drain();
  }

  /**
   * The served arena keeps a slot record per slot (`recordBytes` each from offset 0, slots from `dataOffset`: a
   * host tier on /dev/shm). A pooled PUT then writes each landed page's record before its ack, so the page outlives
   * a crash of this process; `slots.commit` must keep those records (or clear the ones of slots it frees).
   */
  keepSlotRecords(dataOffset: number, recordBytes: number): void {
    checkInteger(dataOffset, 'dataOffset');
    checkInteger(recordBytes, 'recordBytes', 1);
    this.#native.keepSlotRecords(dataOffset, recordBytes);
  }

  /** Grants free slots of the arena (each `slotBytes` long) to the data plane. */
  grant(offsets: Float64Array, slotBytes: number): void {
    checkInteger(slotBytes, 'slotBytes', 1);
    this.#native.grant(offsets, slotBytes);
  }

  get port(): number {
    return this.#native.port();
  }

  /**
   * connections: accepted in all; active: open now; refused: closed on accept because maxConnections were open;
   * authFailures: failed handshakes and frames that failed their tag; putRequests, getRequests, hasRequests,
   * deleteRequests: requests received, however answered; pooledPuts: PUTs stored into granted slots
   * without a plan; pooledSlots: granted slots free now; heldKeys: keys the data plane knows the tier holds;
   * getsPlannedHere, hasAnsweredHere: GETs planned and HAS answered on the data plane (the others asked `plan`).
   * Ranged GET pages: rangesByChunk checked only the 64 KiB chunks they overlap against the chunk CRC32Cs an earlier
   * whole check of the page found; rangesWhole checked their page whole (its first ranged read, or a chunk that no
   * longer matched); rangesAnnounced were chunk-aligned and sent unchecked with the CRC32C they must have (joined from
   * those chunk CRC32Cs), for the client to check: against what lands (no secret), or against the CRC32C of the bytes
   * as sent (authenticated).
   */
  stats(): PeerServerStats {
    return this.#native.stats();
  }

  /**
   * Stops listening, fails requests waiting on the control plane, closes connections and joins their threads;
   * acknowledged pages are committed, and the slots still granted go back through `slots.release`.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#native.close();
    const left = this.#native.takePool();
    if (this.#slots && left.length) this.#slots.release(left);
    this.#slots?.closed?.();
  }
}

export interface PeerClientOptions {
  host: string;
  port: number;
  /** Shared secret; without one only loopback peers are contacted. With one every frame is authenticated. */
  secret?: string;
  /** With a secret: encrypt frames too (AES-256-GCM). Default false, unless the server requires it. */
  encrypt?: boolean;
  /** Parallel TCP streams. Default 4. */
  streams?: number;
  /** Deadline for connecting and for every socket read/write of a request, ms. Default 30000. */
  timeoutMs?: number;
  maxPayload?: number;
}

export interface PeerReply {
  statuses: Uint8Array;
  lengths: Uint32Array;
  crcs: Uint32Array;
}

/** A connection (several streams) to one peer. Requests are spread over the streams as they free up. */
export class PeerClient {
  readonly #native: NativePeerClient;

  private constructor(raw: NativePeerClient) {
    this.#native = raw;
  }

  /** Connects every stream and runs the handshake off the JS thread. Rejects with ERR_IO, ERR_TIMEOUT or ERR_AUTH. */
  static async connect(options: PeerClientOptions): Promise<PeerClient> {
    checkInteger(options.port, 'port', 1);
    if (options.secret !== undefined) native.peerFrameCrypto(); // a bad TIERSYNC_PEER_FRAME_CRYPTO fails here, not in the handshake
    return new PeerClient(await native.connectPeer(options));
  }

  get streams(): number {
    return this.#native.streams();
  }

  /**
   * Sends pages [offsets[i], +lengths[i]) of `arena` with their CRC32C; statuses per page. Without `crcs` the
   * server computes them as the pages land (returned in `crcs` of the reply): each page is checksummed once.
   */
  put(arena: HostArena, keys: string[], offsets: Float64Array, lengths: Uint32Array, crcs?: Uint32Array): Promise<PeerReply> {
    return this.#native.request('put', arena.native, keys, offsets, lengths, crcs ?? new Uint32Array(keys.length), crcs === undefined);
  }

  /**
   * Fetches pages into `arena` at `offsets` (room: `room[i]` bytes); CRC32C checked on arrival (status badChecksum).
   * With `ranges`, entry i with `ranges.lengths[i] > 0` fetches only bytes [ranges.offsets[i], +lengths[i]) of its
   * page: the server checks the stored page whole first, the range travels with its own CRC32C (checked on arrival);
   * the reply gives the range's length and the page's CRC32C, or outOfRange for a range past the page.
   */
  get(arena: HostArena, keys: string[], offsets: Float64Array, room: Uint32Array, ranges?: { offsets: Float64Array; lengths: Uint32Array }): Promise<PeerReply> {
    return this.#native.request('get', arena.native, keys, offsets, room, new Uint32Array(keys.length), false, ranges?.offsets, ranges?.lengths);
  }

  has(keys: string[]): Promise<PeerReply> {
    return this.#native.request('has', null, keys);
  }

  delete(keys: string[]): Promise<PeerReply> {
    return this.#native.request('delete', null, keys);
  }

  close(): void {
    this.#native.close();
  }
}

/**
 * Which library authenticates (and encrypts) peer frames in this process, and its version text. All compute the
 * same AES-256-GCM, so peers using different ones interoperate; they differ in speed:
 * - `ipsec-mb`: Intel's IPsec Multi-Buffer library (apt: libipsec-mb-dev, x86-64), wherever the CPU runs its VAES
 *   + VPCLMULQDQ (AVX-512) GCM: ~20 GB/s GMAC per core, 2.6x OpenSSL 3.0's;
 * - otherwise `system` (the system's libcrypto.so.3) or `node` (Node's own OpenSSL), whichever is newer, since newer
 *   releases carry faster GCM (OpenSSL 3.5, in Node 22 and 24, authenticates ~2.5x faster than 3.0 on AVX-512 CPUs).
 *   At equal versions the system's is used; Node's always without a system library and in an ASan build.
 * TIERSYNC_PEER_FRAME_CRYPTO (`ipsec-mb`, `system` or `node`) picks one where it loads. Benchmarks report it.
 * @throws TierSyncError ERR_INVALID_ARGUMENT when TIERSYNC_PEER_FRAME_CRYPTO is set to another value (so do
 *   PeerServer and PeerClient.connect with a secret)
 */
export function peerFrameCrypto(): PeerFrameCrypto {
  return native.peerFrameCrypto();
}

/** Frame codec exposed for tests and fuzzing: decode refuses malformed frames with ERR_PROTOCOL. */
export const peerFrames = {
  decode(bytes: Uint8Array): NativePeerFrame {
    if (!(bytes instanceof Uint8Array)) throw new TierSyncError('bytes must be a Uint8Array', 'ERR_INVALID_ARGUMENT');
    return native.decodePeerFrame(bytes);
  },
  encode(op: number, requestId: number, entries: Array<{ key: string; status?: number; length?: number; crc32c?: number }>, payloadBytes = 0): Uint8Array {
    return native.encodePeerFrame(op, requestId, entries, payloadBytes);
  },
};
