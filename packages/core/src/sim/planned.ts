/**
 * The simulator's executor of the planner (`@tiersync/policy` Planner): the live hierarchy carries the planner's
 * moves out with bytes, this carries them out by counting, so every placement decision the simulator reports is
 * the one the live hierarchy would make. Nothing here decides where a page goes.
 *
 * Execution follows the planner's contract (planner/types.ts) as the live executor does: the moves of one answer
 * in order; each reported through `completed()`, whose follow-ups run first (depth first); `queue` moves wait in a
 * FIFO of at most `maxQueuedPages` pages (beyond it a copy is dropped and reported failed, as live) until
 * {@link CountingHierarchy.flush}, which hands each to `dequeue()` and runs what it answers. Every copy and write
 * lands (the simulator has no failing devices), and an evict keeps what a pin holds when it runs.
 *
 * {@link replayPlanned} replays a workload as `tiersync demo` replays it live (bench/live-replay.ts): per request
 * lookup, load of the found prefix, flush, store of the prompt, flush.
 */
import { Planner, type Move, type PlannerLookup, type PlannerStoreOptions, type PolicyError, type RetentionHint } from '@tiersync/policy';
import type { ResolvedConfig } from '../hierarchy/index.js';
import { emptyCounters, type ReplayCounters } from './counters.js';
import { simHierarchy, type SimHierarchy } from './hierarchy.js';
import { configError, policyFailure } from './errors.js';
import { checkTierPolicy, isChainAware } from './policies.js';
import type { LlmTrace } from './trace/types.js';
import { workloadPages, type Workload } from './workload.js';

type QueueMove = Extract<Move<number>, { kind: 'queue' }>;

/** Page ids of the workload: dense integers (sim/workload.ts). */
export type PageId = number;

/** A hierarchy whose moves are counted, not made. */
export class CountingHierarchy {
  readonly planner: Planner<PageId>;
  readonly counters: ReplayCounters;
  readonly #maxQueued: number;
  readonly #queue: QueueMove[] = [];
  #queued = 0;
  /** The first failure of a tier's policy: the run stops at the end of the call that met it. */
  #policyError: PolicyError | undefined;
  /** Pages the last store() placed, and the ones it turned away (no room, not admitted). */
  lastStore = { placed: 0, dropped: 0 };
  /**
   * Some tier's policy is chain-aware (`prefix-aware`, `prefix-hold`): stores then hand the planner each page's parent (the page before it in
   * the request: workload ids are chained, sim/workload.ts). Others skip that bookkeeping.
   */
  readonly chainAware: boolean;

