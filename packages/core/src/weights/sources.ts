/**
 * Where a receiver fetches chunks from: another node over the native peer data plane (the publisher, or an
 * upstream receiver in a chain), or a staging tier (fs, object) holding a checkpoint. Either way the bytes land
 * straight in the receiver's chunk-store arena.
 */
import { HostArena, PeerClient, PeerStatus, TierSyncError } from '@tiersync/native';
import type { TierDriver } from '@tiersync/tiers';
import type { ChunkStore } from './chunk-store.js';

export interface FetchReply {
  /** PeerStatus per key: ok, miss (not there yet), badChecksum (CRC32C mismatch on arrival), failed. */
  statuses: Uint8Array;
  lengths: Uint32Array;
  crcs: Uint32Array;
}

export interface ChunkSource {
  readonly description: string;
  /** Fetches `keys` into `arena` at `offsets` (room `room[i]` bytes each). */
  fetch(arena: HostArena, keys: string[], offsets: Float64Array, room: Uint32Array): Promise<FetchReply>;
  close(): void;
}

/** Address of a node serving weights (`WeightPublisher.serve`, `WeightReceiver.serve`). */
export interface PeerAddress {
  host: string;
  port: number;
  secret?: string;
  /** Parallel TCP streams. Default 4. */
  streams?: number;
  /** Socket deadline, ms. Default 30000. */
  timeoutMs?: number;
}

export class PeerSource implements ChunkSource {
  readonly description: string;
  readonly #client: PeerClient;

  private constructor(client: PeerClient, description: string) {
    this.#client = client;
    this.description = description;
  }

  static async connect(a: PeerAddress): Promise<PeerSource> {
    const client = await PeerClient.connect({
      host: a.host,
      port: a.port,
      streams: a.streams ?? 4,
      ...(a.secret ? { secret: a.secret } : {}),
      ...(a.timeoutMs !== undefined ? { timeoutMs: a.timeoutMs } : {}),
    });
    return new PeerSource(client, `peer ${a.host}:${a.port}`);
  }

  fetch(arena: HostArena, keys: string[], offsets: Float64Array, room: Uint32Array): Promise<FetchReply> {
    return this.#client.get(arena, keys, offsets, room);
  }

  close(): void {
    this.#client.close();
  }
}

/** A staging tier (opened by the caller, who also closes it). Its page size must hold a chunk. */
export class TierSource implements ChunkSource {
  readonly description: string;
  readonly #tier: TierDriver;
  readonly #pageBytes: number;

  /** `pageBytes`: the tier's page size (its TierContext), the most one read may ask for. */
  constructor(tier: TierDriver, pageBytes: number) {
    this.#tier = tier;
    this.#pageBytes = pageBytes;
    this.description = `tier ${tier.url}`;
  }

  async fetch(arena: HostArena, keys: string[], offsets: Float64Array, room: Uint32Array): Promise<FetchReply> {
    const n = keys.length;
    const out: FetchReply = { statuses: new Uint8Array(n), lengths: new Uint32Array(n), crcs: new Uint32Array(n) };
    const outcomes = await this.#tier.read(keys.map((key, i) => ({ key, into: { arena, offset: offsets[i]!, length: Math.min(room[i]!, this.#pageBytes) } })));
    outcomes.forEach((o, i) => {
      if (o.status === 'hit') {
        out.statuses[i] = PeerStatus.ok;
        out.lengths[i] = o.length;
        out.crcs[i] = o.crc32c;
      } else if (o.status === 'miss') {
        out.statuses[i] = PeerStatus.miss;
      } else {
        out.statuses[i] = o.error instanceof TierSyncError && o.error.code === 'ERR_CHECKSUM' ? PeerStatus.badChecksum : PeerStatus.failed;
      }
    });
    return out;
  }

  close(): void {}
}

/**
 * A node's own chunk store as a source: what a pushed version is assembled from (its chunks and manifest were
 * pushed into the store before). A key the store lacks is answered 'failed', not 'miss': nobody will bring it.
 */
export class StoreSource implements ChunkSource {
  readonly description = 'local store (pushed)';
  readonly #store: ChunkStore;

  constructor(store: ChunkStore) {
    this.#store = store;
  }

  async fetch(arena: HostArena, keys: string[], offsets: Float64Array, room: Uint32Array): Promise<FetchReply> {
    const n = keys.length;
    const out: FetchReply = { statuses: new Uint8Array(n).fill(PeerStatus.failed), lengths: new Uint32Array(n), crcs: new Uint32Array(n) };
    keys.forEach((k, i) => {
      const e = this.#store.get(k);
      if (!e || e.length > room[i]!) return;
      arena.view(offsets[i]!, e.length).set(this.#store.arena.view(e.offset, e.length));
      out.statuses[i] = PeerStatus.ok;
      out.lengths[i] = e.length;
      out.crcs[i] = e.crc32c;
    });
    return out;
  }

  close(): void {}
}
