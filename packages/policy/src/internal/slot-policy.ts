import type { CapacityUnit, EvictionPolicy, PolicyKey, PolicyOptions } from '../types.js';
import { Links, type List, NIL, resizeFloat64, resizeUint32, resizeUint8, type SlotId } from './list.js';
import { checkInteger, checkKey, checkOptions, checkSize, checkUnit, describe } from './validate.js';

/** Slot states. A ghost keeps its key and size (history for ARC and S3-FIFO) but holds no capacity. */
export const FREE = 0;
export const RESIDENT = 1;
export const GHOST = 2;

const MAX_SLOTS = NIL - 1;

/**
 * The machinery every built-in policy shares: the key -> dense slot id map, per-slot typed arrays (size, pin
 * count, state, links) that grow by doubling, a LIFO free-slot stack, accounting, pins and argument checks.
 * A subclass implements only its algorithm, through the protected hooks below. The public methods validate
 * their arguments; the hooks trust theirs.
 */
export abstract class SlotPolicy<K extends PolicyKey> implements EvictionPolicy<K> {
  abstract readonly name: string;
  readonly capacity: number;
  readonly unit: CapacityUnit;
  /** True when every object costs one unit. */
  protected readonly byObjects: boolean;

  protected readonly links: Links;
  /** Object size in bytes, per slot. */
  protected sizes: Float64Array;
  /** Pin count, per slot. */
  protected pins: Uint32Array;
  /** FREE, RESIDENT or GHOST, per slot. */
  protected state: Uint8Array;
  /** Key per slot; undefined for free slots. */
  protected readonly keyOf: (K | undefined)[] = [];
  protected readonly slotOf = new Map<K, SlotId>();

  #slots: number;
  #highWater = 0;
  #free: Uint32Array;
  #freeTop = 0;

  #used = 0;
  #usedBytes = 0;
  #count = 0;
  #pinnedCount = 0;
  #pinnedUsed = 0;

