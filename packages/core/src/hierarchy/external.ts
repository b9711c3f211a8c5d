/**
 * Pages that reach or leave a tier outside store() and load(): the daemon's peer endpoint and same-host clients
 * write bytes into a tier directly, then ask for room first (makeRoomOn), record them (adoptPages), or report them
 * gone (forgetPages); the RESP door reads bytes straight from a host tier's slots and reports those reads
 * (recordHits). The planner decides room, victims, write-through and what a hit earns as for a store or a load.
 */
import type { PageKey } from '@tiersync/tiers';
import { runMoves } from './background.js';
import { exclusive, ready, tierNamed, type HierarchyState } from './state.js';

/** Frees room on tier `tier` so `pages` more fit under its high watermark. Returns how many fit. */
export function makeRoomOn(s: HierarchyState, tier: string, pages: number): Promise<number> {
  const { planner } = ready(s);
  const t = tierNamed(s, tier);
  return exclusive(s, async () => {
    await runMoves(s, planner.expire(Date.now()));
    const { fit, moves } = planner.room(t.index, pages);
    await runMoves(s, moves);
    return fit;
  });
}

/**
 * Records pages whose bytes are already in tier `tier` as ready copies with the CRC32C they were committed with;
 * the planner makes them resident and answers write-through copies and pressure. Keys the index already knows on
 * that tier are left alone. Returns the keys newly recorded. Keys are validated by the caller.
 */
export function adoptPages(s: HierarchyState, tier: string, pages: ReadonlyArray<{ key: PageKey; length: number; crc32c: number }>): Promise<PageKey[]> {
  const { index, planner } = ready(s);
  const t = tierNamed(s, tier);
  return exclusive(s, async () => {
    const begin = index.beginStore(
      s.namespace.id,
      t.name,
      pages.map((p) => ({ key: p.key, parent: null, position: 0, length: p.length, location: p.key, crc32c: p.crc32c })),
    );
    // Pages known elsewhere (e.g. on a lower tier) get a copy on this tier too.
    const more = begin.existing.length ? index.beginCopies(t.name, begin.existing.map((key) => ({ key, location: key }))).added : [];
    const adopted = [...begin.fresh, ...more];
    const crcOf = new Map(pages.map((p) => [p.key, p.crc32c]));
    try {
      index.commitCopies(adopted.map((key) => ({ key, tier: t.name, crc32c: crcOf.get(key)!, durable: t.driver.capabilities.persistent })));
    } catch (e) {
      // Not left pending (a caller that tries again, as the page recorder does, would find them begun and skip
      // them, so the planner never learned the pages); best effort: an index whose disk is full may refuse this too.
      try {
        index.abortCopies(t.name, adopted);
      } catch {
        // pending copies are dropped at the index's next open
      }
      throw e;
    }
    if (adopted.length) {
      s.counters.pagesStored += adopted.length;
      s.emit('block:stored', { keys: adopted, tier: t.name });
    }
    // Resident now; bytes written from outside may also have pushed the tier past its high watermark.
    await runMoves(s, planner.adopt(t.index, adopted));
    return adopted;
  });
}

/** Forgets copies that tier `tier` no longer holds (deleted there by a peer). */
export function forgetPages(s: HierarchyState, tier: string, keys: readonly PageKey[]): void {
  const { index, planner } = ready(s);
  const t = tierNamed(s, tier);
  if (!keys.length) return;
  index.removeCopies(t.name, keys, { force: true });
  planner.forget(t.index, keys);
  s.emit('block:evicted', { keys: [...keys], tier: t.name, why: 'deleted' });
}

/**
 * Counts reads of pages on tier `tier` made outside load() (bytes read straight from a host tier's slots, e.g. the
 * RESP door's GETs) as load() counts the hits it served from that tier: the index records the access (time, hit
 * count), the tier's eviction policy sees an access, and the planner answers promotions and selective copies, run
 * here. Keys the planner does not hold on that tier are skipped (not recorded yet, evicted meanwhile, unknown):
 * their access is lost, never an error. One index transaction and one planner call per batch. Keys are validated by
 * the caller. Returns how many keys were counted.
 */
export function recordHits(s: HierarchyState, tier: string, keys: readonly PageKey[]): Promise<number> {
  const t = tierNamed(s, tier);
  return exclusive(s, async () => {
    // Checked under the lock: the hierarchy may have closed while this waited for it.
    const { index, planner } = ready(s);
    const held = keys.filter((k) => planner.holds(t.index, k));
    if (!held.length) return 0;
    index.touch(held);
    await runMoves(s, planner.load(held.map((key) => ({ key, tier: t.index }))));
    return held.length;
  });
}
