/**
 * W-TinyLFU: a small LRU window in front of a segmented-LRU main cache guarded by a TinyLFU frequency filter.
 *
 * Einziger, Friedman, Manes, "TinyLFU: A highly efficient cache admission policy", ACM Transactions on Storage
 * 13(4), 2017 (W-TinyLFU, the policy of Caffeine). Written from the paper with Caffeine's default shape:
 *
 * - window: an LRU of `windowRatio` (default 1%) of the capacity, at least one unit; new objects enter it;
 * - main: a segmented LRU of the rest, `protectedRatio` (default 80%) of it protected, the remainder probation;
 *   a hit in probation moves the object to protected's head (protected's LRU falls back to probation's head while
 *   protected is over its share); a hit in protected or the window moves it to its list's head;
 * - every request is counted in a frequency sketch: a count-min sketch of 8-bit counters (the package's
 *   {@link LookupCountAdmission}, 4 rows, conservative update) whose counters halve every 10 x width requests
 *   (the paper's reset with sample size W = 10 x the cache size);
 * - after an insert, the window's LRU objects move to probation's head while the window is over its share and main
 *   has room for them (Caffeine's maintenance; nothing is evicted);
 * - making room for an incoming object: while the window (with the incoming object) is over its share, its LRU
 *   object is the candidate: it moves to probation's head if main has room for it; otherwise it duels main's victim
 *   (probation's LRU, else protected's LRU) and the one with the lower estimated frequency is evicted (ties evict
 *   the candidate, as the paper admits only a more frequent candidate; the winner candidate enters probation).
 *   With the window within its share, main's victim is evicted (the window's LRU when main is empty).
 *
 * Because the window's overflow counts the incoming object, `insert` may evict other objects than `peekVictims`
 * (which assumes no incoming object) announced. Pinned objects are passed over in place.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { clearList, emptyList, type List, NIL, resizeUint8, type SlotId } from '../internal/list.js';
import { checkInteger, checkNumber } from '../internal/validate.js';
import { LookupCountAdmission } from '../admission.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Options of {@link WTinyLfuPolicy}. */
export interface WTinyLfuOptions extends PolicyOptions {
  /** Share of the capacity for the LRU window, in (0, 1). Default 0.01. */
  windowRatio?: number;
  /** Share of the main cache that is protected, in [0, 1). Default 0.8. */
  protectedRatio?: number;
  /**
   * Counters per row of the frequency sketch (rounded up to a power of two, in [16, 2^26]). Default: the capacity
   * in objects mode (at least 16), 65,536 in bytes mode.
   */
  sketchWidth?: number;
  /** Seed of the sketch's hashes, an integer in [0, 2^32). Default 0. */
  seed?: number;
}

const WINDOW = 1;
const PROBATION = 2;
const PROTECTED = 3;

