/**
 * Content-addressed chunks (and manifests) in one host arena, carved into fixed slots of `slotBytes`. It is the
 * page table the native peer server consults to serve chunks to other nodes (downstream receivers in a chain),
 * the dedup cache of a receiver (a chunk held from any earlier version never moves again), and the staging area
 * a device slot is assembled from. Retained keys (chunks and manifests of the versions a node serves, its latest
 * pointer) and pushed chunks awaiting their manifest are never evicted; others go least recently used first when
 * room is needed, and when that is not enough the caller gets ERR_TIER_FULL.
 */
import { createHash } from 'node:crypto';
import { HostArena, PageAllocator, PeerServer, PeerStatus, TierSyncError, type PeerPlan, type PeerServerRequest, type Slot, describeValue } from '@tiersync/native';

const CHUNK_KEY = /^[0-9a-f]{64}$/;
const MANIFEST_KEY = /^a0[0-9a-f]{64}$/;

export interface StoredChunk {
  slot: Slot;
  offset: number;
  length: number;
  crc32c: number;
  /** Requests reading it now (peer GETs, device copies): not evictable while > 0. */
  pins: number;
  lastUse: number;
}

export interface ChunkStoreOptions {
  /** Bytes of host memory for chunks and manifests. */
  capacity: number;
  /** Size of one slot: the largest chunk (and manifest) the store holds. Default 4 MiB. */
  slotBytes?: number;
  /** Fault the memory in at creation (MAP_POPULATE), so arriving chunks never pay page faults. Default false. */
  prefault?: boolean;
}

export interface ServeOptions {
  host?: string;
  port?: number;
  secret?: string;
  timeoutMs?: number;
}

export class ChunkStore {
  readonly arena: HostArena;
  readonly slotBytes: number;
  readonly #allocator: PageAllocator;
  readonly #entries = new Map<string, StoredChunk>();
  /** key -> number of retained versions referencing it. */
  readonly #retained = new Map<string, number>();
  #clock = 0;
  #server: PeerServer | undefined;

