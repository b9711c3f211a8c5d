import type { CapacityUnit, EvictionPolicy, PolicyKey, PolicyOptions } from '../types.js';
import { IntSlotMap } from './int-map.js';
import { Links, type List, NIL, resizeFloat64, resizeUint32, resizeUint8, type SlotId } from './list.js';
import { checkInteger, checkKey, checkOptions, checkSize, checkUnit, describe } from './validate.js';

/** Largest `denseKeys.bound`: slot ids + 1 are stored in an Int32Array. */
export const MAX_DENSE_BOUND = 0x7fff_ffff;

/** The error for a key the dense path refuses: TypeError for a non-number, RangeError naming it otherwise. */
function badDenseKey(key: unknown, bound: number): Error {
  if (typeof key !== 'number') return new TypeError(`key must be a number with options.denseKeys, got ${describe(key)}`);
  return new RangeError(`key ${describe(key)} must be an integer in [0, ${bound}) (options.denseKeys.bound)`);
}

/** Slot states. A ghost keeps its key and size (history for ARC and S3-FIFO) but holds no capacity. */
export const FREE = 0;
export const RESIDENT = 1;
export const GHOST = 2;

const MAX_SLOTS = NIL - 1;

/**
 * The state every built-in policy shares, in one object of one class: the key -> slot map, per-slot typed arrays,
 * the free-slot stack and the accounting. SlotPolicy's methods run on all seven policy classes, so their property
 * loads on `this` are megamorphic once a process uses more than four of them (a sweep); loads on this object stay
 * monomorphic whatever the policy.
 */
class SlotTable<K extends PolicyKey> {
  readonly capacity: number;
  /** True when every object costs one unit. */
  readonly byObjects: boolean;
  readonly links: Links;
  /** Object size in bytes, per slot. */
  sizes: Float64Array;
  /** Pin count, per slot. */
  pins: Uint32Array;
  /** FREE, RESIDENT or GHOST, per slot. */
  state: Uint8Array;
  /** Key per slot; undefined for free slots. */
  readonly keyOf: (K | undefined)[] = [];
  /** The default path's key -> slot map for non-negative int32 keys (empty with `denseKeys`). */
  readonly intSlots = new IntSlotMap();
  /** The default path's key -> slot map for every other key (empty with `denseKeys`). */
  readonly slotOf = new Map<K, SlotId>();
  /**
   * The last key looked up in `slotOf` and its slot (-1 = none): a miss looks its key up three times (access,
   * canAdmit, insert), so two of the three are a comparison. Kept exact by allocate, release and reset.
   */
  lastKey: K | undefined = undefined;
  lastSlot = -1;
  /** The dense path's key -> slot + 1 map (0 = no slot), or null on the default path. */
  dense: Int32Array | null = null;
  /** Keys are integers in [0, denseBound) on the dense path; 0 on the default path. */
  readonly denseBound: number = 0;

  slots: number;
  highWater = 0;
  free: Uint32Array;
  freeTop = 0;

  used = 0;
  usedBytes = 0;
  count = 0;
  pinnedCount = 0;
  pinnedUsed = 0;

  constructor(capacity: number, byObjects: boolean, denseBound: number) {
    this.capacity = capacity;
    this.byObjects = byObjects;
    // Objects mode knows its peak population up front (ghosts may add some); bytes mode starts small and doubles.
    let slots = byObjects ? Math.min(capacity + 1, 1 << 16) : 64;
    if (denseBound > 0) {
      this.denseBound = denseBound;
      this.dense = new Int32Array(Math.min(denseBound, 1 << 16));
      // Every key has at most one slot (resident or ghost), so the slots never need to outnumber the keys.
      slots = Math.min(slots, denseBound);
    }
    this.slots = slots;
    this.links = new Links(slots);
    this.sizes = new Float64Array(slots);
    this.pins = new Uint32Array(slots);
    this.state = new Uint8Array(slots);
    this.free = new Uint32Array(slots);
    this.keyOf.length = slots;
    this.keyOf.fill(undefined);
  }

  /**
   * The slot of `key` (resident or ghost), or -1; validates `key`. On the dense path: three comparisons and one
   * typed-array load.
   */
  find(key: K): number {
    const dense = this.dense;
    if (dense !== null) {
      const k = key as unknown as number;
      // (k | 0) === k: a number that is an int32 (strings, fractions, NaN, +-Infinity and >= 2^31 fail).
      if ((k | 0) !== k || k < 0 || k >= this.denseBound) throw badDenseKey(key, this.denseBound);
      return k < dense.length ? dense[k]! - 1 : -1;
    }
    if (typeof key === 'number' && (key | 0) === key && key >= 0) return this.intSlots.get(key);
    if (key === this.lastKey) return this.lastSlot;
    checkKey(key);
    const slot = this.slotOf.get(key);
    this.lastKey = key;
    return (this.lastSlot = slot === undefined ? -1 : slot);
  }

