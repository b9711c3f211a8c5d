import { describe, expect, it } from 'vitest';
import { MruPolicy } from './mru.js';
import { LruPolicy } from './lru.js';
import { run } from '../test-helpers.js';

describe('MruPolicy', () => {
  it('evicts the most recently used object (worked by hand, 3 objects)', () => {
    const mru = new MruPolicy<string>({ capacity: 3, unit: 'objects' });
    // [C B A] -> A hit [A C B] -> D evicts A -> B hit [B D C] -> E evicts B
    expect(run(mru, 'A B C A D B E')).toEqual({ outcomes: 'MMMHMHM', victims: ['A', 'B'] });
    expect(mru.snapshot().queue).toEqual(['E', 'D', 'C']);
  });

  it('keeps most of a cyclic scan larger than the cache, where LRU misses every access', () => {
    const loop = Array.from({ length: 10 }, () => 'A B C D E').join(' ');
    const mru = run(new MruPolicy<string>({ capacity: 4, unit: 'objects' }), loop);
    const lru = run(new LruPolicy<string>({ capacity: 4, unit: 'objects' }), loop);
    expect(lru.outcomes).not.toContain('H');
    expect([...mru.outcomes].filter((o) => o === 'H').length).toBeGreaterThan(25);
  });

  it('passes over pinned objects', () => {
    const mru = new MruPolicy<string>({ capacity: 3, unit: 'objects' });
    run(mru, 'A B C');
    mru.pin('C');
    expect(mru.peekVictims(3)).toEqual(['B', 'A']);
    expect(run(mru, 'D')).toEqual({ outcomes: 'M', victims: ['B'] });
  });
});
