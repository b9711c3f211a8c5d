/**
 * The RESP door's direct access to the first tier's slots, when that tier is a host tier: the mechanism the
 * daemon's same-host clients use (client-api.ts), reused as is:
 * - room: `TierSync.makeRoomOn` (the planner evicts or demotes), then `HostTier.reserveRemote` (all-or-nothing);
 * - the bytes are written into the reserved slots by the caller (the RESP parser copies socket chunks there);
 * - commit: each page's CRC32C (computed by the caller as the bytes arrive, or here on native threads),
 *   `HostTier.commitRemote` (the page is in the tier now: a shm tier
 *   writes its slot record last, so a process killed before that leaves the slot free, never a torn page), and
 *   `TierSync.adoptPages` records the pages in the block index, batched over every commit of an event-loop turn
 *   (PageRecorder, the same recorder);
 * - reads: `HostTier.pinRemote` says where a page is and holds its slot until `unpin`.
 *
 * Threading: everything here runs on the event loop except the CRC32C pass (native threads).
 */
import { crc32cRanges, HostArena, TierSyncError } from '@tiersync/native';
import type { HostTier, PageKey } from '@tiersync/tiers';
import type { Logger } from 'pino';
import type { TierSync } from '../../hierarchy/index.js';
import { PageRecorder } from '../page-recorder.js';

/**
 * How long committed pages wait before the recorder writes them to the block index, ms. A value replaced within
 * this time (a hot key SET again and again) is dropped from the tier without ever costing an index transaction
 * (insert, then delete: ~15% of the event loop's time per landed SET when each turn recorded its pages), and the
 * rest are recorded in fewer, larger transactions. Each recording costs a few index transactions whatever its size
 * (~0.4 ms for one page here), so a hot key costs that once per delay: at 5 ms that was still ~5 us of event-loop
 * time per SET at 10,000 SETs/s (session 8, `bench resp --cpu`). A caller short of slots still waits for the
 * recorder (PageRecorder.reserve), so unrecorded pages never make the tier refuse what eviction would allow; a
 * crash before recording loses nothing (the tier's slot records make the index adopt them at its next open).
 */
const RECORD_DELAY_MS = 20;

const recordTurn = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, RECORD_DELAY_MS));

/** Native threads that checksum committed pages (the machine's cores are shared with the event loop). */
const CRC_THREADS = 2;

/** Where a pinned page is in the first tier's arena. */
export interface PinnedSlot {
  readonly offset: number;
  readonly length: number;
  readonly crc32c: number;
}

/** Where a stored page is in the first tier's arena right now (SlotAccess.locate): PinnedSlot and its slot number. */
export interface LocatedSlot extends PinnedSlot {
  /** The slot (index into slotVersions). */
  readonly slot: number;
}

/** What the door uses of the first tier's slots (implemented by HostSlots). */
export interface SlotAccess {
  readonly arena: HostArena;
  /** True when the tier checks each page against its CRC32C on read (a GET from a slot must check it too). */
  readonly verifiesOnRead: boolean;
  /** Reserves one slot per key now, without waiting (arena offsets), or undefined when the tier has no free slot for them all. */
  tryReserve(keys: readonly PageKey[]): Float64Array | undefined;
  /**
   * Reserves after making room (the planner evicts or demotes pages first).
   * @throws TierSyncError ERR_TIER_FULL when pinned pages leave no room
   */
  reserve(keys: readonly PageKey[]): Promise<Float64Array>;
  /**
   * Makes filled slots pages of the tier and queues them for the index. `crcs`: each page's CRC32C when the caller
   * computed it while the bytes were hot (the RESP parser's windows); computed here on native threads otherwise.
   */
  commit(keys: readonly PageKey[], offsets: Float64Array, lengths: Uint32Array, crcs?: Uint32Array): Promise<void>;
  /**
   * commit() with the CRC32Cs given, done now: the pages are in the tier when it returns (the index records them
   * in the background, as after commit()). Lets a SET be acknowledged in the turn its last byte arrived.
   */
  commitNow(keys: readonly PageKey[], offsets: Float64Array, lengths: Uint32Array, crcs: Uint32Array): void;
  /** Frees reserved slots that will not be committed. */
  cancel(keys: readonly PageKey[], offsets: Float64Array): void;
  /** Pins pages in the tier and says where they are (undefined: not in this tier). */
  pin(keys: readonly PageKey[]): Array<PinnedSlot | undefined>;
  unpin(keys: readonly PageKey[]): void;
  /**
   * Up to n free slots (fewer when the tier is fuller, none when full), reserved for a pool that lands values
   * natively (the native RESP engine); never takes slots back from another pool to do so.
   */
  lend?(n: number): Float64Array;
  /** Frees slots lent by lend() that were not used. */
  giveBack?(offsets: Float64Array): void;
  /** The tier's slot size. */
  readonly slotBytes?: number;
  /** Slots the tier has in all. */
  readonly capacitySlots?: number;
  /**
   * Runs `reclaim` whenever an allocation of the tier finds too few free slots (after any hook set before),
   * so lent slots are spare room, never capacity the tier loses. Returns the function that removes it.
   */
  onShortage?(reclaim: () => void): () => void;
  /**
   * One 32-bit version per slot, bumped whenever the tier frees the slot (MemoryTier.slotVersions): what the native
   * RESP door checks before and after it copies a slot out for a GET.
   */
  readonly slotVersions?: Uint32Array | undefined;
  /**
   * Where pages are in the tier now, without pinning them (undefined: not in this tier). Valid in the calling turn
   * only: a slot freed later has its version bumped first, so slotVersions read in the same turn detect it.
   */
  locate?(keys: readonly PageKey[]): Array<LocatedSlot | undefined>;
}

