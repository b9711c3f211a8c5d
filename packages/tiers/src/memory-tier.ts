/**
 * Shared core of the two memory tiers (hbm, host): fixed page slots in one arena, a PageAllocator, and a table
 * key -> slot. Writes and reads are single native batches; a page is entered in the table only after its batch
 * completes, so a failed or aborted write never becomes visible.
 */
import { PageAllocator, TierSyncError, TransferBatch, type DeviceArena, type HostArena, type Slot } from '@tiersync/native';
import type {
  IoOptions,
  PageInfo,
  PageKey,
  PageMeta,
  PageRead,
  PageWrite,
  ReadOutcome,
  TierCapabilities,
  TierContext,
  TierDriver,
  TierStats,
  WriteResult,
} from './driver.js';
import { InFlight, PinTable, TierCounters, listPages } from './stats.js';
import { checkKeys, checkReads, checkWrites } from './validate.js';

/** How long a write short of slots only because native readers hold freed ones waits for them by default, ms. */
const READERS_WAIT_MS = 1000;

export interface StoredPage {
  slot: Slot;
  length: number;
  crc32c: number;
  /** Kept (and listed) only by stores that persist slot records: PageWrite.meta. */
  meta?: PageMeta | undefined;
}

/** Hooks a memory tier gives the shared core: where slots live and how to persist slot metadata. */
export interface SlotStore {
  /** The arena holding page data; slot s occupies [dataOffset + s * pageBytes, +pageBytes). */
  arena: HostArena | DeviceArena;
  dataOffset: number;
  /** Records a slot as holding a page (after its bytes landed) or as free. Volatile tiers do nothing. */
  commit?(slot: Slot, page: { key: PageKey; length: number; crc32c: number; meta?: PageMeta | undefined } | undefined): void;
}

/** Told of every key a memory tier's table gains or loses (MemoryTier.watchKeys). */
export interface KeyWatcher {
  added(keys: PageKey[]): void;
  removed(keys: PageKey[]): void;
}

/** The key a lent slot is reserved under: no page has it (keys are validated non-empty hex). */
const LENT_SLOT: PageKey = '';

export abstract class MemoryTier implements TierDriver {
  abstract readonly capabilities: TierCapabilities;
  readonly url: string;
  protected readonly context: TierContext;
  protected readonly capacityBytes: number;
  protected readonly table = new Map<PageKey, StoredPage>();
  protected readonly counters = new TierCounters();
  protected allocator: PageAllocator | undefined;
  protected store: SlotStore | undefined;
  readonly #pins = new PinTable();
  readonly #inflight = new InFlight();
  /** Holders of lent slots (lendSlots), asked to give them back when an allocation finds too few free slots. */
  readonly #reclaimers = new Set<() => void>();
  readonly #keyWatchers = new Set<KeyWatcher>();
  /**
   * @internal One 32-bit version per slot (slot s: word s), bumped (Atomics, seq_cst) every time the slot is freed:
   * delete, eviction, demotion, a write that lost, slots given back. A reader outside JavaScript (the native RESP
   * door's GETs) records a page's slot version and copies the slot only while the version is unchanged. Shared
   * memory, so its words never move. Undefined until open().
   */
  slotVersions: Uint32Array | undefined;
  /**
   * @internal One 32-bit count per slot of pins held outside JavaScript (the peer data plane's GETs), Atomics. A
   * delete bumps the slot's version first, then reads its pins; such a reader pins first, then checks the version it
   * recorded: one of the two sees the other's write. A deleted page whose slot a reader holds is gone from the table
   * at once, but its slot is kept aside (#heldByReaders) until the pin drops, so a slot is never reused under a send.
   * Shared memory, undefined until open().
   */
  slotPins: Int32Array | undefined;
  /** Slots a reader outside JavaScript still held when their page went (#freeDeleted); freed once their pins drop. */
  readonly #heldByReaders = new Set<Slot>();
  #closed = false;
  #usedBytes = 0;

