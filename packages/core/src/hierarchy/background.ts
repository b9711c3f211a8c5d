/**
 * Background copies (write-through, selective, promotion): a bounded queue drained one job at a time, and the
 * entry point that runs a planner answer (foreground moves now, background ones queued).
 *
 * A job holds the lock only for its bookkeeping: planning (dequeue), the moves that make room on its target, and
 * beginning its copies; then, once each copy's I/O is done, committing and reporting it. The I/O itself runs
 * outside the lock, so a slow or stalled lower tier holds back the queue, never a store. That is safe because the
 * planner tracks the copy in flight: its sources are held (never victims) and its target slots reserved until it
 * is reported, and its pages stay invisible (pending) on the target until committed.
 *
 * close() stops the queue: a copy that would leave no page more durable (its pages already have a durable copy,
 * or it writes to a volatile tier) is aborted or dropped at once, its pages staying where they are; a copy that
 * makes pages of a volatile tier durable may finish, all of them within one `deadlines.moveMs`.
 */
import type { Move } from '@tiersync/policy';
import type { PageKey } from '@tiersync/tiers';
import { beginCopy, executeMoves, finishCopy, transferCopy, type BegunCopy, type MoveIo } from './moves.js';
import { exclusive, ready, type CopyInFlight, type HierarchyState, type QueuedCopy } from './state.js';

/** What a planner answer left for the requester. */
export interface RunResult {
  /** Pages freed because the tier's policy refused them on landing. */
  refused: PageKey[];
  /** Background pages dropped because the queue was full. */
  queueDropped: number;
}

/** Runs a planner answer: foreground moves in order (call under the lock), background copies queued. */
export async function runMoves(s: HierarchyState, moves: readonly Move[], io: MoveIo = {}): Promise<RunResult> {
  if (!moves.length) return { refused: [], queueDropped: 0 };
  const out = await executeMoves(s, moves, io);
  let queueDropped = 0;
  for (const q of out.queued) queueDropped += enqueue(s, q);
  return { refused: out.refused, queueDropped };
}

/**
 * Queues a background copy; beyond maxQueuedPages its pages are dropped and counted rather than waited for (the
 * planner is told they are not coming). Returns how many were dropped.
 */
export function enqueue(s: HierarchyState, q: QueuedCopy): number {
  const { planner } = ready(s);
  if (s.queued + q.keys.length > s.config.maxQueuedPages) {
    s.counters.backgroundDropped += q.keys.length;
    planner.completed(q, { done: [], failed: q.keys });
    return q.keys.length;
  }
  s.queue.push(q);
  s.queued += q.keys.length;
  s.draining ??= drain(s).finally(() => (s.draining = undefined));
  return 0;
}

async function drain(s: HierarchyState): Promise<void> {
  for (let job = s.queue.shift(); job; job = s.queue.shift()) {
    s.queued -= job.keys.length;
    await runJob(s, job).catch(() => undefined);
  }
}

/** The queue's own sections run beside its copy in flight (they are what reports it). */
const BESIDE = { besideCopies: true };

/** Whether a move is a background copy (its I/O runs outside the lock), not a demotion that makes room. */
function isBackgroundCopy(m: Move): m is Extract<Move, { kind: 'copy' }> {
  return m.kind === 'copy' && m.why !== 'demote';
}

/** A background copy begun, with what settles its `reported`. */
interface Run extends CopyInFlight {
  readonly copy: BegunCopy;
  readonly settle: () => void;
}

/** One queued copy: planned and begun under the lock, its I/O outside it, each copy reported under it. */
async function runJob(s: HierarchyState, q: QueuedCopy): Promise<void> {
  const runs = await exclusive(
    s,
    async (): Promise<Run[]> => {
      const { planner } = ready(s);
      if (s.closing && !worthFinishing(s, q.to, q.keys)) {
        planner.completed(q, { done: [], failed: q.keys });
        return [];
      }
      const moves = planner.dequeue(q);
      // Room on the target first (evictions and demotions, whose victims must be gone before anything lands there:
      // the planner counts their slots free), then the copies, which only write into slots reserved for them.
      await runMoves(s, moves.filter((m) => !isBackgroundCopy(m)));
      // Each copy is in flight from here (its sources held): a section that waits for copies in flight must see it
      // before this one lets go of the lock.
      const copying = (s.copying ??= new Set());
      return moves.filter(isBackgroundCopy).map((m) => {
        let settle!: () => void;
        const copy = beginCopy(s, m);
        const reported = new Promise<void>((resolve) => (settle = resolve));
        const run: Run = { copy, to: m.to, keys: copy.moving, abort: new AbortController(), reported, settle };
        copying.add(run);
        if (s.closing) stopOnClose(s, run);
        return run;
      });
    },
    BESIDE,
  );
  try {
    for (const run of runs) {
      // transferCopy never throws (a failed batch is reported failed), so the planner always hears of the copy.
      const t = await transferCopy(s, run.copy, 'background', { signal: run.abort.signal });
      await exclusive(
        s,
        async () => {
          await runMoves(s, await finishCopy(s, run.copy, t));
        },
        BESIDE,
      );
      s.copying!.delete(run);
      run.settle();
    }
  } finally {
    // Whatever went wrong, nothing waits for these copies any longer.
    for (const run of runs) {
      s.copying?.delete(run);
      run.settle();
    }
  }
}

/**
 * Whether finishing a copy of `keys` to tier `to` makes some page durable that is not yet: the tier is
 * persistent and some key has no ready copy on a persistent tier (only such pages would be lost by closing).
 */
function worthFinishing(s: HierarchyState, to: number, keys: readonly PageKey[]): boolean {
  if (s.closing?.aborted || !keys.length || !s.tiers[to]!.driver.capabilities.persistent) return false;
  return ready(s).index.copiesOf(keys).some((copies) => !copies.some((c) => c.state === 'ready' && c.durable));
}

/** A copy in flight when close() runs: aborted now, or at close()'s deadline if it makes pages durable. */
function stopOnClose(s: HierarchyState, run: CopyInFlight): void {
  const closing = s.closing!;
  if (!worthFinishing(s, run.to, run.keys)) run.abort.abort();
  else closing.addEventListener('abort', () => run.abort.abort(), { once: true });
}

/** Resolves when stores in flight and background copies have caught up. */
export async function flush(s: HierarchyState): Promise<void> {
  while (s.storesInFlight.size) await Promise.allSettled([...s.storesInFlight]);
  while (s.draining) await s.draining;
  await exclusive(s, async () => undefined);
}

/**
 * Stops background work for close() (see the top of this file): copies whose pages are durable elsewhere, or that
 * write to a volatile tier, are aborted (the one in flight) or dropped (queued ones); copies that make volatile
 * pages durable go on, until `deadlines.moveMs` from now at most. Stores in flight finish (their writes have their
 * own deadline), and what they queue is treated alike. Resolves once nothing of the hierarchy's is running.
 */
export async function stopBackground(s: HierarchyState): Promise<void> {
  s.closing ??= AbortSignal.timeout(s.config.deadlines.moveMs);
  for (const run of s.copying ?? []) stopOnClose(s, run);
  while (s.storesInFlight.size || s.draining) {
    await Promise.allSettled([...s.storesInFlight]);
    await s.draining;
  }
  await exclusive(s, async () => undefined);
}

/** Settles once the background copies in flight now have been reported (their reserved slots then free up). */
export function copiesReported(s: HierarchyState): Promise<void>[] {
  return [...(s.copying ?? [])].map((c) => c.reported);
}
