/**
 * S3-FIFO: three static FIFO queues.
 *
 * Yang, Zhang, Qiu, Yue, Rashmi, "FIFO queues are all you need for cache eviction", SOSP'23. Semantics match
 * libCacheSim `S3FIFOv0.c`, the implementation used for the paper's results (the newer `S3FIFO.c` differs only
 * in filling the main queue directly until the first eviction):
 *
 * - Sizes (in units): small = floor(capacity * smallRatio) (default 0.1), main = capacity - small,
 *   ghost = floor(capacity * ghostRatio) (default 0.9). Ghost entries remember key and size only.
 * - Frequency: 0 on insertion and on a move into main; each hit adds 1, capped at 3 (2 bits, as the paper;
 *   libCacheSim counts on but only ever uses min(freq, 3), which decides the same for thresholds <= 3).
 * - A miss whose key is in the ghost queue removes it from the ghost and inserts the object at the head of
 *   main; any other miss inserts at the head of small.
 * - Admission (libCacheSim `S3FIFO_can_insert` / `S3FIFO_insert`): an object whose cost is >= the small queue is
 *   refused, unless it comes from the ghost, which needs cost <= the small queue. (libCacheSim evicts before it
 *   refuses an object of cost exactly equal to the small queue; this policy refuses it up front, without evicting.)
 * - Eviction evicts from main when main holds more than its share or small is empty, otherwise from small:
 *   - small: look at the tail; an object with `freq >= moveToMainThreshold` (default 2, i.e. hit at least twice
 *     while in small, the libCacheSim default `move-to-main-threshold=2`) moves to the head of main with freq 0;
 *     the first other object is evicted and remembered in the ghost (dropping the oldest ghosts while the ghost
 *     queue is over its size; an object larger than the whole ghost queue is not remembered). If small runs out
 *     without evicting, eviction continues in main.
 *   - main: look at the tail; an object with freq >= 1 is reinserted at the head with freq - 1 (a 2-bit CLOCK),
 *     the first with freq 0 is evicted.
 *
 * Pinned objects are passed over in place, their frequency untouched; "small is empty" above then means "small
 * holds no unpinned object", and main is used only when it holds an unpinned object.
 */
import { SlotPolicy } from '../internal/slot-policy.js';
import { clearList, emptyList, NIL, resizeUint8, type SlotId } from '../internal/list.js';
import { checkInteger, checkNumber } from '../internal/validate.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Options of {@link S3FifoPolicy}. */
export interface S3FifoOptions extends PolicyOptions {
  /** Share of the capacity given to the small FIFO, in (0, 1). Default 0.1. */
  smallRatio?: number;
  /** Size of the ghost FIFO as a share of the capacity, in [0, 1]; 0 disables it. Default 0.9. */
  ghostRatio?: number;
  /**
   * Hits an object needs while in the small FIFO to move to main instead of being evicted when it reaches the
   * tail of small: 1, 2 or 3 (frequencies are 2-bit). Default 2, as libCacheSim.
   */
  moveToMainThreshold?: number;
}

const SMALL = 1;
const MAIN = 2;
const GHOST_QUEUE = 3;
const MAX_FREQ = 3;

/** S3-FIFO (SOSP'23): small FIFO + main 2-bit CLOCK + ghost FIFO. */
export class S3FifoPolicy<K extends PolicyKey = PolicyKey> extends SlotPolicy<K> {
  override readonly name = 's3fifo';
  /** Capacity of the small FIFO, in units. */
  readonly smallCapacity: number;
  /** Capacity of the main FIFO, in units. */
  readonly mainCapacity: number;
  /** Capacity of the ghost FIFO, in units. */
  readonly ghostCapacity: number;
  /** Hits in small that move an object to main: 1, 2 or 3. */
  readonly moveToMainThreshold: number;

  readonly #small = emptyList();
  readonly #main = emptyList();
  readonly #ghost = emptyList();
  #queueOf: Uint8Array;
  #freq: Uint8Array;
  #smallUsed = 0;
  #mainUsed = 0;
  #ghostUsed = 0;
  #smallUnpinned = 0;
  #mainUnpinned = 0;
  /** Key of the current request when it hit the ghost queue (set by `access` or `insert`, used by `insert`). */
  #ghostHit: K | undefined;

