/**
 * The checks a registered custom policy runs behind (registry.ts applies them to every policy a custom factory
 * builds; the built-ins run bare, so their speed is untouched). A custom policy is user code the planner and the
 * simulator must be able to trust: a victim that was never resident, a victim still resident, or a capacity
 * overrun would let the planner's picture drift from the tier's bytes, and would make a simulated policy look
 * better than it is. Each answer is checked against the record of resident keys this wrapper keeps (what callers
 * were told: the keys inserted and not yet reported gone, with their sizes), at O(1) per call plus O(1) per victim.
 *
 * A broken rule, or a throw, becomes a {@link PolicyError} naming the policy, the call and the rule. Before it is
 * thrown the record is brought back in line with the policy (its `has()` is asked about every recorded key: the
 * error path only): the keys that left are the error's `victims`, and the key of a failed insert is removed again,
 * so a caller that frees the victims and treats the key as not stored stays consistent (the planner does).
 * `has`, `count`, `keys`, `sizeOf`, `used` and `usedBytes` answer from the record, so they agree with what callers
 * were told whatever the policy does. Arguments are checked here first (TypeError / RangeError, as the contract
 * says), so what the policy throws is always the policy's fault.
 */
import { PolicyError, type PolicyErrorOptions } from '../errors.js';
import type { CapacityUnit, EvictionPolicy, PageHint, PolicyKey } from '../types.js';
import { checkInteger, checkKey, checkSize, describe } from './validate.js';

const METHODS = ['has', 'keys', 'access', 'canAdmit', 'insert', 'evict', 'peekVictims', 'remove', 'pin', 'unpin', 'pinCount', 'reset'] as const;

/** A custom policy behind the contract's checks. */
export class CheckedPolicy<K extends PolicyKey = PolicyKey> implements EvictionPolicy<K> {
  /** The registry name it was created by. */
  readonly name: string;
  readonly capacity: number;
  readonly unit: CapacityUnit;
  readonly evictKey?: (key: K) => boolean;
  readonly hint?: (key: K, hint: PageHint<K>) => boolean;
  readonly #inner: EvictionPolicy<K>;
  /** Resident keys as callers were told, with their sizes. */
  readonly #resident = new Map<K, number>();
  #usedBytes = 0;

  /**
   * @param inner what the factory built
   * @param name the registry name (messages name it)
   * @throws PolicyError when `inner` is not an EvictionPolicy (a method missing, a bad capacity or unit)
   */
  constructor(inner: EvictionPolicy<K>, name: string) {
    this.name = name;
    const bad = (rule: string) => new PolicyError({ policy: name, call: 'factory', rule });
    if (typeof inner !== 'object' || inner === null) throw bad(`the factory returns an EvictionPolicy object, got ${describe(inner)}`);
    for (const m of METHODS) if (typeof inner[m] !== 'function') throw bad(`the factory returns an EvictionPolicy (it has no ${m}() method)`);
    if (!Number.isSafeInteger(inner.capacity) || inner.capacity < 1) throw bad(`capacity is a positive safe integer, got ${describe(inner.capacity)}`);
    if (inner.unit !== 'bytes' && inner.unit !== 'objects') throw bad(`unit is 'bytes' or 'objects', got ${describe(inner.unit)}`);
    if (inner.count !== 0) throw bad(`a new policy holds nothing, count is ${describe(inner.count)}`);
    this.#inner = inner;
    this.capacity = inner.capacity;
    this.unit = inner.unit;
    // Optional methods exist here only when the policy has them (callers test for them: evictFrom, hints).
    if (typeof inner.evictKey === 'function') this.evictKey = (key) => this.#evictKey(key);
    if (typeof inner.hint === 'function') {
      this.hint = (key, hint) => {
        try {
          return inner.hint!(key, hint);
        } catch (e) {
          throw this.#failed('hint', undefined, e);
        }
      };
    }
  }

  get count(): number {
    return this.#resident.size;
  }

  get used(): number {
    return this.unit === 'objects' ? this.#resident.size : this.#usedBytes;
  }

  get usedBytes(): number {
    return this.#usedBytes;
  }

  get pinnedCount(): number {
    try {
      return this.#inner.pinnedCount;
    } catch (e) {
      throw this.#failed('pinnedCount', undefined, e);
    }
  }

  get pinnedUsed(): number {
    try {
      return this.#inner.pinnedUsed;
    } catch (e) {
      throw this.#failed('pinnedUsed', undefined, e);
    }
  }

  has(key: K): boolean {
    checkKey(key);
    return this.#resident.has(key);
  }

  sizeOf(key: K): number | undefined {
    return this.#resident.get(key);
  }

  keys(): IterableIterator<K> {
    return this.#resident.keys();
  }

