import { describe, expect, it } from 'vitest';
import { LruPolicy } from './lru.js';
import { run } from '../test-helpers.js';

describe('LruPolicy', () => {
  it('evicts the least recently used object (worked by hand, 3 objects)', () => {
    const lru = new LruPolicy<string>({ capacity: 3, unit: 'objects' });
    // [C B A] -> A hit [A C B] -> D evicts B -> B evicts C -> E evicts A -> A evicts D
    expect(run(lru, 'A B C A D B E A')).toEqual({ outcomes: 'MMMHMMMM', victims: ['B', 'C', 'A', 'D'] });
    expect(lru.snapshot().queue).toEqual(['A', 'E', 'B']);
  });

  it('counts bytes: an object larger than the cache is refused without evicting; others evict until they fit', () => {
    const lru = new LruPolicy<string>({ capacity: 10, unit: 'bytes' });
    // X (11 bytes) > 10: refused, A and B stay. C needs 3 more: B goes. D (9) needs A and C to go.
    expect(run(lru, 'A:4 B:4 X:11 A:4 C:3 D:9')).toEqual({ outcomes: 'MMRHMM', victims: ['B', 'A', 'C'] });
    expect([lru.used, lru.usedBytes, lru.count]).toEqual([9, 9, 1]);
  });

  it('passes over pinned objects', () => {
    const lru = new LruPolicy<string>({ capacity: 3, unit: 'objects' });
    run(lru, 'A B C');
    lru.pin('A');
    expect(lru.peekVictims(5)).toEqual(['B', 'C']);
    expect(run(lru, 'D E')).toEqual({ outcomes: 'MM', victims: ['B', 'C'] });
    expect(lru.canAdmit('F', 1)).toBe(true);
    lru.pin('D');
    lru.pin('E');
    expect(lru.canAdmit('F', 1)).toBe(false);
    expect(lru.evict()).toBeUndefined();
  });
});
