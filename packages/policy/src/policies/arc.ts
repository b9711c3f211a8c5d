/**
 * ARC: Adaptive Replacement Cache.
 *
 * Megiddo, Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST'03. Two resident LRU lists, T1
 * (seen once recently) and T2 (seen at least twice), and two ghost LRU lists of evicted keys, B1 and B2; the
 * target size p of T1 adapts on ghost hits. Semantics match libCacheSim `ARC.c`, which generalises the paper to
 * sizes (all list sizes and p in units) and evicts only when the incoming object does not fit:
 *
 * - Hit in T1 or T2 (case I): move to the head of T2.
 * - Miss that hits B1 (case II): p = min(p + max(|B2| / |B1|, 1), capacity), computed before the ghost leaves B1;
 *   the object is inserted at the head of T2. Hit in B2 (case III): p = max(p - max(|B1| / |B2|, 1), 0); also
 *   into T2. p is a real number (libCacheSim and the paper's reference code use floating point), starting at 0.
 * - Every eviction made room for a ghost hit is REPLACE: take the LRU of T1 into B1 when T1 is non-empty and
 *   (|T1| > p, or |T1| = p and the hit was in B2), or when T2 is empty; otherwise the LRU of T2 into B2.
 * - Every eviction for any other miss (case IV), with `c` the capacity and `s` the incoming cost:
 *   if |T1| + |B1| + s > c: when B1 is non-empty drop the LRU of B1 and REPLACE, else evict the LRU of T1
 *   without a ghost; otherwise, when |T1| + |B1| + |T2| + |B2| >= 2c and B2 is non-empty, drop the LRU of B2,
 *   then REPLACE. New objects enter at the head of T1.
 * - `evict()` and `peekVictims()` evict as for a miss of cost 0 (pressure, no incoming object) unless the last
 *   `access` was a ghost hit, in which case they REPLACE, as libCacheSim does while that request is in flight.
 *
 * Pinned objects are passed over: "the LRU of T1/T2" is the least recently used unpinned object of that list;
 * when the list chosen holds only pinned objects, the other list gives the victim (into its own ghost list).
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { clearList, emptyList, type List, NIL, resizeUint8, type SlotId } from '../internal/list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

const T1 = 1;
const T2 = 2;
const B1 = 3;
const B2 = 4;

type GhostHit = 0 | typeof B1 | typeof B2;

/** ARC (FAST'03): adaptive balance between recency (T1) and frequency (T2), guided by ghost lists B1 and B2. */
export class ArcPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'arc';

  readonly #t1 = emptyList();
  readonly #t2 = emptyList();
  readonly #b1 = emptyList();
  readonly #b2 = emptyList();
  #t1Used = 0;
  #t2Used = 0;
  #b1Used = 0;
  #b2Used = 0;
  #p = 0;
  #listOf: Uint8Array;
  /** Which ghost list the current request hit, and its key (set by `access` or `insert`, used by `insert`). */
  #ghostHit: GhostHit = 0;
  #ghostHitKey: K | undefined;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
    this.#listOf = new Uint8Array(this.slotCapacity);
  }

  /** The adaptive target size of T1, in units: 0 <= p <= capacity. */
  get p(): number {
    return this.#p;
  }

  /** @internal White-box view for tests: each list head (most recent) to tail, and p. */
  snapshot(): { t1: K[]; t2: K[]; b1: K[]; b2: K[]; p: number } {
    return {
      t1: this.listKeys(this.#t1),
      t2: this.listKeys(this.#t2),
      b1: this.listKeys(this.#b1),
      b2: this.listKeys(this.#b2),
      p: this.#p,
    };
  }

  protected override onHit(slot: SlotId): void {
    this.#clearGhostHit();
    if (this.#listOf[slot] === T1) {
      const cost = this.costOf(slot);
      this.links.unlink(this.#t1, slot);
      this.#t1Used -= cost;
      this.links.pushHead(this.#t2, slot);
      this.#t2Used += cost;
      this.#listOf[slot] = T2;
    } else {
      this.links.moveToHead(this.#t2, slot);
    }
  }

  protected override onMiss(key: K, ghost: SlotId | undefined): void {
    this.#clearGhostHit();
    if (ghost !== undefined) this.#adapt(key, ghost);
  }

  // An insert without a preceding access of the same key still counts a ghost hit (once).
  protected override beforeInsert(key: K): void {
    if (this.#ghostHitKey === key) return;
    this.#clearGhostHit();
    const ghost = this.ghostSlot(key);
    if (ghost !== undefined) this.#adapt(key, ghost);
  }

  protected override place(slot: SlotId): void {
    const cost = this.costOf(slot);
    if (this.#ghostHit !== 0 && this.#ghostHitKey === this.keyAt(slot)) {
      this.#listOf[slot] = T2;
      this.links.pushHead(this.#t2, slot);
      this.#t2Used += cost;
    } else {
      this.#listOf[slot] = T1;
      this.links.pushHead(this.#t1, slot);
      this.#t1Used += cost;
    }
    this.#clearGhostHit();
  }

  protected override evictOne(incomingCost: number): K {
    if (this.#ghostHit !== 0) return this.#replace();
    const c = this.capacity;
    if (this.#t1Used + this.#b1Used + incomingCost > c) {
      if (this.#b1Used > 0) {
        this.#dropOldestGhost(this.#b1);
        return this.#replace();
      }
      const slot = this.oldestUnpinned(this.#t1);
      if (slot === NIL) return this.#toGhost(this.oldestUnpinned(this.#t2), T2);
      this.links.unlink(this.#t1, slot);
      this.#t1Used -= this.costOf(slot);
      return this.retire(slot, false);
    }
    if (this.#t1Used + this.#b1Used + this.#t2Used + this.#b2Used >= 2 * c && this.#b2Used > 0) {
      this.#dropOldestGhost(this.#b2);
    }
    return this.#replace();
  }

  /**
   * Evicts `key` as REPLACE would had it chosen it: from T1 into B1, from T2 into B2, after trimming the ghost
   * lists exactly as `evict()` does (case IV with no incoming object, nothing trimmed during a ghost hit), so the
   * directory stays within 2c. A T1 object leaves without a ghost where case IV would evict T1's LRU without one.
   */
  evictKey(key: K): boolean {
    const slot = this.evictableSlot(key);
    if (slot === undefined) return false;
    const c = this.capacity;
    if (this.#ghostHit === 0) {
      if (this.#t1Used + this.#b1Used > c) {
        if (this.#b1Used > 0) this.#dropOldestGhost(this.#b1);
        else if (this.#listOf[slot] === T1) {
          this.links.unlink(this.#t1, slot);
          this.#t1Used -= this.costOf(slot);
          this.retire(slot, false);
          return true;
        }
      } else if (this.#t1Used + this.#b1Used + this.#t2Used + this.#b2Used >= 2 * c && this.#b2Used > 0) {
        this.#dropOldestGhost(this.#b2);
      }
    }
    this.#toGhost(slot, this.#listOf[slot] === T1 ? T1 : T2);
    return true;
  }

  protected override collectVictims(limit: number, out: K[]): void {
    // Replays evictOne(0) on counters and cursors: T1 and T2 only lose objects (from their LRU ends), and the
    // ghost lists lose their oldest entries and gain the victims in order.
    let t1 = this.#t1Used;
    let t2 = this.#t2Used;
    let b1 = this.#b1Used;
    let b2 = this.#b2Used;
    let t1Cursor = this.#t1.tail;
    let t2Cursor = this.#t2.tail;
    let b1Cursor = this.#b1.tail;
    let b2Cursor = this.#b2.tail;
    const b1Added: SlotId[] = [];
    const b2Added: SlotId[] = [];
    let b1Next = 0;
    let b2Next = 0;
    const c = this.capacity;
    const lru = (cursor: SlotId): SlotId => {
      while (cursor !== NIL && this.isPinned(cursor)) cursor = this.links.newer(cursor);
      return cursor;
    };
    // Takes the LRU unpinned object of the preferred list, else of the other; only T1 victims may skip the ghost.
    const take = (preferT1: boolean, toGhost: boolean): void => {
      t1Cursor = lru(t1Cursor);
      t2Cursor = lru(t2Cursor);
      const fromT1 = preferT1 ? t1Cursor !== NIL : t2Cursor === NIL;
      const slot = fromT1 ? t1Cursor : t2Cursor;
      const cost = this.costOf(slot);
      out.push(this.keyAt(slot));
      if (fromT1) {
        t1Cursor = this.links.newer(slot);
        t1 -= cost;
        if (toGhost) {
          b1 += cost;
          b1Added.push(slot);
        }
      } else {
        t2Cursor = this.links.newer(slot);
        t2 -= cost;
        b2 += cost;
        b2Added.push(slot);
      }
    };
    const replace = (): void => {
      const fromT1 = (t1 > 0 && (t1 > this.#p || (t1 === this.#p && this.#ghostHit === B2))) || t2 === 0;
      take(fromT1, true);
    };
    const dropB1 = (): void => {
      let slot: SlotId;
      if (b1Cursor !== NIL) {
        slot = b1Cursor;
        b1Cursor = this.links.newer(slot);
      } else slot = b1Added[b1Next++]!;
      b1 -= this.costOf(slot);
    };
    const dropB2 = (): void => {
      let slot: SlotId;
      if (b2Cursor !== NIL) {
        slot = b2Cursor;
        b2Cursor = this.links.newer(slot);
      } else slot = b2Added[b2Next++]!;
      b2 -= this.costOf(slot);
    };
    while (out.length < limit) {
      if (this.#ghostHit !== 0) replace();
      else if (t1 + b1 > c) {
        if (b1 > 0) {
          dropB1();
          replace();
        } else take(true, false);
      } else {
        if (t1 + b1 + t2 + b2 >= 2 * c && b2 > 0) dropB2();
        replace();
      }
    }
  }

  protected override onRemove(slot: SlotId): void {
    const cost = this.costOf(slot);
    if (this.#listOf[slot] === T1) {
      this.links.unlink(this.#t1, slot);
      this.#t1Used -= cost;
    } else {
      this.links.unlink(this.#t2, slot);
      this.#t2Used -= cost;
    }
  }

  protected override onForgetGhost(slot: SlotId): void {
    const cost = this.costOf(slot);
    if (this.#listOf[slot] === B1) {
      this.links.unlink(this.#b1, slot);
      this.#b1Used -= cost;
    } else {
      this.links.unlink(this.#b2, slot);
      this.#b2Used -= cost;
    }
  }

  protected override onGrow(slots: number): void {
    this.#listOf = resizeUint8(this.#listOf, slots);
  }

  protected override onReset(): void {
    for (const list of [this.#t1, this.#t2, this.#b1, this.#b2]) clearList(list);
    this.#t1Used = 0;
    this.#t2Used = 0;
    this.#b1Used = 0;
    this.#b2Used = 0;
    this.#p = 0;
    this.#listOf.fill(0);
    this.#clearGhostHit();
  }

  #clearGhostHit(): void {
    this.#ghostHit = 0;
    this.#ghostHitKey = undefined;
  }

  /** Cases II and III: adapt p and consume the ghost. */
  #adapt(key: K, ghost: SlotId): void {
    if (this.#listOf[ghost] === B1) {
      this.#p = Math.min(this.#p + Math.max(this.#b2Used / this.#b1Used, 1), this.capacity);
      this.#ghostHit = B1;
    } else {
      this.#p = Math.max(this.#p - Math.max(this.#b1Used / this.#b2Used, 1), 0);
      this.#ghostHit = B2;
    }
    this.#ghostHitKey = key;
    this.onForgetGhost(ghost);
    this.dropGhost(ghost);
  }

  /** REPLACE(x, p) of the paper. */
  #replace(): K {
    const t1 = this.#t1Used;
    const fromT1 = (t1 > 0 && (t1 > this.#p || (t1 === this.#p && this.#ghostHit === B2))) || this.#t2Used === 0;
    let slot = this.oldestUnpinned(fromT1 ? this.#t1 : this.#t2);
    if (slot !== NIL) return this.#toGhost(slot, fromT1 ? T1 : T2);
    slot = this.oldestUnpinned(fromT1 ? this.#t2 : this.#t1);
    return this.#toGhost(slot, fromT1 ? T2 : T1);
  }

  /** Evicts a resident slot of T1 (into B1) or T2 (into B2). */
  #toGhost(slot: SlotId, from: typeof T1 | typeof T2): K {
    const cost = this.costOf(slot);
    if (from === T1) {
      this.links.unlink(this.#t1, slot);
      this.#t1Used -= cost;
    } else {
      this.links.unlink(this.#t2, slot);
      this.#t2Used -= cost;
    }
    const key = this.retire(slot, true);
    const ghost = from === T1 ? B1 : B2;
    this.#listOf[slot] = ghost;
    this.links.pushHead(ghost === B1 ? this.#b1 : this.#b2, slot);
    if (ghost === B1) this.#b1Used += cost;
    else this.#b2Used += cost;
    return key;
  }

  #dropOldestGhost(list: List): void {
    const slot = list.tail;
    this.onForgetGhost(slot);
    this.dropGhost(slot);
  }
}