  access(key: K, nextAccess?: number): boolean {
    checkKey(key);
    let hit: boolean;
    try {
      hit = this.#inner.access(key, nextAccess);
    } catch (e) {
      throw this.#failed('access', undefined, e);
    }
    if (hit !== this.#resident.has(key)) {
      throw this.#failed('access', `access(key) answers whether key is resident: ${describe(hit)} for ${describe(key)}, which is ${this.#resident.has(key) ? '' : 'not '}resident`);
    }
    return hit;
  }

  canAdmit(key: K, size: number): boolean {
    checkKey(key);
    checkSize(size);
    let ok: boolean;
    try {
      ok = this.#inner.canAdmit(key, size);
    } catch (e) {
      throw this.#failed('canAdmit', undefined, e);
    }
    if (ok && this.#resident.has(key)) throw this.#failed('canAdmit', `canAdmit(key) is false for a resident key (${describe(key)})`);
    return ok;
  }

  insert(key: K, size: number, hint?: PageHint<K>): K[] {
    checkKey(key);
    checkSize(size);
    // The caller's mistake, not the policy's: refused as the contract says.
    if (this.#resident.has(key)) throw new RangeError(`key ${describe(key)} is already resident`);
    let victims: K[];
    let rule: string | undefined;
    try {
      victims = this.#inner.insert(key, size, hint);
      rule = this.#checkInsert(key, size, victims);
    } catch (e) {
      // A RangeError for an insert canAdmit() refuses is the contract's answer to the caller's mistake.
      if (e instanceof RangeError && !this.#admitsQuietly(key, size)) throw e;
      throw this.#failed('insert', undefined, e, key);
    }
    if (rule !== undefined) throw this.#failed('insert', rule, undefined, key);
    for (const v of victims) this.#drop(v);
    this.#resident.set(key, size);
    this.#usedBytes += size;
    return victims;
  }

  evict(): K | undefined {
    let v: K | undefined;
    let rule: string | undefined;
    try {
      v = this.#inner.evict();
      rule = this.#checkEvict(v);
    } catch (e) {
      throw this.#failed('evict', undefined, e);
    }
    if (rule !== undefined) throw this.#failed('evict', rule);
    if (v !== undefined) this.#drop(v);
    return v;
  }

  peekVictims(count: number): K[] {
    checkInteger(count, 'count', 0);
    let out: K[];
    try {
      out = this.#inner.peekVictims(count);
    } catch (e) {
      throw this.#failed('peekVictims', undefined, e);
    }
    if (!Array.isArray(out)) throw this.#failed('peekVictims', `peekVictims() answers an array, got ${describe(out)}`);
    if (out.length > count) throw this.#failed('peekVictims', `peekVictims(${count}) answers at most ${count} keys, got ${out.length}`);
    for (const k of out) if (!this.#resident.has(k)) throw this.#failed('peekVictims', `peekVictims() answers resident keys: ${describe(k)} is not`);
    return out;
  }

  remove(key: K): boolean {
    checkKey(key);
    const was = this.#resident.has(key);
    let removed: boolean;
    let rule: string | undefined;
    try {
      removed = this.#inner.remove(key);
      if (removed !== was) rule = `remove(key) answers whether key was resident: ${describe(removed)} for ${describe(key)}, which was ${was ? '' : 'not '}resident`;
      else rule = was ? (this.#checkLeft(key, 'remove()') ?? this.#checkCount(this.#resident.size - 1, `removing ${describe(key)}`)) : this.#checkCount(this.#resident.size, `removing ${describe(key)}, which was not resident`);
    } catch (e) {
      throw this.#failed('remove', undefined, e);
    }
    if (rule !== undefined) throw this.#failed('remove', rule);
    if (was) this.#drop(key);
    return removed;
  }

  pin(key: K): number {
    checkKey(key);
    try {
      return this.#inner.pin(key);
    } catch (e) {
      throw this.#failed('pin', undefined, e);
    }
  }

  unpin(key: K): number {
    checkKey(key);
    try {
      return this.#inner.unpin(key);
    } catch (e) {
      throw this.#failed('unpin', undefined, e);
    }
  }

  pinCount(key: K): number {
    try {
      return this.#inner.pinCount(key);
    } catch (e) {
      throw this.#failed('pinCount', undefined, e);
    }
  }

  reset(): void {
    this.#resident.clear();
    this.#usedBytes = 0;
    try {
      this.#inner.reset();
    } catch (e) {
      throw this.#failed('reset', undefined, e);
    }
    if (this.#inner.count !== 0) throw this.#failed('reset', `reset() empties the policy, count is ${describe(this.#inner.count)} after it`);
  }

  // ---- internals -----------------------------------------------------------------------------------------------

  #evictKey(key: K): boolean {
    checkKey(key);
    let evicted: boolean;
    let rule: string | undefined;
    try {
      evicted = this.#inner.evictKey!(key);
      rule = evicted ? (this.#checkLeft(key, 'evictKey()') ?? this.#checkCount(this.#resident.size - 1, `evicting ${describe(key)}`)) : this.#checkCount(this.#resident.size, `not evicting ${describe(key)}`);
    } catch (e) {
      throw this.#failed('evictKey', undefined, e);
    }
    if (rule !== undefined) throw this.#failed('evictKey', rule);
    if (evicted) this.#drop(key);
    return evicted;
  }

  /** The first rule that evict()'s answer `v` breaks, if any. */
  #checkEvict(v: K | undefined): string | undefined {
    if (v !== undefined) return this.#checkLeft(v, 'evict()') ?? this.#checkCount(this.#resident.size - 1, `evicting ${describe(v)}`);
    const rule = this.#checkCount(this.#resident.size, 'answering no victim');
    if (rule !== undefined) return rule;
    const pinned = this.#inner.pinnedCount;
    if (pinned >= this.#resident.size) return undefined;
    return `evict() answers undefined only when every resident key is pinned: ${this.#resident.size - pinned} of ${this.#resident.size} are not`;
  }

  /** Whether the policy admits `key` now; `true` (the insert was no mistake of the caller's) when it cannot say. */
  #admitsQuietly(key: K, size: number): boolean {
    try {
      return this.#inner.canAdmit(key, size) === true;
    } catch {
      return true;
    }
  }

  /** The first rule that insert(key, size)'s answer breaks, if any. */
  #checkInsert(key: K, size: number, victims: K[]): string | undefined {
    if (!Array.isArray(victims)) return `insert() answers an array of victims, got ${describe(victims)}`;
    const n = victims.length;
    const seen = n > 16 ? new Set<K>() : undefined;
    let freed = 0;
    for (let i = 0; i < n; i++) {
      const v = victims[i]!;
      if (v === key) return `a victim is not the key being inserted (${describe(key)})`;
      if (seen !== undefined) {
        if (seen.has(v)) return `each victim appears once: ${describe(v)} is there twice`;
        seen.add(v);
      } else {
        for (let j = 0; j < i; j++) if (victims[j] === v) return `each victim appears once: ${describe(v)} is there twice`;
      }
      const rule = this.#checkLeft(v, 'insert()');
      if (rule !== undefined) return rule;
      freed += this.#resident.get(v)!;
    }
    const inner = this.#inner;
    if (!inner.has(key)) return `the inserted key is resident after insert(): has(${describe(key)}) is false`;
    const count = this.#resident.size + 1 - n;
    const rule = this.#checkCount(count, `inserting ${describe(key)} with ${n} victim(s)`);
    if (rule !== undefined) return rule;
    const used = this.unit === 'objects' ? count : this.#usedBytes - freed + size;
    if (used > this.capacity) return `used <= capacity after insert(): ${used} > ${this.capacity} ${this.unit} (it evicted too little)`;
    return undefined;
  }

  /** The rule a victim `v` reported by `call` breaks: it was resident, and it is not any more. */
  #checkLeft(v: K, call: string): string | undefined {
    if (!this.#resident.has(v)) return `each victim was resident: ${call} named ${describe(v)}, which was not`;
    if (this.#inner.has(v)) return `a victim is no longer resident: has(${describe(v)}) is still true after ${call} named it`;
    return undefined;
  }

  /** The rule the policy's `count` breaks unless it is `expected` after `after`. */
  #checkCount(expected: number, after: string): string | undefined {
    const count = this.#inner.count;
    if (count === expected) return undefined;
    return `count is the number of resident keys: ${describe(count)} after ${after}, not ${expected} (a key left or stayed unreported)`;
  }

  #drop(key: K): void {
    this.#usedBytes -= this.#resident.get(key)!;
    this.#resident.delete(key);
  }

  /**
   * The error for a failed `call`, after the record is brought back in line with the policy: the keys that left it
   * are the error's victims, and `inserting` (the key of a failed insert) does not stay.
   */
  #failed(call: string, rule: string | undefined, cause?: unknown, inserting?: K): PolicyError {
    const victims: K[] = [];
    const inner = this.#inner;
    try {
      if (inserting !== undefined && inner.has(inserting)) inner.remove(inserting);
      for (const k of this.#resident.keys()) if (!inner.has(k)) victims.push(k);
    } catch {
      // It fails has() or remove() too: what left cannot be found out; the record stays as it was.
      victims.length = 0;
    }
    for (const v of victims) this.#drop(v);
    const options: PolicyErrorOptions = { policy: this.name, call, victims };
    if (rule !== undefined) options.rule = rule;
    if (cause !== undefined) options.cause = cause;
    return new PolicyError(options);
  }
}
