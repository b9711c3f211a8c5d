/**
 * An inference worker's side: `pullWeights(version, { from })` fetches a version's manifest, fetches only the
 * chunks it does not already hold (from any earlier version), checks each (CRC32C on arrival, SHA-256 against its
 * key) and fetches damaged ones again, copies chunks into the inactive device slot as they arrive, and switches
 * readers to the new version atomically. A receiver can serve what it holds to the next receiver while it is
 * still pulling: a pipelined chain (publisher -> r1 -> r2 -> ...) in which a chunk a downstream node asks for
 * too early is answered 'miss' and asked for again shortly after.
 */
import { TierSyncError, TransferBatch, TransferEngine, crc32c, describeValue, type DeviceArena, type HostArena, type Slot } from '@tiersync/native';
import { EventEmitter } from 'eventemitter3';
import { ChunkStore, type ServeOptions } from './chunk-store.js';
import { emptyMetrics, type WeightEvents, type WeightMetrics } from './events.js';
import { LATEST_KEY, checkVersion, chunkHash, manifestKey, parseManifest, placements, type Placement, type WeightManifest } from './manifest.js';
import { PeerSource, StoreSource, type ChunkSource, type PeerAddress } from './sources.js';
import { PullDeadline } from './deadline.js';
import { VersionSlots, type SlotMemory, type WeightLease } from './version-slots.js';

const STATUS_OK = 0;
const STATUS_MISS = 1;
const STATUS_BAD_CHECKSUM = 4;

export interface WeightReceiverOptions {
  /**
   * Host memory for held chunks (the current version, what earlier versions share with it, in-flight), bytes.
   * Every chunk and manifest takes one `slotBytes` slot: the active and the pending version's manifests and the
   * latest pointer are held with their chunks; a pull that finds no room fails with ERR_TIER_FULL.
   */
  capacity: number;
  /** Largest chunk accepted (one store slot). Default 4 MiB. */
  slotBytes?: number;
  /** Where versions are assembled. Default device memory, `sim` backend. */
  memory?: SlotMemory;
  /** Fault the chunk store's memory in at creation. Default false. */
  prefault?: boolean;
  /** Engine for store -> slot copies; default: one of its own. */
  engine?: TransferEngine;
}

export interface PullOptions {
  /** A node serving weights (publisher or upstream receiver), or a staging source (`TierSource`). */
  from: PeerAddress | ChunkSource;
  /** Deadline of the whole pull, ms. Default 600000. */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Chunks per request. Default 1 (a downstream node in a chain can ask for each chunk as soon as it lands). */
  batchChunks?: number;
  /**
   * Requests in flight at once. Default 4. In a chain each hop lags its upstream by about this many chunks, so
   * keep it small; a few requests in flight already fill a link.
   */
  inflight?: number;
  /** How long to wait for readers to release the slot being reused, ms. Default 30000. */
  leaseWaitMs?: number;
  /**
   * How long to keep asking for a manifest the source does not hold yet, ms (a downstream receiver in a chain
   * started before its upstream). Default 0: an unknown version fails at once with ERR_NOT_FOUND.
   */
  waitForVersionMs?: number;
  /** A damaged chunk is fetched again up to this many times before the pull fails with ERR_CHECKSUM. Default 5. */
  maxAttempts?: number;
}

export interface PullResult {
  version: string;
  bytes: number;
  chunks: number;
  chunksFetched: number;
  bytesFetched: number;
  chunksReused: number;
  bytesReused: number;
  /** Bytes the assembly slot already held at the right offsets (from an older version): neither fetched nor copied. */
  bytesInPlace: number;
  corrupted: number;
  /** Chunk requests answered 'miss' (the upstream did not hold them yet) and asked again. */
  missesRetried: number;
  seconds: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** How long a source may answer 'miss' without progress before the pull asks whether it still has the version. */
const MISS_RECHECK_MS = 250;

export class WeightReceiver extends EventEmitter<WeightEvents> {
  readonly store: ChunkStore;
  readonly #slots: VersionSlots;
  readonly #engine: TransferEngine;
  readonly #ownEngine: boolean;
  readonly #metrics: WeightMetrics = emptyMetrics();
  /** Chunk sets retained for the active and the in-progress version. */
  #retained: { active?: string[]; pending?: string[] } = {};
  #busy: Promise<unknown> = Promise.resolve();