  /** True when the default path keeps `key` in `intSlots` (a non-negative int32). */
  static isIntKey(key: unknown): key is number {
    return typeof key === 'number' && (key | 0) === key && key >= 0;
  }

  costOf(slot: number): number {
    return this.byObjects ? 1 : this.sizes[slot]!;
  }

  /** Takes a detached resident slot out of the accounting. */
  discount(slot: number): void {
    this.count--;
    this.used -= this.costOf(slot);
    this.usedBytes -= this.sizes[slot]!;
  }

  allocate(key: K, size: number, name: string): SlotId {
    let slot: SlotId;
    if (this.freeTop > 0) slot = this.free[--this.freeTop] as SlotId;
    else {
      if (this.highWater === this.slots) this.#grow(name);
      slot = this.highWater++ as SlotId;
    }
    this.state[slot] = RESIDENT;
    this.sizes[slot] = size;
    this.pins[slot] = 0;
    this.keyOf[slot] = key;
    const dense = this.dense;
    if (dense !== null) {
      const k = key as unknown as number;
      if (k >= dense.length) this.#growDense(k);
      this.dense![k] = slot + 1;
    } else if (SlotTable.isIntKey(key)) this.intSlots.set(key, slot);
    else {
      this.slotOf.set(key, slot);
      this.lastKey = key;
      this.lastSlot = slot;
    }
    return slot;
  }

  release(slot: number): void {
    const key = this.keyOf[slot] as K;
    if (this.dense !== null) this.dense[key as unknown as number] = 0;
    else if (SlotTable.isIntKey(key)) this.intSlots.delete(key);
    else {
      this.slotOf.delete(key);
      if (key === this.lastKey) this.lastSlot = -1;
    }
    this.keyOf[slot] = undefined;
    this.state[slot] = FREE;
    this.free[this.freeTop++] = slot;
  }

  reset(): void {
    this.slotOf.clear();
    this.intSlots.clear();
    this.lastKey = undefined;
    this.lastSlot = -1;
    this.dense?.fill(0);
    this.keyOf.fill(undefined);
    this.state.fill(FREE);
    this.pins.fill(0);
    this.links.next.fill(NIL);
    this.links.prev.fill(NIL);
    this.highWater = 0;
    this.freeTop = 0;
    this.used = 0;
    this.usedBytes = 0;
    this.count = 0;
    this.pinnedCount = 0;
    this.pinnedUsed = 0;
  }

  /** Grows the dense map to hold key `k` (doubling, at most the bound). */
  #growDense(k: number): void {
    const old = this.dense!;
    let length = old.length;
    while (length <= k) length *= 2;
    const grown = new Int32Array(Math.min(length, this.denseBound));
    grown.set(old);
    this.dense = grown;
  }

  #grow(name: string): void {
    const slots = Math.min(this.slots * 2, MAX_SLOTS, this.dense !== null ? this.denseBound : MAX_SLOTS);
    if (slots === this.slots) throw new RangeError(`${name}: more than ${MAX_SLOTS} objects`);
    this.links.grow(slots);
    this.sizes = resizeFloat64(this.sizes, slots);
    this.pins = resizeUint32(this.pins, slots);
    this.state = resizeUint8(this.state, slots);
    this.free = resizeUint32(this.free, slots);
    for (let i = this.slots; i < slots; i++) this.keyOf.push(undefined);
    this.slots = slots;
  }
}

/**
 * The machinery every built-in policy shares: the key -> dense slot id map, per-slot typed arrays (size, pin
 * count, state, links) that grow by doubling, a LIFO free-slot stack, accounting, pins and argument checks.
 * A subclass implements only its algorithm, through the protected hooks below. The public methods validate
 * their arguments; the hooks trust theirs.
 *
 * By default non-negative int32 keys map to slots through a typed-array hash table (internal/int-map.ts) and every
 * other key through a `Map`, with the last `Map` lookup remembered (a miss looks its key up three times).
 * With `options.denseKeys` the key -> slot map is an Int32Array indexed by the key (slot + 1, 0 = none), grown by
 * doubling up to the bound, and the slot arrays never grow past the bound (one slot per key at most). The hot
 * methods (`access`, `canAdmit`, `insert`) then check a key with three integer comparisons and do no hashing.
 */
