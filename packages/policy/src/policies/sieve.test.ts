import { describe, expect, it } from 'vitest';
import { SievePolicy } from './sieve.js';
import { ClockPolicy } from './clock.js';
import { run } from '../test-helpers.js';

describe('SievePolicy', () => {
  it('moves the hand from tail to head and keeps retained objects in place (worked by hand, 3 objects)', () => {
    const sieve = new SievePolicy<string>({ capacity: 3, unit: 'objects' });
    // [C B A], A visited. D: hand at tail A (clear it), B evicted, hand rests on C -> [D C A].
    expect(run(sieve, 'A B C A D')).toEqual({ outcomes: 'MMMHM', victims: ['B'] });
    expect(sieve.snapshot()).toEqual({ queue: ['D', 'C', 'A'], visited: [], hand: 'C' });
    // C hit. E: hand at C (visited: clear), D unvisited -> evicted; D was the head, so the hand wraps.
    expect(run(sieve, 'C E')).toEqual({ outcomes: 'HM', victims: ['D'] });
    expect(sieve.snapshot()).toEqual({ queue: ['E', 'C', 'A'], visited: [], hand: undefined });
    // F: the hand restarts at the tail: A (cleared on the first sweep) goes now.
    expect(run(sieve, 'F')).toEqual({ outcomes: 'M', victims: ['A'] });
    expect(sieve.snapshot()).toEqual({ queue: ['F', 'E', 'C'], visited: [], hand: 'C' });
  });

  it('evicts a newer object where CLOCK would evict the old one', () => {
    const sieve = new SievePolicy<string>({ capacity: 3, unit: 'objects' });
    const clock = new ClockPolicy<string>({ capacity: 3, unit: 'objects' });
    expect(run(sieve, 'A B C A D C E').victims).toEqual(['B', 'D']);
    expect(run(clock, 'A B C A D C E').victims).toEqual(['B', 'A']);
  });

  it('moves the hand off an object that is removed', () => {
    const sieve = new SievePolicy<string>({ capacity: 3, unit: 'objects' });
    run(sieve, 'A B C A D');
    expect(sieve.snapshot().hand).toBe('C');
    expect(sieve.remove('C')).toBe(true);
    expect(sieve.snapshot().hand).toBe('D');
    expect(run(sieve, 'E F')).toEqual({ outcomes: 'MM', victims: ['D'] });
  });

  it('passes over pinned objects without clearing their bit', () => {
    const sieve = new SievePolicy<string>({ capacity: 3, unit: 'objects' });
    run(sieve, 'A B C A');
    sieve.pin('B');
    // Hand: A (visited, cleared), B pinned (skipped), C evicted; C was the head, so the hand wraps -> [D B A].
    expect(run(sieve, 'D')).toEqual({ outcomes: 'M', victims: ['C'] });
    sieve.access('B');
    expect(sieve.snapshot()).toEqual({ queue: ['D', 'B', 'A'], visited: ['B'], hand: undefined });
    expect(sieve.peekVictims(3)).toEqual(['A', 'D']);
  });
});
