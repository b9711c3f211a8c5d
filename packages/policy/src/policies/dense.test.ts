/**
 * The dense-key fast path (`options.denseKeys`): every built-in policy must make exactly the decisions of its
 * default (`Map`-keyed) path, on random operation sequences and on long random traces; and it must refuse keys
 * outside `[0, bound)` with an error naming the key.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createPolicy } from '../registry.js';
import { replay, type TraceRequest } from '../replay.js';
import { SeededRandom } from '../random.js';
import type { CapacityUnit, EvictionPolicy, PolicyOptions } from '../types.js';

const POLICIES = ['lru', 'fifo', 'clock', 'sieve', 'lfu', 'arc', 's3fifo', 'mru', 'slru', 'lirs', '2q', 'wtinylfu', 'lfuda', 'gdsf', 'opt', 'opt-size'] as const;

function make(name: string, unit: CapacityUnit, capacity: number, bound?: number): EvictionPolicy<number> {
  const options: PolicyOptions & { smallRatio?: number } = { unit, capacity };
  // S3-FIFO needs a small queue of at least 2 units.
  if (name === 's3fifo' && capacity * 0.1 < 2) options.smallRatio = 0.5;
  if (bound !== undefined) options.denseKeys = { bound };
  return createPolicy<number>(name, options);
}

type Op =
  | { kind: 'request'; key: number; size: number }
  | { kind: 'insert'; key: number; size: number }
  | { kind: 'remove'; key: number }
  | { kind: 'pin'; key: number }
  | { kind: 'unpin'; key: number }
  | { kind: 'evict' }
  | { kind: 'peek'; count: number }
  | { kind: 'reset' };

/** Applies one operation and returns everything observable about it. */
function apply(policy: EvictionPolicy<number>, op: Op): unknown {
  switch (op.kind) {
    case 'request': {
      const hit = policy.access(op.key);
      if (hit) return ['hit'];
      if (!policy.canAdmit(op.key, op.size)) return ['refused'];
      return ['miss', policy.insert(op.key, op.size)];
    }
    // An insert with no access first (ghost history is consumed by insert itself).
    case 'insert':
      return policy.canAdmit(op.key, op.size) ? ['inserted', policy.insert(op.key, op.size)] : ['refused'];
    case 'remove':
      return policy.remove(op.key);
    case 'pin':
      return policy.pin(op.key);
    case 'unpin':
      return policy.unpin(op.key);
    case 'evict':
      return policy.evict();
    case 'peek':
      return policy.peekVictims(op.count);
    case 'reset':
      policy.reset();
      return null;
  }
}

function observe(policy: EvictionPolicy<number>, keys: number): unknown {
  const perKey: unknown[] = [];
  for (let k = 0; k < keys; k++) perKey.push([policy.has(k), policy.sizeOf(k), policy.pinCount(k)]);
  return {
    used: policy.used,
    usedBytes: policy.usedBytes,
    count: policy.count,
    pinnedCount: policy.pinnedCount,
    pinnedUsed: policy.pinnedUsed,
    keys: [...policy.keys()].sort((a, b) => a - b),
    perKey,
  };
}

describe('denseKeys: the same decisions as the Map path', () => {
  for (const name of POLICIES) {
    it(`${name}: random operation sequences (requests, inserts, pins, removals, evictions, peeks, resets)`, () => {
      const scenario = fc
        .record({
          unit: fc.constantFrom<CapacityUnit>('objects', 'bytes'),
          keys: fc.integer({ min: 2, max: 40 }),
          capacity: fc.integer({ min: 4, max: 60 }),
        })
        .chain(({ unit, keys, capacity }) => {
          const key = fc.integer({ min: 0, max: keys - 1 });
          const size = fc.integer({ min: 1, max: 12 });
          const op = fc.oneof(
            { weight: 30, arbitrary: fc.record({ kind: fc.constant('request' as const), key, size }) },
            { weight: 3, arbitrary: fc.record({ kind: fc.constant('insert' as const), key, size }) },
            { weight: 2, arbitrary: fc.record({ kind: fc.constant('remove' as const), key }) },
            { weight: 3, arbitrary: fc.record({ kind: fc.constant('pin' as const), key }) },
            { weight: 3, arbitrary: fc.record({ kind: fc.constant('unpin' as const), key }) },
            { weight: 2, arbitrary: fc.record({ kind: fc.constant('evict' as const) }) },
            { weight: 2, arbitrary: fc.record({ kind: fc.constant('peek' as const), count: fc.integer({ min: 0, max: 6 }) }) },
            { weight: 1, arbitrary: fc.constant({ kind: 'reset' as const }) },
          );
          const cap = unit === 'objects' ? Math.max(4, capacity >> 2) : Math.max(16, capacity);
          // Bounds from exactly the key count to well above it (the dense map grows as keys arrive).
          const bound = fc.oneof(fc.constant(keys), fc.integer({ min: keys, max: 5000 }));
          return fc.record({ unit: fc.constant(unit), capacity: fc.constant(cap), keys: fc.constant(keys), bound, ops: fc.array(op, { maxLength: 200 }) });
        });
      fc.assert(
        fc.property(scenario, ({ unit, capacity, keys, bound, ops }) => {
          const viaMap = make(name, unit, capacity);
          const dense = make(name, unit, capacity, bound);
          for (const op of ops) {
            expect(apply(dense, op)).toEqual(apply(viaMap, op));
            expect(observe(dense, keys)).toEqual(observe(viaMap, keys));
          }
        }),
        { numRuns: 150 },
      );
    });

    it(`${name}: hit/miss and victim sequences of long random traces, objects and bytes mode`, () => {
      const rng = new SeededRandom(7 + name.length);
      const distinct = 6000;
      const sizeOf = new Float64Array(distinct).map(() => 1 + rng.nextInt(1000));
      const requests: TraceRequest<number>[] = [];
      for (let i = 0; i < 30_000; i++) {
        // a hot set, a warm set and a long tail
        const u = rng.next();
        const key = u < 0.5 ? rng.nextInt(200) : u < 0.8 ? rng.nextInt(1500) : rng.nextInt(distinct);
        requests.push({ key, size: sizeOf[key]! });
      }
      for (const [unit, capacity] of [['objects', 100], ['objects', 1200], ['bytes', 60_000], ['bytes', 500_000]] as const) {
        const viaMap = replay(make(name, unit, capacity), requests, { record: true });
        const dense = replay(make(name, unit, capacity, distinct), requests, { record: true });
        expect(dense.outcomes).toEqual(viaMap.outcomes);
        expect(dense.victims).toEqual(viaMap.victims);
        expect(dense).toEqual(viaMap);
        expect(viaMap.evictions).toBeGreaterThan(0);
      }
    });
  }
});

