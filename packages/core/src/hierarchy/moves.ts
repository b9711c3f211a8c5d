/**
 * The executor of the planner's moves with real bytes: `evict` frees copies on a tier (driver, then index), `copy`
 * moves pages between tiers through host staging memory. Each move's outcome goes back to the planner, whose
 * follow-up moves run next (depth first). `queue` moves (background copies) are handed back to the caller, which
 * queues them (background.ts). executeMoves runs under the hierarchy's lock.
 *
 * A copy is three steps so that a background copy's I/O can run outside the lock: `beginCopy` (pending copies in
 * the index) and `finishCopy` (commit, events, the planner's report) are bookkeeping done under the lock;
 * `transferCopy` is the I/O between them. Moves run under the lock use the first part of the staging memory and
 * background copies the rest, so both can be in flight at once.
 */
import { HostArena, TierSyncError } from '@tiersync/native';
import type { Move } from '@tiersync/policy';
import type { PageKey, PageMeta, ReadOutcome } from '@tiersync/tiers';
import { reportIntegrity } from './read.js';
import { ready, type HierarchyState, type QueuedCopy } from './state.js';

/** What running a list of moves left for the caller. */
export interface Executed {
  /** Background copies to queue. */
  queued: QueuedCopy[];
  /** Pages freed because the tier's policy refused them on landing (a store counts them dropped). */
  refused: PageKey[];
}

/**
 * Deadlines and cancellation of the copies of one list of moves. Default: each driver call of a copy gets
 * `deadlines.moveMs`; nothing aborts it.
 */
export interface MoveIo {
  /**
   * Time each copy move has for all its driver calls, ms (a store's demotions: `deadlines.storeMs`, so a stalled
   * lower tier holds a store back no longer than its own write could). Each call still gets at most moveMs.
   */
  budgetMs?: number;
  /** Aborts the copies' driver calls (close() stopping background copies). */
  signal?: AbortSignal;
}

/** A copy move. */
export type CopyMove = Extract<Move, { kind: 'copy' }>;

/** A copy begun in the index: `existing` keys need no bytes, `moving` ones have pending copies on the target. */
export interface BegunCopy {
  readonly move: CopyMove;
  readonly existing: readonly PageKey[];
  readonly moving: readonly PageKey[];
}

/** One staging batch of a copy: written (with the target's CRC32C of each page), lost at the source, or failed. */
type Batch =
  | { readonly ok: PageKey[]; readonly crc32c: number[]; readonly lost: PageKey[]; readonly seconds: number }
  | { readonly failed: readonly PageKey[]; readonly error: TierSyncError };

/** What a copy's driver calls did, for finishCopy. */
export interface Transferred {
  readonly batches: readonly Batch[];
}

/** Part of the staging memory: moves under the lock use `foreground`, background copies `background`. */
interface StagingLane {
  readonly arena: HostArena;
  readonly offset: number;
  readonly pages: number;
}

/** Runs `moves` in order with their follow-ups; `refuse`, `wait` and `place` are the requester's to handle. */
export async function executeMoves(s: HierarchyState, moves: readonly Move[], io: MoveIo = {}, out: Executed = { queued: [], refused: [] }): Promise<Executed> {
  for (const m of moves) {
    switch (m.kind) {
      case 'refuse':
      case 'wait':
      case 'place':
        continue;
      case 'queue':
        out.queued.push(m);
        continue;
      case 'evict': {
        const { done, follow } = await evict(s, m);
        if (m.why === 'refused') out.refused.push(...done);
        await executeMoves(s, follow, io, out);
        continue;
      }
      case 'copy': {
        const begun = beginCopy(s, m);
        await executeMoves(s, await finishCopy(s, begun, await transferCopy(s, begun, 'foreground', io)), io, out);
        continue;
      }
    }
  }
  return out;
}

/**
 * Frees `m.keys` on their tier: the driver deletes the bytes, then the index forgets the copies (a load reading
 * meanwhile meets a miss and falls back to its next copy). Kept, and reported failed so the planner keeps them
 * resident: keys pinned now (a load reading them, a TTL pin), keys a durable pin in the index holds (pins made
 * before a restart), and keys the driver refuses to free (pinned there by a same-host client's lease).
 */