  constructor(options: ChunkStoreOptions) {
    this.slotBytes = options.slotBytes ?? 4 * 1024 * 1024;
    if (typeof options.capacity !== 'number' || !(options.capacity >= this.slotBytes)) {
      throw new TierSyncError(`chunk store capacity must be a number of bytes >= one ${this.slotBytes}-byte slot, got ${describeValue(options.capacity)}`, 'ERR_INVALID_ARGUMENT');
    }
    // Whole slots only: a fractional capacity rounds down.
    this.#allocator = new PageAllocator({ capacity: Math.floor(options.capacity / this.slotBytes) * this.slotBytes, pageBytes: this.slotBytes });
    this.arena = HostArena.create({ capacity: this.#allocator.slots * this.slotBytes, prefault: options.prefault ?? false });
  }

  get chunks(): number {
    return this.#entries.size;
  }

  get freeSlots(): number {
    return this.#allocator.freeCount;
  }

  get(key: string): StoredChunk | undefined {
    const e = this.#entries.get(key);
    if (e) e.lastUse = ++this.#clock;
    return e;
  }

  has(key: string): boolean {
    return this.#entries.has(key);
  }

  /**
   * Takes `count` free slots, evicting unpinned, unretained chunks (least recently used first) when needed.
   * @throws TierSyncError ERR_TIER_FULL when retained and pinned chunks leave too little room
   */
  allocate(count: number): Slot[] {
    let got = this.#allocator.allocate(count);
    if (got) return got;
    const victims = [...this.#entries].filter(([k, e]) => e.pins === 0 && !this.#retained.has(k)).sort((a, b) => a[1].lastUse - b[1].lastUse);
    const need = count - this.#allocator.freeCount;
    for (const [k] of victims.slice(0, need)) this.remove(k);
    got = this.#allocator.allocate(count);
    if (!got) {
      throw new TierSyncError(
        `weights chunk store full: ${count} slots of ${this.slotBytes} bytes wanted, ${this.#allocator.freeCount} free after eviction (capacity ${this.arena.capacity} bytes)`,
        'ERR_TIER_FULL',
      );
    }
    return got;
  }

  offsetOf(slot: Slot): number {
    return this.#allocator.offset(slot);
  }

  free(slots: readonly Slot[]): void {
    if (slots.length) this.#allocator.free(slots as Slot[]);
  }

  /** Makes bytes already in `slot` visible under `key` (callers verify them first). A duplicate frees the slot. */
  commit(key: string, slot: Slot, length: number, crc32c: number): StoredChunk {
    const have = this.#entries.get(key);
    if (have) {
      this.free([slot]);
      return have;
    }
    const e: StoredChunk = { slot, offset: this.offsetOf(slot), length, crc32c, pins: 0, lastUse: ++this.#clock };
    this.#entries.set(key, e);
    return e;
  }

  remove(key: string): boolean {
    const e = this.#entries.get(key);
    if (!e || e.pins > 0) return false;
    this.#entries.delete(key);
    this.free([e.slot]);
    return true;
  }

  pin(key: string): StoredChunk | undefined {
    const e = this.get(key);
    if (e) e.pins++;
    return e;
  }

  unpin(key: string): void {
    const e = this.#entries.get(key);
    if (e && e.pins > 0) e.pins--;
  }

  /** Keeps `keys` from eviction until {@link release} with the same keys. */
  retain(keys: Iterable<string>): void {
    for (const k of keys) this.#retained.set(k, (this.#retained.get(k) ?? 0) + 1);
  }

  /** Whether `key` is retained (by a version, a pointer or a push hold). */
  retained(key: string): boolean {
    return this.#retained.has(key);
  }

  release(keys: Iterable<string>): void {
    for (const k of keys) {
      const n = (this.#retained.get(k) ?? 0) - 1;
      if (n > 0) this.#retained.set(k, n);
      else this.#retained.delete(k);
    }
  }

  /**
   * Stores a small blob (manifest, pointer) under `key`, replacing what was there. Like a chunk, a blob is
   * evictable unless its key is retained: owners retain the manifests they serve and their latest pointer.
   * @throws TierSyncError ERR_TIER_FULL when no slot can be freed (retained keys are never evicted for a blob)
   */
  putBlob(key: string, bytes: Uint8Array, crc32c: number): void {
    if (bytes.length > this.slotBytes) {
      throw new TierSyncError(`blob of ${bytes.length} bytes does not fit a ${this.slotBytes}-byte slot (a manifest must fit one chunk slot)`, 'ERR_INVALID_ARGUMENT');
    }
    const [slot] = this.allocate(1);
    this.arena.view(this.offsetOf(slot!), bytes.length).set(bytes);
    this.drop(key);
    this.#entries.set(key, { slot: slot!, offset: this.offsetOf(slot!), length: bytes.length, crc32c, pins: 0, lastUse: ++this.#clock });
  }

  /**
   * Makes `key` invisible now, pinned or not (a manifest of a version no longer served). A reader (peer GET) of
   * the bytes keeps its slot; the slot is freed when it unpins.
   */
  drop(key: string): void {
    const old = this.#entries.get(key);
    if (!old) return;
    this.#entries.delete(key);
    if (old.pins === 0) this.free([old.slot]);
    else this.#orphans.add(old);
  }

  readonly #orphans = new Set<StoredChunk>();
  readonly #pinnedByRequest = new Map<number, StoredChunk[]>();

  /** The page-table answer for the native peer server: GET and HAS of chunks and manifests; writes are refused. */
  plan(r: PeerServerRequest): PeerPlan | void {
    const n = r.keys.length;
    const offsets = new Float64Array(n).fill(-1);
    const statuses = new Uint8Array(n).fill(PeerStatus.miss);
    if (r.op === 'get' && r.phase === 'plan') {
      const lengths = new Uint32Array(n);
      const crcs = new Uint32Array(n);
      const pinned: StoredChunk[] = [];
      r.keys.forEach((k, i) => {
        const e = this.pin(k);
        if (!e) return;
        pinned.push(e);
        offsets[i] = e.offset;
        lengths[i] = e.length;
        crcs[i] = e.crc32c;
        statuses[i] = PeerStatus.ok;
      });
      this.#pinnedByRequest.set(r.id, pinned);
      return { offsets, statuses, lengths, crcs };
    }
    if (r.op === 'get' && r.phase === 'finish') {
      for (const e of this.#pinnedByRequest.get(r.id) ?? []) {
        e.pins--;
        if (e.pins === 0 && this.#orphans.delete(e)) this.free([e.slot]);
      }
      this.#pinnedByRequest.delete(r.id);
      return;
    }
    if (r.op === 'has') {
      r.keys.forEach((k, i) => (statuses[i] = this.#entries.has(k) ? PeerStatus.ok : PeerStatus.miss));
      return { offsets, statuses };
    }
    if (r.op === 'put' && this.#onPushedManifest) return this.#planPut(r, this.#onPushedManifest);
    if (r.phase === 'plan') throw new TierSyncError(`weights store refuses '${r.op}' from peers (read-only)`, 'ERR_UNSUPPORTED');
  }

  #onPushedManifest: ((key: string, bytes: Uint8Array) => void) | undefined;
  readonly #reservedByRequest = new Map<number, Array<Slot | undefined>>();
  /** Pushed chunks held (retained) until their manifest's assembly retains them, or the hold's deadline. */
  readonly #pushHolds = new Map<string, NodeJS.Timeout>();
  #pushHoldMs = 60_000;

  /**
   * Lets peers push chunks and manifests into this store (PUT). A pushed chunk becomes visible only once its
   * SHA-256 matches its key (the native side has already checked its CRC32C), and is held from eviction until
   * {@link releasePushed} (its manifest arrived and the version's assembly retains it) or for `holdMs` (default
   * 60000), so later pushed chunks of the same version cannot evict earlier ones. A pushed manifest is handed
   * to `onManifest` (after the request finishes, off the page-table callback).
   */
  acceptPushes(onManifest: (key: string, bytes: Uint8Array) => void, holdMs = 60_000): void {
    this.#onPushedManifest = onManifest;
    this.#pushHoldMs = holdMs;
  }

  /** Ends the push holds of `keys` (their version's assembly now retains them, or gave up). */
  releasePushed(keys: Iterable<string>): void {
    for (const k of keys) {
      const t = this.#pushHolds.get(k);
      if (t === undefined) continue;
      clearTimeout(t);
      this.#pushHolds.delete(k);
      this.release([k]);
    }
  }

  #holdPushed(key: string): void {
    const t = this.#pushHolds.get(key);
    if (t !== undefined) return void t.refresh();
    this.retain([key]);
    const timer = setTimeout(() => this.releasePushed([key]), this.#pushHoldMs);
    timer.unref();
    this.#pushHolds.set(key, timer);
  }

  #planPut(r: PeerServerRequest, onManifest: (key: string, bytes: Uint8Array) => void): PeerPlan | void {
    const n = r.keys.length;
    if (r.phase === 'plan') {
      const offsets = new Float64Array(n).fill(-1);
      const statuses = new Uint8Array(n).fill(PeerStatus.failed);
      const slots: Array<Slot | undefined> = new Array(n).fill(undefined);
      r.keys.forEach((k, i) => {
        const isChunk = CHUNK_KEY.test(k);
        if (isChunk && this.#entries.has(k)) {
          statuses[i] = PeerStatus.existing;
          this.#holdPushed(k); // held like a chunk that arrived: the pusher counts on it
          return;
        }
        if ((!isChunk && !MANIFEST_KEY.test(k)) || r.lengths[i]! > this.slotBytes || r.lengths[i]! < 1) return;
        try {
          const [slot] = this.allocate(1);
          slots[i] = slot;
          offsets[i] = this.offsetOf(slot!);
          statuses[i] = PeerStatus.ok;
        } catch {
          statuses[i] = PeerStatus.full;
        }
      });
      this.#reservedByRequest.set(r.id, slots);
      return { offsets, statuses };
    }
    const slots = this.#reservedByRequest.get(r.id) ?? [];
    this.#reservedByRequest.delete(r.id);
    slots.forEach((slot, i) => {
      if (slot === undefined) return;
      const key = r.keys[i]!;
      const length = r.lengths[i]!;
      const intact = !r.failed && r.outcome?.[i] === PeerStatus.ok;
      const view = this.arena.view(this.offsetOf(slot), length);
      if (intact && CHUNK_KEY.test(key) && createHash('sha256').update(view).digest('hex') === key) {
        this.commit(key, slot, length, r.crcs[i]!);
        this.#holdPushed(key);
        return;
      }
      if (intact && MANIFEST_KEY.test(key)) {
        const bytes = Uint8Array.from(view);
        setImmediate(() => onManifest(key, bytes));
      }
      this.free([slot]);
    });
  }

  /** Serves this store to other nodes over the native peer data plane until {@link close}. */
  serve(options: ServeOptions = {}): PeerServer {
    if (this.#server) return this.#server;
    this.#server = new PeerServer(this.arena, (r) => this.plan(r), {
      ...(options.host !== undefined ? { host: options.host } : {}),
      ...(options.port !== undefined ? { port: options.port } : {}),
      ...(options.secret ? { secret: options.secret } : {}),
      ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
    });
    return this.#server;
  }

  get server(): PeerServer | undefined {
    return this.#server;
  }

  close(): void {
    for (const t of this.#pushHolds.values()) clearTimeout(t);
    this.#pushHolds.clear();
    this.#server?.close();
    this.#server = undefined;
    this.arena.close();
  }
}
