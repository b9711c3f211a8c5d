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
import { checkInteger, checkKey, describe } from '../internal/validate.js';
import type { CapacityUnit, EvictionPolicy, PageHint, PolicyKey } from '../types.js';

/** Chain-aware victims over an inner policy that orders leaves only. */
export class PrefixHoldPolicy<K extends PolicyKey = PolicyKey> implements EvictionPolicy<K> {
  readonly name: string;
  /** The policy that orders victims among leaves. */
  readonly inner: EvictionPolicy<K>;
  /** Parent of each resident page that named one. */
  readonly #parentOf = new Map<K, K>();
  /** Resident children by parent key (the parent may be absent: its children are then stranded). */
  readonly #children = new Map<K, Set<K>>();
  /** Resident pages whose chain is broken, in the order they were stranded. */
  readonly #stranded = new Set<K>();
  /** Pages this wrapper pinned in the inner policy because they have resident children. */
  readonly #held = new Set<K>();
  /** The caller's pin counts. */
  readonly #pins = new Map<K, number>();
  #pinnedUsed = 0;

  /** @param inner the policy to make chain-aware (fresh: the wrapper must see every call) */
  constructor(inner: EvictionPolicy<K>) {
    if (typeof inner !== 'object' || inner === null || typeof inner.insert !== 'function') {
      throw new TypeError(`inner must be an EvictionPolicy, got ${describe(inner)}`);
    }
    this.inner = inner;
    this.name = `prefix-hold:${inner.name}`;
  }

  get capacity(): number {
    return this.inner.capacity;
  }
  get unit(): CapacityUnit {
    return this.inner.unit;
  }
  get used(): number {
    return this.inner.used;
  }
  get usedBytes(): number {
    return this.inner.usedBytes;
  }
  get count(): number {
    return this.inner.count;
  }
  get pinnedCount(): number {
    return this.#pins.size;
  }
  get pinnedUsed(): number {
    return this.#pinnedUsed;
  }
  /** Resident pages whose chain is broken (dropped before any other victim). */
  get strandedCount(): number {
    return this.#stranded.size;
  }

  /** The parent a resident page was stored with, `undefined` for a root or an absent page. */
  parentOf(key: K): K | undefined {
    return this.#parentOf.get(key);
  }

  /** Whether a resident page is stranded (an ancestor is gone). */
  isStranded(key: K): boolean {
    return this.#stranded.has(key);
  }

  has(key: K): boolean {
    return this.inner.has(key);
  }
  sizeOf(key: K): number | undefined {
    return this.inner.sizeOf(key);
  }
  keys(): IterableIterator<K> {
    return this.inner.keys();
  }
  access(key: K): boolean {
    return this.inner.access(key);
  }

  canAdmit(key: K, size: number): boolean {
    return this.inner.canAdmit(key, size);
  }

