import { describe, expect, it } from 'vitest';
import { FifoPolicy } from './fifo.js';
import { run } from '../test-helpers.js';

describe('FifoPolicy', () => {
  it('evicts in insertion order whatever the hits (worked by hand, 3 objects)', () => {
    const fifo = new FifoPolicy<string>({ capacity: 3, unit: 'objects' });
    // [C B A]: A hit changes nothing -> D evicts A, B hits, E evicts B, A evicts C
    expect(run(fifo, 'A B C A D B E A')).toEqual({ outcomes: 'MMMHMHMM', victims: ['A', 'B', 'C'] });
    expect(fifo.snapshot().queue).toEqual(['A', 'E', 'D']);
  });

  it('evicts several small objects for one large one', () => {
    const fifo = new FifoPolicy<string>({ capacity: 10, unit: 'bytes' });
    expect(run(fifo, 'A:3 B:3 C:3 D:7 E:10 F:11')).toEqual({ outcomes: 'MMMMMR', victims: ['A', 'B', 'C', 'D'] });
  });
});
