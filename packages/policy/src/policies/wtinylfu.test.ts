import { describe, expect, it } from 'vitest';
import { WTinyLfuPolicy } from './wtinylfu.js';
import { LruPolicy } from './lru.js';
import { run } from '../test-helpers.js';

describe('WTinyLfuPolicy', () => {
  it('sizes window, main and protected like Caffeine (1%, 80% of main)', () => {
    const p = new WTinyLfuPolicy({ capacity: 1000, unit: 'objects' });
    expect([p.windowCapacity, p.mainCapacity, p.protectedCapacity]).toEqual([10, 990, 792]);
    expect(() => new WTinyLfuPolicy({ capacity: 1, unit: 'objects' })).toThrow(/main/);
  });

  it('admits a window victim into a full main cache only when it is more frequent than main\'s victim', () => {
    const p = new WTinyLfuPolicy<string>({ capacity: 3, unit: 'objects', windowRatio: 0.34 });
    // window 1, main 2: A and B pass from the window into probation as they are pushed out; C sits in the window.
    run(p, 'A B C');
    expect(p.snapshot()).toEqual({ window: ['C'], probation: ['B', 'A'], protected: [] });
    // D: the window's C duels main's victim A; equal frequencies (1 each) evict the candidate.
    expect(run(p, 'D')).toEqual({ outcomes: 'M', victims: ['C'] });
    // D is requested 3 times in all; when E arrives, D (3) beats A (1) and enters probation.
    run(p, 'D D');
    expect(run(p, 'E')).toEqual({ outcomes: 'M', victims: ['A'] });
    expect(p.snapshot()).toEqual({ window: ['E'], probation: ['D', 'B'], protected: [] });
  });

  it('keeps a hot set through a scan that flushes LRU', () => {
    const hot = Array.from({ length: 150 }, (_, i) => `H${i % 50}`).join(' ');
    const scan = Array.from({ length: 1000 }, (_, i) => `S${i}`).join(' ');
    const trace = `${hot} ${hot} ${scan} ${hot}`;
    const w = run(new WTinyLfuPolicy<string>({ capacity: 100, unit: 'objects' }), trace);
    const lru = run(new LruPolicy<string>({ capacity: 100, unit: 'objects' }), trace);
    const tail = (o: string): number => [...o.slice(-150)].filter((c) => c === 'H').length;
    expect(tail(w.outcomes)).toBeGreaterThan(140);
    expect(tail(lru.outcomes)).toBeLessThan(110);
    expect(tail(w.outcomes)).toBeGreaterThan(tail(lru.outcomes));
  });
});
