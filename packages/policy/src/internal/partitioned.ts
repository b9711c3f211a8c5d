import type { CapacityUnit, EvictionPolicy, PolicyKey, PolicyOptions } from '../types.js';
import { checkInteger, checkKey, checkOptions, checkSize, checkUnit, describe } from './validate.js';

/** What a partitioned policy knows of one partition when it picks where to evict. */
export interface PartitionState {
  /** Units held. */
  used: number;
  /** Units held by pinned objects. */
  pinnedUsed: number;
  /** Unpinned resident objects. */
  evictable: number;
}

/** Builds the policy of one partition; it gets the whole capacity (the composite enforces the shared limit). */
export type PartitionFactory<P> = (options: Required<Pick<PolicyOptions, 'capacity' | 'unit'>>, partition: P) => EvictionPolicy;

/**
 * A policy made of one inner policy per partition (priority level, tenant) sharing one capacity. The inner
 * policies order victims within a partition; the subclass picks which partition gives the next victim.
 * Each inner policy gets the full capacity, so the composite's own checks are what bound the total.
 */
export abstract class PartitionedPolicy<K extends PolicyKey, P extends PolicyKey> implements EvictionPolicy<K> {
  abstract readonly name: string;
  readonly capacity: number;
  readonly unit: CapacityUnit;

  readonly #create: PartitionFactory<P>;
  readonly #parts = new Map<P, EvictionPolicy<K>>();
  readonly #partitionOf = new Map<K, P>();

  protected constructor(options: PolicyOptions & { create: PartitionFactory<P> }) {
    checkOptions(options);
    this.unit = checkUnit(options.unit, 'options.unit');
    this.capacity = checkInteger(options.capacity, 'options.capacity', 1);
    if (typeof options.create !== 'function') {
      throw new TypeError(`options.create must be a function, got ${describe(options.create)}`);
    }
    this.#create = options.create;
  }

  get used(): number {
    return this.#sum((p) => p.used);
  }

  get usedBytes(): number {
    return this.#sum((p) => p.usedBytes);
  }

  get count(): number {
    return this.#sum((p) => p.count);
  }

  get pinnedCount(): number {
    return this.#sum((p) => p.pinnedCount);
  }

  get pinnedUsed(): number {
    return this.#sum((p) => p.pinnedUsed);
  }

  /** The partition of a resident key, `undefined` when absent. */
  partitionOf(key: K): P | undefined {
    checkKey(key);
    return this.#partitionOf.get(key);
  }

  has(key: K): boolean {
    checkKey(key);
    return this.#partitionOf.has(key);
  }

  sizeOf(key: K): number | undefined {
    return this.#residentPart(key)?.sizeOf(key);
  }

  keys(): IterableIterator<K> {
    return this.#partitionOf.keys();
  }

  access(key: K): boolean {
    checkKey(key);
    const part = this.#parts.get(this.#partitionOf.get(key) ?? this.partitionFor(key));
    return part !== undefined && part.access(key);
  }

