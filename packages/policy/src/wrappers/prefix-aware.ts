/**
 * Prefix-aware eviction: any policy made chain-aware.
 *
 * KV page keys are chained (a page's key hashes its parent's), so a page is reachable only through its whole
 * prefix: evicting a page strands every later page of its chain (they take room and can never hit again). SGLang's
 * radix cache evicts leaves first and vLLM frees a chain from its tail; this wrapper gives any policy the same
 * structure:
 * - pages stranded by a lost ancestor (an explicit removal, a page stored whose parent is not resident, a victim the
 *   inner policy took from inside a chain) are dropped first, oldest stranding first;
 * - descendants leave before their ancestors: the inner policy still chooses where to cut (its next victim), and
 *   when that page has resident descendants they leave first, leaves first (post-order, older branches first),
 *   then the page itself through the inner policy's own eviction;
 * - the ancestors of a page the caller pins are never victims (held in the inner policy while it is pinned).
 * Pages learn their parent through {@link PageHint.parent} on insert (the planner feeds it from a store's chain).
 * Without parents every page is a root and the wrapper decides exactly as its inner policy.
 *
 * The inner policy's choice is kept rather than overridden (only its order within a chain is), so its own
 * dynamics (a CLOCK or SIEVE hand, S3-FIFO's queues) are not disturbed. Pages the wrapper chooses (trimmed from a
 * chain, stranded) leave through the inner policy's {@link EvictionPolicy.evictKey}, so policies with ghost
 * history (ARC, S3-FIFO, 2Q, LIRS) remember them as their own victims: a returning chain is a returning one, not
 * a new one. `prefix-hold:` (prefix-hold.ts) is the other trade: the inner policy orders leaves only.
 */
import { checkInteger, checkKey } from '../internal/validate.js';
import type { EvictionPolicy, PageHint, PolicyKey } from '../types.js';
import { ChainTreePolicy } from './chain-tree.js';
import { evictFrom } from './evict-from.js';

/** How far into the inner policy's victim order a trim looks for the subtree's first-ranked leaf. */
const RANK_WINDOW = 64;

/** Chain-aware victims over an inner policy (which chooses where chains are cut). */
export class PrefixAwarePolicy<K extends PolicyKey = PolicyKey> extends ChainTreePolicy<K> {
  /** Per resident page, how many pinned pages below it hold it (it is pinned in the inner policy while > 0). */
  readonly #pinnedBelow = new Map<K, number>();

  /** @param inner the policy to make chain-aware (fresh: the wrapper must see every call) */
  constructor(inner: EvictionPolicy<K>) {
    super(inner, 'prefix-aware');
  }

  insert(key: K, size: number, hint?: PageHint<K>): K[] {
    this.checkInsert(key, size);
    const parent = hint?.parent;
    if (parent !== undefined && parent !== null) checkKey(parent, 'hint.parent');
    const cost = this.inner.unit === 'objects' ? 1 : size;
    const evicted: K[] = [];
    // Room: stranded pages first, then the inner policy's choices trimmed from their tails. Once its next victim
    // is a leaf, its own insert evicts (so an incoming-aware policy like ARC keeps its rule).
    while (this.inner.used + cost > this.inner.capacity) {
      const v = this.#dropStranded() ?? this.#trim(parent ?? undefined);
      if (v === undefined) break;
      evicted.push(v);
    }
    // The parent may have gone just now (the cache holds little more than this chain): the page starts stranded.
    const victims = this.inner.insert(key, size, hint);
    for (const v of victims) this.#left(v);
    evicted.push(...victims);
    let broken = false;
    if (parent !== undefined && parent !== null && parent !== key) {
      this.link(key, parent);
      broken = !this.inner.has(parent) || this.stranded.has(parent);
      if (broken) this.stranded.add(key);
    }
    // Orphans waiting for this page are reachable again (unless this page is itself stranded).
    if (!broken && this.children.has(key)) this.mark(key, false);
    return evicted;
  }

  evict(): K | undefined {
    return this.#dropStranded() ?? this.#trim(undefined) ?? this.#evictInner();
  }

  peekVictims(count: number): K[] {
    checkInteger(count, 'count', 0);
    const out: K[] = [];
    const taken = new Set<K>();
    for (const s of this.stranded) {
      if (out.length >= count) return out;
      if (!this.pins.has(s)) {
        out.push(s);
        taken.add(s);
      }
    }
    // Each inner victim's resident subtree, leaves first in the inner policy's order (what trimming takes), then
    // the victim. The inner order is read once, before any of these evictions: exact unless trimming reorders it.
    const ranked = this.inner.peekVictims(Math.max(count, RANK_WINDOW));
    const gone = (k: K): boolean => taken.has(k);
    for (const v of this.inner.peekVictims(count)) {
      while (out.length < count && !taken.has(v) && this.inner.pinCount(v) === 0) {
        const k = this.#leafBelow(v, ranked, gone, undefined) ?? v;
        out.push(k);
        taken.add(k);
      }
      if (out.length >= count) break;
    }
    return out;
  }

  /**
   * Evicts `key` as a victim (for a wrapper around this one): through the inner policy's `evictKey`; its resident
   * descendants are stranded. `false` for an absent page, one the caller pinned, or an ancestor held for one.
   */
  evictKey(key: K): boolean {
    if (!this.inner.has(key) || this.inner.pinCount(key) > 0) return false;
    if (!evictFrom(this.inner, key)) return false;
    this.#left(key);
    return true;
  }

