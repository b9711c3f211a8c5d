/**
 * The store path shared by store() and storeKeys(): the index records pending copies of the new pages, the
 * planner admits them and plans room on the first tier, the room moves run under the lock, and the driver write
 * runs outside it, so stores of different pages overlap. Slots are reserved in the planner, so overlapping stores
 * never promise the same ones. Background copies run their I/O outside the lock too, so a store into free room
 * waits for no tier but the first; the demotions a store needs for room wait at most `deadlines.storeMs` each.
 */
import type { TierSyncError } from '@tiersync/native';
import { parsePolicySpec, type Move, type PlannerStoreOptions, type RetentionHint } from '@tiersync/policy';
import type { PageKey, PageLocation, PageWrite } from '@tiersync/tiers';
import type { StorePage } from '../index/index.js';
import { copiesReported, runMoves } from './background.js';
import { exclusive, ready, type HierarchyState } from './state.js';
import type { StoreResult } from './types.js';

/** Times a store short of room waits for other stores' writes to land before dropping what does not fit. */
const MAX_ROOM_WAITS = 8;

/**
 * Stores `entries` (`pages[i]` holds the bytes of `entries[i]`) on the first tier. Pages another store is writing
 * are `existing` here (their pending copy is in the index); if that store fails, they vanish as if never stored.
 */
