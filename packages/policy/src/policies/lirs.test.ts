import { describe, expect, it } from 'vitest';
import { LirsPolicy } from './lirs.js';
import { LruPolicy } from './lru.js';
import { run } from '../test-helpers.js';

describe('LirsPolicy', () => {
  it('follows the paper: warm-up LIR, HIR in Q, ghosts promoted on return (worked by hand)', () => {
    const p = new LirsPolicy<string>({ capacity: 3, unit: 'objects', hirRatio: 0.34 });
    expect([p.lirCapacity, p.hirCapacity]).toEqual([2, 1]);
    run(p, 'A B C');
    // A B are LIR (warm-up); C is resident HIR, in S and in Q.
    expect(p.snapshot()).toEqual({ s: [['C', 'hir'], ['B', 'lir'], ['A', 'lir']], q: ['C'], lirUsed: 2 });
    // D evicts Q's front C, which stays in S as a ghost; D is HIR.
    expect(run(p, 'D')).toEqual({ outcomes: 'M', victims: ['C'] });
    expect(p.snapshot().s).toEqual([['D', 'hir'], ['C', 'ghost'], ['B', 'lir'], ['A', 'lir']]);
    // C returns while still in S: it becomes LIR; the bottom LIR (A) becomes HIR at the end of Q; D was evicted.
    expect(run(p, 'C')).toEqual({ outcomes: 'M', victims: ['D'] });
    expect(p.snapshot()).toEqual({ s: [['C', 'lir'], ['D', 'ghost'], ['B', 'lir']], q: ['A'], lirUsed: 2 });
  });

  it('keeps most of a loop slightly larger than the cache, where LRU misses every access', () => {
    const loop = Array.from({ length: 20 }, () => 'A B C D E F').join(' ');
    const lirs = run(new LirsPolicy<string>({ capacity: 5, unit: 'objects' }), loop);
    const lru = run(new LruPolicy<string>({ capacity: 5, unit: 'objects' }), loop);
    expect(lru.outcomes).not.toContain('H');
    expect([...lirs.outcomes].filter((o) => o === 'H').length).toBeGreaterThan(60);
  });

  it('bounds the ghosts kept in S', () => {
    const p = new LirsPolicy<number>({ capacity: 10, unit: 'objects', ghostRatio: 0.5 });
    for (let k = 0; k < 200; k++) if (!p.access(k)) p.insert(k, 1);
    expect(p.snapshot().s.filter(([, st]) => st === 'ghost').length).toBeLessThanOrEqual(5);
  });
});