  remove(key: K): boolean {
    if (!this.inner.has(key)) return this.inner.remove(key);
    if (this.dropPins(key)) this.#holdAncestors(key, -1);
    // Pinned pages below lose their hold on the ancestors above this one (the chain is cut here).
    const below = this.#pinnedBelow.get(key);
    if (below !== undefined) this.#holdAncestors(key, -below);
    this.#pinnedBelow.delete(key);
    this.inner.remove(key);
    this.#left(key);
    return true;
  }

  protected override onFirstPin(key: K): void {
    this.#holdAncestors(key, 1);
  }

  protected override onLastUnpin(key: K): void {
    this.#holdAncestors(key, -1);
  }

  protected override onReset(): void {
    this.#pinnedBelow.clear();
  }

  // ---- internals -----------------------------------------------------------------------------------------------

  /** Adds `delta` pinned descendants to every resident ancestor of `key`, up to a cut in its chain. */
  #holdAncestors(key: K, delta: number): void {
    for (let a = this.parents.get(key); a !== undefined && this.inner.has(a); a = this.parents.get(a)) {
      const before = this.#pinnedBelow.get(a) ?? 0;
      const after = before + delta;
      if (after > 0) this.#pinnedBelow.set(a, after);
      else this.#pinnedBelow.delete(a);
      if (before === 0 && after > 0) this.inner.pin(a);
      else if (before > 0 && after <= 0) this.inner.unpin(a);
    }
  }

  /** Drops the oldest unpinned stranded page, if any. */
  #dropStranded(): K | undefined {
    for (const s of this.stranded) {
      if (this.pins.has(s)) continue;
      this.#settleHolds(s);
      this.#evictChosen(s);
      this.#left(s);
      return s;
    }
    return undefined;
  }

  /**
   * When the inner policy's next victim has resident descendants, removes the first leaf below it (post-order:
   * its oldest branch, deepest first) and answers it; `undefined` when that victim is a leaf (or there is none).
   * `keep` (the parent of a page being inserted) is never trimmed here.
   */
  #trim(keep: K | undefined): K | undefined {
    const v = this.inner.peekVictims(1)[0];
    if (v === undefined || !this.children.has(v)) return undefined;
    const node = this.#leafBelow(v, this.inner.peekVictims(RANK_WINDOW), () => false, keep);
    if (node === undefined) return undefined;
    this.#evictChosen(node);
    this.#left(node);
    return node;
  }

  /**
   * The leaf of `v`'s resident subtree to take next, chosen the way `v` itself was: the inner policy's first-ranked
   * page below `v` in `ranked` (its victim order) is where the subtree is cut, and so on down (a shared ancestor
   * that a FIFO-like queue ranks first must not hand over its branches in age order: hot ones may sit in the
   * policy's protected queue). Below the last page the window ranks, the oldest live child, down to a leaf.
   * `undefined` when `v` has no live descendant. Pages for which `gone` answers true count as already taken; `keep`
   * and its subtree are never taken.
   */
  #leafBelow(v: K, ranked: readonly K[], gone: (k: K) => boolean, keep: K | undefined): K | undefined {
    const live = (k: K): boolean => !gone(k) && k !== keep && !this.stranded.has(k) && this.inner.pinCount(k) === 0;
    // One pass: a page below `node` ranked before any other page below it becomes the new node (every page below it
    // is below `node` too, and none ranked earlier is below it). Pages found not below a node are not below any
    // deeper one either, so walks up the chain stop at them.
    const notBelow = new Set<K>();
    const below = (k: K, top: K): boolean => {
      const path: K[] = [];
      let found = false;
      for (let a = this.parents.get(k); a !== undefined && !notBelow.has(a); a = this.parents.get(a)) {
        if (a === top) {
          found = true;
          break;
        }
        path.push(a);
      }
      if (!found) {
        notBelow.add(k);
        for (const a of path) notBelow.add(a);
      }
      return found;
    };
    let node = v;
    for (const k of ranked) if (k !== node && !notBelow.has(k) && live(k) && below(k, node)) node = k;
    for (;;) {
      let next: K | undefined;
      for (const c of this.children.get(node) ?? []) {
        if (live(c)) {
          next = c;
          break;
        }
      }
      if (next === undefined) break;
      node = next;
    }
    return node === v ? undefined : node;
  }

  /** Evicts a page the wrapper chose through the inner policy's rules (its ghosts remember it). */
  #evictChosen(key: K): void {
    if (!evictFrom(this.inner, key)) this.inner.remove(key);
  }

  /** The inner policy's own eviction; a victim taken from inside a chain strands what is below it. */
  #evictInner(): K | undefined {
    const v = this.inner.evict();
    if (v !== undefined) this.#left(v);
    return v;
  }

  /** A stranded page may be held for pinned pages below it: those holds end with it. */
  #settleHolds(key: K): void {
    const below = this.#pinnedBelow.get(key);
    if (below === undefined) return;
    this.#holdAncestors(key, -below);
    this.#pinnedBelow.delete(key);
  }

  /**
   * Bookkeeping of a page that left the inner policy (pins already settled). Its resident descendants, if any,
   * are stranded from now on and stay linked to it (so they are reachable again if it comes back).
   */
  #left(key: K): void {
    this.stranded.delete(key);
    this.#pinnedBelow.delete(key);
    if (this.children.has(key)) this.mark(key, true);
    this.unlink(key);
  }
}