describe('denseKeys: bad keys and options', () => {
  for (const name of POLICIES) {
    it(`${name}: keys must be integers in [0, bound), and the error names the key`, () => {
      const policy = make(name, 'objects', 40, 10);
      for (const key of [1.5, -1, 10, 11, 2 ** 31, 2 ** 32 + 1, NaN, Infinity, -Infinity]) {
        const message = new RegExp(`key ${String(key).replace('.', '\\.')} must be an integer in \\[0, 10\\)`);
        expect(() => policy.access(key)).toThrow(RangeError);
        expect(() => policy.access(key)).toThrow(message);
        expect(() => policy.canAdmit(key, 1)).toThrow(message);
        expect(() => policy.insert(key, 1)).toThrow(message);
        for (const call of [policy.has, policy.sizeOf, policy.remove, policy.pin, policy.unpin, policy.pinCount]) {
          expect(() => call.call(policy, key)).toThrow(RangeError);
        }
      }
      expect(() => policy.access('3' as unknown as number)).toThrow(TypeError);
      expect(() => policy.access('3' as unknown as number)).toThrow(/key must be a number with options.denseKeys, got "3"/);
      // Nothing was inserted by the refused calls; the edges of the range work.
      expect(policy.count).toBe(0);
      for (const key of [0, 9, -0]) {
        policy.access(key);
        if (policy.canAdmit(key, 1)) policy.insert(key, 1);
      }
      expect([...policy.keys()].sort()).toEqual([0, 9]);
      expect(policy.access(0)).toBe(true);
      expect(policy.access(9)).toBe(true);
    });
  }

  it('the size is still checked, after the key', () => {
    const policy = make('lru', 'bytes', 100, 10);
    expect(() => policy.canAdmit(3, 0)).toThrow(/size must be an integer >= 1/);
    expect(() => policy.insert(3, 1.5)).toThrow(RangeError);
    expect(() => policy.canAdmit(30, 0)).toThrow(/key 30/);
  });

  it('refuses a malformed denseKeys option, naming it', () => {
    const bad: [unknown, RegExp, ErrorConstructor][] = [
      [{ bound: 0 }, /options\.denseKeys\.bound must be an integer in \[1, 2147483647\], got 0/, RangeError],
      [{ bound: 2 ** 31 }, /options\.denseKeys\.bound/, RangeError],
      [{ bound: 1.5 }, /options\.denseKeys\.bound/, RangeError],
      [{ bound: '9' }, /options\.denseKeys\.bound must be a number/, TypeError],
      [{}, /options\.denseKeys\.bound must be a number/, TypeError],
      [7, /options\.denseKeys must be an object/, TypeError],
    ];
    for (const name of POLICIES) {
      for (const [denseKeys, message, type] of bad) {
        expect(() => createPolicy(name, { capacity: 40, unit: 'objects', denseKeys } as PolicyOptions)).toThrow(type);
        expect(() => createPolicy(name, { capacity: 40, unit: 'objects', denseKeys } as PolicyOptions)).toThrow(message);
      }
    }
  });

  it('a bound of 1 and a bound far above the keys both work, and reset forgets everything', () => {
    const one = make('lru', 'objects', 4, 1);
    expect(one.access(0)).toBe(false);
    one.insert(0, 1);
    expect(one.access(0)).toBe(true);
    expect(() => one.access(1)).toThrow(/key 1 must be an integer in \[0, 1\)/);
    const wide = make('arc', 'objects', 4, 2 ** 31 - 1);
    for (const key of [5, 1 << 20, 3]) {
      expect(wide.access(key)).toBe(false);
      wide.insert(key, 1);
    }
    expect(wide.access(1 << 20)).toBe(true);
    expect(() => wide.access(2 ** 31 - 1)).toThrow(RangeError);
    wide.reset();
    expect(wide.count).toBe(0);
    expect(wide.has(5)).toBe(false);
    expect([...wide.keys()]).toEqual([]);
  });
});