  canAdmit(key: K, size: number): boolean {
    checkKey(key);
    checkSize(size);
    if (this.#partitionOf.has(key)) return false;
    const partition = this.partitionFor(key);
    const cost = this.unit === 'objects' ? 1 : size;
    if (cost > this.capacity - this.pinnedUsed) return false;
    if (!this.admitsTo(partition, cost, this.#state())) return false;
    return this.#part(partition).canAdmit(key, size);
  }

  insert(key: K, size: number): K[] {
    checkKey(key);
    checkSize(size);
    if (this.#partitionOf.has(key)) throw new RangeError(`key ${describe(key)} is already resident`);
    if (!this.canAdmit(key, size)) {
      throw new RangeError(`size: an object of ${size} bytes cannot be admitted now (check canAdmit first)`);
    }
    const partition = this.partitionFor(key);
    const cost = this.unit === 'objects' ? 1 : size;
    const evicted: K[] = [];
    for (;;) {
      const from = this.roomFrom(this.#state(), partition, cost);
      if (from === undefined) break;
      const victim = this.#parts.get(from)?.evict();
      if (victim === undefined) throw new Error(`${this.name}: partition ${describe(from)} gave no victim`);
      this.#partitionOf.delete(victim);
      evicted.push(victim);
    }
    for (const victim of this.#part(partition).insert(key, size)) {
      this.#partitionOf.delete(victim);
      evicted.push(victim);
    }
    this.#partitionOf.set(key, partition);
    return evicted;
  }

  evict(): K | undefined {
    const from = this.pressureFrom(this.#state());
    if (from === undefined) return undefined;
    const victim = this.#parts.get(from)!.evict();
    if (victim !== undefined) this.#partitionOf.delete(victim);
    return victim;
  }

  peekVictims(count: number): K[] {
    checkInteger(count, 'count', 0);
    // Replays evict() on a copy of the partition states, drawing each partition's victims from its own peek.
    const state = this.#state();
    const queued = new Map<P, K[]>();
    const out: K[] = [];
    while (out.length < count) {
      const from = this.pressureFrom(state);
      if (from === undefined) break;
      const part = this.#parts.get(from)!;
      let victims = queued.get(from);
      if (victims === undefined) queued.set(from, (victims = part.peekVictims(count).reverse()));
      const victim = victims.pop()!;
      const partition = state.get(from)!;
      partition.used -= this.unit === 'objects' ? 1 : part.sizeOf(victim)!;
      partition.evictable--;
      out.push(victim);
    }
    return out;
  }

  remove(key: K): boolean {
    checkKey(key);
    const resident = this.#partitionOf.get(key);
    const part = this.#parts.get(resident ?? this.partitionFor(key));
    if (part === undefined) return false;
    this.#partitionOf.delete(key);
    return part.remove(key);
  }

  pin(key: K): number {
    return this.#residentPart(key)?.pin(key) ?? 0;
  }

  unpin(key: K): number {
    return this.#residentPart(key)?.unpin(key) ?? 0;
  }

  pinCount(key: K): number {
    return this.#residentPart(key)?.pinCount(key) ?? 0;
  }

  reset(): void {
    this.#parts.clear();
    this.#partitionOf.clear();
    this.onReset();
  }

  // ---- hooks -------------------------------------------------------------------------------------------------

  /** The partition of a new key (validated by the subclass). */
  protected abstract partitionFor(key: K): P;

  /** The partition that gives the next pressure victim, `undefined` when nothing is evictable. */
  protected abstract pressureFrom(state: Map<P, PartitionState>): P | undefined;

  /**
   * The partition that gives the next victim while making room for `cost` units in `partition`, or `undefined`
   * when the object fits now. Default: pressure eviction while the total does not fit.
   */
  protected roomFrom(state: Map<P, PartitionState>, _partition: P, cost: number): P | undefined {
    let used = 0;
    for (const s of state.values()) used += s.used;
    return used + cost > this.capacity ? this.pressureFrom(state) : undefined;
  }

  /** Whether `partition` may take `cost` more units at all (called after the capacity checks). */
  protected admitsTo(_partition: P, _cost: number, _state: Map<P, PartitionState>): boolean {
    return true;
  }

  /** Called when a partition is created, so the subclass can keep its partitions ordered. */
  protected onPartitionCreated(_partition: P): void {}

  /** Called by `reset()`, after every partition is gone. */
  protected onReset(): void {}

  // ---- private -----------------------------------------------------------------------------------------------

  #part(partition: P): EvictionPolicy<K> {
    let part = this.#parts.get(partition);
    if (part === undefined) {
      part = this.#create({ capacity: this.capacity, unit: this.unit }, partition) as EvictionPolicy<K>;
      if (part.capacity !== this.capacity || part.unit !== this.unit) {
        throw new RangeError(`options.create must build a policy with the capacity and unit it is given`);
      }
      this.#parts.set(partition, part);
      this.onPartitionCreated(partition);
    }
    return part;
  }

  #residentPart(key: K): EvictionPolicy<K> | undefined {
    checkKey(key);
    const partition = this.#partitionOf.get(key);
    return partition === undefined ? undefined : this.#parts.get(partition);
  }

  #state(): Map<P, PartitionState> {
    const state = new Map<P, PartitionState>();
    for (const [partition, part] of this.#parts) {
      state.set(partition, { used: part.used, pinnedUsed: part.pinnedUsed, evictable: part.count - part.pinnedCount });
    }
    return state;
  }

  #sum(read: (part: EvictionPolicy<K>) => number): number {
    let total = 0;
    for (const part of this.#parts.values()) total += read(part);
    return total;
  }
}
