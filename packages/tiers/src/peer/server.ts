/**
 * The serving side of the peer tier: exposes a host tier's pages to other hosts through the native peer data
 * plane. The tier's page table is mirrored into the data plane as it changes (watchKeys: each key with where its
 * page is and its slot's version), so the common requests are answered on the connection threads, with no call to
 * this thread:
 * - PUTs land in slots granted in advance; the ack says ok or existing as the table would. The page table records
 *   every PUT acknowledged meanwhile in one batched call (`slots.commit`) before it plans any later request, so a
 *   client that has its ack finds the page.
 * - GETs are planned from the mirror; their slots are pinned through words shared with the tier (slotPins,
 *   slotVersions), which a delete respects. Their reads reach the tier's counters and `onServed` at the same batched
 *   call. A page a PUT landed is located where it landed until then, so a GET of it needs no call here either.
 * - HAS is answered from the mirror (a key a PUT claimed counts).
 * DELETE and a PUT the pool cannot take ask the page table here.
 * Bytes move socket <-> arena on native threads.
 */
import { HostArena, PeerServer, PeerStatus, TierSyncError, type PeerCommitAnswer, type PeerCommitBatch, type PeerPageLocations, type PeerPlan, type PeerServerOptions, type PeerServerRequest } from '@tiersync/native';
import type { PageKey, TierContext } from '../driver.js';
import type { HostTier } from '../host/index.js';

const POOL_MAX_BYTES = 256 * 2 ** 20;

/** The native server's options (listen address, secret, deadlines, limits), plus the tier owner's hooks. */
export interface PeerServeOptions extends PeerServerOptions {
  /**
   * Called after a put's pages became visible in the tier (their bytes arrived intact), so the owner of the tier
   * (the daemon's hierarchy) can record them in its block index. For pooled PUTs this is after their ack, before
   * the server plans any later request and when `PeerServer.drain()` is called.
   */
  onCommitted?: (pages: Array<{ key: PageKey; length: number; crc32c: number }>) => void;
  /** Called after a peer deleted pages from the tier. */
  onDeleted?: (keys: PageKey[]) => void;
  /**
   * Called after a GET sent pages from the tier (those its plan found, on a connection that did not fail), so the
   * owner of the tier can count these reads for its eviction policy: they bypass the owner's loads.
   */
  onServed?: (keys: PageKey[]) => void;
  /**
   * Page slots granted to the data plane in advance, so PUTs need nothing from this thread before their ack (the
   * slots are refilled as pages are recorded). They are reserved in the tier, unavailable to local writes, while
   * granted. 0 sends every PUT through the page table first. Default: an eighth of the tier, at most 256 MiB of
   * slots (two 64 MiB batches in flight).
   */
  slotPool?: number;
}

/** The pages at `indices` of a request's keys, lengths and CRC32Cs (for onCommitted). */
function pagesAt(indices: readonly number[], keys: readonly PageKey[], lengths: Uint32Array, crcs: Uint32Array): Array<{ key: PageKey; length: number; crc32c: number }> {
  return indices.map((i) => ({ key: keys[i]!, length: lengths[i]!, crc32c: crcs[i]! }));
}

