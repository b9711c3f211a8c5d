/**
 * `evictKey`: evicting a key the caller chose, under the policy's own rules (its ghost history remembers it).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createPolicy, ORACLE_POLICIES, policyNames } from '../registry.js';
import type { CapacityUnit, EvictionPolicy } from '../types.js';
import { evictFrom } from '../wrappers/evict-from.js';
import { PrefixAwarePolicy } from '../wrappers/prefix-aware.js';
import { ArcPolicy } from './arc.js';
import { LfudaPolicy } from './lfuda.js';
import { LirsPolicy } from './lirs.js';
import { S3FifoPolicy } from './s3fifo.js';
import { TwoQPolicy } from './twoq.js';

const online = policyNames().filter((n) => !ORACLE_POLICIES.includes(n));

/**
 * Policies whose own eviction of their next victim changes nothing but that victim (no hand sweep, no second
 * chances, no duel): for them `evictKey(peekVictims(1)[0])` must leave exactly the state `evict()` leaves.
 */
const EXACT = ['lru', 'fifo', 'mru', 'lfu', 'slru', 'arc', '2q', 'lirs', 'lfuda', 'gdsf'];

const make = (name: string, unit: CapacityUnit, capacity: number): EvictionPolicy<number> =>
  createPolicy<number>(name, { unit, capacity, ...(name === 's3fifo' ? { smallRatio: 0.5 } : {}) });

