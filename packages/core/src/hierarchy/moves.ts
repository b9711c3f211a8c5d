/**
 * The executor of the planner's moves with real bytes: `evict` frees copies on a tier (driver, then index), `copy`
 * moves pages between tiers through host staging memory. Each move's outcome goes back to the planner, whose
 * follow-up moves run next (depth first). `queue` moves (background copies) are handed back to the caller, which
 * queues them (background.ts). Call under the hierarchy's lock.
 */
import type { TierSyncError } from '@tiersync/native';
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

/** Runs `moves` in order with their follow-ups; `refuse`, `wait` and `place` are the requester's to handle. */
export async function executeMoves(s: HierarchyState, moves: readonly Move[], out: Executed = { queued: [], refused: [] }): Promise<Executed> {
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
        await executeMoves(s, follow, out);
        continue;
      }
      case 'copy':
        await executeMoves(s, await copy(s, m), out);
        continue;
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
 * Copies `m.keys` from tier `m.from` to tier `m.to` through host staging memory, in staging-sized chunks: the index
 * records a pending copy, the source is read (verified where the tier checks), the destination written with each
 * page's meta, and the copy committed ready with its CRC32C. A failed chunk is reported failed, not thrown.
 */
async function copy(s: HierarchyState, m: Extract<Move, { kind: 'copy' }>): Promise<Move[]> {
  const { index, planner } = ready(s);
  const src = s.tiers[m.from]!;
  const dst = s.tiers[m.to]!;
  const staging = s.staging!;
  const chunk = s.config.stagingPages;
  const pageBytes = s.pageBytes;
  const done: PageKey[] = [];
  for (let at = 0; at < m.keys.length; at += chunk) {
    const part = m.keys.slice(at, at + chunk);
    const begun = index.beginCopies(dst.name, part.map((key) => ({ key, location: key })));
    // Already recorded there (a copy made outside the planner's view): it is there, so the planner counts it.
    done.push(...begun.existing);
    const moving = begun.added;
    if (!moving.length) continue;
    const start = process.hrtime.bigint();
    try {
      const read = await src.driver.read(
        moving.map((key, i) => ({ key, into: { arena: staging, offset: i * pageBytes, length: pageBytes } })),
        { priority: 'writeBack', timeoutMs: s.config.deadlines.moveMs },
      );
      reportIntegrity(s, read, src.name);
      const slots = moving.map((_, i) => i).filter((i) => read[i]!.status === 'hit');
      const ok = slots.map((i) => moving[i]!);
      const records = dst.driver.capabilities.persistent ? index.pages(ok) : undefined;
      const written = await dst.driver.write(
        slots.map((slot, j) => {
          const hit = read[slot] as Extract<ReadOutcome, { status: 'hit' }>;
          const r = records?.[j];
          const meta: PageMeta | undefined = r ? { namespace: r.namespace, parent: r.parent, position: r.position } : undefined;
          // The checksum travels with the page, so the next tier need not compute it again (the peer tier skips a pass).
          return { key: ok[j]!, source: { arena: staging, offset: slot * pageBytes, length: hit.length }, crc32c: hit.crc32c, ...(meta ? { meta } : {}) };
        }),
        { priority: 'writeBack', timeoutMs: s.config.deadlines.moveMs },
      );
      const commit = index.commitCopies(ok.map((key, i) => ({ key, tier: dst.name, crc32c: written.crc32c[i]!, durable: dst.driver.capabilities.persistent })));
      let landed = ok;
      if (commit.missing.length) {
        // Deleted while being copied: free the bytes again.
        const gone = new Set(commit.missing);
        landed = ok.filter((k) => !gone.has(k));
        await dst.driver.delete(commit.missing).catch(() => undefined);
      }
      const lost = moving.filter((_, i) => read[i]!.status !== 'hit');
      if (lost.length) index.abortCopies(dst.name, lost);
      done.push(...landed);
      if (landed.length) {
        const e = { keys: landed, from: src.name, to: dst.name };
        if (m.why === 'demote') s.emit('block:demoted', e);
        else if (m.why === 'promote') s.emit('block:promoted', e);
        else s.emit('block:copied', { ...e, why: m.why });
      }
      s.emit('transfer:completed', { op: 'move', tier: dst.name, pages: landed.length, bytes: landed.length * pageBytes, seconds: Number(process.hrtime.bigint() - start) / 1e9 });
    } catch (e) {
      index.abortCopies(dst.name, moving);
      s.emit('transfer:failed', { op: 'move', tier: dst.name, error: e as TierSyncError });
    }
  }
  return planner.completed(m, { done });
}
