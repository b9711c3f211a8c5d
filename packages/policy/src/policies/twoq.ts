/**
 * 2Q: the full version of Johnson and Shasha, "2Q: A low overhead high performance buffer management replacement
 * algorithm", VLDB'94.
 *
 * Three queues: A1in, a FIFO of objects seen once recently; A1out, a FIFO of ghost keys evicted from A1in; Am, an
 * LRU of objects seen again after leaving A1in. Semantics and defaults match libCacheSim `TwoQ.c`
 * (`Ain-size-ratio=0.25,Aout-size-ratio=0.5`, the paper's recommended Kin = 25%, Kout = 50%):
 *
 * - sizes in units: A1in = floor(capacity x `inRatio`), Am = capacity - A1in, A1out = floor(capacity x `outRatio`)
 *   (A1out holds keys and sizes only);
 * - a hit in A1in changes nothing (correlated references); a hit in Am moves the object to Am's head;
 * - a miss whose key is in A1out removes the ghost and inserts the object at the head of Am, first evicting Am's
 *   LRU while Am would exceed its share (libCacheSim inserts it through Am's own LRU); any other miss inserts at
 *   the head of A1in;
 * - making room: when A1in holds more than its share its FIFO tail moves to A1out (dropping A1out's oldest ghosts
 *   until it fits; an object larger than A1out is not remembered), otherwise Am's LRU is evicted;
 * - an object larger than A1in is refused (libCacheSim `TwoQ_can_insert`).
 *
 * Pinned objects are passed over in place; when the queue chosen holds only pinned objects the other gives the
 * victim. Because a ghost hit evicts for Am's share as well, `insert` may evict more than `peekVictims` announced.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { clearList, emptyList, type List, NIL, resizeUint8, type SlotId } from '../internal/list.js';
import { checkNumber } from '../internal/validate.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Options of {@link TwoQPolicy}. */
export interface TwoQOptions extends PolicyOptions {
  /** Share of the capacity for A1in, in (0, 1). Default 0.25 (Kin). */
  inRatio?: number;
  /** Size of the A1out ghost FIFO as a share of the capacity, in [0, 1]. Default 0.5 (Kout). */
  outRatio?: number;
}

const A1IN = 1;
const AM = 2;
const A1OUT = 3;