type Op = { kind: 'request'; key: number; size: number } | { kind: 'pin' | 'unpin' | 'evictKey'; key: number } | { kind: 'evictVictim' };

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 8, arbitrary: fc.record({ kind: fc.constant('request' as const), key: fc.integer({ min: 0, max: 24 }), size: fc.integer({ min: 1, max: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom('pin' as const, 'unpin' as const), key: fc.integer({ min: 0, max: 24 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('evictKey' as const), key: fc.integer({ min: 0, max: 24 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('evictVictim' as const) }) },
);

function request(p: EvictionPolicy<number>, key: number, size: number): [boolean, number[]] {
  if (p.access(key)) return [true, []];
  return [false, p.canAdmit(key, size) ? p.insert(key, size) : []];
}

describe('evictKey', () => {
  for (const name of online) {
    for (const unit of ['objects', 'bytes'] as const) {
      it(`${name} (${unit}): evicts exactly a resident unpinned key, refuses a pinned or absent one`, () => {
        fc.assert(
          fc.property(fc.array(op, { maxLength: 120 }), (ops) => {
            const p = make(name, unit, 12);
            for (const o of ops) {
              if (o.kind === 'request') request(p, o.key, o.size);
              else if (o.kind === 'pin') p.pin(o.key);
              else if (o.kind === 'unpin') p.unpin(o.key);
              else {
                const key = o.kind === 'evictKey' ? o.key : p.peekVictims(1)[0];
                if (key === undefined) continue;
                const before = { count: p.count, used: p.used, bytes: p.usedBytes, size: p.sizeOf(key) };
                const expected = p.has(key) && p.pinCount(key) === 0;
                expect(evictFrom(p, key)).toBe(expected);
                expect(p.has(key)).toBe(!expected && before.size !== undefined);
                const cost = expected ? (unit === 'objects' ? 1 : before.size!) : 0;
                expect([p.count, p.used, p.usedBytes]).toEqual([
                  before.count - (expected ? 1 : 0),
                  before.used - cost,
                  before.bytes - (expected ? before.size! : 0),
                ]);
              }
              expect(p.used).toBeLessThanOrEqual(p.capacity);
            }
          }),
          { numRuns: 60 },
        );
      });
    }
  }

  for (const name of EXACT) {
    it(`${name}: evictKey of its own next victim leaves the state evict() leaves`, () => {
      fc.assert(
        fc.property(fc.array(op, { maxLength: 150 }), fc.constantFrom('objects' as const, 'bytes' as const), (ops, unit) => {
          const a = make(name, unit, 12);
          const b = make(name, unit, 12);
          for (const o of ops) {
            if (o.kind === 'request') expect(request(b, o.key, o.size)).toEqual(request(a, o.key, o.size));
            else if (o.kind === 'pin') expect(b.pin(o.key)).toBe(a.pin(o.key));
            else if (o.kind === 'unpin') expect(b.unpin(o.key)).toBe(a.unpin(o.key));
            else {
              const v = a.evict();
              if (v !== undefined) expect(evictFrom(b, v)).toBe(true);
            }
            expect(b.peekVictims(4)).toEqual(a.peekVictims(4));
          }
          expect([...b.keys()].sort()).toEqual([...a.keys()].sort());
        }),
        { numRuns: 80 },
      );
    });
  }

  it('arc: a key evicted from T1 is a B1 ghost, and comes back into T2', () => {
    const p = new ArcPolicy<string>({ capacity: 4, unit: 'objects' });
    for (const k of ['a', 'b', 'c']) p.insert(k, 1);
    expect(p.evictKey('b')).toBe(true);
    expect(p.snapshot().b1).toEqual(['b']);
    expect(p.access('b')).toBe(false);
    p.insert('b', 1);
    expect(p.snapshot().t2).toEqual(['b']);
    expect(p.p).toBe(1);
  });

  it('s3fifo: a key evicted from small enters the ghost queue and comes back into main; from main, no ghost', () => {
    const p = new S3FifoPolicy<string>({ capacity: 10, unit: 'objects', smallRatio: 0.3 });
    for (const k of ['a', 'b', 'c']) p.insert(k, 1);
    expect(p.evictKey('b')).toBe(true);
    expect(p.snapshot().ghost).toEqual(['b']);
    p.access('b');
    p.insert('b', 1);
    expect(p.snapshot().main).toEqual(['b']);
    expect(p.evictKey('b')).toBe(true);
    expect(p.snapshot().ghost).toEqual([]);
    p.pin('a');
    expect(p.evictKey('a')).toBe(false);
    expect(p.evictKey('zz')).toBe(false);
  });

  it('2q: a key evicted from A1in is remembered in A1out and comes back into Am', () => {
    const p = new TwoQPolicy<string>({ capacity: 8, unit: 'objects' });
    for (const k of ['a', 'b']) p.insert(k, 1);
    expect(p.evictKey('a')).toBe(true);
    p.access('a');
    p.insert('a', 1);
    // From Am, a ghost-less eviction: the key is then new again (A1in).
    expect(p.evictKey('a')).toBe(true);
    p.insert('a', 1);
    expect(p.evictKey('a')).toBe(true);
    expect(p.evictKey('b')).toBe(true);
    expect(p.count).toBe(0);
  });

  it('lirs: a resident HIR key still in S stays as a non-resident entry and comes back LIR', () => {
    const p = new LirsPolicy<string>({ capacity: 100, unit: 'objects' });
    for (let i = 0; i < 99; i++) p.insert(`l${i}`, 1);
    p.insert('h', 1);
    expect(p.snapshot().q).toEqual(['h']);
    expect(p.evictKey('h')).toBe(true);
    expect(p.snapshot().s[0]).toEqual(['h', 'ghost']);
    p.access('h');
    p.insert('h', 1);
    expect(p.snapshot().s[0]).toEqual(['h', 'lir']);
  });

  it('lfuda: evicting a chosen key ages the cache to its key, never backwards', () => {
    const p = new LfudaPolicy<string>({ capacity: 4, unit: 'objects' });
    p.insert('a', 1);
    p.insert('b', 1);
    p.access('b');
    p.access('b');
    expect(p.evictKey('b')).toBe(true);
    expect(p.age).toBe(3);
    expect(p.evictKey('a')).toBe(true);
    expect(p.age).toBe(3);
  });

  it('prefix-aware:s3fifo: pages trimmed from a chain are S3-FIFO ghosts, so the returning chain enters main', () => {
    const inner = new S3FifoPolicy<string>({ capacity: 20, unit: 'objects', smallRatio: 0.2, ghostRatio: 1 });
    const p = new PrefixAwarePolicy(inner);
    let prev: string | null = null;
    for (const k of ['a', 'b', 'c']) {
      p.access(k);
      p.insert(k, 1, { parent: prev });
      prev = k;
    }
    // Fill until the chain leaves: its tail first, each page through evictKey.
    const evicted: string[] = [];
    for (let i = 0; evicted.length < 3; i++) {
      p.access(`x${i}`);
      evicted.push(...p.insert(`x${i}`, 1, { parent: null }).filter((k) => ['a', 'b', 'c'].includes(k)));
    }
    expect(evicted).toEqual(['c', 'b', 'a']);
    expect(inner.snapshot().ghost).toEqual(expect.arrayContaining(['a', 'b', 'c']));
    prev = null;
    for (const k of ['a', 'b', 'c']) {
      expect(p.access(k)).toBe(false);
      p.insert(k, 1, { parent: prev });
      prev = k;
    }
    expect(inner.snapshot().main.slice(0, 3)).toEqual(['c', 'b', 'a']);
  });
});
