/**
 * LIRS: Low Inter-reference Recency Set.
 *
 * Jiang and Zhang, "LIRS: An efficient low inter-reference recency set replacement policy to improve buffer cache
 * performance", SIGMETRICS'02. Objects are LIR (low inter-reference recency: seen twice within the recency of the
 * LIR set) or HIR; most of the cache holds LIR objects, a small part (`hirRatio`, default 1%, the paper's and
 * libCacheSim's choice) holds resident HIR objects, and HIR objects evicted while still in the recency stack stay
 * there as non-resident entries (ghosts), so a quick return promotes them to LIR. Written from the paper:
 *
 * - stack S: LIR objects and recently seen HIR objects (resident or not), most recent on top; its bottom is always
 *   LIR ("stack pruning" removes HIR entries from the bottom: resident ones stay in Q, ghosts are forgotten);
 * - list Q: resident HIR objects; the victim is Q's front (oldest);
 * - hit on LIR: to the top of S, then prune; hit on a resident HIR object that is in S: it becomes LIR, leaves Q,
 *   and the bottom LIR of S becomes HIR at the end of Q (as many as needed to keep the LIR set within its share),
 *   then prune; a resident HIR object not in S goes to the top of S and the end of Q;
 * - miss: while the LIR set has room (warm-up) the object becomes LIR; a miss on a ghost in S becomes LIR (and
 *   demotes bottom LIR objects as above); any other miss becomes resident HIR, on top of S and at the end of Q;
 * - sizes are in units: LIR share = capacity - HIR share, HIR share = max(1, floor(capacity x hirRatio)).
 *
 * The paper leaves S's ghosts unbounded; here they are bounded to `ghostRatio x capacity` units (default 1x),
 * forgetting the oldest ghost first. libCacheSim asserts results for its own LIRS (`LIRS.c`, built from three LRU
 * caches with request-dependent eviction and a separate bound on non-resident entries); this implementation
 * follows the paper and is not claimed to reproduce those counts. When Q holds no unpinned object the victim is the
 * unpinned LIR object nearest the bottom of S. Pinned objects are passed over in place.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { clearList, emptyList, Links, NIL, resizeUint8, type SlotId } from '../internal/list.js';
import { checkNumber } from '../internal/validate.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Options of {@link LirsPolicy}. */
export interface LirsOptions extends PolicyOptions {
  /** Share of the capacity for resident HIR objects, in (0, 1). Default 0.01. */
  hirRatio?: number;
  /** Bound on non-resident (ghost) entries in S, as a share of the capacity, in [0, 8]. Default 1. */
  ghostRatio?: number;
}

const LIR = 1;
const HIR = 2;
const GHOST_ENTRY = 3;