  /**
   * @throws TypeError / RangeError naming a bad option, including a capacity so small that the small queue holds
   * fewer than 2 units (it would then admit nothing)
   */
  constructor(options: S3FifoOptions) {
    super(options);
    const smallRatio = checkNumber(options.smallRatio ?? 0.1, 'options.smallRatio', Number.MIN_VALUE, 1);
    const ghostRatio = checkNumber(options.ghostRatio ?? 0.9, 'options.ghostRatio', 0, 1);
    this.moveToMainThreshold = checkInteger(options.moveToMainThreshold ?? 2, 'options.moveToMainThreshold', 1, 3);
    // The same double arithmetic and truncation as libCacheSim's (int64_t)(cache_size * ratio).
    this.smallCapacity = Math.floor(this.capacity * smallRatio);
    this.mainCapacity = this.capacity - this.smallCapacity;
    this.ghostCapacity = Math.floor(this.capacity * ghostRatio);
    if (this.smallCapacity < 2) {
      throw new RangeError(
        `options.capacity: the small queue gets ${this.smallCapacity} ${this.unit} (capacity * smallRatio); ` +
          'S3-FIFO admits only objects smaller than it, so it needs at least 2',
      );
    }
    if (this.mainCapacity < 1) throw new RangeError('options.smallRatio: leaves no room for the main queue');
    this.#queueOf = new Uint8Array(this.slotCapacity);
    this.#freq = new Uint8Array(this.slotCapacity);
  }

