/**
 * The planner: every placement decision of a tiersync hierarchy, in one pure, deterministic object. Given a
 * request (store, lookup, load, pressure, promote, expire, ...) and what it knows of the tiers, it answers the
 * moves to make; an executor carries them out (the live hierarchy with bytes, the simulator by counting) and
 * reports each move's outcome through {@link Planner.completed}, so the planner's picture follows reality.
 *
 * What it holds in memory: which tier holds which key (one eviction policy per tier, the tier's configured
 * algorithm inside priority levels and tenant quotas when those are on), slots reserved by moves in flight, keys
 * on their way to a tier, victims being freed, pins (load pins and TTL pins: the one owner of pins), each page's
 * priority, tenant and hit count, and the admission filter's lookup counts.
 *
 * Rules, in one place:
 * - room: a tier whose use plus the incoming pages passes its high watermark frees victims down to its low one
 *   (the policy's order; pinned pages are never chosen, they are pinned in the policy itself);
 * - demotion: a victim with no copy lower down is copied to the next tier first when that tier's write mode says
 *   so (`decideWrite(mode, 'evicting')`), then freed;
 * - write-through / selective: after a store lands, each lower tier whose mode copies stored pages gets a
 *   background copy; after a load, pages reaching a selective tier's `minHits` get one;
 * - promotion: a page served by a lower tier is copied up by the promotion rule, in the background;
 * - admission: new pages pass the admission filter (lookups recorded by lookup()).
 *
 * Same config and same calls, same moves: nothing here reads a clock or a random source (time is passed in).
 * Keys are trusted: executors validate them once at their public boundary.
 *
 * Policies are not trusted to stay up: a policy call that throws (or that a custom policy's checks refuse, see
 * registry.ts) never escapes half-way through a request, since the moves already planned must still reach the
 * executor. The planner keeps its own bookkeeping whole instead: the victims chosen so far are evicted, a key whose
 * insert failed is refused on that tier (evicted there, its copies lower down kept), the other keys go on, and the
 * failure is reported as a {@link PolicyError} naming the policy, the tier and the call (`PlannerOptions`).
 */
import { createAdmissionFilter, type AdmissionFilter } from '../admission.js';
import { PolicyError } from '../errors.js';
import { PriorityPolicy } from '../priority.js';
import { promotionTarget } from '../promotion.js';
import { createPolicy, parsePolicySpec, wrapPolicy } from '../registry.js';
import { TenantQuotaPolicy } from '../tenant-quota.js';
import { checkInteger, checkNumber, describe } from '../internal/validate.js';
import type { EvictionPolicy, PageHint, PolicyKey, PolicyOptions, Retention } from '../types.js';
import { decideWrite } from '../write-mode.js';
import { resolvePlannerConfig, type ResolvedPlannerConfig, type ResolvedTier } from './config.js';
import { PinTable, type LoadPinId, type TtlPin } from './pins.js';
import type {
  CopyReason,
  EvictReason,
  Move,
  MoveId,
  MoveOutcome,
  PlannerConfig,
  PlannerHit,
  PlannerLookup,
  PlannerOptions,
  PlannerStoreOptions,
  PlannerTierView,
  ReportedMove,
  RetentionHint,
} from './types.js';

interface TierRuntime<K extends PolicyKey> {
  readonly config: ResolvedTier;
  readonly index: number;
  readonly policy: EvictionPolicy<K>;
  /** Slots promised to places and copies in flight (not yet in the policy). */
  reserved: number;
  /** Keys on their way here (a place, a copy, or a queued copy), with how many moves bring them. */
  readonly incoming: Map<K, number>;
  /** Of `incoming`, those only queued (a background copy not yet dequeued: nothing holds its source yet). */
  readonly queued: Map<K, number>;
  /** Victims taken out of the policy whose evict has not been reported: still readable here until then. */
  readonly leaving: Set<K>;
  /** Calls of the policy that failed (threw, or broke its contract). */
  faults: number;
}

interface Pending<K extends PolicyKey> {
  readonly move: ReportedMove<K>;
  /**
   * A demote copy to tier `to`: the victims of tier `tier` freed once it is reported. Those whose copy did not land
   * (a failed write, no room there) are first demoted further down, to the tiers below `to`.
   */
  readonly thenEvict?: { readonly tier: number; readonly to: number; readonly keys: readonly K[]; readonly why: EvictReason };
  /** A copy out of the queue: its source pages are held (never victims) until it is reported. */
  readonly hold?: LoadPinId;
}

/** Placement, eviction, admission, write modes, promotion, pins, priorities and quotas for one hierarchy. */
export class Planner<K extends PolicyKey = string> {
  /** The config with every default applied. */
  readonly config: ResolvedPlannerConfig;
  readonly #tiers: TierRuntime<K>[];
  readonly #admission: AdmissionFilter<K>;
  readonly #pins = new PinTable<K>();
  readonly #pending = new Map<MoveId, Pending<K>>();
  /** Priority of pages stored with a non-zero one. */
  readonly #priority = new Map<K, number>();
  /** Tenant of pages stored while quotas are on (absent: the default tenant). */
  readonly #tenantOf = new Map<K, string>();
  /** Parent of pages stored with one (store option `parents`), handed to the tiers' policies as they land. */
  readonly #parentOf = new Map<K, K | null>();
  /** Retention hint of pages stored with one, handed to the tiers' policies as they land. */
  readonly #retention = new Map<K, Retention>();
  /** Load hits per page, kept while some rule reads them (selective write modes, promotion after n hits). */
  readonly #hits = new Map<K, number>();
  readonly #countHits: boolean;
  readonly #onPolicyError: ((error: PolicyError) => void) | undefined;
  #nextId = 1;

