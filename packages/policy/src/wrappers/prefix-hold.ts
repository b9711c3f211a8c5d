/**
 * Prefix-aware eviction, holding variant (`prefix-hold:<policy>`): the inner policy orders only the leaves.
 *
 * The same goal as {@link PrefixAwarePolicy} (`prefix-aware:`, chained page keys, descendants before ancestors,
 * stranded pages first), by another mechanism: a page with resident children is held in the inner policy (pinned
 * there, out of its victim order) until its last child leaves, so every eviction is the inner policy's own choice
 * among leaves and keeps its ghost history (ARC's B1/B2). The cost is with policies whose structures count pinned
 * pages or pass them by position: SIEVE's hand leaves a released ancestor behind it for a lap, and S3-FIFO's small
 * queue fills with held pages. `tiersync bench prefix` measures both variants; docs/SIMULATION.md says which to
 * pick for which policy.
 *
 * Pins taken through the wrapper are the caller's; the structural holds are not counted in `pinnedCount`. The
 * ancestors of a pinned page are never victims either (that would strand the pinned page).
 */
import { checkInteger, checkKey } from '../internal/validate.js';
import type { EvictionPolicy, PageHint, PolicyKey } from '../types.js';
import { ChainTreePolicy } from './chain-tree.js';

/** Chain-aware victims over an inner policy that orders leaves only. */
export class PrefixHoldPolicy<K extends PolicyKey = PolicyKey> extends ChainTreePolicy<K> {
  /** Pages this wrapper pinned in the inner policy because they have resident children. */
  readonly #held = new Set<K>();

  /** @param inner the policy to make chain-aware (fresh: the wrapper must see every call) */
  constructor(inner: EvictionPolicy<K>) {
    super(inner, 'prefix-hold');
  }

  insert(key: K, size: number, hint?: PageHint<K>): K[] {
    this.checkInsert(key, size);
    const parent = hint?.parent;
    let broken = false;
    if (parent !== undefined && parent !== null) {
      checkKey(parent, 'hint.parent');
      if (parent !== key) {
        this.link(key, parent);
        // Hold the parent before room is made, so making room for its child never takes it.
        if (this.inner.has(parent)) {
          this.#hold(parent);
          // A cache holding nothing but this chain: its tail must go after all (the child then starts stranded).
          if (!this.inner.canAdmit(key, size)) this.#release(parent);
        }
      }
    }
    const evicted: K[] = [];
    const cost = this.inner.unit === 'objects' ? 1 : size;
    for (const s of this.stranded) {
      if (this.inner.used + cost <= this.inner.capacity) break;
      if (this.pins.has(s)) continue;
      this.#drop(s);
      evicted.push(s);
    }
    for (const v of this.inner.insert(key, size, hint)) {
      this.#gone(v);
      evicted.push(v);
    }
    if (parent !== undefined && parent !== null && parent !== key) {
      broken = !this.inner.has(parent) || this.stranded.has(parent);
      if (broken) this.stranded.add(key);
    }
    const kids = this.children.get(key);
    if (kids !== undefined && kids.size > 0) {
      this.#hold(key);
      // Orphans waiting for this page are reachable again (unless this page is itself stranded).
      if (!broken) this.mark(key, false);
    }
    return evicted;
  }

  evict(): K | undefined {
    for (const s of this.stranded) {
      if (this.pins.has(s)) continue;
      this.#drop(s);
      return s;
    }
    const v = this.inner.evict();
    if (v !== undefined) this.#gone(v);
    return v;
  }

  peekVictims(count: number): K[] {
    checkInteger(count, 'count', 0);
    const out: K[] = [];
    for (const s of this.stranded) {
      if (out.length >= count) return out;
      if (!this.pins.has(s)) out.push(s);
    }
    if (out.length >= count) return out;
    // The inner order among today's leaves; a parent whose last child would leave is released (briefly unpinned
    // in the inner policy, pinned back before returning) and the inner order asked again, so it takes its own place.
    const leaving = new Set<K>(out);
    const released: K[] = [];
    try {
      let candidates = this.inner.peekVictims(count);
      let i = 0;
      while (out.length < count) {
        const v = candidates[i++];
        if (v === undefined) break;
        if (leaving.has(v)) continue;
        out.push(v);
        leaving.add(v);
        const p = this.parents.get(v);
        if (p === undefined || !this.#held.has(p) || this.pins.has(p) || this.stranded.has(v)) continue;
        let free = true;
        for (const c of this.children.get(p)!) if (!leaving.has(c)) free = false;
        if (!free) continue;
        this.inner.unpin(p);
        released.push(p);
        candidates = this.inner.peekVictims(out.length + count);
        i = 0;
      }
    } finally {
      for (const p of released) this.inner.pin(p);
    }
    return out;
  }

  remove(key: K): boolean {
    if (!this.inner.has(key)) return this.inner.remove(key);
    const kids = this.children.get(key);
    this.dropPins(key);
    this.inner.remove(key);
    this.#gone(key);
    // Its descendants can never be reached again: they go first from now on.
    if (kids !== undefined && kids.size > 0) this.mark(key, true);
    return true;
  }

  protected override onReset(): void {
    this.#held.clear();
  }

  /** A parent named late holds its resident parent like one named on insert. */
  protected override onLateLink(_key: K, parent: K): void {
    if (this.inner.has(parent)) this.#hold(parent);
  }

  // ---- internals -----------------------------------------------------------------------------------------------

  #hold(key: K): void {
    if (this.#held.has(key)) return;
    this.#held.add(key);
    this.inner.pin(key);
  }

  #release(key: K): void {
    if (!this.#held.delete(key)) return;
    this.inner.unpin(key);
  }

  /** A stranded page leaves (whether or not held: its own children are stranded too). */
  #drop(key: K): void {
    this.inner.remove(key);
    this.#gone(key);
  }

  /**
   * Bookkeeping of a page that left the inner policy (never one the caller pins: those are not victims, and
   * remove() settles their pins first). Its own children (if any) stay linked to it, stranded.
   */
  #gone(key: K): void {
    this.#held.delete(key);
    this.stranded.delete(key);
    const emptied = this.unlink(key);
    if (emptied !== undefined) this.#release(emptied);
  }
}