  constructor(options: WeightReceiverOptions) {
    super();
    this.store = new ChunkStore({ capacity: options.capacity, prefault: options.prefault ?? false, ...(options.slotBytes ? { slotBytes: options.slotBytes } : {}) });
    this.#slots = new VersionSlots(options.memory ?? { kind: 'device', backend: 'sim' });
    this.#ownEngine = options.engine === undefined;
    this.#engine = options.engine ?? new TransferEngine();
    this.store.retain([LATEST_KEY]);
  }

  /** The version readers see now. */
  get version(): string | undefined {
    return this.#slots.version;
  }

  get manifest(): WeightManifest | undefined {
    return this.#slots.activeManifest;
  }

  /**
   * Allocates the slot the next version will be assembled into now (device memory of `slotBytes`), so the first
   * pull does not pay for the allocation; with `slots: 2` (before the first pull) the second slot too, which the
   * first delta pull would otherwise allocate. Called while a pull is assembling, it waits for that pull to end
   * (it would otherwise reallocate the slot being filled).
   */
  reserve(slotBytes: number, slots: 1 | 2 = 1): void {
    this.#slots.reserve(slotBytes, slots);
  }

  /** Leases the active version (see {@link WeightLease}); undefined before the first switch. */
  acquire(): WeightLease | undefined {
    return this.#slots.acquire();
  }

  metrics(): WeightMetrics {
    return { ...this.#metrics };
  }

  /** Serves held chunks and manifests to downstream receivers; returns the port. */
  serve(options: ServeOptions = {}): number {
    return this.store.serve(options).port;
  }

  /**
   * Lets a publisher push versions (`WeightPublisher.pushWeights`) to the server started by {@link serve}: pushed
   * chunks land in the store once their SHA-256 matches; when the manifest arrives the version is assembled from
   * the store and switched to ('weights:switched', or 'push:failed').
   */
  acceptPushes(options: Omit<PullOptions, 'from'> = {}): void {
    this.store.acceptPushes((key, bytes) => {
      let version: string | undefined;
      let hashes: string[] = [];
      try {
        const m = parseManifest(bytes);
        version = m.version;
        hashes = m.chunks.map((c) => c.hash);
        if (manifestKey(version) !== key) throw new TierSyncError(`pushed manifest of '${version}' arrived under another version's key`, 'ERR_PROTOCOL');
        this.store.putBlob(key, bytes, crc32c(bytes));
      } catch (error) {
        this.store.releasePushed(hashes);
        this.emit('push:failed', { version, error });
        return;
      }
      // The manifest and the pushed chunks stay held until the assembly (queued behind other pulls) retains them.
      this.store.retain([key]);
      this.pullWeights(version, { ...options, from: new StoreSource(this.store) })
        .catch((error: unknown) => this.emit('push:failed', { version, error }))
        .finally(() => {
          this.store.release([key]);
          this.store.releasePushed(hashes);
        });
    });
  }

  /** The newest version `from` announces (its latest pointer), or undefined when it has none. */
  async latest(from: PeerAddress | ChunkSource): Promise<string | undefined> {
    const { source, owned } = await this.#source(from);
    try {
      return await this.#latestAt(source);
    } finally {
      if (owned) source.close();
    }
  }

  async #latestAt(source: ChunkSource, guard?: PullDeadline): Promise<string | undefined> {
    const bytes = await this.#fetchBlob(source, LATEST_KEY, guard);
    if (!bytes) return undefined;
    const v = (JSON.parse(Buffer.from(bytes).toString('utf8')) as { version?: unknown }).version;
    return checkVersion(v);
  }

