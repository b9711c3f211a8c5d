import { describe, expect, it } from 'vitest';
import { TwoQPolicy } from './twoq.js';
import { run } from '../test-helpers.js';

describe('TwoQPolicy', () => {
  it('sizes A1in, Am and A1out like libCacheSim (Kin 25%, Kout 50%)', () => {
    const q = new TwoQPolicy({ capacity: 10, unit: 'objects' });
    expect([q.inCapacity, q.mainCapacity, q.outCapacity]).toEqual([2, 8, 5]);
    expect(() => new TwoQPolicy({ capacity: 3, unit: 'objects' })).toThrow(/A1in/);
  });

  it('sends first-timers through A1in, ghosts back into Am (worked by hand)', () => {
    const q = new TwoQPolicy<string>({ capacity: 4, unit: 'objects' });
    // A1in holds 1: A B C D all enter A1in; making room for E, A1in (4 > 1) evicts its FIFO tail A into A1out.
    expect(run(q, 'A B C D E')).toEqual({ outcomes: 'MMMMM', victims: ['A'] });
    expect(q.snapshot()).toEqual({ in: ['E', 'D', 'C', 'B'], main: [], out: ['A'] });
    // A hit in A1in changes nothing; A again is a ghost hit: B leaves for A1out, A enters Am.
    expect(run(q, 'C A')).toEqual({ outcomes: 'HM', victims: ['B'] });
    expect(q.snapshot()).toEqual({ in: ['E', 'D', 'C'], main: ['A'], out: ['B'] });
  });

  it('resists a scan: objects promoted to Am survive a long run of one-time keys', () => {
    const q = new TwoQPolicy<string>({ capacity: 8, unit: 'objects' });
    const hot = 'H1 H2 H3';
    run(q, `${hot} ${Array.from({ length: 8 }, (_, i) => `F${i}`).join(' ')} ${hot}`); // H* come back as ghosts -> Am
    expect(q.snapshot().main.sort()).toEqual(['H1', 'H2', 'H3']);
    run(q, Array.from({ length: 40 }, (_, i) => `S${i}`).join(' '));
    expect(run(q, hot).outcomes).toBe('HHH');
  });
});