  protected constructor(url: string, context: TierContext, capacityBytes: number) {
    this.url = url;
    this.context = context;
    this.capacityBytes = capacityBytes;
  }

  /** Creates or reattaches the arena; returns the slot store and any pages recovered into `table`. */
  protected abstract openStore(): Promise<SlotStore>;
  protected abstract closeStore(): void;

  async open(): Promise<void> {
    if (this.store) throw this.error('tier is already open', 'ERR_INVALID_ARGUMENT');
    this.store = await this.openStore();
    const slots = Math.floor(this.capacityBytes / this.context.pageBytes);
    if (slots < 1) throw this.error(`capacity ${this.capacityBytes} is smaller than one page (${this.context.pageBytes})`, 'ERR_CONFIG');
    this.allocator = new PageAllocator({ capacity: slots * this.context.pageBytes, pageBytes: this.context.pageBytes });
    this.slotVersions = new Uint32Array(new SharedArrayBuffer(slots * 4));
    this.slotPins = new Int32Array(new SharedArrayBuffer(slots * 4));
    this.allocator.reserve([...this.table.values()].map((p) => p.slot));
    for (const p of this.table.values()) this.#usedBytes += p.length;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#inflight.drained();
    this.closeStore();
  }

  protected error(message: string, code: TierSyncError['code']): TierSyncError {
    return new TierSyncError(`${this.capabilities.kind} tier: ${message}`, code, { tier: this.capabilities.kind });
  }

  #ready(): { allocator: PageAllocator; store: SlotStore } {
    if (this.#closed) throw this.error('tier is closed', 'ERR_CLOSED');
    if (!this.allocator || !this.store) throw this.error('tier is not open; call open() first', 'ERR_CLOSED');
    return { allocator: this.allocator, store: this.store };
  }

