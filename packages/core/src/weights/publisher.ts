/**
 * The trainer's side: `publishWeights(version, tensors)` cuts tensors (named byte ranges of a host or device
 * arena) into content-addressed chunks in a chunk store, writes the version's manifest, and serves both to
 * receivers over the native peer data plane. A chunk already held (from an earlier version) is stored once.
 */
import { DeviceArena, HostArena, PeerClient, PeerStatus, TierSyncError, TransferBatch, TransferEngine, crc32c, describeValue, type Slot } from '@tiersync/native';
import type { TierDriver } from '@tiersync/tiers';
import { EventEmitter } from 'eventemitter3';
import { ChunkStore, type ServeOptions } from './chunk-store.js';
import { emptyMetrics, type WeightEvents, type WeightMetrics } from './events.js';
import {
  DEFAULT_CHUNK_BYTES, DTYPE_BYTES, LATEST_KEY, canonicalDtype, MANIFEST_FORMAT, TENSOR_ALIGNMENT, alignUp, checkVersion, chunkHash, encodeManifest, manifestKey,
  type ManifestChunk, type ManifestTensor, type WeightManifest,
} from './manifest.js';
import type { PeerAddress } from './sources.js';
import { stageVersion } from './staging.js';

/** One tensor to publish: `length` bytes at `offset` of `arena`. */
export interface TensorSource {
  name: string;
  /**
   * e.g. 'bf16', 'f32' (see DTYPE_BYTES; 'BF16', 'torch.bfloat16', 'bfloat16' are the same and the manifest
   * lists 'bf16'); with a known dtype, shape x element size must equal length. Other names pass unchecked.
   */
  dtype: string;
  shape: number[];
  arena: HostArena | DeviceArena;
  offset: number;
  length: number;
}

export interface WeightPublisherOptions {
  /**
   * Host memory for chunks of the retained versions plus one cutting window (16 chunks), bytes; every chunk and
   * every manifest takes one `chunkBytes` slot, and the latest pointer two while it is rewritten. A publish that
   * finds no room fails with ERR_TIER_FULL: manifests of served versions and the latest pointer are never evicted.
   */
  capacity: number;
  /** Chunk size, bytes. Default 4 MiB. */
  chunkBytes?: number;
  /** Versions kept servable; older ones are dropped (their chunks become evictable). Default 2. */
  keepVersions?: number;
  /** Fault the store's memory in at creation, so serving never pays page faults. Default false. */
  prefault?: boolean;
  /** Engine to copy with; default: one of its own (closed with the publisher). */
  engine?: TransferEngine;
}

export interface PublishResult {
  version: string;
  bytes: number;
  chunks: number;
  /** Chunks not held before (the rest were deduplicated against earlier versions). */
  newChunks: number;
}

/** One chunk-sized range of one tensor: the `index`-th chunk of tensors[tensor]. */
interface Piece {
  tensor: number;
  index: number;
  src: TensorSource;
  offset: number;
  length: number;
}

/** Arenas lend JavaScript views that stay within one of their 1 GiB spans. */
const VIEW_SPAN = 2 ** 30;

/** Whether `length` bytes at `aOffset` of `a` equal those at `bOffset` of `b` (memcmp, view by view). */
function sameBytes(a: HostArena, aOffset: number, b: HostArena, bOffset: number, length: number): boolean {
  for (let done = 0; done < length; ) {
    const x = aOffset + done;
    const y = bOffset + done;
    const n = Math.min(length - done, VIEW_SPAN - (x % VIEW_SPAN), VIEW_SPAN - (y % VIEW_SPAN));
    if (Buffer.compare(a.view(x, n), b.view(y, n)) !== 0) return false;
    done += n;
  }
  return true;
}

/** Chunks cut per engine batch: bounds the extra room a publish needs beyond the versions retained. */
const CUT_WINDOW = 16;

