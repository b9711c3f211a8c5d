/**
 * The planner's public shapes: its configuration, the moves it returns, and what an executor reports back.
 *
 * Tiers are numbered from the fastest, 0. A move names tiers by number; `PlannerTierConfig.name` is only carried
 * for messages and for executors that map numbers to their drivers.
 */
import type { AdmissionConfig } from '../admission.js';
import type { PolicyError } from '../errors.js';
import type { PromotionRule } from '../promotion.js';
import type { OverQuotaMode } from '../tenant-quota.js';
import type { PolicyKey } from '../types.js';
import type { WriteMode } from '../write-mode.js';

/** One tier of the hierarchy as the planner sees it: a capacity in pages and the rules of its eviction. */
export interface PlannerTierConfig {
  /** The tier's name (messages, and executors that look their driver up by it). A non-empty string. */
  name: string;
  /** Pages the tier holds: a positive safe integer. Every page counts 1, whatever its length. */
  capacityPages: number;
  /**
   * Fraction of capacity in (0, 1] above which a placement first frees room. Default 0.95.
   */
  highWatermark?: number;
  /** Fraction of capacity in (0, highWatermark] that freeing brings the tier back to. Default 0.85. */
  lowWatermark?: number;
  /**
   * Eviction policy by registry name (`lru`, `fifo`, `clock`, `lfu`, `arc`, `s3fifo`, `sieve`, or registered),
   * optionally behind wrappers, outermost first: `prefix-aware:lru`, `prefix-aware:session-aware:s3fifo`. The
   * wrappers go around the tier's priority levels and tenant quotas. Default `lru`.
   */
  policy?: string;
  /**
   * How pages reach this tier from the tiers above (ignored on tier 0, which takes every store); see
   * write-mode.ts. A string is shorthand for `{ kind }`. Default `'write-back'`.
   */
  writeMode?: WriteMode | 'write-through' | 'write-back';
}

/** Per-tenant quotas on every tier, as fractions of each tier's capacity in pages. */
export interface PlannerQuotas {
  /** Share of each tier per tenant, in [0, 1]. */
  shares: Readonly<Record<string, number>>;
  /** Share of tenants missing from `shares`, in [0, 1]. Default 1 (the whole tier). */
  defaultShare?: number;
  /** A store that would take a tenant over its share evicts that tenant's own pages first, or is refused. Default 'evict-own'. */
  overQuota?: OverQuotaMode;
}

/** Everything the planner decides from: plain data, so a config file, the live hierarchy and the simulator share it. */
export interface PlannerConfig {
  /** Tiers, fastest first: 1 to 16. */
  tiers: readonly PlannerTierConfig[];
  /** Which new pages a store admits. Default `{ kind: 'always' }`. */
  admission?: AdmissionConfig;
  /** Evict by priority level first (store option `priority`). Default false. */
  priorities?: boolean;
  /** Per-tenant quotas on every tier. Default none. */
  tenantQuotas?: PlannerQuotas;
  /** Tenant of pages stored without one. Default 'default'. */
  defaultTenant?: string;
  /**
   * Copy a page served by a lower tier into a faster one: `true` is `{ kind: 'to-top' }` (into tier 0 on the
   * first hit), `false` is `{ kind: 'never' }`. Default true.
   */
  promoteOnHit?: boolean | PromotionRule;
}

/** Identifies one move, for {@link Planner.completed}. Unique within one planner. */
export type MoveId = number & { readonly __brand: 'MoveId' };

/** Why pages are copied from one tier to another. */
export type CopyReason =
  /** A victim of `from` with no copy lower down, copied before it is freed (write-back, or selective with coldOnEvict 'demote'). */
  | 'demote'
  /** A page just stored on tier 0 (or adopted on `from`), copied to a write-through tier. */
  | 'write-through'
  /** A page that reached a selective tier's `minHits`, copied down to it. */
  | 'selective'
  /** A page served by a lower tier, copied up. */
  | 'promote';

/** Why pages are freed from a tier. */
export type EvictReason =
  /** Victims freeing room for a placement or a copy. */
  | 'room'
  /** Victims bringing a tier over its high watermark back to its low one (pressure(), adopt(), expire()). */
  | 'pressure'
  /**
   * Pages that just landed but the tier's policy refuses them (their tenant at its quota with overQuota 'refuse',
   * or pinned pages filling the tier): they do not stay. A store counts these as dropped.
   */
  | 'refused';

/** Why pages were turned away. */
export type RefuseReason =
  /** The admission filter turned the new pages away (not looked up often enough yet). */
  | 'not-admitted'
  /** No room: what is left is pinned, or reserved by work in flight. */
  | 'no-room'
  /** The planner already knows the pages on some tier or on their way there. */
  | 'present';

/**
 * One step for the executor. Execute the moves of one answer in order; each move that names an `id` (every kind
 * but `refuse` and `wait`) is reported exactly once through {@link Planner.completed}, whose answer (follow-up
 * moves) is executed before the rest of the list (depth first).
 */
