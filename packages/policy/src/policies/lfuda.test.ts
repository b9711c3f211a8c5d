import { describe, expect, it } from 'vitest';
import { LfudaPolicy } from './lfuda.js';
import { LfuPolicy } from './lfu.js';
import { run } from '../test-helpers.js';

describe('LfudaPolicy', () => {
  it('keys objects F + L, L being the last victim\'s key (worked by hand)', () => {
    const p = new LfudaPolicy<string>({ capacity: 2, unit: 'objects' });
    run(p, 'A A A B');
    expect([p.keyValueOf('A'), p.keyValueOf('B'), p.age]).toEqual([3, 1, 0]);
    expect(run(p, 'C')).toEqual({ outcomes: 'M', victims: ['B'] });
    expect([p.age, p.keyValueOf('C')]).toEqual([1, 2]);
    // C hit: F = 2, K = 2 + 1 = 3, equal to A's 3: A (older) goes first
    run(p, 'C');
    expect(p.peekVictims(2)).toEqual(['A', 'C']);
  });

  it('ages out a once-popular object that LFU keeps forever', () => {
    const trace = `${Array.from({ length: 30 }, () => 'OLD').join(' ')} ${Array.from({ length: 200 }, (_, i) => `N${i % 4}`).join(' ')}`;
    const lfuda = new LfudaPolicy<string>({ capacity: 4, unit: 'objects' });
    const lfu = new LfuPolicy<string>({ capacity: 4, unit: 'objects' });
    run(lfuda, trace);
    run(lfu, trace);
    expect(lfu.has('OLD')).toBe(true);
    expect(lfuda.has('OLD')).toBe(false);
  });
});
