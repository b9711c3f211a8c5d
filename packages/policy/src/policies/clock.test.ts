import { describe, expect, it } from 'vitest';
import { ClockPolicy } from './clock.js';
import { run } from '../test-helpers.js';

describe('ClockPolicy', () => {
  it('gives a referenced object a second chance (worked by hand, 3 objects)', () => {
    const clock = new ClockPolicy<string>({ capacity: 3, unit: 'objects' });
    // [C B A], A referenced. D: A's bit cleared, A to the head [A C B], B evicted -> [D A C].
    // E: C (clear) evicted -> [E D A]. A hit sets its bit again. F: A cleared and moved, D evicted -> [F A E].
    expect(run(clock, 'A B C A D E A F')).toEqual({ outcomes: 'MMMHMMHM', victims: ['B', 'C', 'D'] });
    expect(clock.snapshot()).toEqual({ queue: ['F', 'A', 'E'], referenced: [] });
  });

  it('sweeps the whole clock when every object is referenced, then evicts in FIFO order', () => {
    const clock = new ClockPolicy<string>({ capacity: 3, unit: 'objects' });
    run(clock, 'A B C A B C');
    expect(clock.peekVictims(3)).toEqual(['A', 'B', 'C']);
    expect(clock.snapshot().referenced).toEqual(['C', 'B', 'A']);
    expect(run(clock, 'D E')).toEqual({ outcomes: 'MM', victims: ['A', 'B'] });
    expect(clock.snapshot()).toEqual({ queue: ['E', 'D', 'C'], referenced: [] });
  });

  it('differs from LRU: a re-referenced object keeps its place until the hand reaches it', () => {
    const clock = new ClockPolicy<string>({ capacity: 3, unit: 'objects' });
    // After D: [D A C]. C hit; E: C is at the tail with its bit set -> moved, A (clear) evicted.
    expect(run(clock, 'A B C A D C E')).toEqual({ outcomes: 'MMMHMHM', victims: ['B', 'A'] });
  });
});
