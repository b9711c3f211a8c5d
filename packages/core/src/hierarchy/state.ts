/**
 * The state every hierarchy module works on: one object, built by the TierSync facade and passed to the open,
 * store, load, background, external-pages and pins modules. The planner (@tiersync/policy) holds every placement
 * decision and which tier holds which page; this object holds what executes them: drivers, the index, staging
 * memory, the background queue and the lock.
 */
import type { HostArena, TransferEngine } from '@tiersync/native';
import { TierSyncError } from '@tiersync/native';
import type { Move, Planner } from '@tiersync/policy';
import type { PageKey, TierDriver } from '@tiersync/tiers';
import type { BlockIndex } from '../index/index.js';
import type { Namespace } from '../keys/index.js';
import type { ResolvedConfig } from './config.js';
import type { ReconcileReport } from './reconcile.js';
import type { TierSyncEvents } from './types.js';

/** One opened tier: its driver and what the executor measures of it. Its pages and rules live in the planner. */
export interface TierState {
  /** Position, fastest first: the planner's tier number. */
  index: number;
  name: string;
  driver: TierDriver;
  capacityPages: number;
  /** Read bandwidth estimate, bytes per second (EWMA of measured loads). */
  readBps: number;
}

/** A background copy waiting in the queue (a planner `queue` move). */
export type QueuedCopy = Extract<Move, { kind: 'queue' }>;

/** A background copy whose I/O runs outside the lock. */
export interface CopyInFlight {
  /** The tier it writes to, by number, and the keys it writes there. */
  readonly to: number;
  readonly keys: readonly PageKey[];
  /** Aborts its driver calls (close()). */
  readonly abort: AbortController;
  /** Settles once the copy is reported to the planner (its target slots are then resident pages or free). */
  readonly reported: Promise<void>;
}

/** Counters of the hierarchy's work (TierSync.counters). */
export interface HierarchyCounters {
  stores: number;
  pagesStored: number;
  pagesDropped: number;
  pagesNotAdmitted: number;
  loads: number;
  pagesLoaded: number;
  pagesMissing: number;
  backgroundDropped: number;
  integrityFailures: number;
}

/** Emits one of TierSync's events (the facade's emit, bound). */
export type Emit = <E extends keyof TierSyncEvents>(event: E, ...args: Parameters<TierSyncEvents[E]>) => boolean;

export interface HierarchyState {
  readonly config: ResolvedConfig;
  readonly namespace: Namespace;
  readonly engine: TransferEngine;
  readonly pageBytes: number;
  readonly tokensPerPage: number;
  readonly emit: Emit;
  readonly counters: HierarchyCounters;
  readonly tiers: TierState[];
  index: BlockIndex | undefined;
  planner: Planner | undefined;
  staging: HostArena | undefined;
  /** What open() adopted from the persistent tiers. */
  reconciled: ReconcileReport | undefined;
  /** open() was called (it runs once). */
  opening: boolean;
  closed: boolean;
  /**
   * Tail of the chain of exclusive sections: planning, the moves that make room (evictions, demotions), and the
   * bookkeeping that begins and reports a background copy. A background copy's I/O runs outside it.
   */
  lock: Promise<void>;
  /** Background copies (write-through, selective, promotion) waiting to run, and their page count. */
  readonly queue: QueuedCopy[];
  queued: number;
  draining: Promise<void> | undefined;
  /** Background copies whose I/O runs now, outside the lock (made by the first). */
  copying?: Set<CopyInFlight>;
  /**
   * Set when close() begins; aborted `deadlines.moveMs` later. Background copies that would make pages durable go
   * on until then; the others stop at once (background.ts).
   */
  closing?: AbortSignal;
  /** Staging of background copies when `stagingPages` is 1 (otherwise they use the second half of `staging`). */
  backgroundStaging?: HostArena;
  /** Stores whose driver write runs outside the lock; flush() and close() wait for them. */
  readonly storesInFlight: Set<Promise<unknown>>;
  /** Driver writes of stores in flight, settled once their pages are resident in the planner (evictable). */
  readonly writesInFlight: Set<Promise<void>>;
}

/** The index and planner of an open, not closed hierarchy. @throws TierSyncError ERR_CLOSED otherwise */
export function ready(s: HierarchyState): { index: BlockIndex; planner: Planner } {
  if (s.closed) throw new TierSyncError('TierSync is closed', 'ERR_CLOSED');
  if (!s.index || !s.planner) throw new TierSyncError('TierSync is not open; call open() first', 'ERR_CLOSED');
  return { index: s.index, planner: s.planner };
}

/**
 * Runs `fn` after every earlier exclusive section has finished: planning, room-making moves and the bookkeeping of
 * background copies run one at a time (see HierarchyState.lock).
 *
 * A background copy runs its I/O outside the lock, but its sources stay held (never victims, kept by deletes) until
 * it is reported. So when a section's turn comes while copies are in flight, it gives the lock up, waits for them
 * to be reported, and takes its turn again: a delete or a request for room then finds those pages free to go, as
 * when copies ran under the lock, while the sections behind it (stores) go on meanwhile, so it may run after some
 * of them (sections that yield keep their order among themselves). Sections that need no such page pass
 * `besideCopies` and run at their turn (stores, whose planning waits itself when it needs held pages, and the
 * background queue's own bookkeeping).
 */
export function exclusive<T>(s: HierarchyState, fn: () => Promise<T>, options: { besideCopies?: boolean } = {}): Promise<T> {
  if (options.besideCopies) return chained(s, fn);
  const turn = chained(s, async (): Promise<{ value: T } | { copies: Promise<void>[] }> => {
    if (!s.copying?.size) return { value: await fn() };
    return { copies: [...s.copying].map((c) => c.reported) };
  });
  // Once: copies that start meanwhile are not waited for, so a busy queue cannot hold a section back for ever.
  return turn.then((r) => ('value' in r ? r.value : Promise.all(r.copies).then(() => chained(s, fn))));
}

/** Appends `fn` to the chain of exclusive sections. */
function chained<T>(s: HierarchyState, fn: () => Promise<T>): Promise<T> {
  const run = s.lock.then(fn);
  s.lock = run.then(
    () => undefined,
    () => undefined,
  );
  return run;
}

/** A tier by name. @throws TierSyncError ERR_INVALID_ARGUMENT naming the tiers there are */
export function tierNamed(s: HierarchyState, name: string): TierState {
  const t = s.tiers.find((x) => x.name === name);
  if (!t) throw new TierSyncError(`no tier named '${name}' (tiers: ${s.tiers.map((x) => x.name).join(', ')})`, 'ERR_INVALID_ARGUMENT');
  return t;
}