/** W-TinyLFU (TOS'17): LRU window + TinyLFU filter + SLRU main. O(1) per request (the sketch's rows). */
export class WTinyLfuPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 'wtinylfu';
  /** Capacity of the window, in units. */
  readonly windowCapacity: number;
  /** Capacity of the main cache (probation + protected), in units. */
  readonly mainCapacity: number;
  /** Capacity of the protected segment, in units. */
  readonly protectedCapacity: number;

  readonly #sketch: LookupCountAdmission<K>;
  readonly #window = emptyList();
  readonly #probation = emptyList();
  readonly #protected = emptyList();
  #queueOf: Uint8Array;
  #windowUsed = 0;
  #probationUsed = 0;
  #protectedUsed = 0;

  /** @throws TypeError / RangeError naming a bad option, including a capacity below 2 units */
  constructor(options: WTinyLfuOptions) {
    super(options);
    const windowRatio = checkNumber(options.windowRatio ?? 0.01, 'options.windowRatio', Number.MIN_VALUE, 1);
    const protectedRatio = checkNumber(options.protectedRatio ?? 0.8, 'options.protectedRatio', 0, 1);
    if (protectedRatio >= 1) throw new RangeError('options.protectedRatio must be below 1');
    this.windowCapacity = Math.max(1, Math.floor(this.capacity * windowRatio));
    this.mainCapacity = this.capacity - this.windowCapacity;
    this.protectedCapacity = Math.floor(this.mainCapacity * protectedRatio);
    if (this.mainCapacity < 1) throw new RangeError(`options.capacity: ${this.capacity} ${this.unit} leave no main cache`);
    const width = options.sketchWidth ?? (this.byObjects ? Math.min(Math.max(this.capacity, 16), 1 << 26) : 1 << 16);
    this.#sketch = new LookupCountAdmission<K>({
      lookups: 1,
      width: checkInteger(width, 'options.sketchWidth', 16, 1 << 26),
      seed: checkInteger(options.seed ?? 0, 'options.seed', 0, 0xffff_ffff),
    });
    this.#queueOf = new Uint8Array(this.slotCapacity);
  }

  /** The sketch's frequency estimate of `key` (requests since the last halving; never below the truth). */
  frequency(key: K): number {
    return this.#sketch.estimate(key);
  }

  /** @internal White-box view for tests: each list head (newest) to tail. */
  snapshot(): { window: K[]; probation: K[]; protected: K[] } {
    return {
      window: this.listKeys(this.#window),
      probation: this.listKeys(this.#probation),
      protected: this.listKeys(this.#protected),
    };
  }

  override access(key: K): boolean {
    const hit = super.access(key);
    this.#sketch.recordLookup(key);
    return hit;
  }

  protected override onHit(slot: SlotId): void {
    switch (this.#queueOf[slot]) {
      case WINDOW:
        this.links.moveToHead(this.#window, slot);
        break;
      case PROTECTED:
        this.links.moveToHead(this.#protected, slot);
        break;
      default: {
        this.#detach(slot);
        this.#attach(slot, PROTECTED);
        while (this.#protectedUsed > this.protectedCapacity) {
          const tail = this.#protected.tail;
          this.#detach(tail);
          this.#attach(tail, PROBATION);
        }
      }
    }
  }

  // As Caffeine's maintenance after a write: the window's overflow moves to probation while main has room for it
  // (no eviction: the total is unchanged). What cannot move duels main's victim at the next eviction.
  protected override place(slot: SlotId): void {
    this.#attach(slot, WINDOW);
    while (this.#windowUsed > this.windowCapacity) {
      const tail = this.oldestUnpinned(this.#window);
      if (tail === NIL || this.#probationUsed + this.#protectedUsed + this.costOf(tail) > this.mainCapacity) break;
      this.#detach(tail);
      this.#attach(tail, PROBATION);
    }
  }

  protected override evictOne(incomingCost: number): K {
    for (;;) {
      const candidate = this.oldestUnpinned(this.#window);
      if (this.#windowUsed + incomingCost > this.windowCapacity && candidate !== NIL) {
        const cost = this.costOf(candidate);
        this.#detach(candidate);
        if (this.#probationUsed + this.#protectedUsed + cost <= this.mainCapacity) {
          this.#attach(candidate, PROBATION);
          continue;
        }
        const victim = this.#mainVictim();
        if (victim !== NIL && this.#sketch.estimate(this.keyAt(candidate)) > this.#sketch.estimate(this.keyAt(victim))) {
          this.#detach(victim);
          this.#attach(candidate, PROBATION);
          return this.retire(victim, false);
        }
        return this.retire(candidate, false);
      }
      let victim = this.#mainVictim();
      if (victim === NIL) victim = candidate;
      this.#detach(victim);
      return this.retire(victim, false);
    }
  }

  protected override collectVictims(limit: number, out: K[]): void {
    // Replays evictOne(0) on copies of the unpinned members of each list (tail first) and the usage counters.
    const unpinned = (list: List): SlotId[] => {
      const slots: SlotId[] = [];
      for (let s = list.tail; s !== NIL; s = this.links.newer(s)) if (!this.isPinned(s)) slots.push(s);
      return slots;
    };
    const window = unpinned(this.#window);
    const probation = unpinned(this.#probation);
    const prot = unpinned(this.#protected);
    let w = 0;
    let p = 0;
    let r = 0;
    let windowUsed = this.#windowUsed;
    let mainUsed = this.#probationUsed + this.#protectedUsed;
    const mainVictim = (): SlotId => (p < probation.length ? probation[p]! : r < prot.length ? prot[r]! : NIL);
    const takeMain = (slot: SlotId): void => {
      if (p < probation.length && probation[p] === slot) p++;
      else r++;
      mainUsed -= this.costOf(slot);
    };
    while (out.length < limit) {
      if (windowUsed > this.windowCapacity && w < window.length) {
        const candidate = window[w++]!;
        const cost = this.costOf(candidate);
        windowUsed -= cost;
        if (mainUsed + cost <= this.mainCapacity) {
          probation.push(candidate);
          mainUsed += cost;
          continue;
        }
        const victim = mainVictim();
        if (victim !== NIL && this.#sketch.estimate(this.keyAt(candidate)) > this.#sketch.estimate(this.keyAt(victim))) {
          takeMain(victim);
          probation.push(candidate);
          mainUsed += cost;
          out.push(this.keyAt(victim));
        } else out.push(this.keyAt(candidate));
        continue;
      }
      const victim = mainVictim();
      if (victim !== NIL) {
        takeMain(victim);
        out.push(this.keyAt(victim));
      } else {
        const slot = window[w++]!;
        windowUsed -= this.costOf(slot);
        out.push(this.keyAt(slot));
      }
    }
  }

  protected override onRemove(slot: SlotId): void {
    this.#detach(slot);
  }

  protected override onGrow(slots: number): void {
    this.#queueOf = resizeUint8(this.#queueOf, slots);
  }

  protected override onReset(): void {
    clearList(this.#window);
    clearList(this.#probation);
    clearList(this.#protected);
    this.#queueOf.fill(0);
    this.#windowUsed = 0;
    this.#probationUsed = 0;
    this.#protectedUsed = 0;
    this.#sketch.reset();
  }

  /** Main's victim: probation's LRU unpinned object, else protected's; NIL when main has none. */
  #mainVictim(): SlotId {
    const slot = this.oldestUnpinned(this.#probation);
    return slot !== NIL ? slot : this.oldestUnpinned(this.#protected);
  }

  #attach(slot: SlotId, queue: number): void {
    this.#queueOf[slot] = queue;
    const cost = this.costOf(slot);
    if (queue === WINDOW) {
      this.links.pushHead(this.#window, slot);
      this.#windowUsed += cost;
    } else if (queue === PROBATION) {
      this.links.pushHead(this.#probation, slot);
      this.#probationUsed += cost;
    } else {
      this.links.pushHead(this.#protected, slot);
      this.#protectedUsed += cost;
    }
  }

  #detach(slot: SlotId): void {
    const cost = this.costOf(slot);
    const queue = this.#queueOf[slot];
    if (queue === WINDOW) {
      this.links.unlink(this.#window, slot);
      this.#windowUsed -= cost;
    } else if (queue === PROBATION) {
      this.links.unlink(this.#probation, slot);
      this.#probationUsed -= cost;
    } else {
      this.links.unlink(this.#protected, slot);
      this.#protectedUsed -= cost;
    }
  }
}
