/**
 * Background copies (write-through, selective, promotion): a bounded queue drained one job at a time under the
 * lock, and the entry point that runs a planner answer (foreground moves now, background ones queued).
 */
import type { Move } from '@tiersync/policy';
import type { PageKey } from '@tiersync/tiers';
import { executeMoves } from './moves.js';
import { exclusive, ready, type HierarchyState, type QueuedCopy } from './state.js';

/** What a planner answer left for the requester. */
export interface RunResult {
  /** Pages freed because the tier's policy refused them on landing. */
  refused: PageKey[];
  /** Background pages dropped because the queue was full. */
  queueDropped: number;
}

/** Runs a planner answer: foreground moves in order (call under the lock), background copies queued. */
export async function runMoves(s: HierarchyState, moves: readonly Move[]): Promise<RunResult> {
  if (!moves.length) return { refused: [], queueDropped: 0 };
  const out = await executeMoves(s, moves);
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
    const q = job;
    await exclusive(s, async () => {
      const { planner } = ready(s);
      await runMoves(s, planner.dequeue(q));
    }).catch(() => undefined);
  }
}

/** Resolves when stores in flight and background copies have caught up. */
export async function flush(s: HierarchyState): Promise<void> {
  while (s.storesInFlight.size) await Promise.allSettled([...s.storesInFlight]);
  while (s.draining) await s.draining;
  await exclusive(s, async () => undefined);
}