  /** The manifest of `version` (default: the latest) at `from`, without pulling it; undefined when absent. */
  async manifestOf(from: PeerAddress | ChunkSource, version?: string): Promise<WeightManifest | undefined> {
    const { source, owned } = await this.#source(from);
    try {
      const wanted = version ?? (await this.latest(source));
      if (wanted === undefined) return undefined;
      const bytes = await this.#fetchBlob(source, manifestKey(checkVersion(wanted)));
      return bytes ? parseManifest(bytes, wanted) : undefined;
    } finally {
      if (owned) source.close();
    }
  }

  /**
   * Pulls `version` (default: the source's latest) and switches readers to it. Pulls run one at a time; a pull
   * that was interrupted (abort, source gone) keeps what arrived, and the next pull of the version resumes there.
   * @throws TierSyncError ERR_NOT_FOUND (unknown version), ERR_PROTOCOL (bad manifest), ERR_CHECKSUM (a chunk
   *   stayed damaged), ERR_TIMEOUT, ERR_ABORTED, ERR_IO (source unreachable or gone), ERR_TIER_FULL
   */
  pullWeights(version: string | undefined, options: PullOptions): Promise<PullResult> {
    if (version !== undefined) checkVersion(version);
    if (typeof options !== 'object' || options === null || options.from === undefined) {
      throw new TierSyncError(`pullWeights needs options.from (a peer address or a chunk source), got ${describeValue(options)}`, 'ERR_INVALID_ARGUMENT');
    }
    if (typeof options.from !== 'object' || options.from === null) {
      throw new TierSyncError(`options.from must be a peer address { host, port } or a chunk source, got ${describeValue(options.from)}`, 'ERR_INVALID_ARGUMENT');
    }
    const run = this.#busy.then(() => this.#pull(version, options));
    this.#busy = run.catch(() => undefined);
    return run;
  }

  /** A chunk source for `from`; `owned` when this call connected it (the caller closes it). */
  async #source(from: PeerAddress | ChunkSource, guard?: PullDeadline): Promise<{ source: ChunkSource; owned: boolean }> {
    if (typeof from !== 'object' || from === null) {
      throw new TierSyncError(`from must be a peer address { host, port } or a chunk source, got ${describeValue(from)}`, 'ERR_INVALID_ARGUMENT');
    }
    if ('fetch' in from && typeof from.fetch === 'function') return { source: from, owned: false };
    // The socket deadline never outlasts the pull's: a request on a stalled connection then fails by itself.
    const address = from as PeerAddress;
    const connecting = PeerSource.connect(guard ? { ...address, timeoutMs: Math.max(1, Math.min(address.timeoutMs ?? 30_000, guard.left)) } : address);
    const source = guard ? await guard.race(connecting, (late) => late.then((s) => s.close(), () => undefined)) : await connecting;
    return { source, owned: true };
  }

