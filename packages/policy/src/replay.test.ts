import { describe, expect, it } from 'vitest';
import { replay } from './replay.js';
import { LruPolicy } from './policies/lru.js';
import { LookupCountAdmission } from './admission.js';
import { trace } from './test-helpers.js';

describe('replay', () => {
  it('counts hits, misses, bytes, refusals and evictions under libCacheSim rules', () => {
    const lru = new LruPolicy<string>({ capacity: 10, unit: 'bytes' });
    const victims: string[] = [];
    const result = replay(lru, trace('A:4 B:4 X:11 A:4 C:3 D:9 D:9'), { record: true, onEvict: (k) => victims.push(k) });
    expect(result).toEqual({
      requests: 7,
      hits: 2,
      misses: 5,
      hitBytes: 13,
      missBytes: 31,
      inserted: 4,
      bypassed: 0,
      rejected: 1,
      evictions: 3,
      outcomes: [false, false, false, true, false, false, true],
      victims: ['B', 'A', 'C'],
    });
    expect(victims).toEqual(['B', 'A', 'C']);
  });

  it('bypasses what the admission filter refuses', () => {
    const lru = new LruPolicy<string>({ capacity: 2, unit: 'objects' });
    const admission = new LookupCountAdmission<string>({ lookups: 2 });
    // A is stored on its second lookup, B never (one lookup); A then hits.
    const result = replay(lru, trace('A B A A'), { admission, record: true });
    expect(result.outcomes).toEqual([false, false, false, true]);
    expect([result.bypassed, result.inserted]).toEqual([2, 1]);
  });

  it('accepts any iterable and names malformed requests', () => {
    const lru = new LruPolicy<number>({ capacity: 2, unit: 'objects' });
    function* requests(): Generator<{ key: number; size: number }> {
      for (let i = 0; i < 5; i++) yield { key: i % 3, size: 1 };
    }
    expect(replay(lru, requests()).misses).toBe(5);
    expect(() => replay(lru, [{ key: 1, size: 0 }])).toThrow(/requests\[0\]\.size/);
    expect(() => replay(lru, [{ key: 1, size: 1 }, { key: Number.NaN, size: 1 }])).toThrow(/requests\[1\]\.key/);
    expect(() => replay(lru, [null as never])).toThrow(/requests\[0\]/);
  });

  it('is deterministic: the same trace and configuration give the same result', () => {
    const keys = Array.from({ length: 2000 }, (_, i) => ({ key: (i * 7919) % 97, size: 1 + ((i * 31) % 5) }));
    const a = replay(new LruPolicy<number>({ capacity: 60 }), keys, { record: true });
    const b = replay(new LruPolicy<number>({ capacity: 60 }), keys, { record: true });
    expect(a).toEqual(b);
  });
});
