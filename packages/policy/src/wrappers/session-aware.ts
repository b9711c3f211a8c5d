/**
 * Session-aware retention: soft retention hints ({@link Retention}) order victims over any policy, without ever
 * refusing a store or holding a page the way a pin does.
 *
 * An agent knows things a cache cannot see: a session waiting on a tool call comes back in seconds, a finished one
 * never. Pages sit in one of three bands, and victims come from the first band that has an unpinned page:
 * 1. finished: pages whose session said it finished, in the order they were marked;
 * 2. the inner policy: pages with no hint, and pages whose session is overdue (see `overdueFactor`), in the inner
 *    policy's own order;
 * 3. expected back: pages with a `returnAt` still ahead, the furthest return first (Belady's rule at session
 *    granularity: the page needed last goes first).
 * A hit on a finished or expected page brings it back into the inner policy (the session returned, or another
 * session uses the page); a later hint replaces an earlier one, except that a page expected back keeps the soonest
 * return still ahead (a page shared by sessions is needed by the first to return). Without hints the wrapper decides exactly as its
 * inner policy. When pages wait in bands 1 or 3, room for an insert is made by this wrapper's own victims (the
 * inner policy's pressure order) rather than inside the inner insert.
 *
 * Compose with prefix-aware eviction as `prefix-aware:session-aware:<policy>` (prefix-aware outside): parking a
 * page takes it out of the inner policy, which a chain-aware inner policy would read as a removal.
 */
import { checkInteger, checkKey, checkNumber, checkOptions, describe } from '../internal/validate.js';
import type { CapacityUnit, EvictionPolicy, PageHint, PolicyKey, Retention } from '../types.js';
import { LazyHeap } from './heap.js';
import { evictFrom } from './evict-from.js';

/** Options of {@link SessionAwarePolicy}. */
export interface SessionAwareOptions {
  /**
   * A page expected back at `returnAt` (hinted at `now`) counts as overdue, and rejoins the inner policy's order,
   * once the clock passes `returnAt + overdueFactor * (returnAt - now)`: with 1, after twice the expected wait.
   * A number >= 0. Default 1.
   */
  overdueFactor?: number;
}

interface Parked {
  readonly size: number;
  readonly returnAt: number;
  readonly version: number;
}

/** Soft retention bands over an inner policy. */
export class SessionAwarePolicy<K extends PolicyKey = PolicyKey> implements EvictionPolicy<K> {
  readonly name: string;
  /** The policy that orders pages with no live hint. */
  readonly inner: EvictionPolicy<K>;
  readonly #overdueFactor: number;
  /** Band 3: pages expected back. */
  readonly #parked = new Map<K, Parked>();
  /** Band 1: pages of finished sessions, with their sizes, in marking order. */
  readonly #finished = new Map<K, number>();
  /** Pin counts of pages in bands 1 and 3 (pages in the inner policy are pinned there). */
  readonly #outPins = new Map<K, number>();
  #outUsed = 0;
  #outBytes = 0;
  #outPinnedUsed = 0;
  /**
   * Parked pages by -returnAt (the furthest return on top; among equal ones the last hinted, so a session's chain
   * leaves from its tail), and by overdue deadline.
   */
  readonly #farthest = new LazyHeap<K>(true);
  readonly #due = new LazyHeap<K>();
  #version = 0;
  /** The latest `now` any hint carried: the wrapper's notion of time. */
  #clock = -Infinity;

  /**
   * @param inner the policy that orders unhinted pages (fresh: the wrapper must see every call)
   * @throws TypeError / RangeError naming a bad option
   */
  constructor(inner: EvictionPolicy<K>, options: SessionAwareOptions = {}) {
    if (typeof inner !== 'object' || inner === null || typeof inner.insert !== 'function') {
      throw new TypeError(`inner must be an EvictionPolicy, got ${describe(inner)}`);
    }
    checkOptions(options);
    this.inner = inner;
    this.name = `session-aware:${inner.name}`;
    this.#overdueFactor = checkNumber(options.overdueFactor ?? 1, 'options.overdueFactor', 0, Number.MAX_VALUE);
  }

