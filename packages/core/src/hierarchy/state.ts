/**
 * The state every hierarchy module works on: one object, built by the TierSync facade and passed to the open,
 * store, load, background, external-pages and pins modules. The planner (@tiersync/policy) holds every placement
 * decision and which tier holds which page; this object holds what executes them: drivers, the index, staging
 * memory, the background queue and the lock.
 */
import type { HostArena, TransferEngine } from '@tiersync/native';
import { TierSyncError } from '@tiersync/native';
import type { Move, Planner } from '@tiersync/policy';
import type { TierDriver } from '@tiersync/tiers';
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
  /** Tail of the chain of exclusive sections (stores' planning, moves between tiers). */
  lock: Promise<void>;
  /** Background copies (write-through, selective, promotion) waiting to run, and their page count. */
  readonly queue: QueuedCopy[];
  queued: number;
  draining: Promise<void> | undefined;
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

/** Runs `fn` after every earlier exclusive section has finished (stores' planning and moves run one at a time). */
export function exclusive<T>(s: HierarchyState, fn: () => Promise<T>): Promise<T> {
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