async function evict(s: HierarchyState, m: Extract<Move, { kind: 'evict' }>): Promise<{ done: PageKey[]; follow: Move[] }> {
  const { index, planner } = ready(s);
  const tier = s.tiers[m.tier]!;
  const failed: PageKey[] = [];
  let candidates = m.keys.filter((k) => {
    if (!planner.isPinned(k)) return true;
    failed.push(k);
    return false;
  });
  const durable = candidates.length ? index.pinned(candidates) : [];
  if (durable.includes(true)) {
    failed.push(...candidates.filter((_, i) => durable[i]));
    candidates = candidates.filter((_, i) => !durable[i]);
  }
  let done: PageKey[] = [];
  if (candidates.length) {
    try {
      const r = await tier.driver.delete(candidates);
      if (r.pinned.length) {
        const kept = new Set(r.pinned);
        failed.push(...r.pinned);
        candidates = candidates.filter((k) => !kept.has(k));
      }
    } catch (e) {
      // The copies are forgotten anyway: a volatile tier's bytes are unreachable without them, and a persistent
      // tier's are adopted again at the next open.
      s.emit('transfer:failed', { op: 'move', tier: tier.name, error: e as TierSyncError });
    }
    if (candidates.length) {
      index.removeCopies(tier.name, candidates, { force: true });
      // Refused pages count too: a copy or an adoption that landed (and was announced) is gone again.
      s.emit('block:evicted', { keys: [...candidates], tier: tier.name, why: 'evicted' });
    }
    done = candidates;
  }
  if (m.why !== 'refused' && done.length) {
    const v = planner.view(m.tier);
    s.emit('tier:pressure', { tier: tier.name, usedPages: v.usedPages + v.leavingPages + v.reservedPages, capacityPages: v.capacityPages, victims: done.length });
  }
  return { done, follow: planner.completed(m, { done, failed }) };
}

/**
 * Starts copy `m` (under the lock): the index records a pending copy of each key on the target; keys it already
 * records there (a copy made outside the planner's view) need no bytes.
 */
export function beginCopy(s: HierarchyState, m: CopyMove): BegunCopy {
  const { index } = ready(s);
  const dst = s.tiers[m.to]!;
  const begun = index.beginCopies(dst.name, m.keys.map((key) => ({ key, location: key })));
  return { move: m, existing: begun.existing, moving: begun.added };
}

/**
 * The I/O of a begun copy, in staging-sized batches: the source is read (verified where the tier checks) and the
 * target written with each page's meta. Touches neither the planner nor the index's copy states, so it may run
 * outside the lock: the planner holds the sources and reserved the target's slots until the copy is reported. A
 * batch that fails (a driver error, a deadline, an abort) is recorded failed, not thrown.
 */
export async function transferCopy(s: HierarchyState, c: BegunCopy, lane: 'foreground' | 'background', io: MoveIo = {}): Promise<Transferred> {
  const { index } = ready(s);
  const src = s.tiers[c.move.from]!;
  const dst = s.tiers[c.move.to]!;
  const staging = stagingLane(s, lane);
  const pageBytes = s.pageBytes;
  const { moveMs } = s.config.deadlines;
  const until = io.budgetMs === undefined ? undefined : Date.now() + io.budgetMs;
  const batches: Batch[] = [];
  for (let at = 0; at < c.moving.length; at += staging.pages) {
    const part = c.moving.slice(at, at + staging.pages);
    const start = process.hrtime.bigint();
    try {
      const options = () => {
        if (io.signal?.aborted) throw new TierSyncError(`copy to ${dst.name} aborted`, 'ERR_ABORTED', { tier: dst.name });
        const left = until === undefined ? moveMs : Math.min(moveMs, until - Date.now());
        if (left <= 0) throw new TierSyncError(`copy to ${dst.name} ran past its ${io.budgetMs} ms deadline`, 'ERR_TIMEOUT', { tier: dst.name });
        return { priority: 'writeBack' as const, timeoutMs: left, ...(io.signal ? { signal: io.signal } : {}) };
      };
      const read = await src.driver.read(
        part.map((key, i) => ({ key, into: { arena: staging.arena, offset: staging.offset + i * pageBytes, length: pageBytes } })),
        options(),
      );
      reportIntegrity(s, read, src.name);
      const slots = part.map((_, i) => i).filter((i) => read[i]!.status === 'hit');
      const ok = slots.map((i) => part[i]!);
      const records = dst.driver.capabilities.persistent ? index.pages(ok) : undefined;
      const written = await dst.driver.write(
        slots.map((slot, j) => {
          const hit = read[slot] as Extract<ReadOutcome, { status: 'hit' }>;
          const r = records?.[j];
          const meta: PageMeta | undefined = r ? { namespace: r.namespace, parent: r.parent, position: r.position } : undefined;
          // The checksum travels with the page, so the next tier need not compute it again (the peer tier skips a pass).
          return { key: ok[j]!, source: { arena: staging.arena, offset: staging.offset + slot * pageBytes, length: hit.length }, crc32c: hit.crc32c, ...(meta ? { meta } : {}) };
        }),
        options(),
      );
      const lost = part.filter((_, i) => read[i]!.status !== 'hit');
      batches.push({ ok, crc32c: written.crc32c, lost, seconds: Number(process.hrtime.bigint() - start) / 1e9 });
    } catch (e) {
      batches.push({ failed: part, error: e as TierSyncError });
    }
  }
  return { batches };
}