export function storePages(s: HierarchyState, entries: StorePage[], pages: readonly PageLocation[], options: { priority: number; tenant: string; retention?: RetentionHint }): Promise<StoreResult> {
  const { index, planner } = ready(s);
  const keys = entries.map((e) => e.key);
  const { retention, ...levels } = options;
  // Parents only when a tier orders victims by chain (prefix-aware, prefix-hold): other policies never read them.
  const chainAware = planner.config.tiers.some((t) => parsePolicySpec(t.policy).wrappers.some((w) => w.startsWith('prefix-')));
  const parentOf = chainAware ? new Map(entries.map((e) => [e.key, e.parent])) : undefined;
  const top = s.tiers[0]!;
  const { storeMs } = s.config.deadlines;
  // The store's own room-making (demotions) is bounded by its deadline, not by the longer one of background moves.
  const io = { budgetMs: storeMs };
  const run = (async (): Promise<StoreResult> => {
    const deadline = Date.now() + storeMs;
    // Stores run beside background copies in flight (their I/O outside the lock): only a store that needs pages they
    // hold waits for them, below.
    const beside = { besideCopies: true };
    const begin = await exclusive(s, async () => index.beginStore(s.namespace.id, top.name, entries), beside);
    let notAdmitted = 0;
    let dropped = 0;
    let place: Extract<Move, { kind: 'place' }> | undefined;
    for (let waits = 0; ; waits++) {
      const planned = await exclusive(s, async (): Promise<{ place: typeof place } | false> => {
        const now = Date.now();
        // A store that could not fit without pages pinned now, while background copies in flight hold some of them
        // (their sources), waits for those copies to be reported first, as it waited for the lock when they ran under
        // it; bounded by its deadline, then it goes on with what fits.
        const v = planner.view(0);
        if (s.copying?.size && v.capacityPages - v.reservedPages - v.pinnedPages < begin.fresh.length && waits < MAX_ROOM_WAITS && now < deadline) return false;
        await runMoves(s, planner.expire(now), io);
        const hints: PlannerStoreOptions<PageKey> = {};
        if (parentOf) hints.parents = begin.fresh.map((k) => parentOf.get(k) ?? null);
        if (retention) {
          hints.retention = retention;
          hints.now = now;
          // Pages of this context stored before (a session's earlier turns) take the new hint too.
          if (begin.existing.length) planner.retain(begin.existing, { retention, now });
        }
        const moves = planner.store(begin.fresh, { ...levels, ...hints, waitForRoom: waits < MAX_ROOM_WAITS });
        // Slots reserved by stores still writing (or background copies in flight) cannot be freed yet: wait for
        // those to land (their pages then become evictable) rather than drop pages that a store run alone would have
        // kept. Bounded in count and by the store's deadline, so neither a stream of other stores nor a stalled
        // copy holds this one back for ever: after that, what does not fit is dropped.
        if (moves[0]?.kind === 'wait') return false;
        let placing: typeof place;
        for (const m of moves) {
          if (m.kind === 'place') placing = m;
          else if (m.kind === 'refuse') {
            index.abortCopies(top.name, m.keys);
            if (m.reason === 'not-admitted') notAdmitted += m.keys.length;
            else dropped += m.keys.length;
          }
        }
        await runMoves(s, moves, io);
        return { place: placing };
      }, beside);
      if (planned) {
        place = planned.place;
        break;
      }
      // Other stores' writes have their own deadline; background copies may stall for longer: those only until ours.
      await Promise.all([Promise.allSettled([...s.writesInFlight]), settledBy(copiesReported(s), deadline)]);
    }
    let stored = 0;
    let writeThroughDropped = 0;
    let landedNow: () => void = () => undefined;
    const landing = new Promise<void>((resolve) => (landedNow = resolve));
    s.writesInFlight.add(landing);
    try {
      if (place) {
        const at = new Map(keys.map((k, i) => [k, i]));
        const persistent = top.driver.capabilities.persistent;
        const toWrite: PageWrite[] = place.keys.map((key) => {
          const i = at.get(key)!;
          const e = entries[i]!;
          return persistent ? { key, source: pages[i]!, meta: { namespace: s.namespace.id, parent: e.parent, position: e.position } } : { key, source: pages[i]! };
        });
        const start = process.hrtime.bigint();
        let written;
        try {
          // The caller is waiting for this write: demand priority, not the background class of moves.
          written = await top.driver.write(toWrite, { priority: 'demand', timeoutMs: s.config.deadlines.storeMs });
        } catch (e) {
          index.abortCopies(top.name, place.keys);
          planner.completed(place, { done: [], failed: place.keys });
          s.emit('transfer:failed', { op: 'store', tier: top.name, error: e as TierSyncError });
          throw e;
        }
        const commit = index.commitCopies(place.keys.map((key, i) => ({ key, tier: top.name, crc32c: written.crc32c[i]!, durable: persistent })));
        let landed: readonly PageKey[] = place.keys;
        if (commit.missing.length) {
          // Deleted (deleteKeys, deleteNamespace) while being written: free the bytes, store nothing.
          const lost = new Set(commit.missing);
          landed = landed.filter((k) => !lost.has(k));
          await top.driver.delete(commit.missing).catch(() => undefined);
        }
        // The reservation becomes resident pages in one synchronous step; what the landing pushes out runs next.
        const follow = planner.completed(place, { done: landed });
        landedNow();
        const r = follow.length ? await exclusive(s, () => runMoves(s, follow, io), beside) : { refused: [], queueDropped: 0 };
        writeThroughDropped = r.queueDropped;
        if (r.refused.length) {
          // The tier's policy refused them (a tenant at its quota with overQuota 'refuse'): not stored.
          const out = new Set(r.refused);
          landed = landed.filter((k) => !out.has(k));
          dropped += r.refused.length;
        }
        stored = landed.length;
        const kept = new Set(landed);
        const bytes = toWrite.reduce((sum, p) => sum + (kept.has(p.key) ? p.source.length : 0), 0);
        if (landed.length) s.emit('block:stored', { keys: [...landed], tier: top.name });
        s.emit('transfer:completed', { op: 'store', tier: top.name, pages: landed.length, bytes, seconds: Number(process.hrtime.bigint() - start) / 1e9 });
      }
    } finally {
      landedNow();
      s.writesInFlight.delete(landing);
    }
    s.counters.stores++;
    s.counters.pagesStored += stored;
    s.counters.pagesDropped += dropped;
    s.counters.pagesNotAdmitted += notAdmitted;
    return { keys, stored, existing: begin.existing.length, dropped, notAdmitted, writeThroughDropped };
  })();
  s.storesInFlight.add(run);
  const done = () => s.storesInFlight.delete(run);
  run.then(done, done);
  return run;
}

/** Resolves once every promise of `work` has settled, or at `deadline` (ms since the epoch) if that comes first. */
async function settledBy(work: readonly Promise<unknown>[], deadline: number): Promise<void> {
  const left = deadline - Date.now();
  if (!work.length || left <= 0) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.allSettled(work), new Promise<void>((resolve) => (timer = setTimeout(resolve, left)))]);
  clearTimeout(timer);
}

/**
 * A soft retention hint for stored pages (TierSync.retain): every tier holding them hands it to its policy. Keys the
 * hierarchy does not hold are skipped. Moves nothing, so it needs no lock.
 */
export function retainPages(s: HierarchyState, keys: readonly PageKey[], retention: RetentionHint): void {
  ready(s).planner.retain(keys, { retention, now: Date.now() });
}