  /**
   * @throws TierSyncError ERR_INVALID_ARGUMENT for an oracle policy (it needs the future, which the planner never
   * has); ERR_CONFIG naming the tier for a tier its policy refuses, or for any config the planner refuses. Each
   * method below throws ERR_CONFIG, naming the policy, the tier and the call, when a tier's policy fails in it
   * (throws, or breaks the EvictionPolicy contract): the numbers of a failing policy mean nothing.
   */
  constructor(hierarchy: SimHierarchy) {
    for (const t of hierarchy.planner.tiers) checkTierPolicy(t.name, t.policy ?? 'lru', t.capacityPages);
    try {
      // The planner keeps going past a failing policy (the live hierarchy must); the simulator stops instead.
      this.planner = new Planner<PageId>(hierarchy.planner, { onPolicyError: (e) => void (this.#policyError ??= e) });
    } catch (e) {
      // The planner throws TypeError / RangeError on its config: a config error here, never an internal one.
      throw configError(`the planner refuses this hierarchy: ${(e as Error).message}`, e);
    }
    this.counters = emptyCounters(hierarchy.tiers.map((t) => t.name));
    this.#maxQueued = hierarchy.maxQueuedPages;
    this.chainAware = this.planner.config.tiers.some((t) => isChainAware(t.policy));
  }

  /** Looks `keys` up (the admission filter counts the lookups) and counts the request, its pages and prefix hits. */
  lookup(keys: readonly PageId[]): PlannerLookup {
    const found = this.planner.lookup(keys);
    const c = this.counters;
    c.requests++;
    c.lookupPages += keys.length;
    c.prefixPageHits += found.prefix;
    for (let j = 0; j < found.prefix; j++) c.tiers[found.tiers[j]!]!.hits++;
    return found;
  }

  /** Loads `keys` from `tiers` (each page's fastest tier, as lookup() said): pinned while read, then accessed. */
  load(keys: readonly PageId[], tiers: readonly number[]): void {
    if (!keys.length) return;
    const pins = this.planner.beginLoad(keys);
    const moves = this.planner.load(keys.map((key, j) => ({ key, tier: tiers[j]! })));
    this.planner.endLoad(pins);
    this.#run(moves);
    this.#check();
  }

  /**
   * Stores `keys` (one request's pages, in order) on the first tier (pages some tier holds are skipped); with
   * {@link chainAware}, each page's parent is the one before it.
   */
  store(keys: readonly PageId[], options: PlannerStoreOptions<PageId> = {}): void {
    this.lastStore = { placed: 0, dropped: 0 };
    const parents = this.chainAware && options.parents === undefined ? chainParents(keys) : options.parents;
    this.#run(this.planner.store(keys, parents === undefined ? options : { ...options, parents }));
    this.#check();
  }

  /** A soft retention hint for held pages (Planner.retain): session-aware tiers order victims by it. */
  retain(keys: readonly PageId[], retention: RetentionHint, now: number): void {
    if (keys.length) this.planner.retain(keys, { retention, now });
    this.#check();
  }

  /** Runs every queued background copy (and the copies they queue) to completion. */
  flush(): void {
    for (let m = this.#queue.shift(); m; m = this.#queue.shift()) {
      this.#queued -= m.keys.length;
      this.#run(this.planner.dequeue(m));
    }
    this.#check();
  }

  /** Stops the run at a tier's failed policy. */
  #check(): void {
    if (this.#policyError !== undefined) throw policyFailure(this.#policyError, 'ERR_CONFIG');
  }

  #run(moves: readonly Move<PageId>[]): void {
    const tiers = this.counters.tiers;
    for (const m of moves) {
      switch (m.kind) {
        case 'refuse':
          if (m.reason !== 'present') this.lastStore.dropped += m.keys.length;
          break;
        case 'wait':
          // Only answered when writes in flight hold slots; the simulator has none in flight.
          throw new Error(`planner asked to wait for room on tier ${m.tier} with nothing in flight`);
        case 'place':
          tiers[m.tier]!.inserts += m.keys.length;
          this.lastStore.placed += m.keys.length;
          this.#run(this.planner.completed(m, { done: m.keys }));
          break;
        case 'copy':
          tiers[m.to]!.inserts += m.keys.length;
          if (m.why === 'demote') tiers[m.from]!.demotions += m.keys.length;
          if (m.why === 'promote') tiers[m.to]!.promotions += m.keys.length;
          this.#run(this.planner.completed(m, { done: m.keys }));
          break;
        case 'queue':
          if (this.#queued + m.keys.length > this.#maxQueued) {
            this.#run(this.planner.completed(m, { done: [], failed: m.keys }));
          } else {
            this.#queue.push(m);
            this.#queued += m.keys.length;
          }
          break;
        case 'evict': {
          const done = m.keys.filter((k) => !this.planner.isPinned(k));
          const failed = done.length === m.keys.length ? [] : m.keys.filter((k) => this.planner.isPinned(k));
          tiers[m.tier]!.evictions += done.length;
          this.#run(this.planner.completed(m, { done, failed }));
          break;
        }
      }
    }
  }
}

/** The parent of each page of one request's chain: the page before it (`null` for the first). */
export function chainParents(keys: readonly PageId[]): (PageId | null)[] {
  const parents: (PageId | null)[] = new Array(keys.length);
  for (let i = 0; i < keys.length; i++) parents[i] = i === 0 ? null : keys[i - 1]!;
  return parents;
}

/** Options of {@link replayPlanned}. */
export interface PlannedReplayOptions {
  /** The hierarchy config (as TierSync and `tiersync demo` take it). */
  config: ResolvedConfig;
  workload: Workload;
  /** Pages per tier, overriding the URLs' capacities (sim/hierarchy.ts). */
  capacityPages?: readonly number[];
}

/** Outcome of {@link replayPlanned}. */
export interface PlannedReplayResult {
  counters: ReplayCounters;
  /** Occupancy of each tier at the end. */
  tiers: Array<{ name: string; capacityPages: number; usedPages: number }>;
  pagesStored: number;
  pagesDropped: number;
}

/**
 * Replays `workload` through the planner of `config` by counting: the simulator's twin of `tiersync demo`.
 * @throws TierSyncError ERR_CONFIG when the config's pages do not line up with the workload's
 */
export function replayPlanned(options: PlannedReplayOptions): PlannedReplayResult {
  const h = simHierarchy(options.config, options.capacityPages);
  const { workload } = options;
  if (h.tokensPerPage !== workload.tokensPerPage) throw configError(`the workload has ${workload.tokensPerPage}-token pages, the config's layout ${h.tokensPerPage}`);
  const sim = new CountingHierarchy(h);
  let stored = 0;
  let dropped = 0;
  for (const pages of workload.pages) {
    const keys = Array.from(pages);
    const found = sim.lookup(keys);
    if (found.prefix > 0) {
      sim.load(keys.slice(0, found.prefix), found.tiers);
      sim.flush();
    }
    sim.store(keys);
    sim.flush();
    stored += sim.lastStore.placed;
    dropped += sim.lastStore.dropped;
  }
  const tiers = h.tiers.map((t, i) => ({ name: t.name, capacityPages: t.capacityPages, usedPages: sim.planner.view(i).usedPages }));
  return { counters: sim.counters, tiers, pagesStored: stored, pagesDropped: dropped };
}

/** A `tiersync sim --config` run: plain data, so it can cross to a sweep worker. */
export interface PlannedJob {
  /** The hierarchy config (parsed). */
  config: ResolvedConfig;
  /** Run every tier with this policy instead of the config's (`--policy`). */
  policy?: string;
  /** Shown in reports. */
  label?: string;
}

/** Outcome of a {@link PlannedJob}. */
export interface PlannedResult extends PlannedReplayResult {
  label: string;
  /** The policy of each tier. */
  policies: string[];
  requests: number;
}

/** Runs a {@link PlannedJob} on a request trace. @throws TierSyncError ERR_CONFIG for a config the trace cannot use */
export function runPlanned(trace: LlmTrace, job: PlannedJob): PlannedResult {
  const config: ResolvedConfig = job.policy === undefined ? job.config : { ...job.config, tiers: job.config.tiers.map((t) => ({ ...t, policy: job.policy! })) };
  const h = simHierarchy(config);
  const r = replayPlanned({ config, workload: workloadPages(trace, h.tokensPerPage) });
  const policies = config.tiers.map((t) => t.policy);
  return { label: job.label ?? `${[...new Set(policies)].join('/')} ${h.tiers.map((t) => `${t.name}=${t.capacityPages}p`).join(' ')}`, policies, requests: r.counters.requests, ...r };
}
