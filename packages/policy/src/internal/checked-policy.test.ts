import { describe, expect, it } from 'vitest';
import { PolicyError } from '../errors.js';
import { PolicyRegistry } from '../registry.js';
import type { EvictionPolicy, PolicyOptions } from '../types.js';
import { CheckedPolicy } from './checked-policy.js';

type Fault =
  | 'none'
  | 'throw-insert'
  | 'garbage-victim'
  | 'dup-victim'
  | 'no-evict'
  | 'phantom-victim'
  | 'evict-self'
  | 'silent-drop'
  | 'evict-garbage'
  | 'evict-undefined'
  | 'access-lies';

/** A hand-written LRU over a Map (objects: every key costs 1), with one fault switched on by `fault`. */
class MapLru implements EvictionPolicy<number> {
  readonly name = 'map-lru';
  readonly unit = 'objects' as const;
  readonly capacity: number;
  readonly map = new Map<number, number>();
  readonly pins = new Map<number, number>();
  fault: Fault = 'none';
  constructor(options: PolicyOptions) {
    this.capacity = options.capacity;
  }
  get count() {
    return this.map.size;
  }
  get used() {
    return this.map.size;
  }
  get usedBytes() {
    let n = 0;
    for (const s of this.map.values()) n += s;
    return n;
  }
  get pinnedCount() {
    return [...this.pins.values()].filter((c) => c > 0).length;
  }
  get pinnedUsed() {
    return this.pinnedCount;
  }
  has(k: number) {
    return this.map.has(k);
  }
  sizeOf(k: number) {
    return this.map.get(k);
  }
  keys() {
    return this.map.keys();
  }
  access(k: number) {
    if (this.fault === 'access-lies') return true;
    const s = this.map.get(k);
    if (s === undefined) return false;
    this.map.delete(k);
    this.map.set(k, s);
    return true;
  }
  canAdmit(k: number) {
    return !this.map.has(k) && this.pinnedCount < this.capacity;
  }
  #victim(): number | undefined {
    for (const k of this.map.keys()) if (!(this.pins.get(k)! > 0)) return k;
    return undefined;
  }
  insert(k: number, size: number): number[] {
    if (this.fault === 'throw-insert') throw new Error('boom');
    if (!this.canAdmit(k)) throw new RangeError(`cannot admit ${k}`);
    const victims: number[] = [];
    if (this.fault !== 'no-evict' && this.fault !== 'phantom-victim') {
      while (this.map.size + 1 > this.capacity) {
        const v = this.#victim()!;
        this.map.delete(v);
        victims.push(v);
      }
    }
    this.map.set(k, size);
    switch (this.fault) {
      case 'garbage-victim':
        return [...victims, 1e9];
      case 'dup-victim':
        return victims.length ? [...victims, victims[0]!] : victims;
      case 'phantom-victim':
        return [this.map.keys().next().value!];
      case 'evict-self':
        return [...victims, k];
      case 'silent-drop': {
        const v = this.#victim()!;
        this.map.delete(v);
        return victims;
      }
      default:
        return victims;
    }
  }
  evict() {
    if (this.fault === 'evict-undefined') return undefined;
    if (this.fault === 'evict-garbage') return 1e9;
    const v = this.#victim();
    if (v !== undefined) this.map.delete(v);
    return v;
  }
  peekVictims(n: number) {
    return [...this.map.keys()].filter((k) => !(this.pins.get(k)! > 0)).slice(0, n);
  }
  remove(k: number) {
    this.pins.delete(k);
    return this.map.delete(k);
  }
  pin(k: number) {
    if (!this.map.has(k)) return 0;
    const c = (this.pins.get(k) ?? 0) + 1;
    this.pins.set(k, c);
    return c;
  }
  unpin(k: number) {
    const c = Math.max(0, (this.pins.get(k) ?? 0) - 1);
    this.pins.set(k, c);
    return c;
  }
  pinCount(k: number) {
    return this.pins.get(k) ?? 0;
  }
  reset() {
    this.map.clear();
    this.pins.clear();
  }
}

const registry = new PolicyRegistry(false);
let inner: MapLru | undefined;
registry.register('map-lru', (o) => (inner = new MapLru(o)));

/** A checked map-lru of 4 objects holding keys 1..4 (1 the least recently used), and its unchecked inside. */
function full(): { policy: EvictionPolicy<number>; inner: MapLru } {
  const policy = registry.create<number>('map-lru', { capacity: 4, unit: 'objects' });
  for (let k = 1; k <= 4; k++) policy.insert(k, 10);
  return { policy, inner: inner! };
}