/** Serves `tier` (opened) to peers until `close()`. */
export function servePeer(tier: HostTier, options: PeerServeOptions = {}): PeerServer {
  const arena = tier.arena;
  if (!(arena instanceof HostArena)) throw new TierSyncError('peer: the host tier must be open before it is served', 'ERR_CLOSED', { tier: 'peer' });
  // eslint-disable-next-line prefer-const -- assigned once the plan and the slot table (which use it) exist
  let peer: PeerServer | undefined;
  // Offsets reserved by a put's plan, kept until its finish commits or frees them.
  const reserved = new Map<number, Float64Array>();
  // The tier's slot size (MemoryTier keeps its context protected; slots are pageBytes apart in its arena): no page
  // longer than this may land in a slot (a peer with larger pages than this tier's).
  const slotBytes = (tier as unknown as { context: TierContext }).context.pageBytes;
  const plan = (r: PeerServerRequest): PeerPlan | void => {
    const n = r.keys.length;
    switch (`${r.op}:${r.phase}`) {
      case 'put:plan': {
        // A batch the pool could not take (the tier reclaims the pool's slots itself when they are what is missing).
        // A page longer than a slot gets outOfRange and no slot: its bytes would run into the next slot's page.
        const statuses = new Uint8Array(n);
        const fit: number[] = [];
        for (let i = 0; i < n; i++) {
          if (r.lengths[i]! > slotBytes) statuses[i] = PeerStatus.outOfRange;
          else fit.push(i);
        }
        const offsets = new Float64Array(n).fill(-1);
        if (!fit.length) return { offsets, statuses };
        const got = tier.reserveRemote(fit.length === n ? r.keys : fit.map((i) => r.keys[i]!));
        if (!got) return { offsets, statuses: statuses.map((s) => (s === PeerStatus.outOfRange ? s : PeerStatus.full)) };
        fit.forEach((i, j) => {
          offsets[i] = got.offsets[j]!;
          statuses[i] = got.existing[j] ? PeerStatus.existing : PeerStatus.ok;
        });
        reserved.set(r.id, offsets);
        return { offsets, statuses };
      }
      case 'put:finish': {
        const offsets = reserved.get(r.id);
        if (!offsets) return;
        reserved.delete(r.id);
        const visible = tier.commitRemote(r.keys, offsets, r.lengths, r.crcs, (i) => !r.failed && r.outcome?.[i] === PeerStatus.ok);
        if (visible.length && options.onCommitted) options.onCommitted(pagesAt(visible, r.keys, r.lengths, r.crcs));
        return;
      }
      case 'get:plan': {
        const where = tier.pinRemote(r.keys);
        const offsets = new Float64Array(n).fill(-1);
        const statuses = new Uint8Array(n).fill(PeerStatus.miss);
        const lengths = new Uint32Array(n);
        const crcs = new Uint32Array(n);
        where.forEach((w, i) => {
          if (!w) return;
          offsets[i] = w.offset;
          statuses[i] = PeerStatus.ok;
          lengths[i] = w.length;
          crcs[i] = w.crc32c;
        });
        return { offsets, statuses, lengths, crcs };
      }
      case 'get:finish': {
        const sent = r.keys.filter((_, i) => r.planned?.[i] === PeerStatus.ok);
        tier.unpin(sent);
        if (!r.failed && sent.length && options.onServed) options.onServed(sent);
        return;
      }
      case 'has:plan': {
        const have = tier.hasNow(r.keys);
        return { offsets: new Float64Array(n).fill(-1), statuses: Uint8Array.from(have, (h) => (h ? PeerStatus.ok : PeerStatus.miss)) };
      }
      case 'delete:plan': {
        const statuses = new Uint8Array(n).fill(PeerStatus.miss);
        const { deleted, pinned } = tier.deleteNow(r.keys);
        // Sets: a request may name thousands of keys.
        const gone = new Set(deleted);
        const held = new Set(pinned);
        r.keys.forEach((k, i) => {
          if (gone.has(k)) statuses[i] = PeerStatus.ok;
          else if (held.has(k)) statuses[i] = PeerStatus.pinned;
        });
        if (deleted.length && options.onDeleted) options.onDeleted(deleted);
        return { offsets: new Float64Array(n).fill(-1), statuses };
      }
      default:
        return;
    }
  };
  const capacitySlots = Math.floor(tier.stats().capacityBytes / slotBytes);
  const poolTarget = options.slotPool ?? Math.min(Math.floor(POOL_MAX_BYTES / slotBytes), Math.floor(capacitySlots / 8));
  const records = tier.slotRecords();
  const slots = {
    commit(batch: PeerCommitBatch): PeerCommitAnswer {
      let grant: Float64Array;
      try {
        // Acknowledged already (ok: the data plane claimed these keys). A key the tier gained meanwhile by another
        // path (a local write) keeps that page, and commitRemote frees this one's slot (after any GET of it).
        const visible = tier.commitRemote(batch.keys, batch.offsets, batch.lengths, batch.crcs, () => true, records !== undefined);
        if (visible.length && options.onCommitted) options.onCommitted(pagesAt(visible, batch.keys, batch.lengths, batch.crcs));
        grant = tier.lendSlots(batch.keys.length);
      } catch {
        return {}; // the tier closed under us: its slots and pages went with it
      }
      // Reads after the pages they may name were recorded (a GET can send a landed page before that).
      if (batch.servedPages || batch.misses) {
        tier.recordRemoteReads(batch.servedPages, batch.servedBytes, batch.misses);
        if (batch.served.length && options.onServed) options.onServed(batch.served);
      }
      return { grant };
    },
    release(offsets: Float64Array): void {
      tier.returnSlots(offsets);
    },
    closed(): void {
      unhook?.();
      unwatch?.();
    },
  };
  let unhook: (() => void) | undefined;
  let unwatch: (() => void) | undefined;
  const { onCommitted: _committed, onDeleted: _deleted, onServed: _served, slotPool: _pool, secret, ...server } = options;
  peer = new PeerServer(arena, plan, { ...server, ...(secret ? { secret } : {}) }, poolTarget > 0 ? slots : undefined);
  if (poolTarget > 0) {
    const server = peer;
    // A persistent tier's slot records are written by the data plane before each ack (commit keeps them).
    if (records) server.keepSlotRecords(records.dataOffset, records.recordBytes);
    // The mirror of the tier's table the data plane answers PUTs and plans GETs from, set up before the pool holds
    // any slot: each key with where its page is and its slot's version, read in the same turn.
    const versions = tier.slotVersions!;
    const hold = (keys: PageKey[]): void => {
      const where = tier.locate(keys);
      const held = keys.filter((_, i) => where[i]);
      const found = where.filter((w) => w !== undefined);
      const locations: PeerPageLocations = {
        offsets: Float64Array.from(found, (w) => w.offset),
        lengths: Uint32Array.from(found, (w) => w.length),
        crcs: Uint32Array.from(found, (w) => w.crc32c),
        slots: Uint32Array.from(found, (w) => w.slot),
        versions: Uint32Array.from(found, (w) => Atomics.load(versions, w.slot)),
      };
      server.holdKeys(held, locations);
    };
    unwatch = tier.watchKeys({ added: hold, removed: (keys) => server.dropKeys(keys) });
    server.shareSlots(versions, tier.slotPins!, tier.slotsOffset!);
    // Any allocation of the tier that finds too few free slots takes the pool back first: pooled slots are spare
    // room lent to the data plane, never capacity the tier's owner loses.
    unhook = tier.onShortage(() => slots.release(server.takePool()));
    const granted = tier.lendSlots(poolTarget);
    if (granted.length) peer.grant(granted, slotBytes);
  }
  return peer;
}