  /**
   * Fetches a small blob (manifest, pointer) through a temporary store slot; undefined when the source lacks it.
   * The slot is freed only once the request settles (an abandoned request may still write into it).
   */
  async #fetchBlob(source: ChunkSource, key: string, guard?: PullDeadline): Promise<Uint8Array | undefined> {
    const [slot] = this.store.allocate(1);
    const offset = this.store.offsetOf(slot!);
    const request = source.fetch(this.store.arena, [key], Float64Array.of(offset), Uint32Array.of(this.store.slotBytes));
    const free = () => this.store.free([slot!]);
    let abandoned = false;
    let r;
    try {
      r = guard ? await guard.race(request, (late) => ((abandoned = true), late.then(free, free))) : await request;
    } catch (e) {
      if (!abandoned) free(); // the request itself failed: settled, nothing writes any more
      throw e;
    }
    try {
      if (r.statuses[0] === STATUS_MISS) return undefined;
      if (r.statuses[0] !== STATUS_OK) throw new TierSyncError(`${source.description}: could not fetch ${key} (status ${r.statuses[0]}; larger than a ${this.store.slotBytes}-byte slot?)`, 'ERR_IO');
      return Uint8Array.from(this.store.arena.view(offset, r.lengths[0]!));
    } finally {
      free();
    }
  }

  async #pull(version: string | undefined, options: PullOptions): Promise<PullResult> {
    const started = performance.now();
    const deadline = Date.now() + (options.timeoutMs ?? 600_000);
    const guard = new PullDeadline(deadline, options.signal, `pull of ${version === undefined ? 'the latest version' : `'${version}'`}`);
    const { source, owned } = await this.#source(options.from, guard);
    try {
      const wanted = version ?? (await this.#latestAt(source, guard));
      if (wanted === undefined) throw new TierSyncError(`${source.description} announces no version`, 'ERR_NOT_FOUND');
      const waitUntil = Date.now() + (options.waitForVersionMs ?? 0);
      let manifestBytes = await this.#fetchBlob(source, manifestKey(wanted), guard);
      for (let backoff = 1; !manifestBytes && Date.now() < Math.min(waitUntil, deadline); backoff = Math.min(backoff * 2, 5)) {
        const stop = guard.check();
        if (stop) throw stop;
        await sleep(backoff);
        manifestBytes = await this.#fetchBlob(source, manifestKey(wanted), guard);
      }
      if (!manifestBytes) throw new TierSyncError(`unknown version '${wanted}' at ${source.description}`, 'ERR_NOT_FOUND');
      const manifest = parseManifest(manifestBytes, wanted);
      if (manifest.chunkBytes > this.store.slotBytes) {
        throw new TierSyncError(`version '${wanted}' uses ${manifest.chunkBytes}-byte chunks, larger than this receiver's ${this.store.slotBytes}-byte slots`, 'ERR_INVALID_ARGUMENT');
      }
      this.#metrics.pulls++;
      try {
        return await this.#assemble(manifest, manifestBytes, source, options, guard, started);
      } catch (e) {
        // The version was announced when the pull started; downstream nodes asking for the latest must get the
        // version this node can serve whole again.
        this.#announceActive();
        this.#slots.endWrite();
        throw e;
      }
    } finally {
      // Requests given up on still run on the client's native threads; close it once they have settled.
      if (owned) {
        if (guard.late.length === 0) source.close();
        else void Promise.all(guard.late).then(() => source.close());
      }
    }
  }

  async #assemble(m: WeightManifest, manifestBytes: Uint8Array, source: ChunkSource, o: PullOptions, guard: PullDeadline, started: number): Promise<PullResult> {
    // Hold this version's chunks and manifest from eviction, and announce it so downstream receivers can start
    // right away. A version given up for this one stops being announced.
    const keys = [...m.chunks.map((c) => c.hash), manifestKey(m.version)];
    this.store.retain(keys);
    if (this.#retained.pending) this.#unhold(this.#retained.pending);
    this.#retained.pending = keys;
    this.store.putBlob(manifestKey(m.version), manifestBytes, crc32c(manifestBytes));
    const pointer = Buffer.from(JSON.stringify({ version: m.version }));
    this.store.putBlob(LATEST_KEY, pointer, crc32c(pointer));

    const places = placements(m);
    const byChunk: Placement[][] = m.chunks.map(() => []);
    const placeIndex: number[][] = m.chunks.map(() => []);
    places.forEach((p, i) => {
      byChunk[p.chunk]!.push(p);
      placeIndex[p.chunk]!.push(i);
    });
    const slot = await this.#slots.beginWrite(
      m.version,
      m.slotBytes,
      places.map((p) => ({ slotOffset: p.slotOffset, length: p.length, hash: m.chunks[p.chunk]!.hash })),
      Math.min(o.leaseWaitMs ?? 30_000, guard.left),
      o.signal,
    );
    this.#metrics.bytesInPlace += slot.inPlaceBytes;
    const placed = slot.placed;
    const copies: Promise<void>[] = [];
    let copyError: unknown;
    const damagedInStore = new Set<string>();

    // Copies chunks from the store into every place they occupy in the slot, verifying CRC32C on the way.
    const place = (chunks: number[]) => {
      const todo = chunks.filter((c) => placeIndex[c]!.some((i) => !placed[i]));
      if (todo.length === 0) return;
      const batch = new TransferBatch();
      const expected: number[] = [];
      const done: number[] = [];
      const descChunk: number[] = [];
      for (const c of todo) {
        const e = this.store.pin(m.chunks[c]!.hash)!;
        byChunk[c]!.forEach((p, j) => {
          const i = placeIndex[c]![j]!;
          if (placed[i]) return;
          batch.add(this.store.arena, e.offset, slot.arena, p.slotOffset, p.length);
          expected.push(m.chunks[c]!.crc32c);
          done.push(i);
          descChunk.push(c);
        });
      }
      copies.push(
        this.#engine
          .submit(batch, { expected: Uint32Array.from(expected) })
          .then((r) => {
            if (r.mismatches && r.mismatches.length > 0) {
              // Drop the damaged copies from the store (after unpinning, below) so the next pull fetches them.
              for (const d of r.mismatches) damagedInStore.add(m.chunks[descChunk[d]!]!.hash);
              throw new TierSyncError(`${r.mismatches.length} chunk(s) of version '${m.version}' changed in host memory before reaching the slot`, 'ERR_CHECKSUM');
            }
            for (const i of done) placed[i] = 1;
            this.#metrics.bytesPlaced += batch.bytes;
          })
          .catch((e: unknown) => {
            copyError ??= e;
          })
          .finally(() => {
            for (const c of todo) this.store.unpin(m.chunks[c]!.hash);
            for (const h of damagedInStore) this.store.remove(h);
          }),
      );
    };

    const missing: number[] = [];
    const present: number[] = [];
    let bytesReused = 0;
    const inSlot = (c: number) => placeIndex[c]!.every((i) => placed[i]);
    m.chunks.forEach((c, i) => {
      // A chunk that sits in every place it needs in the slot is not needed from anywhere, held or not.
      if (this.store.has(c.hash) || inSlot(i)) {
        present.push(i);
        bytesReused += c.length;
      } else missing.push(i);
    });
    // A chunk that sits in the slot but no longer in the store (evicted since an older version left it there, as
    // after a rollback A -> B -> A) goes back into the store: this node announces the version, so it must serve
    // every chunk of it. A copy that fails its CRC32C is fetched instead.
    const slotOnly = present.filter((c) => !this.store.has(m.chunks[c]!.hash));
    if (slotOnly.length > 0) {
      const lost = await this.#restoreFromSlot(m, slotOnly, slot.arena, (c) => byChunk[c]![0]!.slotOffset);
      for (const c of lost) {
        present.splice(present.indexOf(c), 1);
        bytesReused -= m.chunks[c]!.length;
        for (const i of placeIndex[c]!) placed[i] = 0;
        missing.push(c);
      }
      missing.sort((x, y) => x - y);
    }
    place(present);
    this.#metrics.chunksReused += present.length;
    this.#metrics.bytesReused += bytesReused;

    const batchChunks = o.batchChunks ?? 1;
    const inflight = o.inflight ?? 4;
    const maxAttempts = o.maxAttempts ?? 5;
    const attempts = new Uint8Array(m.chunks.length);
    const ready: number[] = missing.reverse(); // pop() takes them in slot order
    let delayed: number[] = [];
    let remaining = missing.length;
    let failure: unknown;
    let bytesFetched = 0;
    let chunksFetched = 0;
    let corrupted = 0;
    let misses = 0;

    const damaged = (c: number, reason: 'crc32c' | 'sha256') => {
      corrupted++;
      this.#metrics.chunksCorrupted++;
      this.emit('chunk:corrupted', { version: m.version, hash: m.chunks[c]!.hash, reason });
      if (++attempts[c]! >= maxAttempts) {
        failure ??= new TierSyncError(`chunk ${m.chunks[c]!.hash} of version '${m.version}' arrived damaged ${maxAttempts} times from ${source.description}`, 'ERR_CHECKSUM');
      } else ready.push(c);
    };

    const fetchOne = async (batch: number[]) => {
      const slots = this.store.allocate(batch.length);
      const offsets = Float64Array.from(slots, (s) => this.store.offsetOf(s));
      const room = new Uint32Array(batch.length).fill(this.store.slotBytes);
      const request = source.fetch(this.store.arena, batch.map((c) => m.chunks[c]!.hash), offsets, room);
      const free = () => this.store.free(slots);
      let abandoned = false;
      let reply;
      try {
        // An abandoned request may still write into its slots: they are freed when it settles.
        reply = await guard.race(request, (late) => ((abandoned = true), late.then(free, free)));
      } catch (e) {
        if (!abandoned) free();
        throw e;
      }
      const arrived: number[] = [];
      await Promise.all(
        batch.map(async (c, i) => {
          const want = m.chunks[c]!;
          const st = reply.statuses[i];
          if (st === STATUS_OK && reply.lengths[i] === want.length && reply.crcs[i] === want.crc32c) {
            const hash = chunkHash(this.store.arena.view(offsets[i]!, want.length));
            if (hash === want.hash) {
              this.store.commit(want.hash, slots[i] as Slot, want.length, want.crc32c);
              arrived.push(c);
              return;
            }
            this.store.free([slots[i]!]);
            damaged(c, 'sha256');
            return;
          }
          this.store.free([slots[i]!]);
          if (st === STATUS_MISS) {
            this.#metrics.missesRetried++;
            misses++;
            delayed.push(c);
          } else if (st === STATUS_OK || st === STATUS_BAD_CHECKSUM) damaged(c, 'crc32c');
          else failure ??= new TierSyncError(`${source.description} failed to send chunk ${want.hash} (status ${st})`, 'ERR_IO');
        }),
      );
      for (const c of arrived) {
        remaining--;
        chunksFetched++;
        bytesFetched += m.chunks[c]!.length;
      }
      this.#metrics.chunksFetched += arrived.length;
      this.#metrics.bytesFetched += arrived.reduce((s, c) => s + m.chunks[c]!.length, 0);
      place(arrived);
      this.emit('chunks:fetched', { version: m.version, chunksDone: m.chunks.length - remaining, chunksTotal: m.chunks.length, bytesFetched });
    };

    // When the source answers 'miss' it is behind us (an upstream receiver still pulling): stop asking ahead,
    // and let one worker probe for the earliest missing chunk with a short backoff; once it lands, resume
    // asking in order. This keeps wasted requests to a few per stall instead of one per remaining chunk.
    let probing = false;
    let backoff = 1;
    // A source that keeps answering 'miss' may have given the version up (a publisher past keepVersions, an
    // upstream receiver that moved on): every MISS_RECHECK_MS of misses without progress, ask for its manifest
    // again, and fail with ERR_NOT_FOUND when it is gone rather than retrying until the deadline.
    let stalledSince = 0;
    const worker = async () => {
      while (remaining > 0 && failure === undefined) {
        const stop = guard.check();
        if (stop) {
          failure ??= stop;
          break;
        }
        if (delayed.length > 0 && ready.length > 0) delayed.push(...ready.splice(0));
        if (ready.length === 0) {
          if (delayed.length > 0 && !probing) {
            probing = true;
            await sleep(backoff);
            delayed.sort((x, y) => x - y);
            const probe = delayed.shift()!;
            const before = remaining;
            try {
              await fetchOne([probe]);
            } catch (e) {
              failure ??= e;
            } finally {
              probing = false;
            }
            if (remaining >= before && failure === undefined) {
              const now = Date.now();
              if (stalledSince === 0) stalledSince = now;
              else if (now - stalledSince >= MISS_RECHECK_MS) {
                stalledSince = now;
                try {
                  if (!(await this.#fetchBlob(source, manifestKey(m.version), guard))) {
                    failure ??= new TierSyncError(`${source.description} no longer serves version '${m.version}' (${remaining} chunks were still missing)`, 'ERR_NOT_FOUND');
                  }
                } catch (e) {
                  failure ??= e;
                }
              }
            } else stalledSince = 0;
            if (remaining < before) {
              backoff = 1;
              ready.push(...delayed.sort((x, y) => y - x)); // pop() takes the earliest first
              delayed = [];
            } else backoff = Math.min(backoff * 2, 8);
          } else await sleep(1);
          continue;
        }
        const batch: number[] = [];
        while (batch.length < batchChunks && ready.length > 0) batch.push(ready.pop()!);
        try {
          await fetchOne(batch);
        } catch (e) {
          failure ??= e;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, inflight) }, worker));
    await Promise.all(copies);
    if (failure === undefined && copyError !== undefined) failure = copyError;
    if (failure !== undefined) throw failure;
    if (!placed.every((x) => x === 1)) throw new TierSyncError(`version '${m.version}' is incomplete after its pull`, 'ERR_IO');

    const previous = this.#slots.version;
    this.#slots.commit(m);
    if (this.#retained.active) this.#unhold(this.#retained.active);
    this.#retained.active = keys;
    this.#retained.pending = undefined;
    this.#metrics.switches++;
    this.emit('weights:switched', { version: m.version, previous, bytesFetched, bytesReused });
    const bytes = m.chunks.reduce((s, c) => s + c.length, 0);
    return {
      version: m.version,
      bytes,
      chunks: m.chunks.length,
      chunksFetched,
      bytesFetched,
      chunksReused: present.length,
      bytesReused,
      bytesInPlace: slot.inPlaceBytes,
      corrupted,
      missesRetried: misses,
      seconds: (performance.now() - started) / 1000,
    };
  }

  /**
   * Copies chunks `cs` of `m` from the assembly slot (at `offsetOf(c)`) into the store, checking each CRC32C on
   * the way; returns those whose copy did not match (not stored).
   */
  async #restoreFromSlot(m: WeightManifest, cs: number[], arena: HostArena | DeviceArena, offsetOf: (c: number) => number): Promise<number[]> {
    const slots = this.store.allocate(cs.length);
    const batch = new TransferBatch();
    cs.forEach((c, i) => batch.add(arena, offsetOf(c), this.store.arena, this.store.offsetOf(slots[i]!), m.chunks[c]!.length));
    let r;
    try {
      r = await this.#engine.submit(batch, { expected: Uint32Array.from(cs, (c) => m.chunks[c]!.crc32c) });
    } catch (e) {
      this.store.free(slots);
      throw e;
    }
    const bad = new Set(r.mismatches ?? []);
    cs.forEach((c, i) => {
      if (bad.has(i)) this.store.free([slots[i]!]);
      else this.store.commit(m.chunks[c]!.hash, slots[i] as Slot, m.chunks[c]!.length, m.chunks[c]!.crc32c);
    });
    return cs.filter((_, i) => bad.has(i));
  }

  /**
   * Points the latest pointer back at the active version (after a failed pull announced another one); with no
   * active version, or no room for the pointer, announces none.
   */
  #announceActive(): void {
    const active = this.#slots.version;
    try {
      if (active === undefined) throw new TierSyncError('no active version', 'ERR_NOT_FOUND');
      const pointer = Buffer.from(JSON.stringify({ version: active }));
      this.store.putBlob(LATEST_KEY, pointer, crc32c(pointer));
    } catch {
      this.store.drop(LATEST_KEY);
    }
  }

  /** Releases a version's retained keys (chunks, then its manifest last) and drops the manifest unless still held. */
  #unhold(keys: string[]): void {
    this.store.release(keys);
    const mkey = keys.at(-1)!;
    if (!this.store.retained(mkey)) this.store.drop(mkey);
  }

  async close(): Promise<void> {
    await this.#busy;
    this.store.close();
    this.#slots.close();
    if (this.#ownEngine) await this.#engine.close();
  }
}