/** LIRS (SIGMETRICS'02). O(1) amortised per request. */
export class LirsPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'lirs';
  /** Capacity of the resident HIR set, in units. */
  readonly hirCapacity: number;
  /** Capacity of the LIR set, in units. */
  readonly lirCapacity: number;
  /** Bound on ghost entries in S, in units. */
  readonly ghostCapacity: number;

  /** S on the shared links. */
  readonly #s = emptyList();
  /** Q (resident HIR) and the ghosts' age order, each on its own links (a slot can be in S and Q at once). */
  readonly #qLinks: Links;
  readonly #q = emptyList();
  readonly #gLinks: Links;
  readonly #g = emptyList();
  #status: Uint8Array;
  #inS: Uint8Array;
  #lirUsed = 0;
  #ghostUsed = 0;
  #ghostHit: K | undefined;

  /** @throws TypeError / RangeError naming a bad option, including a capacity that leaves no LIR share */
  constructor(options: LirsOptions) {
    super(options);
    const hirRatio = checkNumber(options.hirRatio ?? 0.01, 'options.hirRatio', Number.MIN_VALUE, 1);
    const ghostRatio = checkNumber(options.ghostRatio ?? 1, 'options.ghostRatio', 0, 8);
    this.hirCapacity = Math.max(1, Math.floor(this.capacity * hirRatio));
    this.lirCapacity = this.capacity - this.hirCapacity;
    this.ghostCapacity = Math.floor(this.capacity * ghostRatio);
    if (this.lirCapacity < 1) throw new RangeError(`options.capacity: ${this.capacity} ${this.unit} leave no LIR share`);
    this.#qLinks = new Links(this.slotCapacity);
    this.#gLinks = new Links(this.slotCapacity);
    this.#status = new Uint8Array(this.slotCapacity);
    this.#inS = new Uint8Array(this.slotCapacity);
  }

  /** @internal White-box view for tests: S top to bottom with each entry's status, and Q end to front. */
  snapshot(): { s: [K, 'lir' | 'hir' | 'ghost'][]; q: K[]; lirUsed: number } {
    const names = ['', 'lir', 'hir', 'ghost'] as const;
    const s: [K, 'lir' | 'hir' | 'ghost'][] = [];
    for (let x = this.#s.head; x !== NIL; x = this.links.older(x)) {
      s.push([this.keyAt(x), names[this.#status[x]!] as 'lir' | 'hir' | 'ghost']);
    }
    const q: K[] = [];
    for (let x = this.#q.head; x !== NIL; x = this.#qLinks.older(x)) q.push(this.keyAt(x));
    return { s, q, lirUsed: this.#lirUsed };
  }

  protected override onHit(slot: SlotId): void {
    this.#ghostHit = undefined;
    if (this.#status[slot] === LIR) {
      const wasBottom = this.#s.tail === slot;
      this.links.moveToHead(this.#s, slot);
      if (wasBottom) this.#prune();
      return;
    }
    if (this.#inS[slot] === 1) {
      this.links.moveToHead(this.#s, slot);
      this.#qLinks.unlink(this.#q, slot);
      this.#status[slot] = LIR;
      this.#lirUsed += this.costOf(slot);
      this.#demoteOverflow();
      this.#prune();
    } else {
      this.#pushS(slot);
      this.#qLinks.moveToHead(this.#q, slot);
    }
  }

  protected override onMiss(key: K, ghost: SlotId | undefined): void {
    this.#ghostHit = undefined;
    if (ghost !== undefined) {
      this.#forget(ghost);
      this.#ghostHit = key;
    }
  }

  protected override beforeInsert(key: K): void {
    if (this.#ghostHit === key) return;
    this.#ghostHit = undefined;
    const ghost = this.ghostSlot(key);
    if (ghost !== undefined) {
      this.#forget(ghost);
      this.#ghostHit = key;
    }
  }

  protected override place(slot: SlotId): void {
    const cost = this.costOf(slot);
    const fromGhost = this.#ghostHit === this.keyAt(slot);
    this.#ghostHit = undefined;
    this.#pushS(slot);
    if (fromGhost || this.#lirUsed + cost <= this.lirCapacity) {
      this.#status[slot] = LIR;
      this.#lirUsed += cost;
      if (fromGhost) {
        this.#demoteOverflow();
        this.#prune();
      }
    } else {
      this.#status[slot] = HIR;
      this.#qLinks.pushHead(this.#q, slot);
    }
  }

  protected override evictOne(): K {
    let slot = this.#q.tail;
    while (slot !== NIL && this.isPinned(slot)) slot = this.#qLinks.newer(slot);
    if (slot !== NIL) return this.#evictHir(slot);
    slot = this.#s.tail;
    while (this.#status[slot] !== LIR || this.isPinned(slot)) slot = this.links.newer(slot);
    const wasBottom = this.#s.tail === slot;
    this.#leaveS(slot);
    this.#lirUsed -= this.costOf(slot);
    const key = this.retire(slot, false);
    if (wasBottom) this.#prune();
    return key;
  }

  /**
   * Evicts `key` as LIRS evicts: a resident HIR object still in S stays there as a non-resident entry (a quick
   * return makes it LIR); an LIR object leaves S (then S is pruned if it was its bottom), as when Q is empty.
   */
  evictKey(key: K): boolean {
    const slot = this.evictableSlot(key);
    if (slot === undefined) return false;
    if (this.#status[slot] === HIR) {
      this.#evictHir(slot);
      return true;
    }
    const wasBottom = this.#s.tail === slot;
    this.#leaveS(slot);
    this.#lirUsed -= this.costOf(slot);
    this.retire(slot, false);
    if (wasBottom) this.#prune();
    return true;
  }

  protected override collectVictims(limit: number, out: K[]): void {
    // Evicting Q's front never reorders the rest; once Q has no unpinned object, LIR objects go bottom-up.
    for (let s = this.#q.tail; s !== NIL && out.length < limit; s = this.#qLinks.newer(s)) {
      if (!this.isPinned(s)) out.push(this.keyAt(s));
    }
    for (let s = this.#s.tail; s !== NIL && out.length < limit; s = this.links.newer(s)) {
      if (this.#status[s] === LIR && !this.isPinned(s)) out.push(this.keyAt(s));
    }
  }

  protected override onRemove(slot: SlotId): void {
    if (this.#status[slot] === LIR) {
      const wasBottom = this.#s.tail === slot;
      this.#leaveS(slot);
      this.#lirUsed -= this.costOf(slot);
      if (wasBottom) this.#prune();
      return;
    }
    this.#qLinks.unlink(this.#q, slot);
    if (this.#inS[slot] === 1) this.#leaveS(slot);
  }

  protected override onForgetGhost(slot: SlotId): void {
    this.#leaveS(slot);
    this.#gLinks.unlink(this.#g, slot);
    this.#ghostUsed -= this.costOf(slot);
  }

  protected override onGrow(slots: number): void {
    this.#qLinks.grow(slots);
    this.#gLinks.grow(slots);
    this.#status = resizeUint8(this.#status, slots);
    this.#inS = resizeUint8(this.#inS, slots);
  }

  protected override onReset(): void {
    clearList(this.#s);
    clearList(this.#q);
    clearList(this.#g);
    this.#qLinks.next.fill(NIL);
    this.#qLinks.prev.fill(NIL);
    this.#gLinks.next.fill(NIL);
    this.#gLinks.prev.fill(NIL);
    this.#status.fill(0);
    this.#inS.fill(0);
    this.#lirUsed = 0;
    this.#ghostUsed = 0;
    this.#ghostHit = undefined;
  }

  #pushS(slot: SlotId): void {
    if (this.#inS[slot] === 1) this.links.moveToHead(this.#s, slot);
    else {
      this.links.pushHead(this.#s, slot);
      this.#inS[slot] = 1;
    }
  }

  #leaveS(slot: SlotId): void {
    this.links.unlink(this.#s, slot);
    this.#inS[slot] = 0;
  }

  /** Turns bottom LIR objects into resident HIR objects (end of Q) while the LIR set is over its share. */
  #demoteOverflow(): void {
    while (this.#lirUsed > this.lirCapacity) {
      this.#prune();
      const bottom = this.#s.tail;
      this.#status[bottom] = HIR;
      this.#lirUsed -= this.costOf(bottom);
      this.#qLinks.pushHead(this.#q, bottom);
      this.#leaveS(bottom);
    }
  }

  /** Stack pruning: removes HIR entries from the bottom of S until its bottom is LIR. */
  #prune(): void {
    for (let slot = this.#s.tail; slot !== NIL && this.#status[slot] !== LIR; slot = this.#s.tail) {
      if (this.#status[slot] === GHOST_ENTRY) this.#forget(slot);
      else this.#leaveS(slot);
    }
  }

  /** Evicts a resident HIR object; one still in S stays there as a ghost. */
  #evictHir(slot: SlotId): K {
    const cost = this.costOf(slot);
    this.#qLinks.unlink(this.#q, slot);
    if (this.#inS[slot] === 0 || cost > this.ghostCapacity) {
      if (this.#inS[slot] === 1) this.#leaveS(slot);
      return this.retire(slot, false);
    }
    while (this.#ghostUsed + cost > this.ghostCapacity) this.#forget(this.#g.tail);
    const key = this.retire(slot, true);
    this.#status[slot] = GHOST_ENTRY;
    this.#gLinks.pushHead(this.#g, slot);
    this.#ghostUsed += cost;
    return key;
  }

  #forget(ghost: SlotId): void {
    this.onForgetGhost(ghost);
    this.dropGhost(ghost);
  }
}