/**
 * Ends a copy (under the lock, which the follow-up moves returned need too): the pages written are committed ready
 * with their CRC32C, failed and lost ones aborted (their source copies stay as they were), events emitted, and the
 * outcome reported to the planner, which lets go of the sources.
 */
export async function finishCopy(s: HierarchyState, c: BegunCopy, t: Transferred): Promise<Move[]> {
  const { index, planner } = ready(s);
  const { move: m } = c;
  const src = s.tiers[m.from]!;
  const dst = s.tiers[m.to]!;
  const done: PageKey[] = [...c.existing];
  for (const b of t.batches) {
    if ('error' in b) {
      index.abortCopies(dst.name, b.failed);
      s.emit('transfer:failed', { op: 'move', tier: dst.name, error: b.error });
      continue;
    }
    let commit;
    try {
      commit = index.commitCopies(b.ok.map((key, i) => ({ key, tier: dst.name, crc32c: b.crc32c[i]!, durable: dst.driver.capabilities.persistent })));
    } catch (e) {
      index.abortCopies(dst.name, [...b.ok, ...b.lost]);
      s.emit('transfer:failed', { op: 'move', tier: dst.name, error: e as TierSyncError });
      continue;
    }
    let landed = b.ok;
    if (commit.missing.length) {
      // Deleted while being copied: free the bytes again.
      const gone = new Set(commit.missing);
      landed = b.ok.filter((k) => !gone.has(k));
      await dst.driver.delete(commit.missing).catch(() => undefined);
    }
    if (b.lost.length) index.abortCopies(dst.name, b.lost);
    done.push(...landed);
    if (landed.length) {
      const e = { keys: landed, from: src.name, to: dst.name };
      if (m.why === 'demote') s.emit('block:demoted', e);
      else if (m.why === 'promote') s.emit('block:promoted', e);
      else s.emit('block:copied', { ...e, why: m.why });
    }
    s.emit('transfer:completed', { op: 'move', tier: dst.name, pages: landed.length, bytes: landed.length * s.pageBytes, seconds: b.seconds });
  }
  return planner.completed(m, { done });
}

/**
 * The staging memory of `lane`. Moves under the lock take the first half of the configured staging pages and
 * background copies the second; with a single staging page, background copies get one page of their own.
 */
function stagingLane(s: HierarchyState, lane: 'foreground' | 'background'): StagingLane {
  const pages = s.config.stagingPages;
  const front = Math.ceil(pages / 2);
  if (lane === 'foreground') return { arena: s.staging!, offset: 0, pages: front };
  if (pages > 1) return { arena: s.staging!, offset: front * s.pageBytes, pages: pages - front };
  s.backgroundStaging ??= HostArena.create({ capacity: s.pageBytes });
  return { arena: s.backgroundStaging, offset: 0, pages: 1 };
}