  get capacity(): number {
    return this.inner.capacity;
  }
  get unit(): CapacityUnit {
    return this.inner.unit;
  }
  get used(): number {
    return this.inner.used + this.#outUsed;
  }
  get usedBytes(): number {
    return this.inner.usedBytes + this.#outBytes;
  }
  get count(): number {
    return this.inner.count + this.#parked.size + this.#finished.size;
  }
  get pinnedCount(): number {
    return this.inner.pinnedCount + this.#outPins.size;
  }
  get pinnedUsed(): number {
    return this.inner.pinnedUsed + this.#outPinnedUsed;
  }

  /** Where a resident page sits: `'finished'`, `'expected'`, `'inner'`, or `undefined` when absent. */
  bandOf(key: K): 'finished' | 'expected' | 'inner' | undefined {
    if (this.#finished.has(key)) return 'finished';
    if (this.#parked.has(key)) return 'expected';
    return this.inner.has(key) ? 'inner' : undefined;
  }

  has(key: K): boolean {
    return this.inner.has(key) || this.#parked.has(key) || this.#finished.has(key);
  }

  sizeOf(key: K): number | undefined {
    return this.#parked.get(key)?.size ?? this.#finished.get(key) ?? this.inner.sizeOf(key);
  }

  *keys(): IterableIterator<K> {
    yield* this.inner.keys();
    yield* this.#parked.keys();
    yield* this.#finished.keys();
  }

  access(key: K): boolean {
    if (this.#parked.has(key) || this.#finished.has(key)) {
      this.#toInner(key);
      return true;
    }
    return this.inner.access(key);
  }

  canAdmit(key: K, size: number): boolean {
    if (this.has(key)) return false;
    if (!this.inner.canAdmit(key, size)) return false;
    return this.#cost(size) <= this.capacity - this.pinnedUsed;
  }

  insert(key: K, size: number, hint?: PageHint<K>): K[] {
    if (this.has(key)) throw new RangeError(`key ${describe(key)} is already resident`);
    if (!this.canAdmit(key, size)) {
      throw new RangeError(`size: an object of ${size} bytes cannot be admitted now (check canAdmit first)`);
    }
    const retention = hint?.retention;
    this.#advance(retention);
    this.#expire();
    const band = this.#bandFor(retention);
    const cost = this.#cost(size);
    const evicted: K[] = [];
    if (band !== 'inner' || this.#outUsed > 0) {
      while (this.used + cost > this.capacity) {
        const v = this.#victim();
        if (v === undefined) break;
        evicted.push(v);
      }
    }
    if (band === 'inner') {
      for (const v of this.inner.insert(key, size, hint)) evicted.push(v);
    } else {
      this.#outUsed += cost;
      this.#outBytes += size;
      if (band === 'finished') this.#finished.set(key, size);
      else this.#park(key, size, retention as { returnAt: number; now: number });
    }
    return evicted;
  }

  hint(key: K, hint: PageHint<K>): boolean {
    checkKey(key);
    const retention = hint.retention;
    this.#advance(retention);
    this.#expire();
    if (!this.has(key)) return false;
    if (retention === undefined) {
      if (this.inner.has(key)) this.inner.hint?.(key, hint);
      return true;
    }
    const band = this.#bandFor(retention);
    if (band === 'inner') {
      if (!this.inner.has(key)) this.#toInner(key);
      return true;
    }
    // A page several sessions use (a shared system prompt) is due back at the soonest return any of them announced
    // that is still ahead; once that has passed, the newest hint replaces it.
    let r = retention as { returnAt: number; now: number };
    const current = this.#parked.get(key);
    if (band === 'expected' && current !== undefined && current.returnAt >= this.#clock && current.returnAt < r.returnAt) {
      r = { returnAt: current.returnAt, now: r.now };
    }
    const pins = this.#leaveBand(key);
    this.#outUsed += this.#cost(pins.size);
    this.#outBytes += pins.size;
    if (band === 'finished') this.#finished.set(key, pins.size);
    else this.#park(key, pins.size, r);
    if (pins.count > 0) {
      this.#outPins.set(key, pins.count);
      this.#outPinnedUsed += this.#cost(pins.size);
    }
    return true;
  }

  evict(): K | undefined {
    this.#expire();
    return this.#victim();
  }

  peekVictims(count: number): K[] {
    checkInteger(count, 'count', 0);
    const out: K[] = [];
    for (const k of this.#finished.keys()) {
      if (out.length >= count) return out;
      if (!this.#outPins.has(k)) out.push(k);
    }
    if (out.length < count) out.push(...this.inner.peekVictims(count - out.length));
    if (out.length < count) {
      const parked = [...this.#parked].filter(([k]) => !this.#outPins.has(k)).sort((a, b) => b[1].returnAt - a[1].returnAt || b[1].version - a[1].version);
      for (const [k] of parked) {
        if (out.length >= count) break;
        out.push(k);
      }
    }
    return out;
  }

  /**
   * Evicts `key` as a victim: a page in the inner policy through its `evictKey` (its ghosts remember it); a page
   * expected back or finished as `remove` does (those bands keep no history). `false` when absent or pinned.
   */
  evictKey(key: K): boolean {
    if (!this.#parked.has(key) && !this.#finished.has(key)) return evictFrom(this.inner, key);
    if (this.#outPins.has(key)) return false;
    return this.remove(key);
  }

  remove(key: K): boolean {
    if (!this.#parked.has(key) && !this.#finished.has(key)) return this.inner.remove(key);
    this.#takeOut(key);
    this.inner.remove(key);
    return true;
  }

  pin(key: K): number {
    if (!this.#parked.has(key) && !this.#finished.has(key)) return this.inner.pin(key);
    const n = this.#outPins.get(key) ?? 0;
    if (n === 0xffff_ffff) throw new RangeError(`key ${describe(key)}: pin count would exceed 2^32 - 1`);
    this.#outPins.set(key, n + 1);
    if (n === 0) this.#outPinnedUsed += this.#cost(this.sizeOf(key)!);
    return n + 1;
  }

  unpin(key: K): number {
    const n = this.#outPins.get(key);
    if (n === undefined) return this.#parked.has(key) || this.#finished.has(key) ? 0 : this.inner.unpin(key);
    if (n > 1) this.#outPins.set(key, n - 1);
    else {
      this.#outPins.delete(key);
      this.#outPinnedUsed -= this.#cost(this.sizeOf(key)!);
    }
    return n - 1;
  }

  pinCount(key: K): number {
    if (this.#parked.has(key) || this.#finished.has(key)) return this.#outPins.get(key) ?? 0;
    return this.inner.pinCount(key);
  }

  reset(): void {
    this.inner.reset();
    this.#parked.clear();
    this.#finished.clear();
    this.#outPins.clear();
    this.#farthest.clear();
    this.#due.clear();
    this.#outUsed = 0;
    this.#outBytes = 0;
    this.#outPinnedUsed = 0;
    this.#clock = -Infinity;
  }

  // ---- internals -----------------------------------------------------------------------------------------------

  #cost(size: number): number {
    return this.inner.unit === 'objects' ? 1 : size;
  }

  #advance(retention: Retention | undefined): void {
    const now = retention?.now;
    if (now === undefined) return;
    checkNumber(now, 'hint.retention.now', -Number.MAX_VALUE, Number.MAX_VALUE);
    if (now > this.#clock) this.#clock = now;
  }

  #bandFor(retention: Retention | undefined): 'finished' | 'expected' | 'inner' {
    if (retention === undefined) return 'inner';
    if ('finished' in retention) {
      if (retention.finished !== true) throw new TypeError(`hint.retention.finished must be true, got ${describe(retention.finished)}`);
      return 'finished';
    }
    checkNumber(retention.returnAt, 'hint.retention.returnAt', -Number.MAX_VALUE, Number.MAX_VALUE);
    return this.#overdueAt(retention) > this.#clock ? 'expected' : 'inner';
  }

  #overdueAt(r: { returnAt: number; now: number }): number {
    return r.returnAt + this.#overdueFactor * Math.max(0, r.returnAt - r.now);
  }

  #park(key: K, size: number, r: { returnAt: number; now: number }, due = this.#overdueAt(r)): void {
    const version = ++this.#version;
    this.#parked.set(key, { size, returnAt: r.returnAt, version });
    this.#farthest.push(-r.returnAt, key, version);
    this.#due.push(due, key, version);
    // Re-hinted pages leave stale entries behind: rebuild once they outnumber the live ones.
    if (this.#farthest.size > 2 * this.#parked.size + 1024) this.#rebuild();
  }

  #rebuild(): void {
    const due = new Map<K, number>();
    for (const e of this.#due.entries()) if (this.#parked.get(e.key)?.version === e.version) due.set(e.key, e.priority);
    this.#farthest.clear();
    this.#due.clear();
    for (const [k, p] of this.#parked) {
      this.#farthest.push(-p.returnAt, k, p.version);
      this.#due.push(due.get(k)!, k, p.version);
    }
  }

  /** Expected pages now overdue rejoin the inner policy's order. */
  #expire(): void {
    for (let e = this.#due.peek(); e !== undefined && e.priority <= this.#clock; e = this.#due.peek()) {
      this.#due.pop();
      if (this.#parked.get(e.key)?.version === e.version) this.#toInner(e.key);
    }
  }

  /** The next victim: a finished page, else the inner policy's, else the expected page due back last. */
  #victim(): K | undefined {
    for (const k of this.#finished.keys()) {
      if (this.#outPins.has(k)) continue;
      this.#takeOut(k);
      return k;
    }
    const v = this.inner.evict();
    if (v !== undefined) return v;
    const skipped: { priority: number; key: K; version: number }[] = [];
    let found: K | undefined;
    for (let e = this.#farthest.pop(); e !== undefined; e = this.#farthest.pop()) {
      if (this.#parked.get(e.key)?.version !== e.version) continue;
      if (this.#outPins.has(e.key)) {
        skipped.push(e);
        continue;
      }
      found = e.key;
      break;
    }
    for (const e of skipped) this.#farthest.push(e.priority, e.key, e.version);
    if (found !== undefined) this.#takeOut(found);
    return found;
  }

  /** Takes a page out of band 1 or 3 (accounting and pins included). */
  #takeOut(key: K): number {
    const size = this.#parked.get(key)?.size ?? this.#finished.get(key)!;
    this.#parked.delete(key);
    this.#finished.delete(key);
    this.#outUsed -= this.#cost(size);
    this.#outBytes -= size;
    if (this.#outPins.delete(key)) this.#outPinnedUsed -= this.#cost(size);
    return size;
  }

  /** Takes a page out of whichever place holds it, answering its size and pin count (for a move between bands). */
  #leaveBand(key: K): { size: number; count: number } {
    if (this.#parked.has(key) || this.#finished.has(key)) {
      const count = this.#outPins.get(key) ?? 0;
      return { size: this.#takeOut(key), count };
    }
    const size = this.inner.sizeOf(key)!;
    const count = this.inner.pinCount(key);
    this.inner.remove(key);
    return { size, count };
  }

  /** Moves a page from band 1 or 3 into the inner policy (as a fresh insert), keeping its pins. */
  #toInner(key: K): void {
    const pins = this.#outPins.get(key) ?? 0;
    const size = this.#takeOut(key);
    if (!this.inner.canAdmit(key, size)) {
      // The inner policy refuses it outright (an S3-FIFO object past its small queue): keep it, due back now.
      this.#outUsed += this.#cost(size);
      this.#outBytes += size;
      this.#park(key, size, { returnAt: this.#clock, now: this.#clock }, Infinity);
      if (pins > 0) {
        this.#outPins.set(key, pins);
        this.#outPinnedUsed += this.#cost(size);
      }
      return;
    }
    // The total is unchanged, so the inner policy has room: nothing is evicted here.
    const victims = this.inner.insert(key, size);
    if (victims.length) throw new Error(`${this.name}: moving ${describe(key)} back evicted ${victims.length} pages`);
    for (let i = 0; i < pins; i++) this.inner.pin(key);
  }
}