export class WeightPublisher extends EventEmitter<WeightEvents> {
  readonly store: ChunkStore;
  readonly chunkBytes: number;
  readonly #keep: number;
  readonly #engine: TransferEngine;
  readonly #ownEngine: boolean;
  readonly #manifests = new Map<string, WeightManifest>();
  /**
   * Versions whose publish is queued or running. A name is reserved here synchronously, when publishWeights is
   * called, so a second publish of it is refused before either runs (the queue would otherwise let both through).
   */
  readonly #publishing = new Set<string>();
  readonly #metrics: WeightMetrics = emptyMetrics();
  #busy: Promise<unknown> = Promise.resolve();

  constructor(options: WeightPublisherOptions) {
    super();
    this.chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
    this.#keep = options.keepVersions ?? 2;
    if (!Number.isSafeInteger(this.#keep) || this.#keep < 1) throw new TierSyncError(`keepVersions must be an integer >= 1, got ${describeValue(this.#keep)}`, 'ERR_INVALID_ARGUMENT');
    this.store = new ChunkStore({ capacity: options.capacity, slotBytes: this.chunkBytes, prefault: options.prefault ?? false });
    this.#ownEngine = options.engine === undefined;
    this.#engine = options.engine ?? new TransferEngine();
    this.store.retain([LATEST_KEY]);
  }

  /** Versions served, oldest first. */
  versions(): string[] {
    return [...this.#manifests.keys()];
  }

  manifest(version: string): WeightManifest | undefined {
    return this.#manifests.get(version);
  }

  metrics(): WeightMetrics {
    return { ...this.#metrics };
  }

  /**
   * Cuts `tensors` into chunks and serves them as `version`. Publishes run one at a time.
   * @throws TierSyncError ERR_INVALID_ARGUMENT (bad version/tensor, version already published or being published), ERR_OVERLAP
   *   (two tensors share bytes of one arena), ERR_OUT_OF_RANGE, ERR_TIER_FULL (store too small)
   */
  publishWeights(version: string, tensors: readonly TensorSource[]): Promise<PublishResult> {
    checkVersion(version);
    if (this.#manifests.has(version)) throw new TierSyncError(`version '${version}' is already published`, 'ERR_INVALID_ARGUMENT');
    if (this.#publishing.has(version)) throw new TierSyncError(`version '${version}' is already being published`, 'ERR_INVALID_ARGUMENT');
    checkTensors(tensors);
    this.#publishing.add(version);
    // The name stays reserved until the publish settles; a failed publish frees it for a retry.
    const run = this.#busy.then(() => this.#publish(version, tensors)).finally(() => this.#publishing.delete(version));
    this.#busy = run.catch(() => undefined);
    return run;
  }

  async #publish(version: string, tensors: readonly TensorSource[]): Promise<PublishResult> {
    const chunks: ManifestChunk[] = [];
    const chunkIndex = new Map<string, number>();
    const outTensors: ManifestTensor[] = [];
    let slotOffset = 0;
    let newChunks = 0;
    // Every (tensor, range) piece, cut in windows so a publish needs only CUT_WINDOW extra slots.
    const pieces: Piece[] = [];
    tensors.forEach((t, ti) => {
      for (let at = 0, k = 0; at < t.length; at += this.chunkBytes, k++) pieces.push({ tensor: ti, index: k, src: t, offset: t.offset + at, length: Math.min(this.chunkBytes, t.length - at) });
      outTensors.push({ name: t.name, dtype: canonicalDtype(t.dtype), shape: [...t.shape], offset: slotOffset, length: t.length, chunks: [] });
      slotOffset = alignUp(slotOffset + t.length, TENSOR_ALIGNMENT);
    });
    // Unique chunks of this version not yet retained: each is retained exactly once.
    const unretained = new Set<string>();
    // The newest version's chunks, per tensor name: change detection compares against them.
    const previous = [...this.#manifests.values()].at(-1);
    const before = new Map<string, ManifestChunk[]>(previous?.tensors.map((t) => [t.name, t.chunks.map((c) => previous.chunks[c]!)]) ?? []);
    try {
      for (let w = 0; w < pieces.length; w += CUT_WINDOW) {
        const window = pieces.slice(w, w + CUT_WINDOW);
        // Pieces whose bytes equal the previous version's chunk at the same place are that chunk: no copy, no hash.
        const same = window.map((p) => this.#unchanged(before, p));
        const changed = window.filter((_, i) => same[i] === undefined);
        const slots = this.store.allocate(changed.length);
        const batch = new TransferBatch();
        changed.forEach((p, i) => batch.add(p.src.arena, p.offset, this.store.arena, this.store.offsetOf(slots[i]!), p.length));
        let result;
        try {
          result = changed.length ? await this.#engine.submit(batch, { checksums: true }) : undefined;
        } catch (e) {
          this.store.free(slots);
          throw e;
        }
        let next = 0;
        window.forEach((p, i) => {
          let hash: string;
          let crc: number;
          const kept = same[i];
          if (kept) {
            hash = kept.hash;
            crc = kept.crc32c;
            this.#metrics.bytesUnchanged += p.length;
          } else {
            const j = next++;
            const slot = slots[j]!;
            hash = chunkHash(this.store.arena.view(this.store.offsetOf(slot), p.length));
            const stored = this.store.commit(hash, slot as Slot, p.length, result!.checksums![j]!);
            if (stored.slot === slot) newChunks++;
            crc = stored.crc32c;
          }
          let index = chunkIndex.get(hash);
          if (index === undefined) {
            index = chunks.push({ hash, crc32c: crc, length: p.length }) - 1;
            chunkIndex.set(hash, index);
            unretained.add(hash);
          }
          outTensors[p.tensor]!.chunks.push(index);
        });
        // Keep this version's chunks from eviction by the next window.
        this.store.retain(unretained);
        unretained.clear();
      }
      const manifest: WeightManifest = { format: MANIFEST_FORMAT, version, chunkBytes: this.chunkBytes, slotBytes: Math.max(slotOffset, 1), tensors: outTensors, chunks };
      const bytes = encodeManifest(manifest);
      const mkey = manifestKey(version);
      // The manifest is held with the version (a served version must stay pullable); the latest pointer is held
      // for good (constructor). Without room for either the publish fails and the manifest goes again.
      this.store.putBlob(mkey, bytes, crc32c(bytes));
      this.store.retain([mkey]);
      try {
        const latest = Buffer.from(JSON.stringify({ version }));
        this.store.putBlob(LATEST_KEY, latest, crc32c(latest));
      } catch (e) {
        this.store.release([mkey]);
        this.store.drop(mkey);
        throw e;
      }
      this.#manifests.set(version, manifest);
    } catch (e) {
      // A failed publish leaves nothing retained: its chunks become evictable like any unreferenced chunk.
      this.store.release(chunks.map((c) => c.hash).filter((h) => !unretained.has(h)));
      throw e;
    }
    while (this.#manifests.size > this.#keep) {
      const [old, m] = this.#manifests.entries().next().value as [string, WeightManifest];
      this.#manifests.delete(old);
      this.store.release([manifestKey(old)]);
      this.store.drop(manifestKey(old));
      this.store.release(m.chunks.map((c) => c.hash));
    }
    const total = tensors.reduce((s, t) => s + t.length, 0);
    this.#metrics.versionsPublished++;
    this.emit('weights:published', { version, bytes: total, chunks: chunks.length, newChunks });
    return { version, bytes: total, chunks: chunks.length, newChunks };
  }

  /**
   * The previous version's chunk for piece `p` when `p`'s bytes are still exactly that chunk's (compared byte for
   * byte with the stored copy: several times faster than hashing them), else undefined. Only host sources can
   * be compared here; a device tensor is always copied and hashed.
   */
  #unchanged(before: Map<string, ManifestChunk[]>, p: Piece): ManifestChunk | undefined {
    const chunk = before.get(p.src.name)?.[p.index];
    if (!chunk || chunk.length !== p.length || !(p.src.arena instanceof HostArena)) return undefined;
    const e = this.store.pin(chunk.hash);
    if (!e) return undefined;
    try {
      return sameBytes(p.src.arena, p.offset, this.store.arena, e.offset, p.length) ? chunk : undefined;
    } finally {
      this.store.unpin(chunk.hash);
    }
  }

  /** Serves the published versions to receivers; returns the port. */
  serve(options: ServeOptions = {}): number {
    return this.store.serve(options).port;
  }

  /**
   * Pushes `version` to a receiver that accepts pushes (`WeightReceiver.acceptPushes` + `serve`): asks which
   * chunks it already holds, sends the others (4 requests in flight), then the manifest, upon which the receiver
   * assembles and switches. Resolves once the manifest is delivered.
   * @throws TierSyncError ERR_NOT_FOUND (unknown version), ERR_IO (the receiver refused or lost a chunk)
   */
  async pushWeights(version: string, to: PeerAddress): Promise<{ chunksSent: number; bytesSent: number }> {
    const m = this.#manifests.get(version);
    if (!m) throw new TierSyncError(`unknown version '${version}'`, 'ERR_NOT_FOUND');
    const client = await PeerClient.connect({ host: to.host, port: to.port, streams: to.streams ?? 4, ...(to.secret ? { secret: to.secret } : {}), ...(to.timeoutMs ? { timeoutMs: to.timeoutMs } : {}) });
    const mkey = manifestKey(version);
    const keys = [...m.chunks.map((c) => c.hash), mkey];
    const pinned = keys.map((k) => this.store.pin(k));
    try {
      if (pinned.some((e) => e === undefined)) throw new TierSyncError(`version '${version}' is no longer complete in the store`, 'ERR_NOT_FOUND');
      const held = await client.has(m.chunks.map((c) => c.hash));
      const todo = m.chunks.map((_, i) => i).filter((i) => held.statuses[i] !== PeerStatus.ok);
      let chunksSent = 0;
      let bytesSent = 0;
      const send = async (indexes: number[], isChunk = true) => {
        const es = indexes.map((i) => pinned[i]!);
        const r = await client.put(this.store.arena, indexes.map((i) => keys[i]!), Float64Array.from(es, (e) => e.offset), Uint32Array.from(es, (e) => e.length), Uint32Array.from(es, (e) => e.crc32c));
        r.statuses.forEach((st, j) => {
          if (st !== PeerStatus.ok && st !== PeerStatus.existing) throw new TierSyncError(`receiver ${to.host}:${to.port} did not store chunk ${keys[indexes[j]!]} (status ${st})`, 'ERR_IO');
          if (st === PeerStatus.ok && isChunk) {
            chunksSent++;
            bytesSent += es[j]!.length;
          }
        });
      };
      for (let next = 0; next < todo.length; ) {
        const wave: Promise<void>[] = [];
        for (let k = 0; k < 4 && next < todo.length; k++, next++) wave.push(send([todo[next]!]));
        await Promise.all(wave);
      }
      // The receiver holds pushed chunks until their manifest arrives, but not the chunks it already had: check
      // that all are there before sending the manifest, so a push that cannot be assembled fails here.
      const after = await client.has(m.chunks.map((c) => c.hash));
      const lost = m.chunks.findIndex((_, i) => after.statuses[i] !== PeerStatus.ok);
      if (lost >= 0) throw new TierSyncError(`receiver ${to.host}:${to.port} no longer holds chunk ${m.chunks[lost]!.hash} of '${version}' (its store is too small?)`, 'ERR_IO');
      await send([keys.length - 1], false); // the manifest last: the receiver assembles when it arrives
      return { chunksSent, bytesSent };
    } finally {
      keys.forEach((k, i) => pinned[i] && this.store.unpin(k));
      client.close();
    }
  }

  /**
   * Writes `version` (chunks, then its manifest, then the latest pointer) to a staging tier (fs, object), a
   * checkpoint that new workers pull at start. Chunks the tier already holds are not written again.
   */
  async stage(version: string, tier: TierDriver): Promise<{ chunksWritten: number; bytesWritten: number }> {
    const m = this.#manifests.get(version);
    if (!m) throw new TierSyncError(`unknown version '${version}'`, 'ERR_NOT_FOUND');
    return stageVersion(this.store, m, tier);
  }

  async close(): Promise<void> {
    await this.#busy;
    this.store.close();
    if (this.#ownEngine) await this.#engine.close();
  }
}

function checkTensors(tensors: readonly TensorSource[]): void {
  if (!Array.isArray(tensors) || tensors.length === 0) throw new TierSyncError('tensors must be a non-empty array', 'ERR_INVALID_ARGUMENT');
  const names = new Set<string>();
  const byArena = new Map<HostArena | DeviceArena, Array<{ name: string; start: number; end: number }>>();
  tensors.forEach((t, i) => {
    const where = `tensors[${i}]`;
    if (typeof t !== 'object' || t === null) throw new TierSyncError(`${where} must be an object`, 'ERR_INVALID_ARGUMENT');
    if (typeof t.name !== 'string' || t.name.length === 0) throw new TierSyncError(`${where}.name must be a non-empty string`, 'ERR_INVALID_ARGUMENT');
    if (names.has(t.name)) throw new TierSyncError(`tensor name '${t.name}' appears twice`, 'ERR_INVALID_ARGUMENT');
    names.add(t.name);
    if (typeof t.dtype !== 'string' || t.dtype.length === 0) throw new TierSyncError(`tensor '${t.name}': dtype must be a non-empty string`, 'ERR_INVALID_ARGUMENT');
    if (!Array.isArray(t.shape) || !(t.shape as unknown[]).every((d) => typeof d === 'number' && Number.isSafeInteger(d) && d >= 0)) {
      throw new TierSyncError(`tensor '${t.name}': shape must be an array of non-negative integers, got ${Array.isArray(t.shape) ? `[${(t.shape as unknown[]).map((d) => describeValue(d)).join(', ')}]` : describeValue(t.shape)}`, 'ERR_INVALID_ARGUMENT');
    }
    if (!(t.arena instanceof HostArena || t.arena instanceof DeviceArena)) throw new TierSyncError(`tensor '${t.name}': arena must be a HostArena or DeviceArena`, 'ERR_INVALID_ARGUMENT');
    if (!Number.isSafeInteger(t.offset) || t.offset < 0) throw new TierSyncError(`tensor '${t.name}': offset must be an integer >= 0, got ${describeValue(t.offset)}`, 'ERR_INVALID_ARGUMENT');
    // A zero-size tensor (a dimension of 0, allowed by safetensors) is listed in the manifest with no chunks.
    if (!Number.isSafeInteger(t.length) || t.length < 0) throw new TierSyncError(`tensor '${t.name}': length must be an integer >= 0, got ${describeValue(t.length)}`, 'ERR_INVALID_ARGUMENT');
    if (t.offset + t.length > t.arena.capacity) {
      throw new TierSyncError(`tensor '${t.name}': range [${t.offset}, +${t.length}) exceeds its arena's ${t.arena.capacity} bytes`, 'ERR_OUT_OF_RANGE');
    }
    const size = DTYPE_BYTES[canonicalDtype(t.dtype)];
    if (size !== undefined) {
      const elements = (t.shape as number[]).reduce((a: number, b: number) => a * b, 1);
      if (elements * size !== t.length) {
        throw new TierSyncError(`tensor '${t.name}': shape [${t.shape.join(', ')}] of ${t.dtype} is ${elements * size} bytes, length says ${t.length}`, 'ERR_INVALID_ARGUMENT');
      }
    }
    if (t.length === 0) return; // holds no bytes: overlaps nothing
    const list = byArena.get(t.arena) ?? [];
    list.push({ name: t.name, start: t.offset, end: t.offset + t.length });
    byArena.set(t.arena, list);
  });
  for (const list of byArena.values()) {
    list.sort((a, b) => a.start - b.start);
    for (let i = 1; i < list.length; i++) {
      if (list[i]!.start < list[i - 1]!.end) {
        throw new TierSyncError(`tensors '${list[i - 1]!.name}' and '${list[i]!.name}' overlap in their arena`, 'ERR_OVERLAP');
      }
    }
  }
}
