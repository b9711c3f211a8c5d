import { describe, expect, it } from 'vitest';
import { LfuPolicy } from './lfu.js';
import { run } from '../test-helpers.js';

describe('LfuPolicy', () => {
  it('evicts the least frequently used object (worked by hand, 3 objects)', () => {
    const lfu = new LfuPolicy<string>({ capacity: 3, unit: 'objects' });
    // A:3 B:2 C:1 -> D evicts C; C (freq 1 again) evicts D; E evicts C.
    expect(run(lfu, 'A B C A A B D C E')).toEqual({ outcomes: 'MMMHHHMMM', victims: ['C', 'D', 'C'] });
    expect(lfu.snapshot().buckets).toEqual([
      [1, ['E']],
      [2, ['B']],
      [3, ['A']],
    ]);
    expect(lfu.frequencyOf('A')).toBe(3);
  });

  it('breaks ties by least recent use: the first to reach the frequency goes first', () => {
    const lfu = new LfuPolicy<string>({ capacity: 3, unit: 'objects' });
    // A, B, C all reach frequency 2, A first: D evicts A. Then D (freq 1) is alone at the bottom: E evicts D.
    expect(run(lfu, 'A B C A B C D E')).toEqual({ outcomes: 'MMMHHHMM', victims: ['A', 'D'] });
    expect(lfu.peekVictims(3)).toEqual(['E', 'B', 'C']);
  });

  it('forgets frequencies on eviction', () => {
    const lfu = new LfuPolicy<string>({ capacity: 1, unit: 'objects' });
    expect(run(lfu, 'A A A B A')).toEqual({ outcomes: 'MHHMM', victims: ['A', 'B'] });
    expect(lfu.frequencyOf('A')).toBe(1);
  });
});