  insert(key: K, size: number, hint?: PageHint<K>): K[] {
    if (this.inner.has(key)) throw new RangeError(`key ${describe(key)} is already resident`);
    if (!this.inner.canAdmit(key, size)) {
      throw new RangeError(`size: an object of ${size} bytes cannot be admitted now (check canAdmit first)`);
    }
    const parent = hint?.parent;
    let broken = false;
    if (parent !== undefined && parent !== null) {
      checkKey(parent, 'hint.parent');
      if (parent !== key) {
        this.#link(key, parent);
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
    for (const s of this.#stranded) {
      if (this.inner.used + cost <= this.inner.capacity) break;
      if (this.#pins.has(s)) continue;
      this.#drop(s);
      evicted.push(s);
    }
    for (const v of this.inner.insert(key, size, hint)) {
      this.#gone(v);
      evicted.push(v);
    }
    if (parent !== undefined && parent !== null && parent !== key) {
      broken = !this.inner.has(parent) || this.#stranded.has(parent);
      if (broken) this.#stranded.add(key);
    }
    const kids = this.#children.get(key);
    if (kids !== undefined && kids.size > 0) {
      this.#hold(key);
      // Orphans waiting for this page are reachable again (unless this page is itself stranded).
      if (!broken) this.#mark(key, false);
    }
    return evicted;
  }

  hint(key: K, hint: PageHint<K>): boolean {
    if (!this.inner.has(key)) return false;
    const parent = hint.parent;
    if (parent !== undefined && parent !== null && parent !== key && !this.#parentOf.has(key)) {
      checkKey(parent, 'hint.parent');
      this.#link(key, parent);
      if (this.inner.has(parent)) this.#hold(parent);
      if (!this.inner.has(parent) || this.#stranded.has(parent)) {
        this.#stranded.add(key);
        this.#mark(key, true);
      }
    }
    this.inner.hint?.(key, hint);
    return true;
  }

  evict(): K | undefined {
    for (const s of this.#stranded) {
      if (this.#pins.has(s)) continue;
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
    for (const s of this.#stranded) {
      if (out.length >= count) return out;
      if (!this.#pins.has(s)) out.push(s);
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
        const p = this.#parentOf.get(v);
        if (p === undefined || !this.#held.has(p) || this.#pins.has(p) || this.#stranded.has(v)) continue;
        let free = true;
        for (const c of this.#children.get(p)!) if (!leaving.has(c)) free = false;
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
    const kids = this.#children.get(key);
    if (this.#pins.delete(key)) this.#pinnedUsed -= this.#cost(key);
    this.inner.remove(key);
    this.#gone(key);
    // Its descendants can never be reached again: they go first from now on.
    if (kids !== undefined && kids.size > 0) this.#mark(key, true);
    return true;
  }

  pin(key: K): number {
    if (this.inner.pin(key) === 0) return 0;
    const n = (this.#pins.get(key) ?? 0) + 1;
    this.#pins.set(key, n);
    if (n === 1) this.#pinnedUsed += this.#cost(key);
    return n;
  }

  unpin(key: K): number {
    const n = this.#pins.get(key);
    if (n === undefined) {
      checkKey(key);
      return 0;
    }
    this.inner.unpin(key);
    if (n > 1) this.#pins.set(key, n - 1);
    else {
      this.#pins.delete(key);
      this.#pinnedUsed -= this.#cost(key);
    }
    return n - 1;
  }

  pinCount(key: K): number {
    checkKey(key);
    return this.#pins.get(key) ?? 0;
  }

  reset(): void {
    this.inner.reset();
    this.#parentOf.clear();
    this.#children.clear();
    this.#stranded.clear();
    this.#held.clear();
    this.#pins.clear();
    this.#pinnedUsed = 0;
  }

  // ---- internals -----------------------------------------------------------------------------------------------

  #cost(key: K): number {
    return this.inner.unit === 'objects' ? 1 : this.inner.sizeOf(key)!;
  }

  #link(child: K, parent: K): void {
    this.#parentOf.set(child, parent);
    let kids = this.#children.get(parent);
    if (kids === undefined) this.#children.set(parent, (kids = new Set()));
    kids.add(child);
  }

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
    this.#stranded.delete(key);
    const parent = this.#parentOf.get(key);
    if (parent === undefined) return;
    this.#parentOf.delete(key);
    const siblings = this.#children.get(parent)!;
    siblings.delete(key);
    if (siblings.size === 0) {
      this.#children.delete(parent);
      this.#release(parent);
    }
  }

  /** Marks (or clears) the stranding of every resident descendant of `key`. */
  #mark(key: K, stranded: boolean): void {
    const stack = [key];
    while (stack.length) {
      const kids = this.#children.get(stack.pop()!);
      if (kids === undefined) continue;
      for (const c of kids) {
        if (stranded ? this.#stranded.has(c) : !this.#stranded.has(c)) continue;
        if (stranded) this.#stranded.add(c);
        else this.#stranded.delete(c);
        stack.push(c);
      }
    }
  }
}