/** Full 2Q: A1in FIFO + A1out ghost FIFO + Am LRU. O(1) per request. */
export class TwoQPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = '2q';
  /** Capacity of A1in, in units. */
  readonly inCapacity: number;
  /** Capacity of Am, in units. */
  readonly mainCapacity: number;
  /** Capacity of the A1out ghost queue, in units. */
  readonly outCapacity: number;

  readonly #in = emptyList();
  readonly #main = emptyList();
  readonly #out = emptyList();
  #queueOf: Uint8Array;
  #inUsed = 0;
  #mainUsed = 0;
  #outUsed = 0;
  /** The key of the current request when it was found in A1out. */
  #ghostHit: K | undefined;

  /** @throws TypeError / RangeError naming a bad option, including a capacity that leaves A1in empty */
  constructor(options: TwoQOptions) {
    super(options);
    const inRatio = checkNumber(options.inRatio ?? 0.25, 'options.inRatio', Number.MIN_VALUE, 1);
    const outRatio = checkNumber(options.outRatio ?? 0.5, 'options.outRatio', 0, 1);
    this.inCapacity = Math.floor(this.capacity * inRatio);
    this.mainCapacity = this.capacity - this.inCapacity;
    this.outCapacity = Math.floor(this.capacity * outRatio);
    if (this.inCapacity < 1) throw new RangeError(`options.capacity: A1in gets 0 ${this.unit} (capacity x inRatio)`);
    if (this.mainCapacity < 1) throw new RangeError('options.inRatio: leaves no room for Am');
    this.#queueOf = new Uint8Array(this.slotCapacity);
  }

  /** @internal White-box view for tests: each queue head (newest) to tail. */
  snapshot(): { in: K[]; main: K[]; out: K[] } {
    return { in: this.listKeys(this.#in), main: this.listKeys(this.#main), out: this.listKeys(this.#out) };
  }

  override insert(key: K, size: number): K[] {
    // A ghost hit enters Am through Am's own LRU: after making room in the whole cache, Am's LRU leaves while Am
    // would exceed its share (libCacheSim TwoQ_insert -> Am->get).
    this.beforeInsert(key);
    if (this.#ghostHit !== key || this.has(key) || !this.canAdmit(key, size)) return super.insert(key, size);
    const cost = this.byObjects ? 1 : size;
    const victims: K[] = [];
    while (this.used + cost > this.capacity) victims.push(this.evict()!);
    while (this.#mainUsed + cost > this.mainCapacity) {
      const slot = this.oldestUnpinned(this.#main);
      if (slot === NIL) break;
      victims.push(this.#evictMain(slot));
    }
    for (const victim of super.insert(key, size)) victims.push(victim);
    return victims;
  }

  protected override admits(_key: K, cost: number): boolean {
    return cost <= this.inCapacity;
  }

  protected override onHit(slot: SlotId): void {
    this.#ghostHit = undefined;
    if (this.#queueOf[slot] === AM) this.links.moveToHead(this.#main, slot);
  }

  protected override onMiss(key: K, ghost: SlotId | undefined): void {
    this.#ghostHit = undefined;
    if (ghost !== undefined) {
      this.#forget(ghost);
      this.#ghostHit = key;
    }
  }

  // An insert without a preceding access of the same key still counts a ghost hit.
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
    if (this.#ghostHit === this.keyAt(slot)) {
      this.#queueOf[slot] = AM;
      this.links.pushHead(this.#main, slot);
      this.#mainUsed += cost;
    } else {
      this.#queueOf[slot] = A1IN;
      this.links.pushHead(this.#in, slot);
      this.#inUsed += cost;
    }
    this.#ghostHit = undefined;
  }

  protected override evictOne(): K {
    const fromIn = this.#inUsed > this.inCapacity;
    let slot = this.oldestUnpinned(fromIn ? this.#in : this.#main);
    if (slot !== NIL) return fromIn ? this.#evictIn(slot) : this.#evictMain(slot);
    slot = this.oldestUnpinned(fromIn ? this.#main : this.#in);
    return fromIn ? this.#evictMain(slot) : this.#evictIn(slot);
  }

  /** Evicts `key` as the queues would: from A1in into the A1out ghost queue, from Am without a ghost entry. */
  evictKey(key: K): boolean {
    const slot = this.evictableSlot(key);
    if (slot === undefined) return false;
    if (this.#queueOf[slot] === A1IN) this.#evictIn(slot);
    else this.#evictMain(slot);
    return true;
  }

  protected override collectVictims(limit: number, out: K[]): void {
    // Replays evictOne on cursors: each victim leaves from the tail end of A1in or Am; only A1in's usage decides.
    let inUsed = this.#inUsed;
    let inCursor = this.#in.tail;
    let mainCursor = this.#main.tail;
    const next = (cursor: SlotId): SlotId => {
      while (cursor !== NIL && this.isPinned(cursor)) cursor = this.links.newer(cursor);
      return cursor;
    };
    while (out.length < limit) {
      inCursor = next(inCursor);
      mainCursor = next(mainCursor);
      const fromIn = inUsed > this.inCapacity ? inCursor !== NIL : mainCursor === NIL;
      const slot = fromIn ? inCursor : mainCursor;
      out.push(this.keyAt(slot));
      if (fromIn) {
        inUsed -= this.costOf(slot);
        inCursor = this.links.newer(slot);
      } else mainCursor = this.links.newer(slot);
    }
  }

  protected override onRemove(slot: SlotId): void {
    const cost = this.costOf(slot);
    if (this.#queueOf[slot] === A1IN) {
      this.links.unlink(this.#in, slot);
      this.#inUsed -= cost;
    } else {
      this.links.unlink(this.#main, slot);
      this.#mainUsed -= cost;
    }
  }

  protected override onForgetGhost(slot: SlotId): void {
    this.links.unlink(this.#out, slot);
    this.#outUsed -= this.costOf(slot);
  }

  protected override onGrow(slots: number): void {
    this.#queueOf = resizeUint8(this.#queueOf, slots);
  }

  protected override onReset(): void {
    clearList(this.#in);
    clearList(this.#main);
    clearList(this.#out);
    this.#queueOf.fill(0);
    this.#inUsed = 0;
    this.#mainUsed = 0;
    this.#outUsed = 0;
    this.#ghostHit = undefined;
  }

  #evictMain(slot: SlotId): K {
    this.links.unlink(this.#main, slot);
    this.#mainUsed -= this.costOf(slot);
    return this.retire(slot, false);
  }

  /** Evicts from A1in into the A1out ghost queue. */
  #evictIn(slot: SlotId): K {
    const cost = this.costOf(slot);
    this.links.unlink(this.#in, slot);
    this.#inUsed -= cost;
    if (cost > this.outCapacity) return this.retire(slot, false);
    while (this.#outUsed + cost > this.outCapacity) this.#forget(this.#out.tail);
    const key = this.retire(slot, true);
    this.#queueOf[slot] = A1OUT;
    this.links.pushHead(this.#out, slot);
    this.#outUsed += cost;
    return key;
  }

  #forget(ghost: SlotId): void {
    this.onForgetGhost(ghost);
    this.dropGhost(ghost);
  }
}