export abstract class SlotPolicy<K extends PolicyKey> implements EvictionPolicy<K> {
  abstract readonly name: string;
  readonly capacity: number;
  readonly unit: CapacityUnit;
  /** True when every object costs one unit. */
  protected readonly byObjects: boolean;
  /** The shared link arrays (slot lists). */
  protected readonly links: Links;

  readonly #t: SlotTable<K>;

  /** @throws TypeError / RangeError naming the bad option */
  protected constructor(options: PolicyOptions) {
    checkOptions(options);
    this.unit = checkUnit(options.unit, 'options.unit');
    this.capacity = checkInteger(options.capacity, 'options.capacity', 1);
    this.byObjects = this.unit === 'objects';
    let denseBound = 0;
    if (options.denseKeys !== undefined) {
      checkOptions(options.denseKeys, 'options.denseKeys');
      denseBound = checkInteger(options.denseKeys.bound, 'options.denseKeys.bound', 1, MAX_DENSE_BOUND);
    }
    this.#t = new SlotTable<K>(this.capacity, this.byObjects, denseBound);
    this.links = this.#t.links;
  }

  get used(): number {
    return this.#t.used;
  }

  get usedBytes(): number {
    return this.#t.usedBytes;
  }

  get count(): number {
    return this.#t.count;
  }

  get pinnedCount(): number {
    return this.#t.pinnedCount;
  }

  get pinnedUsed(): number {
    return this.#t.pinnedUsed;
  }

  has(key: K): boolean {
    const t = this.#t;
    const slot = t.find(key);
    return slot >= 0 && t.state[slot] === RESIDENT;
  }

  sizeOf(key: K): number | undefined {
    const t = this.#t;
    const slot = t.find(key);
    return slot >= 0 && t.state[slot] === RESIDENT ? t.sizes[slot] : undefined;
  }

  *keys(): IterableIterator<K> {
    const t = this.#t;
    for (let slot = 0; slot < t.highWater; slot++) if (t.state[slot] === RESIDENT) yield t.keyOf[slot] as K;
  }

  access(key: K): boolean {
    const t = this.#t;
    const slot = t.find(key);
    if (slot >= 0 && t.state[slot] === RESIDENT) {
      this.onHit(slot as SlotId);
      return true;
    }
    this.onMiss(key, slot < 0 ? undefined : (slot as SlotId));
    return false;
  }

  canAdmit(key: K, size: number): boolean {
    const t = this.#t;
    const slot = t.find(key);
    checkSize(size);
    return this.#admissible(t, key, size, slot);
  }

  insert(key: K, size: number): K[] {
    const t = this.#t;
    const existing = t.find(key);
    checkSize(size);
    if (existing >= 0 && t.state[existing] === RESIDENT) {
      throw new RangeError(`key ${describe(key)} is already resident`);
    }
    if (!this.#admissible(t, key, size, existing)) {
      throw new RangeError(`size: an object of ${size} bytes cannot be admitted now (check canAdmit first)`);
    }
    const cost = t.byObjects ? 1 : size;
    this.beforeInsert(key);
    let evicted: K[] | undefined;
    while (t.used + cost > t.capacity) {
      // canAdmit guaranteed cost <= capacity - pinnedUsed, so an unpinned resident object exists here.
      const victim = this.evictOne(cost);
      if (victim === undefined) throw new Error(`${this.name}: found no victim although one must exist`);
      // A literal for the usual single victim (no backing store to grow).
      if (evicted === undefined) evicted = [victim];
      else evicted.push(victim);
    }
    const slots = t.slots;
    const slot = t.allocate(key, size, this.name);
    if (t.slots !== slots) this.onGrow(t.slots);
    t.count++;
    t.used += cost;
    t.usedBytes += size;
    this.place(slot);
    return evicted ?? [];
  }

  evict(): K | undefined {
    const t = this.#t;
    if (t.count === t.pinnedCount) return undefined;
    return this.evictOne(0);
  }

  peekVictims(count: number): K[] {
    checkInteger(count, 'count', 0);
    const t = this.#t;
    const out: K[] = [];
    const limit = Math.min(count, t.count - t.pinnedCount);
    if (limit > 0) this.collectVictims(limit, out);
    return out;
  }