export class HostSlots implements SlotAccess {
  /** Committed pages on their way to the block index (the same recorder as the daemon's same-host clients). */
  readonly #recorder: PageRecorder;

  constructor(
    private readonly ts: TierSync,
    private readonly tier: HostTier,
    private readonly tierName: string,
    log?: Logger,
  ) {
    this.#recorder = new PageRecorder({
      ts,
      tierName,
      turn: recordTurn,
      // The batch stays in the tier (a shm tier's slot records name its pages): the index adopts it at its next open.
      onFailed: (batch, e) => log?.error({ err: (e as Error).message, pages: batch.length }, 'could not record RESP value pages in the block index'),
    });
  }

  get arena(): HostArena {
    const a = this.tier.arena;
    if (!(a instanceof HostArena)) throw new TierSyncError('the first tier is closed', 'ERR_CLOSED');
    return a;
  }

  get verifiesOnRead(): boolean {
    return this.tier.capabilities.verifiesOnRead;
  }

  get unrecordedCount(): number {
    return this.#recorder.size;
  }

  isUnrecorded(key: PageKey): boolean {
    return this.#recorder.has(key);
  }

  tryReserve(keys: readonly PageKey[]): Float64Array | undefined {
    const got = this.tier.reserveRemote(keys);
    return got && this.#checkFresh(keys, got);
  }

  /** A key already stored (never the case for the door's fresh keys) would get no slot: refused rather than aliased. */
  #checkFresh(keys: readonly PageKey[], got: { offsets: Float64Array; existing: readonly boolean[] }): Float64Array {
    if (got.existing.some(Boolean)) {
      this.cancel(keys, got.offsets);
      throw new TierSyncError('internal: a fresh RESP page key is already stored', 'ERR_INVALID_ARGUMENT');
    }
    return got.offsets;
  }

  async reserve(keys: readonly PageKey[]): Promise<Float64Array> {
    const reserved = await this.#recorder.reserve(this.tier, keys);
    const got = reserved && this.#checkFresh(keys, reserved);
    if (!got) throw new TierSyncError(`the first tier has no room for ${keys.length} page(s) (pinned pages fill it)`, 'ERR_TIER_FULL');
    return got;
  }

  async commit(keys: readonly PageKey[], offsets: Float64Array, lengths: Uint32Array, given?: Uint32Array): Promise<void> {
    let crcs: Uint32Array;
    try {
      crcs = given ?? (await crc32cRanges(this.arena, offsets, lengths, { threads: CRC_THREADS }));
    } catch (e) {
      this.cancel(keys, offsets);
      throw e;
    }
    this.commitNow(keys, offsets, lengths, crcs);
  }

  commitNow(keys: readonly PageKey[], offsets: Float64Array, lengths: Uint32Array, crcs: Uint32Array): void {
    this.tier.commitRemote(keys, offsets, lengths, crcs, () => true);
    this.#recorder.add(keys.map((key, i) => ({ key, length: lengths[i]!, crc32c: crcs[i]! })));
  }

  cancel(keys: readonly PageKey[], offsets: Float64Array): void {
    try {
      this.tier.commitRemote(keys, offsets, new Uint32Array(keys.length), new Uint32Array(keys.length), () => false);
    } catch {
      // The tier is closing: its slots go with it.
    }
  }

  pin(keys: readonly PageKey[]): Array<PinnedSlot | undefined> {
    return this.tier.pinRemote(keys);
  }

  unpin(keys: readonly PageKey[]): void {
    if (keys.length) this.tier.unpin(keys);
  }

  get slotBytes(): number {
    // MemoryTier keeps its context protected; slots are pageBytes apart in its arena.
    return (this.tier as unknown as { context: { pageBytes: number } }).context.pageBytes;
  }

  get capacitySlots(): number {
    return Math.floor(this.tier.stats().capacityBytes / this.slotBytes);
  }

  lend(n: number): Float64Array {
    return this.tier.lendSlots(n);
  }

  giveBack(offsets: Float64Array): void {
    this.tier.returnSlots(offsets);
  }

  get slotVersions(): Uint32Array | undefined {
    return this.tier.slotVersions;
  }

  locate(keys: readonly PageKey[]): Array<LocatedSlot | undefined> {
    return this.tier.locate(keys);
  }

  onShortage(reclaim: () => void): () => void {
    return this.tier.onShortage(reclaim);
  }

  /**
   * Deletes pages committed here that the index has yet to record (and whose batch is not being recorded now)
   * straight from the tier: nothing else knows them, so no index transaction is needed. A value overwritten
   * within the same few turns (a hot key) costs no index work at all. Returns the keys it did not handle.
   */
  dropUnrecorded(keys: readonly PageKey[]): { rest: PageKey[]; pinned: PageKey[] } {
    const { rest, pinned } = this.#recorder.dropEarly(this.tier, keys);
    return { rest, pinned };
  }

  /** Resolves once `keys` (default: every page committed so far) are recorded in the block index (or failed to be). */
  recorded(keys?: Iterable<PageKey>): Promise<void> {
    return this.#recorder.recorded(keys);
  }
}