  /**
   * @param options.onPolicyError told of each failed policy call (see {@link PlannerOptions})
   * @throws TypeError / RangeError naming a bad config field
   */
  constructor(config: PlannerConfig, options: PlannerOptions = {}) {
    this.config = resolvePlannerConfig(config);
    if (options.onPolicyError !== undefined && typeof options.onPolicyError !== 'function') {
      throw new TypeError(`options.onPolicyError must be a function, got ${describe(options.onPolicyError)}`);
    }
    this.#onPolicyError = options.onPolicyError;
    this.#admission = createAdmissionFilter<K>(this.config.admission);
    this.#tiers = this.config.tiers.map((t, index) => ({ config: t, index, policy: this.#policyFor(t), reserved: 0, incoming: new Map(), queued: new Map(), leaving: new Set(), faults: 0 }));
    const rule = this.config.promotion;
    this.#countHits = this.config.tiers.some((t) => t.writeMode.kind === 'selective') || (rule.kind !== 'never' && (rule.minHits ?? 1) > 1);
  }

  /** Number of tiers. */
  get tierCount(): number {
    return this.#tiers.length;
  }

  /** Occupancy of tier `tier`. */
  view(tier: number): PlannerTierView {
    const t = this.#tier(tier);
    return {
      name: t.config.name,
      capacityPages: t.config.capacityPages,
      usedPages: t.policy.count,
      reservedPages: t.reserved,
      pinnedPages: t.policy.pinnedCount,
      leavingPages: t.leaving.size,
      policyErrors: t.faults,
    };
  }

  /** Whether tier `tier` holds `key` (landed, or chosen as a victim and not yet freed). */
  holds(tier: number, key: K): boolean {
    const t = this.#tier(tier);
    return t.policy.has(key) || t.leaving.has(key);
  }

  /** Resident keys of tier `tier` (landed and not leaving), in no particular order. */
  keysOn(tier: number): IterableIterator<K> {
    return this.#tier(tier).policy.keys();
  }

  // ---- requests ------------------------------------------------------------------------------------------------

  /**
   * Records one lookup of each key for the admission filter, without answering where the keys are (for an
   * executor whose own index answers that). The same admission state as lookup().
   */
  noteLookups(keys: readonly K[]): void {
    if (this.config.admission.kind === 'always') return;
    for (const k of keys) this.#admission.recordLookup(k);
  }