  /** @throws TypeError / RangeError naming the bad option */
  protected constructor(options: PolicyOptions) {
    checkOptions(options);
    this.unit = checkUnit(options.unit, 'options.unit');
    this.capacity = checkInteger(options.capacity, 'options.capacity', 1);
    this.byObjects = this.unit === 'objects';
    // Objects mode knows its peak population up front (ghosts may add some); bytes mode starts small and doubles.
    this.#slots = this.byObjects ? Math.min(this.capacity + 1, 1 << 16) : 64;
    this.links = new Links(this.#slots);
    this.sizes = new Float64Array(this.#slots);
    this.pins = new Uint32Array(this.#slots);
    this.state = new Uint8Array(this.#slots);
    this.#free = new Uint32Array(this.#slots);
    this.keyOf.length = this.#slots;
    this.keyOf.fill(undefined);
  }

  get used(): number {
    return this.#used;
  }

  get usedBytes(): number {
    return this.#usedBytes;
  }

  get count(): number {
    return this.#count;
  }

  get pinnedCount(): number {
    return this.#pinnedCount;
  }

  get pinnedUsed(): number {
    return this.#pinnedUsed;
  }

  has(key: K): boolean {
    checkKey(key);
    const slot = this.slotOf.get(key);
    return slot !== undefined && this.state[slot] === RESIDENT;
  }

  sizeOf(key: K): number | undefined {
    checkKey(key);
    const slot = this.slotOf.get(key);
    return slot !== undefined && this.state[slot] === RESIDENT ? this.sizes[slot] : undefined;
  }

  *keys(): IterableIterator<K> {
    for (const [key, slot] of this.slotOf) if (this.state[slot] === RESIDENT) yield key;
  }

  access(key: K): boolean {
    checkKey(key);
    const slot = this.slotOf.get(key);
    if (slot !== undefined && this.state[slot] === RESIDENT) {
      this.onHit(slot);
      return true;
    }
    this.onMiss(key, slot);
    return false;
  }

  canAdmit(key: K, size: number): boolean {
    checkKey(key);
    checkSize(size);
    return this.#admissible(key, size);
  }

  insert(key: K, size: number): K[] {
    checkKey(key);
    checkSize(size);
    const existing = this.slotOf.get(key);
    if (existing !== undefined && this.state[existing] === RESIDENT) {
      throw new RangeError(`key ${describe(key)} is already resident`);
    }
    if (!this.#admissible(key, size)) {
      throw new RangeError(`size: an object of ${size} bytes cannot be admitted now (check canAdmit first)`);
    }
    const cost = this.byObjects ? 1 : size;
    this.beforeInsert(key);
    const evicted: K[] = [];
    while (this.#used + cost > this.capacity) {
      // canAdmit guaranteed cost <= capacity - pinnedUsed, so an unpinned resident object exists here.
      const victim = this.evictOne(cost);
      if (victim === undefined) throw new Error(`${this.name}: found no victim although one must exist`);
      evicted.push(victim);
    }
    const slot = this.#allocate(key, size);
    this.#count++;
    this.#used += cost;
    this.#usedBytes += size;
    this.place(slot);
    return evicted;
  }

  evict(): K | undefined {
    if (this.#count === this.#pinnedCount) return undefined;
    return this.evictOne(0);
  }

  peekVictims(count: number): K[] {
    checkInteger(count, 'count', 0);
    const out: K[] = [];
    const limit = Math.min(count, this.#count - this.#pinnedCount);
    if (limit > 0) this.collectVictims(limit, out);
    return out;
  }

  remove(key: K): boolean {
    checkKey(key);
    const slot = this.slotOf.get(key);
    if (slot === undefined) return false;
    if (this.state[slot] === GHOST) {
      this.onForgetGhost(slot);
      this.#release(slot);
      return false;
    }
    this.onRemove(slot);
    if (this.pins[slot]! > 0) {
      this.#pinnedCount--;
      this.#pinnedUsed -= this.costOf(slot);
      this.pins[slot] = 0;
    }
    this.#discount(slot);
    this.#release(slot);
    return true;
  }

  pin(key: K): number {
    checkKey(key);
    const slot = this.slotOf.get(key);
    if (slot === undefined || this.state[slot] !== RESIDENT) return 0;
    const pins = this.pins[slot]!;
    if (pins === 0xffff_ffff) throw new RangeError(`key ${describe(key)}: pin count would exceed 2^32 - 1`);
    this.pins[slot] = pins + 1;
    if (pins === 0) {
      this.#pinnedCount++;
      this.#pinnedUsed += this.costOf(slot);
      this.onPinChange(slot, true);
    }
    return pins + 1;
  }

  unpin(key: K): number {
    checkKey(key);
    const slot = this.slotOf.get(key);
    if (slot === undefined || this.state[slot] !== RESIDENT) return 0;
    const pins = this.pins[slot]!;
    if (pins === 0) return 0;
    this.pins[slot] = pins - 1;
    if (pins === 1) {
      this.#pinnedCount--;
      this.#pinnedUsed -= this.costOf(slot);
      this.onPinChange(slot, false);
    }
    return pins - 1;
  }

  pinCount(key: K): number {
    checkKey(key);
    const slot = this.slotOf.get(key);
    return slot !== undefined && this.state[slot] === RESIDENT ? this.pins[slot]! : 0;
  }

  reset(): void {
    this.slotOf.clear();
    this.keyOf.fill(undefined);
    this.state.fill(FREE);
    this.pins.fill(0);
    this.links.next.fill(NIL);
    this.links.prev.fill(NIL);
    this.#highWater = 0;
    this.#freeTop = 0;
    this.#used = 0;
    this.#usedBytes = 0;
    this.#count = 0;
    this.#pinnedCount = 0;
    this.#pinnedUsed = 0;
    this.onReset();
  }

  // ---- hooks -------------------------------------------------------------------------------------------------

  /** A hit on a resident slot. */
  protected abstract onHit(slot: SlotId): void;

  /** A miss; `ghost` is the key's ghost slot when it has one (policies without ghosts never see one). */
  protected onMiss(_key: K, _ghost: SlotId | undefined): void {}

  /** Policy-specific admission beyond the capacity checks (`cost` in units). */
  protected admits(_key: K, _cost: number): boolean {
    return true;
  }

  /** Called once per insert, before any eviction it causes. */
  protected beforeInsert(_key: K): void {}

  /** Puts a freshly allocated resident slot into the policy's structures. */
  protected abstract place(slot: SlotId): void;

  /**
   * Chooses and evicts one unpinned resident slot (at least one exists), detaching it from the policy's
   * structures and then calling `retire`. `incomingCost` is the cost of the object being made room for (0 for
   * pressure evictions). Returns the victim's key.
   */
  protected abstract evictOne(incomingCost: number): K;

  /** Appends to `out` the keys of the next `limit` victims (at most the number of evictable objects). */
  protected abstract collectVictims(limit: number, out: K[]): void;

  /** Detaches a resident slot that the caller removes. */
  protected abstract onRemove(slot: SlotId): void;

  /** Detaches a ghost slot that the caller removes (only policies with ghosts need this). */
  protected onForgetGhost(_slot: SlotId): void {}

  /** A slot's pin count went from 0 to 1 (`pinned`) or from 1 to 0. */
  protected onPinChange(_slot: SlotId, _pinned: boolean): void {}

  /** Per-slot arrays must grow to `slots`. */
  protected onGrow(_slots: number): void {}

  /** Clears the subclass's own state. */
  protected abstract onReset(): void;

  // ---- helpers for subclasses --------------------------------------------------------------------------------

  /** Length of every per-slot array. */
  protected get slotCapacity(): number {
    return this.#slots;
  }

  protected keyAt(slot: SlotId): K {
    return this.keyOf[slot] as K;
  }

  protected costOf(slot: SlotId): number {
    return this.byObjects ? 1 : this.sizes[slot]!;
  }

  protected isPinned(slot: SlotId): boolean {
    return this.pins[slot]! > 0;
  }

  /** The key's ghost slot, if it has one. */
  protected ghostSlot(key: K): SlotId | undefined {
    const slot = this.slotOf.get(key);
    return slot !== undefined && this.state[slot] === GHOST ? slot : undefined;
  }

  /**
   * Accounts an evicted (already detached) resident slot and returns its key. With `asGhost` the slot stays
   * allocated as a ghost, which the subclass links into a ghost list; otherwise it is freed.
   */
  protected retire(slot: SlotId, asGhost: boolean): K {
    const key = this.keyAt(slot);
    this.#discount(slot);
    if (asGhost) this.state[slot] = GHOST;
    else this.#release(slot);
    return key;
  }

  /** Frees a (detached) ghost slot. */
  protected dropGhost(slot: SlotId): void {
    this.#release(slot);
  }

  /** Keys of a list, head (newest) to tail. */
  protected listKeys(list: List): K[] {
    const out: K[] = [];
    for (let s = list.head; s !== NIL; s = this.links.older(s)) out.push(this.keyAt(s));
    return out;
  }

  // ---- private -----------------------------------------------------------------------------------------------

  #admissible(key: K, size: number): boolean {
    const slot = this.slotOf.get(key);
    if (slot !== undefined && this.state[slot] === RESIDENT) return false;
    const cost = this.byObjects ? 1 : size;
    if (cost > this.capacity - this.#pinnedUsed) return false;
    return this.admits(key, cost);
  }

  #discount(slot: SlotId): void {
    this.#count--;
    this.#used -= this.costOf(slot);
    this.#usedBytes -= this.sizes[slot]!;
  }

  #allocate(key: K, size: number): SlotId {
    let slot: SlotId;
    if (this.#freeTop > 0) slot = this.#free[--this.#freeTop] as SlotId;
    else {
      if (this.#highWater === this.#slots) this.#grow();
      slot = this.#highWater++ as SlotId;
    }
    this.state[slot] = RESIDENT;
    this.sizes[slot] = size;
    this.pins[slot] = 0;
    this.keyOf[slot] = key;
    this.slotOf.set(key, slot);
    return slot;
  }

  #release(slot: SlotId): void {
    this.slotOf.delete(this.keyAt(slot));
    this.keyOf[slot] = undefined;
    this.state[slot] = FREE;
    this.#free[this.#freeTop++] = slot;
  }

  #grow(): void {
    const slots = Math.min(this.#slots * 2, MAX_SLOTS);
    if (slots === this.#slots) throw new RangeError(`${this.name}: more than ${MAX_SLOTS} objects`);
    this.links.grow(slots);
    this.sizes = resizeFloat64(this.sizes, slots);
    this.pins = resizeUint32(this.pins, slots);
    this.state = resizeUint8(this.state, slots);
    this.#free = resizeUint32(this.#free, slots);
    for (let i = this.#slots; i < slots; i++) this.keyOf.push(undefined);
    this.#slots = slots;
    this.onGrow(slots);
  }
}