  remove(key: K): boolean {
    const t = this.#t;
    const found = t.find(key);
    if (found < 0) return false;
    const slot = found as SlotId;
    if (t.state[slot] === GHOST) {
      this.onForgetGhost(slot);
      t.release(slot);
      return false;
    }
    this.onRemove(slot);
    if (t.pins[slot]! > 0) {
      t.pinnedCount--;
      t.pinnedUsed -= t.costOf(slot);
      t.pins[slot] = 0;
    }
    t.discount(slot);
    t.release(slot);
    return true;
  }

  pin(key: K): number {
    const t = this.#t;
    const slot = t.find(key);
    if (slot < 0 || t.state[slot] !== RESIDENT) return 0;
    const pins = t.pins[slot]!;
    if (pins === 0xffff_ffff) throw new RangeError(`key ${describe(key)}: pin count would exceed 2^32 - 1`);
    t.pins[slot] = pins + 1;
    if (pins === 0) {
      t.pinnedCount++;
      t.pinnedUsed += t.costOf(slot);
      this.onPinChange(slot as SlotId, true);
    }
    return pins + 1;
  }

  unpin(key: K): number {
    const t = this.#t;
    const slot = t.find(key);
    if (slot < 0 || t.state[slot] !== RESIDENT) return 0;
    const pins = t.pins[slot]!;
    if (pins === 0) return 0;
    t.pins[slot] = pins - 1;
    if (pins === 1) {
      t.pinnedCount--;
      t.pinnedUsed -= t.costOf(slot);
      this.onPinChange(slot as SlotId, false);
    }
    return pins - 1;
  }

  pinCount(key: K): number {
    const t = this.#t;
    const slot = t.find(key);
    return slot >= 0 && t.state[slot] === RESIDENT ? t.pins[slot]! : 0;
  }

  reset(): void {
    this.#t.reset();
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
    return this.#t.slots;
  }

  protected keyAt(slot: SlotId): K {
    return this.#t.keyOf[slot] as K;
  }

  protected costOf(slot: SlotId): number {
    return this.#t.costOf(slot);
  }

  protected isPinned(slot: SlotId): boolean {
    return this.#t.pins[slot]! > 0;
  }

  /** The least recently linked unpinned slot of `list` (walking from its tail), or NIL when every member is pinned. */
  protected oldestUnpinned(list: List): SlotId {
    const pins = this.#t.pins;
    const links = this.links;
    let slot = list.tail;
    while (slot !== NIL && pins[slot]! > 0) slot = links.newer(slot);
    return slot;
  }

  /** The key's resident, unpinned slot (what `evictKey` may take), if it has one: one lookup. */
  protected evictableSlot(key: K): SlotId | undefined {
    const t = this.#t;
    const slot = t.find(key);
    return slot >= 0 && t.state[slot] === RESIDENT && t.pins[slot] === 0 ? (slot as SlotId) : undefined;
  }

  /** The key's ghost slot, if it has one. */
  protected ghostSlot(key: K): SlotId | undefined {
    const t = this.#t;
    const slot = t.find(key);
    return slot >= 0 && t.state[slot] === GHOST ? (slot as SlotId) : undefined;
  }

  /** The key's slot (resident or ghost), if it has one. */
  protected slotFor(key: K): SlotId | undefined {
    const slot = this.#t.find(key);
    return slot < 0 ? undefined : (slot as SlotId);
  }

  /**
   * Accounts an evicted (already detached) resident slot and returns its key. With `asGhost` the slot stays
   * allocated as a ghost, which the subclass links into a ghost list; otherwise it is freed.
   */
  protected retire(slot: SlotId, asGhost: boolean): K {
    const t = this.#t;
    const key = t.keyOf[slot] as K;
    t.discount(slot);
    if (asGhost) t.state[slot] = GHOST;
    else t.release(slot);
    return key;
  }

  /** Frees a (detached) ghost slot. */
  protected dropGhost(slot: SlotId): void {
    this.#t.release(slot);
  }

  /** Keys of a list, head (newest) to tail. */
  protected listKeys(list: List): K[] {
    const out: K[] = [];
    for (let s = list.head; s !== NIL; s = this.links.older(s)) out.push(this.keyAt(s));
    return out;
  }

  // ---- private -----------------------------------------------------------------------------------------------

  /** `slot` is the key's slot from `find` (-1 for none). */
  #admissible(t: SlotTable<K>, key: K, size: number, slot: number): boolean {
    if (slot >= 0 && t.state[slot] === RESIDENT) return false;
    const cost = t.byObjects ? 1 : size;
    if (cost > t.capacity - t.pinnedUsed) return false;
    return this.admits(key, cost);
  }
}