  #offset(store: SlotStore, slot: Slot): number {
    return store.dataOffset + slot * this.context.pageBytes;
  }

  /**
   * @internal Where stored pages are now, without pinning them or counting a read: each one's arena offset, length,
   * CRC32C and slot (the index into slotVersions); undefined for a key this tier does not hold. True for the calling
   * turn only: any later free of the slot (delete, eviction, demotion) bumps its version first, so a reader outside
   * JavaScript that records slotVersions[slot] in this same turn sees any change after it (the native RESP door's
   * mirror of GET-able values).
   */
  locate(keys: readonly PageKey[]): Array<{ offset: number; length: number; crc32c: number; slot: number } | undefined> {
    const { store } = this.#ready();
    return keys.map((k) => {
      const p = this.table.get(k);
      return p && { offset: this.#offset(store, p.slot), length: p.length, crc32c: p.crc32c, slot: p.slot };
    });
  }

  /**
   * Frees the slot of a page a reader outside JavaScript may be sending (a deleted page, or a landed one the table
   * does not keep): bumps its version, then reads its pins (slotPins). A reader that pins after the bump sees the
   * change and lets go; one that pinned before is seen here, and the slot waits for it (#heldByReaders) instead of
   * going back to the allocator.
   */
  #freeDeleted(allocator: PageAllocator, slot: Slot): void {
    Atomics.add(this.slotVersions!, slot, 1);
    if (Atomics.load(this.slotPins!, slot) > 0) this.#heldByReaders.add(slot);
    else allocator.free([slot]);
  }

  /** Gives back the held slots whose readers have let go (their versions were bumped at the delete). */
  #freeReleased(allocator: PageAllocator): void {
    for (const slot of this.#heldByReaders) {
      if (Atomics.load(this.slotPins!, slot) > 0) continue;
      this.#heldByReaders.delete(slot);
      allocator.free([slot]);
    }
  }

  /** @internal The arena offset of slot 0 (slot s is pageBytes * s further on); undefined before open(). */
  get slotsOffset(): number | undefined {
    return this.store?.dataOffset;
  }

  /**
   * @internal Slots whose page went (#freeDeleted) while a reader outside JavaScript still held them, for the length
   * of a send: taken, yet holding no page the hierarchy's planner counts, so whoever makes room before a reservation
   * asks for them too.
   */
  get slotsHeldByReaders(): number {
    if (this.#heldByReaders.size && this.allocator) this.#freeReleased(this.allocator);
    return this.#heldByReaders.size;
  }

  /** Frees slots that no reader outside JavaScript can hold; each one's version is bumped first all the same. */
  #free(allocator: PageAllocator, slots: readonly Slot[]): void {
    const v = this.slotVersions;
    if (v) for (const s of slots) Atomics.add(v, s, 1);
    allocator.free(slots);
  }

  write(pages: readonly PageWrite[], options: IoOptions = {}): Promise<WriteResult> {
    const { allocator, store } = this.#ready();
    checkWrites(pages, this.context.pageBytes, this.capabilities.kind);
    return this.#inflight.run(async () => {
      const fresh = pages.filter((p) => !this.table.has(p.key));
      const slots = this.#allocate(allocator, fresh.length) ?? (await this.#allocateAfterReaders(allocator, fresh.length, options));
      if (!slots) {
        throw this.error(`${fresh.length} new page(s) do not fit: ${allocator.freeCount} of ${allocator.slots} slots free`, 'ERR_TIER_FULL');
      }
      const batch = new TransferBatch();
      fresh.forEach((p, i) => batch.add(p.source.arena, p.source.offset, store.arena, this.#offset(store, slots[i]!), p.source.length));
      let crcs: Uint32Array;
      try {
        const r = await this.context.engine.submit(batch, { checksums: true, priority: options.priority ?? 'writeBack', ...ioLimits(options) });
        crcs = r.checksums ?? new Uint32Array(0);
      } catch (e) {
        this.#free(allocator, slots);
        this.counters.errors++;
        throw e;
      }
      const byKey = new Map<PageKey, number>();
      fresh.forEach((p, i) => {
        const page = { slot: slots[i]!, length: p.source.length, crc32c: crcs[i]! };
        if (this.table.has(p.key)) {
          this.#free(allocator, [page.slot]); // a concurrent write of the same key landed first
          return;
        }
        if (p.crc32c !== undefined && p.crc32c !== page.crc32c) {
          // The caller's bytes changed between hashing and writing: store what was written, say so.
          this.counters.checksumFailures++;
        }
        store.commit?.(page.slot, { key: p.key, length: page.length, crc32c: page.crc32c, meta: p.meta });
        this.table.set(p.key, store.commit && p.meta ? { ...page, meta: p.meta } : page);
        this.#usedBytes += page.length;
        this.counters.bytesWritten += page.length;
        byKey.set(p.key, page.crc32c);
      });
      this.counters.writes += fresh.length;
      if (byKey.size) this.#keysAdded([...byKey.keys()]);
      return {
        written: fresh.map((p) => p.key),
        existing: pages.filter((p) => !byKey.has(p.key)).map((p) => p.key),
        crc32c: pages.map((p) => byKey.get(p.key) ?? this.table.get(p.key)!.crc32c),
      };
    });
  }

  read(pages: readonly PageRead[], options: IoOptions = {}): Promise<ReadOutcome[]> {
    const { store } = this.#ready();
    checkReads(pages, this.context.pageBytes, this.capabilities.kind);
    return this.#inflight.run(async () => {
      const outcomes: ReadOutcome[] = new Array(pages.length);
      const batch = new TransferBatch();
      const found: Array<{ index: number; page: StoredPage }> = [];
      pages.forEach((p, index) => {
        const page = this.table.get(p.key);
        if (!page) {
          outcomes[index] = { key: p.key, status: 'miss' };
          this.counters.misses++;
          return;
        }
        const range = p.range;
        if (range !== undefined) {
          // Checked before anything moves; a range of a page cannot be verified against its CRC32C, hence the capability.
          if (!this.capabilities.rangeReads) throw this.error(`pages[${index}].range: this tier verifies whole pages on read; read the whole page`, 'ERR_UNSUPPORTED');
          if (!Number.isSafeInteger(range.offset) || !Number.isSafeInteger(range.length) || range.offset < 0 || range.length < 1 || range.offset + range.length > page.length) {
            throw this.error(`pages[${index}].range [${range.offset}, +${range.length}) is not inside the page's ${page.length} bytes`, 'ERR_OUT_OF_RANGE');
          }
          if (p.into.length < range.length) throw this.error(`pages[${index}].into holds ${p.into.length} bytes, the range has ${range.length}`, 'ERR_OUT_OF_RANGE');
          batch.add(store.arena, this.#offset(store, page.slot) + range.offset, p.into.arena, p.into.offset, range.length);
          found.push({ index, page });
          return;
        }
        if (p.into.length < page.length) {
          throw this.error(`pages[${index}].into holds ${p.into.length} bytes, the page has ${page.length}`, 'ERR_OUT_OF_RANGE');
        }
        batch.add(store.arena, this.#offset(store, page.slot), p.into.arena, p.into.offset, page.length);
        found.push({ index, page });
      });
      if (found.length > 0) {
        // Pinned while bytes move, so a concurrent delete cannot free and reuse the slot under the copy.
        const keys = found.map((f) => pages[f.index]!.key);
        this.#pins.pin(keys, () => true);
        try {
          await this.#copyOut(batch, found, pages, outcomes, options);
        } finally {
          this.#pins.unpin(keys);
        }
      }
      return outcomes;
    });
  }

  async #copyOut(
    batch: TransferBatch,
    found: Array<{ index: number; page: StoredPage }>,
    pages: readonly PageRead[],
    outcomes: ReadOutcome[],
    options: IoOptions,
  ): Promise<void> {
    const expected = this.capabilities.verifiesOnRead ? Uint32Array.from(found, (f) => f.page.crc32c) : undefined;
    const r = await this.context.engine.submit(batch, { priority: options.priority ?? 'demand', ...ioLimits(options), ...(expected ? { expected } : {}) });
    const bad = new Set(r.mismatches ?? []);
    found.forEach((f, i) => {
      const key = pages[f.index]!.key;
      if (bad.has(i)) {
        this.counters.checksumFailures++;
        this.counters.errors++;
        outcomes[f.index] = { key, status: 'error', error: this.error(`page ${key} failed its CRC32C check`, 'ERR_CHECKSUM') };
      } else {
        const length = pages[f.index]!.range?.length ?? f.page.length;
        outcomes[f.index] = { key, status: 'hit', length, crc32c: f.page.crc32c };
        this.counters.hits++;
        this.counters.reads++;
        this.counters.bytesRead += length;
      }
    });
  }

  async has(keys: readonly PageKey[]): Promise<boolean[]> {
    return this.hasNow(keys);
  }

  /** Synchronous has(), for the peer server's page-table answers. */
  hasNow(keys: readonly PageKey[]): boolean[] {
    this.#ready();
    checkKeys(keys, this.capabilities.kind);
    return keys.map((k) => this.table.has(k));
  }

  async delete(keys: readonly PageKey[]): Promise<{ deleted: PageKey[]; pinned: PageKey[] }> {
    return this.deleteNow(keys);
  }

  /** Synchronous delete(), for the peer server's page-table answers. */
  deleteNow(keys: readonly PageKey[]): { deleted: PageKey[]; pinned: PageKey[] } {
    const { allocator, store } = this.#ready();
    checkKeys(keys, this.capabilities.kind);
    const deleted: PageKey[] = [];
    const pinned: PageKey[] = [];
    for (const k of new Set(keys)) {
      const page = this.table.get(k);
      if (!page) continue;
      if (this.#pins.isPinned(k)) {
        pinned.push(k);
        continue;
      }
      store.commit?.(page.slot, undefined);
      this.table.delete(k);
      this.#freeDeleted(allocator, page.slot);
      this.#usedBytes -= page.length;
      deleted.push(k);
    }
    if (deleted.length) for (const w of this.#keyWatchers) w.removed(deleted);
    return { deleted, pinned };
  }

  list(): AsyncIterable<PageInfo> {
    this.#ready();
    return listPages(this.table);
  }

  pin(keys: readonly PageKey[]): void {
    this.#ready();
    this.#pins.pinKeys(keys, this.capabilities.kind, (k) => this.table.has(k));
  }

  unpin(keys: readonly PageKey[]): void {
    this.#pins.unpinKeys(keys, this.capabilities.kind);
  }

  /**
   * @internal Remote access for the peer server: reserves slots for new pages (all-or-nothing) and returns their
   * arena offsets; -1 for keys already stored. Undefined when they do not fit.
   */
  reserveRemote(keys: readonly PageKey[]): { offsets: Float64Array; existing: boolean[] } | undefined {
    return this.#reserve(keys, true);
  }

  #reserve(keys: readonly PageKey[], reclaim: boolean): { offsets: Float64Array; existing: boolean[] } | undefined {
    const { allocator, store } = this.#ready();
    const existing = keys.map((k) => this.table.has(k));
    const slots = this.#allocate(allocator, existing.filter((e) => !e).length, reclaim);
    if (!slots) return undefined;
    let next = 0;
    const offsets = Float64Array.from(keys, (_, i) => (existing[i] ? -1 : this.#offset(store, slots[next++]!)));
    return { offsets, existing };
  }

  /**
   * An allocation short only while readers outside JavaScript still hold freed slots (for the length of a send):
   * waits for them to let go, looking each millisecond, up to the call's deadline (default READERS_WAIT_MS) or its
   * abort. Undefined: still short.
   */
  async #allocateAfterReaders(allocator: PageAllocator, n: number, options: IoOptions): Promise<Slot[] | undefined> {
    const until = Date.now() + (options.timeoutMs ?? READERS_WAIT_MS);
    while (this.#heldByReaders.size && allocator.freeCount + this.#heldByReaders.size >= n && Date.now() < until && !options.signal?.aborted && !this.#closed) {
      await new Promise((resolve) => setTimeout(resolve, 1));
      const got = this.#allocate(allocator, n);
      if (got) return got;
    }
    return undefined;
  }

  #allocate(allocator: PageAllocator, n: number, reclaim = true): Slot[] | undefined {
    if (this.#heldByReaders.size) this.#freeReleased(allocator);
    const got = allocator.allocate(n);
    if (got || !reclaim || !this.#reclaimers.size) return got;
    for (const r of [...this.#reclaimers]) r();
    return allocator.allocate(n);
  }

  /**
   * @internal Up to `n` free slots (fewer when the tier is fuller; their arena offsets) lent to a pool that lands
   * bytes outside JavaScript (the peer data plane, the native RESP door). Never takes slots back from other pools:
   * filling one must not empty another. The lender registers with onShortage() and returns them with returnSlots().
   */
  lendSlots(n: number): Float64Array {
    for (let k = n; k > 0; k = Math.floor(k / 2)) {
      const got = this.#reserve(new Array<PageKey>(k).fill(LENT_SLOT), false);
      if (got) return got.offsets;
    }
    return new Float64Array(0);
  }

  /** @internal Frees lent slots a pool did not use (nothing when the tier is closed: its slots went with it). */
  returnSlots(offsets: Float64Array): void {
    if (!offsets.length || this.#closed) return;
    this.commitRemote(new Array<PageKey>(offsets.length).fill(LENT_SLOT), offsets, new Uint32Array(offsets.length), new Uint32Array(offsets.length), () => false);
  }

  /**
   * @internal Registers a pool of lent slots: when an allocation finds too few free slots, every registered pool is
   * asked (`reclaim`) to give its slots back (returnSlots) before the allocation gives up, so lent slots are spare
   * room and never capacity this tier loses. Several pools may share a tier. Returns the function that unregisters it.
   */
  onShortage(reclaim: () => void): () => void {
    const entry = (): void => reclaim(); // one entry per registration, even for the same function
    this.#reclaimers.add(entry);
    return () => void this.#reclaimers.delete(entry);
  }

  /**
   * @internal Makes remotely written pages visible (ok) or frees their reserved slots. `recorded`: their slot
   * records were written already, outside JavaScript (the peer data plane, before its acks): kept for the pages
   * made visible, cleared for the slots freed. Returns the indices of the pages made visible (a key already held,
   * or named twice, is not).
   */
  commitRemote(keys: readonly PageKey[], offsets: Float64Array, lengths: Uint32Array, crcs: Uint32Array, ok: (i: number) => boolean, recorded = false): number[] {
    const { allocator, store } = this.#ready();
    const added: PageKey[] = [];
    const visible: number[] = [];
    keys.forEach((key, i) => {
      const offset = offsets[i]!;
      if (offset < 0) return;
      const slot = ((offset - store.dataOffset) / this.context.pageBytes) as Slot;
      if (!ok(i) || this.table.has(key)) {
        if (recorded) store.commit?.(slot, undefined);
        // A reader outside JavaScript may be sending the landed page already (planned from where it landed).
        this.#freeDeleted(allocator, slot);
        return;
      }
      const page = { slot, length: lengths[i]!, crc32c: crcs[i]! };
      if (!recorded) store.commit?.(slot, { key, length: page.length, crc32c: page.crc32c });
      this.table.set(key, page);
      this.#usedBytes += page.length;
      this.counters.bytesWritten += page.length;
      this.counters.writes++;
      added.push(key);
      visible.push(i);
    });
    if (added.length) this.#keysAdded(added);
    return visible;
  }

  /**
   * @internal Tells `watcher` every key the table holds now (`added`), then every key it gains or loses, in the
   * same turn as the change, so a mirror outside JavaScript (the peer data plane's held keys) answers as the table
   * would. Returns the function that stops it.
   */
  watchKeys(watcher: KeyWatcher): () => void {
    this.#ready();
    this.#keyWatchers.add(watcher);
    if (this.table.size) watcher.added([...this.table.keys()]);
    return () => void this.#keyWatchers.delete(watcher);
  }

  #keysAdded(keys: PageKey[]): void {
    for (const w of this.#keyWatchers) w.added(keys);
  }

  /** @internal Counts reads a remote reader made outside JavaScript (the peer data plane's GETs). */
  recordRemoteReads(pages: number, bytes: number, misses: number): void {
    this.counters.hits += pages;
    this.counters.reads += pages;
    this.counters.bytesRead += bytes;
    this.counters.misses += misses;
  }

  /** @internal Pins stored pages for a remote read and says where they are. */
  pinRemote(keys: readonly PageKey[]): Array<{ offset: number; length: number; crc32c: number } | undefined> {
    const { store } = this.#ready();
    return keys.map((k) => {
      const p = this.table.get(k);
      if (!p) {
        this.counters.misses++;
        return undefined;
      }
      this.#pins.pin([k], () => true);
      this.counters.hits++;
      this.counters.reads++;
      this.counters.bytesRead += p.length;
      return { offset: this.#offset(store, p.slot), length: p.length, crc32c: p.crc32c };
    });
  }

  /** @internal The arena that holds this tier's pages (host tiers serve it to peers). */
  get arena(): HostArena | DeviceArena | undefined {
    return this.store?.arena;
  }

  stats(): TierStats {
    const slots = this.allocator?.slots ?? 0;
    return this.counters.snapshot(this.capabilities.kind, slots * this.context.pageBytes, this.#usedBytes, this.table.size, this.#pins.size);
  }
}

/** Maps IoOptions onto the engine's submit options. */
export function ioLimits(options: IoOptions): { signal?: AbortSignal; timeoutMs?: number } {
  return { ...(options.signal ? { signal: options.signal } : {}), ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}) };
}