export type Move<K extends PolicyKey = string> =
  /** Nothing to do for `keys`; say why to the caller. Not reported back. */
  | { readonly kind: 'refuse'; readonly tier: number; readonly keys: readonly K[]; readonly reason: RefuseReason }
  /**
   * store() only, with `waitForRoom`: the keys do not all fit now but slots reserved by writes in flight will be
   * free once those land. Nothing was changed: wait for them, then ask again. Not reported back.
   */
  | { readonly kind: 'wait'; readonly tier: number; readonly keys: readonly K[] }
  /** Write the caller's bytes of `keys` to `tier` (room is reserved). Report which landed. */
  | { readonly kind: 'place'; readonly id: MoveId; readonly tier: number; readonly keys: readonly K[] }
  /**
   * Copy `keys` from tier `from` to tier `to` now, before the moves after it (room on `to` is reserved). Report
   * which landed. A `demote` copy's victims are freed by the follow-up `evict` of its completion.
   */
  | { readonly kind: 'copy'; readonly id: MoveId; readonly from: number; readonly to: number; readonly keys: readonly K[]; readonly why: CopyReason }
  /**
   * A background copy of `keys` to tier `to`, to run when the executor has time: hand it to
   * {@link Planner.dequeue} when it runs (which returns the room-making and the `copy` moves), or report it with
   * every key failed if the executor drops it (a full queue).
   */
  | { readonly kind: 'queue'; readonly id: MoveId; readonly to: number; readonly keys: readonly K[]; readonly why: Exclude<CopyReason, 'demote'> }
  /**
   * Free the copies of `keys` on `tier`. A key pinned when the executor gets to it (see {@link Planner.isPinned})
   * must be kept and reported failed; the planner then keeps it resident.
   */
  | { readonly kind: 'evict'; readonly id: MoveId; readonly tier: number; readonly keys: readonly K[]; readonly why: EvictReason };

/** A move the executor reports back. */
export type ReportedMove<K extends PolicyKey = string> = Extract<Move<K>, { id: MoveId }>;

/**
 * How a move ended. `done`: the keys it moved (landed on the target of a place or copy, freed by an evict);
 * `failed`: the keys it did not (a failed read or write, a key kept by a pin). A key in neither counts as failed.
 */
export interface MoveOutcome<K extends PolicyKey = string> {
  readonly done: readonly K[];
  readonly failed?: readonly K[];
}

/**
 * A soft retention hint for stored pages (see wrappers/session-aware.ts): a victim-order hint, never a pin.
 * `expectedReturnMs`: the pages' session is expected back in that many milliseconds (waiting on a tool call);
 * `finished`: it will not come back.
 */
export type RetentionHint = { readonly expectedReturnMs: number } | { readonly finished: true };

/** Options of {@link Planner.store}. */
export interface PlannerStoreOptions<K extends PolicyKey = PolicyKey> {
  /**
   * The parent of each key, aligned with `keys` (`null`: the first page of a sequence): the page each key's chain
   * hash derives from. Tiers with a `prefix-aware` policy evict descendants before ancestors by it. Default none.
   */
  parents?: readonly (K | null)[];
  /**
   * A soft retention hint for the stored pages, and for those of `keys` already held (a store of a session's
   * whole prompt re-hints its older pages). Tiers with a `session-aware` policy order victims by it. Needs `now`
   * with `expectedReturnMs`. Default none.
   */
  retention?: RetentionHint;
  /** The caller's clock, ms (the planner reads none). Needed with `retention.expectedReturnMs`. */
  now?: number;
  /** Eviction priority of the new pages (higher is evicted later); needs config.priorities. Default 0. */
  priority?: number;
  /** Tenant the new pages count against (config.tenantQuotas). Default config.defaultTenant. */
  tenant?: string;
  /**
   * When the keys do not all fit but writes in flight hold reserved slots, answer one `wait` move and change
   * nothing (the live hierarchy waits for those writes and asks again). Default false: place what fits now.
   */
  waitForRoom?: boolean;
}

/** A load's served page: the key and the tier that served it. */
export interface PlannerHit<K extends PolicyKey = string> {
  readonly key: K;
  readonly tier: number;
}

/** Answer of {@link Planner.lookup}. */
export interface PlannerLookup {
  /** For each key, the fastest tier holding it, or -1. */
  readonly tiers: number[];
  /** How many leading keys some tier holds (the reusable prefix). */
  readonly prefix: number;
}

/** A read-only view of one tier's occupancy. */
export interface PlannerTierView {
  readonly name: string;
  readonly capacityPages: number;
  /** Pages resident (landed and not being freed). */
  readonly usedPages: number;
  /** Slots promised to places and copies in flight. */
  readonly reservedPages: number;
  /** Resident pages currently pinned. */
  readonly pinnedPages: number;
  /** Pages chosen as victims whose evict has not been reported yet. */
  readonly leavingPages: number;
  /** Calls of the tier's policy that failed so far (threw, or broke its contract): see {@link PlannerOptions}. */
  readonly policyErrors: number;
}

/** How a {@link Planner} reports what is not a decision (the second argument of its constructor). */
export interface PlannerOptions {
  /**
   * Told of each policy call that failed: one that threw, or one that broke the `EvictionPolicy` contract (custom
   * policies are checked, registry.ts). The planner has already kept its own bookkeeping whole (the victims chosen
   * are evicted, a key whose insert failed is refused on that tier, the rest of the request goes on), so a
   * hierarchy can keep running; the hook decides whether to log it, count it or stop. Called synchronously, in the
   * middle of a planner call: it must not call the planner, and what it throws is ignored.
   * Default: the first failure of each tier is emitted as a process warning (`process.emitWarning`), and
   * every failure is counted in `view(tier).policyErrors`.
   */
  onPolicyError?: (error: PolicyError) => void;
}