  /**
   * Records one lookup of each key (the admission filter counts them) and answers where each key is.
   */
  lookup(keys: readonly K[]): PlannerLookup {
    const tiers: number[] = new Array(keys.length);
    let prefix = -1;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      this.#admission.recordLookup(k);
      tiers[i] = this.#fastest(k);
      if (tiers[i] === -1 && prefix === -1) prefix = i;
    }
    return { tiers, prefix: prefix === -1 ? keys.length : prefix };
  }

  /**
   * New pages for tier 0, in `keys` order. Answers, in order: `refuse` of keys already known (`present`) and of
   * keys the admission filter turns away (`not-admitted`); the moves that free room (evicts, demote copies); one
   * `place` of the keys that fit (their slots reserved); `refuse` (`no-room`) of the rest. With `waitForRoom`,
   * a single `wait` when writes in flight hold the missing slots (nothing changed).
   * @throws RangeError for a priority without config.priorities, TypeError for a bad tenant
   */
  store(keys: readonly K[], options: PlannerStoreOptions<K> = {}): Move<K>[] {
    const retention = this.#checkRetention(options.retention, options.now);
    const parents = options.parents;
    if (parents !== undefined && (!Array.isArray(parents) || parents.length !== keys.length)) {
      throw new RangeError(`options.parents must be an array as long as keys (${keys.length}), got ${describe(parents)}`);
    }
    const priority = options.priority ?? 0;
    checkInteger(priority, 'options.priority', Number.MIN_SAFE_INTEGER);
    if (priority !== 0 && !this.config.priorities) throw new RangeError('options.priority needs config.priorities: true');
    const tenant = options.tenant ?? this.config.defaultTenant;
    if (typeof tenant !== 'string' || tenant === '') throw new TypeError(`options.tenant must be a non-empty string, got ${describe(tenant)}`);
    const present: K[] = [];
    const refused: K[] = [];
    const admitted: K[] = [];
    const seen = new Set<K>();
    for (const k of keys) {
      if (seen.has(k) || this.#known(k)) present.push(k);
      else if (!this.#admission.admit(k, 1)) refused.push(k);
      else admitted.push(k);
      seen.add(k);
    }
    // Held pages take the hint before room is made: a session storing its next turn keeps its own context.
    if (retention !== undefined && present.length) this.#retain(present, retention);
    const room = admitted.length ? this.#makeRoom(0, admitted.length, options.waitForRoom === true, 'room') : { fit: 0, moves: [] };
    if (room === 'wait') return [{ kind: 'wait', tier: 0, keys: admitted }];
    const moves: Move<K>[] = [];
    if (present.length) moves.push({ kind: 'refuse', tier: 0, keys: present, reason: 'present' });
    if (refused.length) moves.push({ kind: 'refuse', tier: 0, keys: refused, reason: 'not-admitted' });
    moves.push(...room.moves);
    const placing = admitted.slice(0, room.fit);
    const dropped = admitted.slice(room.fit);
    if (parents !== undefined) {
      for (let i = 0; i < keys.length; i++) if (!this.#parentOf.has(keys[i]!) && this.#known(keys[i]!)) this.#parentOf.set(keys[i]!, parents[i]!);
    }
    if (placing.length) {
      const parentOf = parents === undefined ? undefined : new Map(keys.map((k, i) => [k, parents[i]!]));
      for (const k of placing) {
        if (priority !== 0) this.#priority.set(k, priority);
        if (this.config.tenantQuotas && tenant !== this.config.defaultTenant) this.#tenantOf.set(k, tenant);
        if (parentOf !== undefined) this.#parentOf.set(k, parentOf.get(k)!);
        if (retention !== undefined) this.#retention.set(k, retention);
      }
      moves.push(this.#reserve({ kind: 'place', id: this.#id(), tier: 0, keys: placing }, 0, placing));
    }
    if (dropped.length) moves.push({ kind: 'refuse', tier: 0, keys: dropped, reason: 'no-room' });
    return moves;
  }

  /**
   * A soft retention hint for pages already held (a session going idle on a tool call, or finishing): every tier
   * holding them passes it to its policy (`session-aware` orders victims by it; other policies ignore it). Keys no
   * tier holds are skipped. Moves nothing.
   * @throws TypeError / RangeError naming a bad hint or clock
   */
  retain(keys: readonly K[], options: { retention: RetentionHint; now?: number }): void {
    const retention = this.#checkRetention(options.retention, options.now);
    if (retention !== undefined) this.#retain(keys.filter((k) => this.#known(k)), retention);
  }

  /**
   * Pages a load served (each with the tier that served it), in the load's order: each counts as an access on
   * its tier (and a hit); answers `queue` moves for promotion (the promotion rule) and for selective tiers whose
   * `minHits` the page now reaches.
   */
  load(hits: readonly PlannerHit<K>[]): Move<K>[] {
    const promote = new Map<number, K[]>();
    const served: K[] = [];
    for (const { key, tier } of hits) {
      const t = this.#tier(tier);
      try {
        t.policy.access(key);
      } catch (e) {
        this.#fault(t, 'access', e);
      }
      served.push(key);
      let n = 1;
      if (this.#countHits) {
        n = (this.#hits.get(key) ?? 0) + 1;
        this.#hits.set(key, n);
      }
      const to = tier > 0 ? promotionTarget(this.config.promotion, tier, n) : undefined;
      if (to !== undefined && !this.#on(to, key)) {
        let list = promote.get(to);
        if (!list) promote.set(to, (list = []));
        list.push(key);
      }
    }
    const moves: Move<K>[] = [];
    for (const [to, keys] of [...promote].sort((a, b) => a[0] - b[0])) moves.push(this.#queue(to, keys, 'promote'));
    if (!this.#countHits) return moves;
    for (const t of this.#tiers) {
      if (t.index === 0 || t.config.writeMode.kind !== 'selective') continue;
      const hot = served.filter((k) => {
        const copiedBelow = this.#copiedFrom(t.index, k);
        return decideWrite(t.config.writeMode, 'hit', { hits: this.#hits.get(k) ?? 0, copiedBelow }) === 'copy-down';
      });
      if (hot.length) moves.push(this.#queue(t.index, [...new Set(hot)], 'selective'));
    }
    return moves;
  }

  /** Prefetch: a `queue` move bringing every key held only below tier 0 up into it. */
  promote(keys: readonly K[]): Move<K>[] {
    const up = [...new Set(keys)].filter((k) => !this.#on(0, k) && this.#fastest(k) > 0);
    return up.length ? [this.#queue(0, up, 'promote')] : [];
  }

  /** Tier `tier` over its high watermark frees victims (demoted per the write mode) down to its low one. */
  pressure(tier: number): Move<K>[] {
    this.#tier(tier);
    return (this.#makeRoom(tier, 0, false, 'pressure') as { moves: Move<K>[] }).moves;
  }

  /**
   * Frees room on tier `tier` so `need` more pages fit under its high watermark, before bytes are written into it
   * from outside the planner (a peer, a same-host client); `fit` of them fit. Nothing is reserved: follow with
   * adopt() once they are there.
   */
  room(tier: number, need: number): { fit: number; moves: Move<K>[] } {
    this.#tier(tier);
    checkInteger(need, 'need', 0);
    return this.#makeRoom(tier, need, false, 'room') as { fit: number; moves: Move<K>[] };
  }

  /**
   * Pages whose bytes reached tier `tier` from outside (a peer put, a same-host client): they become resident
   * there. Answers evicts of pages the tier's policy refuses and of the victims they push out, background copies to
   * lower tiers whose write mode copies stored pages, and the pressure moves if the tier is over its watermark.
   */
  adopt(tier: number, keys: readonly K[]): Move<K>[] {
    const t = this.#tier(tier);
    const fresh = [...new Set(keys)].filter((k) => !t.policy.has(k) && !t.incoming.has(k));
    const moves = this.#land(tier, fresh, true);
    moves.push(...(this.#makeRoom(tier, 0, false, 'pressure') as { moves: Move<K>[] }).moves);
    return moves;
  }

  /** A queued copy is about to run: answers its room-making and one `copy` per source tier (fastest first). */
  dequeue(move: Extract<Move<K>, { kind: 'queue' }>): Move<K>[] {
    const rec = this.#pending.get(move.id);
    if (!rec || rec.move.kind !== 'queue') throw new RangeError(`move ${describe(move.id)} is not a queued copy waiting to run`);
    this.#pending.delete(move.id);
    const to = this.#tiers[move.to]!;
    this.#unqueue(to, move.keys);
    const bySource = new Map<number, K[]>();
    for (const k of move.keys) {
      if (this.#on(to.index, k)) continue;
      let from = -1;
      for (const t of this.#tiers) {
        if (t.index !== to.index && t.policy.has(k)) {
          from = t.index;
          break;
        }
      }
      if (from < 0) continue;
      let list = bySource.get(from);
      if (!list) bySource.set(from, (list = []));
      list.push(k);
    }
    // The sources are held while the copies' room is planned and until each copy is reported: room on the target
    // can cascade into demotions that free room on the source tier, and a source chosen there would be gone
    // before its copy reads it.
    const candidates = [...bySource.values()].flat();
    const planning = this.#hold(candidates);
    const moves: Move<K>[] = [];
    for (const [from, keys] of [...bySource].sort((a, b) => a[0] - b[0])) {
      const room = this.#makeRoom(to.index, keys.length, false, 'room') as { fit: number; moves: Move<K>[] };
      moves.push(...room.moves);
      const moving = keys.slice(0, room.fit);
      if (moving.length) {
        const copy = this.#reserve({ kind: 'copy', id: this.#id(), from, to: to.index, keys: moving, why: move.why }, to.index, moving);
        this.#pending.set(copy.id, { move: copy, hold: this.#hold(moving) });
        moves.push(copy);
      }
      if (keys.length > moving.length) moves.push({ kind: 'refuse', tier: to.index, keys: keys.slice(room.fit), reason: 'no-room' });
    }
    this.#release(planning);
    for (const k of move.keys) this.#forgetIfGone(k);
    return moves;
  }

  /**
   * The outcome of a move this planner answered. Answers the follow-up moves, to run before the rest of the
   * list: after a `place` or a `copy`, evicts of pages the target's policy refuses and of the victims the new
   * pages push out, and (after a `place`) background write-through copies; after a `demote` copy, the evict of its
   * victims; after an `evict`, the moves that re-admitting kept pages needs.
   * @throws RangeError for a move that is not waiting for its outcome (unknown, or reported twice)
   */
  completed(move: ReportedMove<K>, outcome: MoveOutcome<K>): Move<K>[] {
    const rec = this.#pending.get(move.id);
    if (!rec) throw new RangeError(`move ${describe(move.id)} is not waiting for its outcome (unknown, or reported twice)`);
    this.#pending.delete(move.id);
    const done = new Set(outcome.done);
    const m = rec.move;
    switch (m.kind) {
      case 'place':
      case 'copy': {
        const to = m.kind === 'place' ? m.tier : m.to;
        const t = this.#tiers[to]!;
        if (rec.hold !== undefined) this.#release(rec.hold);
        this.#unreserveIncoming(t, m.keys, m.keys.length);
        const landed = m.keys.filter((k) => done.has(k));
        const moves = this.#land(to, landed, m.kind === 'place');
        if (rec.thenEvict) moves.push(...this.#evictVictims(rec.thenEvict.tier, rec.thenEvict.keys, rec.thenEvict.why, rec.thenEvict.to + 1));
        for (const k of m.keys) if (!done.has(k)) this.#forgetIfGone(k);
        return moves;
      }
      case 'queue': {
        // Dropped by the executor (a full queue): the keys are no longer on their way.
        this.#unqueue(this.#tiers[m.to]!, m.keys);
        for (const k of m.keys) this.#forgetIfGone(k);
        return [];
      }
      case 'evict': {
        const t = this.#tiers[m.tier]!;
        const kept: K[] = [];
        for (const k of m.keys) {
          t.leaving.delete(k);
          if (!done.has(k)) kept.push(k);
        }
        const moves: Move<K>[] = [];
        const victims: K[] = [];
        const back: K[] = [];
        for (const k of kept) {
          // A page the policy does not take back (or fails on) is left as one it does not admit.
          if (t.policy.has(k) || !this.#admits(t, k)) continue;
          if (this.#insert(t, k, victims)) back.push(k);
        }
        // Kept pages take slots that placements in flight were promised: free as many others, never the pages just
        // kept (held while choosing). Only after some progress (a page freed), so pages that keep refusing end it.
        const over = t.policy.count + t.reserved - t.config.capacityPages - victims.length;
        if (over > 0 && back.length && done.size > 0) {
          const hold = this.#hold(back);
          this.#evictSome(t, over, victims);
          this.#release(hold);
        }
        if (victims.length) moves.push(...this.#evictVictims(m.tier, victims, m.why === 'refused' ? 'room' : m.why));
        for (const k of m.keys) if (done.has(k)) this.#forgetIfGone(k);
        return moves;
      }
    }
  }

  /**
   * Copies of `keys` on tier `tier` are gone without a move (deleted by the caller, found missing or damaged,
   * removed by a peer): the planner forgets them there.
   */
  forget(tier: number, keys: readonly K[]): void {
    const t = this.#tier(tier);
    for (const k of keys) {
      try {
        t.policy.remove(k);
      } catch (e) {
        this.#fault(t, 'remove', e);
      }
      t.leaving.delete(k);
      this.#forgetIfGone(k);
    }
  }

  /**
   * Pages found on tier `tier` when a hierarchy opens (a persistent tier's listing) become resident there. Answers
   * the evicts (and demotions) of what does not fit, when the tier holds more than its capacity now (a capacity
   * lowered since the pages were written); run them once the hierarchy can move pages.
   */
  restore(tier: number, keys: readonly K[]): Move<K>[] {
    const t = this.#tier(tier);
    const victims: K[] = [];
    const refused: K[] = [];
    for (const k of keys) {
      if (t.policy.has(k) || !this.#admits(t, k)) continue;
      if (!this.#insert(t, k, victims)) {
        refused.push(k);
        t.leaving.add(k);
      }
    }
    const moves: Move<K>[] = refused.length ? [this.#evictMove(tier, refused, 'refused')] : [];
    if (victims.length) moves.push(...this.#evictVictims(tier, victims, 'pressure'));
    return moves;
  }

  // ---- pins ----------------------------------------------------------------------------------------------------

  /** Holds `keys` (never victims, on any tier) while a load reads them. End with endLoad(). */
  beginLoad(keys: readonly K[]): LoadPinId {
    const { id, held } = this.#pins.beginLoad(keys);
    this.#pinInPolicies(held, true);
    return id;
  }

  /** Ends a load's pins. */
  endLoad(id: LoadPinId): void {
    this.#pinInPolicies(this.#pins.endLoad(id), false);
  }

  /**
   * Holds `keys` for `owner` until `now + ttl` (the same owner pinning a key again sets its new deadline). Keys need
   * not be stored yet: a page that arrives while held is held on arrival.
   * @throws TypeError / RangeError naming a bad argument
   */
  pin(keys: readonly K[], options: { owner: string; now: number; ttl: number }): void {
    checkNumber(options.ttl, 'options.ttl', Number.MIN_VALUE, Number.MAX_VALUE);
    checkNumber(options.now, 'options.now', -Number.MAX_VALUE, Number.MAX_VALUE);
    this.#pinInPolicies(this.#pins.hold(keys, options.owner, options.now + options.ttl), true);
  }

  /** Removes `owner`'s TTL pins on `keys`. Returns how many pins were removed. */
  unpin(keys: readonly K[], owner: string): number {
    const { removed, released } = this.#pins.release(keys, owner);
    this.#pinInPolicies(released, false);
    return removed;
  }

  /** Whether a pin (a load, or an unexpired TTL pin as of the last expire()) holds `key`. */
  isPinned(key: K): boolean {
    return this.#pins.isHeld(key);
  }

  /** Live TTL pins, in pin order. */
  ttlPins(): TtlPin<K>[] {
    return this.#pins.ttlPins();
  }

  /** The earliest TTL deadline, `undefined` when none. */
  nextExpiry(): number | undefined {
    return this.#pins.nextExpiry();
  }

  /**
   * Ends TTL pins whose deadline is at or before `now`; answers the pressure moves of tiers that pins had kept
   * over their high watermark.
   */
  expire(now: number): Move<K>[] {
    const released = this.#pins.expire(now);
    if (!released.length) return [];
    this.#pinInPolicies(released, false);
    const moves: Move<K>[] = [];
    for (const t of this.#tiers) moves.push(...(this.#makeRoom(t.index, 0, false, 'pressure') as { moves: Move<K>[] }).moves);
    return moves;
  }

  // ---- internals -----------------------------------------------------------------------------------------------

  #tier(tier: number): TierRuntime<K> {
    const t = this.#tiers[tier];
    if (!Number.isInteger(tier) || t === undefined) throw new RangeError(`tier must be an integer in [0, ${this.#tiers.length - 1}], got ${describe(tier)}`);
    return t;
  }

  #id(): MoveId {
    return this.#nextId++ as MoveId;
  }

  /** The tier's policy: its algorithm, inside priority levels and tenant quotas when those are on. */
  #policyFor(t: ResolvedTier): EvictionPolicy<K> {
    // Wrappers go around the levels and quotas: a page's parent or session may sit in another level or tenant.
    const { wrappers, policy } = parsePolicySpec(t.policy);
    let p = this.#levelsFor(t, policy);
    for (let i = wrappers.length - 1; i >= 0; i--) p = wrapPolicy(wrappers[i]!, p, { capacity: t.capacityPages, unit: 'objects' });
    return p;
  }

  #levelsFor(t: ResolvedTier, policy: string): EvictionPolicy<K> {
    const base = (o: PolicyOptions) => createPolicy<K>(policy, o);
    const levels = this.config.priorities
      ? (o: PolicyOptions) => new PriorityPolicy<K>({ ...o, priorityOf: (k) => this.#priority.get(k) ?? 0, create: base as never }) as EvictionPolicy<K>
      : base;
    const q = this.config.tenantQuotas;
    if (!q) return levels({ capacity: t.capacityPages, unit: 'objects' });
    const quotas: Record<string, number> = {};
    for (const [tenant, share] of Object.entries(q.shares)) quotas[tenant] = Math.floor(share * t.capacityPages);
    return new TenantQuotaPolicy<K>({
      capacity: t.capacityPages,
      unit: 'objects',
      tenantOf: (k) => this.#tenantOf.get(k) ?? this.config.defaultTenant,
      quotas,
      defaultQuota: Math.floor(q.defaultShare * t.capacityPages),
      overQuota: q.overQuota,
      create: levels as never,
    });
  }

  /** What the tiers' policies are told of a landing page, `undefined` when nothing. */
  #hintOf(key: K): PageHint<K> | undefined {
    if (this.#parentOf.size === 0 && this.#retention.size === 0) return undefined;
    const parent = this.#parentOf.get(key);
    const retention = this.#retention.get(key);
    if (parent === undefined && retention === undefined) return undefined;
    return retention === undefined ? { parent } : parent === undefined ? { retention } : { parent, retention };
  }

  /** A store's or retain()'s hint as the policies take it (an absolute return time), checked. */
  #checkRetention(hint: RetentionHint | undefined, now: number | undefined): Retention | undefined {
    if (hint === undefined) return undefined;
    if (typeof hint !== 'object' || hint === null) throw new TypeError(`options.retention must be an object, got ${describe(hint)}`);
    if (now !== undefined) checkNumber(now, 'options.now', -Number.MAX_VALUE, Number.MAX_VALUE);
    if ('finished' in hint) {
      if (hint.finished !== true) throw new TypeError(`options.retention.finished must be true, got ${describe(hint.finished)}`);
      return now === undefined ? { finished: true } : { finished: true, now };
    }
    const ms = checkNumber((hint as { expectedReturnMs: number }).expectedReturnMs, 'options.retention.expectedReturnMs', 0, Number.MAX_VALUE);
    if (now === undefined) throw new TypeError('options.now is needed with options.retention.expectedReturnMs (the planner reads no clock)');
    return { returnAt: now + ms, now };
  }

  /** Records a retention hint for held pages and hands it to every tier's policy that holds them. */
  #retain(keys: readonly K[], retention: Retention): void {
    const hint: PageHint<K> = { retention };
    for (const k of keys) {
      this.#retention.set(k, retention);
      for (const t of this.#tiers) {
        if (!t.policy.has(k)) continue;
        try {
          t.policy.hint?.(k, hint);
        } catch (e) {
          this.#fault(t, 'hint', e);
        }
      }
    }
  }

  /** Whether tier `tier` holds `key` or it is on its way there. */
  #on(tier: number, key: K): boolean {
    const t = this.#tiers[tier]!;
    return t.policy.has(key) || t.incoming.has(key) || t.leaving.has(key);
  }

  /** Whether any tier holds `key` or it is on its way to one. */
  #known(key: K): boolean {
    for (let i = 0; i < this.#tiers.length; i++) if (this.#on(i, key)) return true;
    return false;
  }

  /** The fastest tier holding `key` (landed or leaving), -1 when none. */
  #fastest(key: K): number {
    for (const t of this.#tiers) if (t.policy.has(key) || t.leaving.has(key)) return t.index;
    return -1;
  }

  /**
   * Whether tier `from` or a lower one holds `key`, or a copy of it is being made now (a place, or a copy whose
   * source is held): what lets a victim go without a demote. A copy still queued does not count: its source is not
   * held, so the victim's evict would leave it nothing to read.
   */
  #safeBelow(from: number, key: K): boolean {
    for (let i = from; i < this.#tiers.length; i++) {
      const t = this.#tiers[i]!;
      if (t.policy.has(key) || (t.incoming.get(key) ?? 0) > (t.queued.get(key) ?? 0)) return true;
    }
    return false;
  }

  /** Whether tier `from` or a lower one holds (or will hold) a copy of `key` that is not leaving. */
  #copiedFrom(from: number, key: K): boolean {
    for (let i = from; i < this.#tiers.length; i++) {
      const t = this.#tiers[i]!;
      if (t.policy.has(key) || t.incoming.has(key)) return true;
    }
    return false;
  }

  #reserve<M extends ReportedMove<K>>(move: M, tier: number, keys: readonly K[]): M {
    const t = this.#tiers[tier]!;
    if (move.kind !== 'queue') t.reserved += keys.length;
    for (const k of keys) t.incoming.set(k, (t.incoming.get(k) ?? 0) + 1);
    this.#pending.set(move.id, { move });
    return move;
  }

  #unreserveIncoming(t: TierRuntime<K>, keys: readonly K[], slots: number): void {
    t.reserved -= slots;
    for (const k of keys) {
      const n = t.incoming.get(k);
      if (n === undefined) continue;
      if (n > 1) t.incoming.set(k, n - 1);
      else t.incoming.delete(k);
    }
  }

  #queue(to: number, keys: readonly K[], why: Exclude<CopyReason, 'demote'>): Move<K> {
    const queued = this.#tiers[to]!.queued;
    for (const k of keys) queued.set(k, (queued.get(k) ?? 0) + 1);
    return this.#reserve({ kind: 'queue', id: this.#id(), to, keys: [...keys], why }, to, keys);
  }

  /** A queued copy left the queue (dequeued to run, or dropped by the executor). */
  #unqueue(t: TierRuntime<K>, keys: readonly K[]): void {
    for (const k of keys) {
      const n = t.queued.get(k);
      if (n === undefined) continue;
      if (n > 1) t.queued.set(k, n - 1);
      else t.queued.delete(k);
    }
    this.#unreserveIncoming(t, keys, 0);
  }

  #evictMove(tier: number, keys: readonly K[], why: EvictReason): Move<K> {
    const move: ReportedMove<K> = { kind: 'evict', id: this.#id(), tier, keys: [...keys], why };
    this.#pending.set(move.id, { move });
    return move;
  }

  /**
   * Pages that landed on tier `tier` enter its policy. Answers the evicts of pages it refuses and of the victims
   * they push out, then (`stored`: a store or an adoption) the background copies the lower tiers' write modes ask
   * for.
   */
  #land(tier: number, keys: readonly K[], stored: boolean): Move<K>[] {
    const t = this.#tiers[tier]!;
    const refused: K[] = [];
    const victims: K[] = [];
    const kept: K[] = [];
    for (const k of keys) {
      if (t.policy.has(k)) continue;
      // Not admitted, or the policy failed on it: refused here (freed on this tier, copies lower down kept).
      if (this.#admits(t, k) && this.#insert(t, k, victims)) kept.push(k);
      else {
        refused.push(k);
        t.leaving.add(k);
      }
    }
    const moves: Move<K>[] = [];
    if (refused.length) moves.push(this.#evictMove(tier, refused, 'refused'));
    if (victims.length) moves.push(...this.#evictVictims(tier, victims, 'room'));
    if (stored && kept.length) {
      for (const below of this.#tiers) {
        if (below.index <= tier) continue;
        const copy = kept.filter((k) => decideWrite(below.config.writeMode, 'stored', { hits: 0, copiedBelow: this.#on(below.index, k) }) === 'copy-down');
        if (copy.length) moves.push(this.#queue(below.index, copy, 'write-through'));
      }
    }
    return moves;
  }

  /**
   * Frees room on tier `tier` for `need` more pages under its high watermark: victims in the policy's order down
   * to the low watermark. Answers how many of `need` fit once the moves ran; 'wait' (nothing changed) when
   * `waitable` and slots reserved by moves in flight are what is missing.
   */
  #makeRoom(tier: number, need: number, waitable: boolean, why: EvictReason): { fit: number; moves: Move<K>[] } | 'wait' {
    const t = this.#tiers[tier]!;
    const { capacityPages: cap, highWatermark, lowWatermark } = t.config;
    const count = t.policy.count;
    const used = count + t.reserved;
    if (used + need <= Math.floor(highWatermark * cap)) return { fit: need, moves: [] };
    const target = Math.max(0, Math.min(Math.floor(lowWatermark * cap), cap - need));
    const want = Math.max(0, used - target);
    if (waitable && t.reserved > 0) {
      // Would the victims free enough? Pinned pages are not victims, so ask the policy without changing it.
      let could = 0;
      try {
        could = Math.min(want, t.policy.peekVictims(Math.min(want, count)).length);
      } catch (e) {
        this.#fault(t, 'peekVictims', e);
      }
      if (Math.min(need, cap - (count - could) - t.reserved) < need) return 'wait';
    }
    const victims: K[] = [];
    this.#evictSome(t, want, victims);
    const fit = Math.max(0, Math.min(need, cap - t.policy.count - t.reserved));
    return { fit, moves: victims.length ? this.#evictVictims(tier, victims, why) : [] };
  }

  /**
   * Victims already out of tier `tier`'s policy: those with no copy lower down go to tier `to` (the next one, unless
   * a copy to it already failed) first when its write mode says so (a `demote` copy, after the room it needs
   * there), and every victim is freed by an evict (after the copy, as its follow-up, so a page always has a
   * readable copy somewhere). Victims that tier `to` has no room for, or whose copy fails, try the tiers below it
   * in turn (a full or unreachable peer tier must not drop pages a lower tier could keep); only past the last tier
   * is a victim freed without a copy.
   */
  #evictVictims(tier: number, victims: readonly K[], why: EvictReason, to = tier + 1): Move<K>[] {
    const t = this.#tiers[tier]!;
    for (const v of victims) t.leaving.add(v);
    const next = this.#tiers[to];
    const demote = next
      ? victims.filter(
          (k) => !this.#safeBelow(tier + 1, k) && decideWrite(next.config.writeMode, 'evicting', { hits: this.#hits.get(k) ?? 0, copiedBelow: false }) === 'copy-down',
        )
      : [];
    if (!next || !demote.length) return [this.#evictMove(tier, victims, why)];
    const room = this.#makeRoom(next.index, demote.length, false, 'room') as { fit: number; moves: Move<K>[] };
    const moving = demote.slice(0, room.fit);
    if (!moving.length) return [...room.moves, ...this.#evictVictims(tier, victims, why, to + 1)];
    const copy: ReportedMove<K> = { kind: 'copy', id: this.#id(), from: tier, to: next.index, keys: moving, why: 'demote' };
    this.#reserve(copy, next.index, moving);
    this.#pending.set(copy.id, { move: copy, thenEvict: { tier, to: next.index, keys: [...victims], why } });
    return [...room.moves, copy];
  }

  /** Holds `keys` as a load pin does (never victims), for the planner's own moves. */
  #hold(keys: readonly K[]): LoadPinId {
    const { id, held } = this.#pins.beginLoad(keys);
    this.#pinInPolicies(held, true);
    return id;
  }

  #release(id: LoadPinId): void {
    this.#pinInPolicies(this.#pins.endLoad(id), false);
  }

  #pinInPolicies(keys: readonly K[], pin: boolean): void {
    if (!keys.length) return;
    for (const t of this.#tiers) {
      for (const k of keys) if (t.policy.has(k)) this.#pin(t, k, pin);
    }
  }

  #pin(t: TierRuntime<K>, key: K, pin: boolean): void {
    try {
      if (pin) t.policy.pin(key);
      else t.policy.unpin(key);
    } catch (e) {
      this.#fault(t, pin ? 'pin' : 'unpin', e);
    }
  }

  // ---- policy calls that may fail ----------------------------------------------------------------------------------

  /** Whether tier t's policy admits `key` now; `false` when it fails to answer. */
  #admits(t: TierRuntime<K>, key: K): boolean {
    try {
      return t.policy.canAdmit(key, 1);
    } catch (e) {
      this.#fault(t, 'canAdmit', e);
      return false;
    }
  }

  /**
   * Inserts `key` into tier t's policy (pinned there when a pin holds it), its victims pushed onto `victims`.
   * `false` when the policy failed on it: the key is then not resident there, and the victims it did take (as far
   * as they are known, {@link PolicyError.victims}) are pushed all the same.
   */
  #insert(t: TierRuntime<K>, key: K, victims: K[]): boolean {
    let out: readonly K[];
    try {
      out = t.policy.insert(key, 1, this.#hintOf(key));
    } catch (e) {
      for (const v of this.#fault(t, 'insert', e)) victims.push(v);
      try {
        if (t.policy.has(key)) t.policy.remove(key);
      } catch (e2) {
        this.#fault(t, 'remove', e2);
      }
      return false;
    }
    for (const v of out) victims.push(v);
    if (this.#pins.isHeld(key)) this.#pin(t, key, true);
    return true;
  }

  /** Up to `count` victims of tier t's policy, pushed onto `victims`; stops early when it has none or fails. */
  #evictSome(t: TierRuntime<K>, count: number, victims: K[]): void {
    for (let i = 0; i < count; i++) {
      let v: K | undefined;
      try {
        v = t.policy.evict();
      } catch (e) {
        for (const gone of this.#fault(t, 'evict', e)) victims.push(gone);
        return;
      }
      if (v === undefined) return;
      victims.push(v);
    }
  }

  /**
   * A call of tier t's policy failed: the error is attributed to the tier (and the policy, and the call) and
   * reported. Answers the keys that left the policy during the call, which the caller must free.
   */
  #fault(t: TierRuntime<K>, call: string, e: unknown): readonly K[] {
    const error = e instanceof PolicyError ? e.onTier(t.config.name) : new PolicyError({ policy: t.config.policy, call, tier: t.config.name, cause: e });
    t.faults++;
    const hook = this.#onPolicyError;
    if (hook !== undefined) {
      try {
        hook(error);
      } catch {
        // Documented: the planner is half-way through a request and must finish it; the hook's error goes nowhere.
      }
    } else if (t.faults === 1) {
      // No one asked to hear of it: say so once per tier (Node's warning channel), count the rest (view()).
      (globalThis as { process?: { emitWarning?(w: Error): void } }).process?.emitWarning?.(error);
    }
    return error.victims as readonly K[];
  }

  /** Drops the per-page bookkeeping of a key no tier holds and none is receiving. */
  #forgetIfGone(key: K): void {
    if (!this.#priority.size && !this.#tenantOf.size && !this.#hits.size && !this.#parentOf.size && !this.#retention.size) return;
    if (this.#known(key)) return;
    this.#parentOf.delete(key);
    this.#retention.delete(key);
    this.#priority.delete(key);
    this.#tenantOf.delete(key);
    this.#hits.delete(key);
  }
}