function failure(fn: () => unknown): PolicyError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(PolicyError);
    return e as PolicyError;
  }
  throw new Error('did not throw');
}

describe('CheckedPolicy (custom policies behind the contract)', () => {
  it('passes a well-behaved policy through unchanged', () => {
    const { policy } = full();
    expect(policy).toBeInstanceOf(CheckedPolicy);
    expect(policy.insert(5, 10)).toEqual([1]);
    expect(policy.access(2)).toBe(true);
    expect(policy.evict()).toBe(3);
    expect([policy.count, policy.used, policy.usedBytes, [...policy.keys()].sort()]).toEqual([3, 3, 30, [2, 4, 5]]);
  });

  // Each fault: the rule named, and what the record holds afterwards (the keys the policy really holds).
  it.each<[Fault, RegExp, number[]]>([
    ['garbage-victim', /insert\(\) broke a rule: each victim was resident: insert\(\) named 1000000000, which was not/, [1]],
    ['dup-victim', /insert\(\) broke a rule: each victim appears once: 1 is there twice/, [1]],
    ['no-evict', /insert\(\) broke a rule: used <= capacity after insert\(\): 5 > 4 objects/, []],
    ['phantom-victim', /insert\(\) broke a rule: a victim is no longer resident: has\(1\) is still true/, []],
    ['evict-self', /insert\(\) broke a rule: a victim is not the key being inserted \(5\)/, [1]],
    ['silent-drop', /insert\(\) broke a rule: count is the number of resident keys: 3 after inserting 5 with 1 victim\(s\), not 4/, [1, 2]],
    ['throw-insert', /insert\(\) threw: Error: boom/, []],
  ])('an insert that breaks the contract (%s) is a PolicyError naming the rule; the record follows the policy', (fault, rule, gone) => {
    const { policy, inner: raw } = full();
    raw.fault = fault;
    const e = failure(() => policy.insert(5, 10));
    expect(e.message).toMatch(/^policy map-lru: /);
    expect(e.message).toMatch(rule);
    expect(e).toMatchObject({ code: 'ERR_POLICY', policy: 'map-lru', call: 'insert' });
    expect([...e.victims].sort()).toEqual(gone);
    // The failed insert's key is not resident, and the record is what the policy holds.
    expect(policy.has(5)).toBe(false);
    expect(raw.has(5)).toBe(false);
    expect([...policy.keys()].sort()).toEqual([...raw.keys()].sort());
    expect(policy.count).toBe(raw.count);
  });

  it('checks evict(), access() and what a thrown error says', () => {
    const a = full();
    a.inner.fault = 'evict-garbage';
    expect(failure(() => a.policy.evict()).message).toMatch(/evict\(\) broke a rule: each victim was resident: evict\(\) named 1000000000, which was not/);
    const b = full();
    b.inner.fault = 'evict-undefined';
    expect(failure(() => b.policy.evict()).message).toMatch(/answers undefined only when every resident key is pinned: 4 of 4 are not/);
    for (let k = 1; k <= 4; k++) b.policy.pin(k);
    expect(b.policy.evict()).toBeUndefined();
    const c = full();
    c.inner.fault = 'access-lies';
    expect(failure(() => c.policy.access(9)).message).toMatch(/access\(key\) answers whether key is resident: true for 9, which is not resident/);
    const e = failure(() => new CheckedPolicy({} as never, 'empty'));
    expect(e.message).toBe('policy empty: factory() broke a rule: the factory returns an EvictionPolicy (it has no has() method)');
  });

  it('leaves bad arguments to TypeError / RangeError, as the contract says', () => {
    const { policy } = full();
    expect(() => policy.access(Number.NaN)).toThrow(TypeError);
    expect(() => policy.insert(9, 0)).toThrow(RangeError);
    expect(() => policy.insert(1, 10)).toThrow(/already resident/);
    expect(() => policy.peekVictims(-1)).toThrow(RangeError);
    // An insert canAdmit() refuses (every resident key pinned): the policy's RangeError, as the contract says.
    for (let k = 1; k <= 4; k++) policy.pin(k);
    expect(policy.canAdmit(9, 10)).toBe(false);
    const e = (() => {
      try {
        policy.insert(9, 10);
      } catch (err) {
        return err;
      }
    })();
    expect(e).toBeInstanceOf(RangeError);
    expect(e).not.toBeInstanceOf(PolicyError);
  });
});