  /** @internal White-box view for tests: each queue head (newest) to tail, and each resident's frequency. */
  snapshot(): {
    small: K[];
    main: K[];
    ghost: K[];
    freq: Map<K, number>;
    used: { small: number; main: number; ghost: number };
  } {
    const small = this.listKeys(this.#small);
    const main = this.listKeys(this.#main);
    const freq = new Map<K, number>();
    for (const key of [...small, ...main]) freq.set(key, this.#freq[this.slotFor(key)!]!);
    const used = { small: this.#smallUsed, main: this.#mainUsed, ghost: this.#ghostUsed };
    return { small, main, ghost: this.listKeys(this.#ghost), freq, used };
  }

  protected override onHit(slot: SlotId): void {
    this.#ghostHit = undefined;
    if (this.#freq[slot]! < MAX_FREQ) this.#freq[slot]!++;
  }

  protected override onMiss(key: K, ghost: SlotId | undefined): void {
    this.#ghostHit = undefined;
    if (ghost !== undefined) {
      this.#forget(ghost);
      this.#ghostHit = key;
    }
  }

  protected override admits(key: K, cost: number): boolean {
    const fromGhost = this.#ghostHit === key || this.ghostSlot(key) !== undefined;
    return fromGhost ? cost <= this.smallCapacity : cost < this.smallCapacity;
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
    this.#freq[slot] = 0;
    if (this.#ghostHit === this.keyAt(slot)) this.#enterMain(slot);
    else {
      this.#queueOf[slot] = SMALL;
      this.links.pushHead(this.#small, slot);
      this.#smallUsed += this.costOf(slot);
      this.#smallUnpinned++;
    }
    this.#ghostHit = undefined;
  }

  protected override evictOne(): K {
    for (;;) {
      const fromMain = this.#smallUnpinned === 0 || (this.#mainUsed > this.mainCapacity && this.#mainUnpinned > 0);
      if (fromMain) return this.#evictMain();
      const victim = this.#evictSmall();
      if (victim !== undefined) return victim;
    }
  }

  /**
   * Evicts `key` as the queues would: from small into the ghost queue (whatever its frequency: it was chosen, so it
   * comes back through main if requested again soon), from main without a ghost entry.
   */
  evictKey(key: K): boolean {
    const slot = this.evictableSlot(key);
    if (slot === undefined) return false;
    const cost = this.costOf(slot);
    if (this.#queueOf[slot] === SMALL) {
      this.links.unlink(this.#small, slot);
      this.#smallUsed -= cost;
      this.#smallUnpinned--;
      this.#evictToGhost(slot);
    } else {
      this.links.unlink(this.#main, slot);
      this.#mainUsed -= cost;
      this.#mainUnpinned--;
      this.retire(slot, false);
    }
    return true;
  }

  protected override collectVictims(limit: number, out: K[]): void {
    // Replays evictOne on a shadow: cursors over the real queues, moved objects appended to a virtual main tail
    // (pinned objects stay in place, so walking past them once is the same as skipping them every time).
    const shadowFreq = new Map<SlotId, number>();
    const freqOf = (slot: SlotId): number => shadowFreq.get(slot) ?? this.#freq[slot]!;
    const movedToMain: SlotId[] = [];
    let next = 0;
    let smallCursor = this.#small.tail;
    let mainCursor = this.#main.tail;
    let smallUnpinned = this.#smallUnpinned;
    let mainUnpinned = this.#mainUnpinned;
    let mainUsed = this.#mainUsed;
    while (out.length < limit && smallUnpinned + mainUnpinned > 0) {
      if (smallUnpinned === 0 || (mainUsed > this.mainCapacity && mainUnpinned > 0)) {
        for (;;) {
          let slot: SlotId;
          if (mainCursor !== NIL) {
            slot = mainCursor;
            mainCursor = this.links.newer(slot);
            if (this.isPinned(slot)) continue;
          } else slot = movedToMain[next++]!;
          const freq = freqOf(slot);
          if (freq === 0) {
            out.push(this.keyAt(slot));
            mainUsed -= this.costOf(slot);
            mainUnpinned--;
            break;
          }
          shadowFreq.set(slot, freq - 1);
          movedToMain.push(slot);
        }
        continue;
      }
      while (smallCursor !== NIL) {
        const slot = smallCursor;
        smallCursor = this.links.newer(slot);
        if (this.isPinned(slot)) continue;
        smallUnpinned--;
        if (freqOf(slot) >= this.moveToMainThreshold) {
          shadowFreq.set(slot, 0);
          movedToMain.push(slot);
          mainUsed += this.costOf(slot);
          mainUnpinned++;
        } else {
          out.push(this.keyAt(slot));
          break;
        }
      }
    }
  }

  protected override onRemove(slot: SlotId): void {
    const cost = this.costOf(slot);
    const unpinned = this.isPinned(slot) ? 0 : 1;
    if (this.#queueOf[slot] === SMALL) {
      this.links.unlink(this.#small, slot);
      this.#smallUsed -= cost;
      this.#smallUnpinned -= unpinned;
    } else {
      this.links.unlink(this.#main, slot);
      this.#mainUsed -= cost;
      this.#mainUnpinned -= unpinned;
    }
  }

  protected override onForgetGhost(slot: SlotId): void {
    this.links.unlink(this.#ghost, slot);
    this.#ghostUsed -= this.costOf(slot);
  }

  protected override onPinChange(slot: SlotId, pinned: boolean): void {
    const delta = pinned ? -1 : 1;
    if (this.#queueOf[slot] === SMALL) this.#smallUnpinned += delta;
    else this.#mainUnpinned += delta;
  }

  protected override onGrow(slots: number): void {
    this.#queueOf = resizeUint8(this.#queueOf, slots);
    this.#freq = resizeUint8(this.#freq, slots);
  }

  protected override onReset(): void {
    clearList(this.#small);
    clearList(this.#main);
    clearList(this.#ghost);
    this.#queueOf.fill(0);
    this.#freq.fill(0);
    this.#smallUsed = 0;
    this.#mainUsed = 0;
    this.#ghostUsed = 0;
    this.#smallUnpinned = 0;
    this.#mainUnpinned = 0;
    this.#ghostHit = undefined;
  }

  #enterMain(slot: SlotId): void {
    this.#queueOf[slot] = MAIN;
    this.links.pushHead(this.#main, slot);
    this.#mainUsed += this.costOf(slot);
    this.#mainUnpinned++;
  }

  /** Evicts from main; main holds an unpinned object. */
  #evictMain(): K {
    let slot = this.#main.tail;
    for (;;) {
      const newer = this.links.newer(slot);
      if (!this.isPinned(slot)) {
        const freq = this.#freq[slot]!;
        if (freq === 0) break;
        this.#freq[slot] = freq - 1;
        this.links.moveToHead(this.#main, slot);
      }
      slot = newer === NIL ? this.#main.tail : newer;
    }
    this.links.unlink(this.#main, slot);
    this.#mainUsed -= this.costOf(slot);
    this.#mainUnpinned--;
    return this.retire(slot, false);
  }

  /** Evicts from small, moving hot objects to main on the way; `undefined` when small ran out first. */
  #evictSmall(): K | undefined {
    let slot = this.#small.tail;
    while (slot !== NIL) {
      const newer = this.links.newer(slot);
      if (!this.isPinned(slot)) {
        this.links.unlink(this.#small, slot);
        this.#smallUsed -= this.costOf(slot);
        this.#smallUnpinned--;
        if (this.#freq[slot]! < this.moveToMainThreshold) return this.#evictToGhost(slot);
        this.#freq[slot] = 0;
        this.#enterMain(slot);
      }
      slot = newer;
    }
    return undefined;
  }

  #evictToGhost(slot: SlotId): K {
    const cost = this.costOf(slot);
    if (cost > this.ghostCapacity) return this.retire(slot, false);
    while (this.#ghostUsed + cost > this.ghostCapacity) this.#forgetOldestGhost();
    const key = this.retire(slot, true);
    this.#queueOf[slot] = GHOST_QUEUE;
    this.links.pushHead(this.#ghost, slot);
    this.#ghostUsed += cost;
    return key;
  }

  #forgetOldestGhost(): void {
    const slot = this.#ghost.tail;
    this.#forget(slot);
  }

  #forget(ghost: SlotId): void {
    this.onForgetGhost(ghost);
    this.dropGhost(ghost);
  }
}
