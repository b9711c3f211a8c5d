/**
 * Priorities: objects of a higher priority are evicted later. Each priority level has its own inner policy
 * (LRU by default) that orders victims within the level; a victim always comes from the lowest level that holds
 * an unpinned object. So a level is touched only when every level below it is empty or pinned.
 */
import { PartitionedPolicy, type PartitionFactory } from './internal/partitioned.js';
import { LruPolicy } from './policies/lru.js';
import { describe } from './internal/validate.js';
import type { PolicyKey, PolicyOptions } from './types.js';

/** Options of {@link PriorityPolicy}. */
export interface PriorityOptions<K extends PolicyKey = PolicyKey> extends PolicyOptions {
  /**
   * The priority of a key, a safe integer; higher is evicted later. Called when a key is looked up or inserted
   * while not resident; a resident object keeps the priority it was inserted with (remove and insert it again to
   * change it). Must be deterministic.
   */
  priorityOf: (key: K) => number;
  /** Builds the inner policy of one level. Default: `new LruPolicy(options)`. */
  create?: PartitionFactory<number>;
}

/** Strict priority levels over inner policies sharing one capacity. */
export class PriorityPolicy<K extends PolicyKey = PolicyKey> extends PartitionedPolicy<K, number> {
  override readonly name = 'priority';
  readonly #priorityOf: (key: K) => number;
  /** Levels that exist, ascending. */
  readonly #levels: number[] = [];

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PriorityOptions<K>) {
    super({ ...options, create: options.create ?? ((o) => new LruPolicy(o)) });
    if (typeof options.priorityOf !== 'function') {
      throw new TypeError(`options.priorityOf must be a function, got ${describe(options.priorityOf)}`);
    }
    this.#priorityOf = options.priorityOf;
  }

  /** The priority of a resident key, `undefined` when absent. */
  priorityOf(key: K): number | undefined {
    return this.partitionOf(key);
  }

  protected override partitionFor(key: K): number {
    const priority = this.#priorityOf(key);
    if (!Number.isSafeInteger(priority)) {
      throw new RangeError(`options.priorityOf must return a safe integer, got ${describe(priority)} for ${describe(key)}`);
    }
    return priority;
  }

  protected override pressureFrom(state: Map<number, { evictable: number }>): number | undefined {
    for (const level of this.#levels) if (state.get(level)!.evictable > 0) return level;
    return undefined;
  }

  protected override onReset(): void {
    this.#levels.length = 0;
  }

  protected override onPartitionCreated(level: number): void {
    let i = this.#levels.length;
    while (i > 0 && this.#levels[i - 1]! > level) i--;
    this.#levels.splice(i, 0, level);
  }
}
