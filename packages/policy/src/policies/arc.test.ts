import { describe, expect, it } from 'vitest';
import { ArcPolicy } from './arc.js';
import { run } from '../test-helpers.js';

describe('ArcPolicy', () => {
  it('adapts p on ghost hits (worked by hand, 4 objects)', () => {
    const arc = new ArcPolicy<string>({ capacity: 4, unit: 'objects' });
    expect(run(arc, 'A B C D A')).toEqual({ outcomes: 'MMMMH', victims: [] });
    expect(arc.snapshot()).toEqual({ t1: ['D', 'C', 'B'], t2: ['A'], b1: [], b2: [], p: 0 });

    // E: case IV, |T1| + |B1| + 1 = 4 is not > 4; REPLACE with |T1| = 3 > p = 0 sends B to B1.
    expect(run(arc, 'E')).toEqual({ outcomes: 'M', victims: ['B'] });
    expect(arc.snapshot()).toEqual({ t1: ['E', 'D', 'C'], t2: ['A'], b1: ['B'], b2: [], p: 0 });

    // B: hit in B1 (case II): p += max(|B2| / |B1|, 1) = 1; REPLACE: |T1| = 3 > 1 sends C to B1; B enters T2.
    expect(run(arc, 'B')).toEqual({ outcomes: 'M', victims: ['C'] });
    expect(arc.snapshot()).toEqual({ t1: ['E', 'D'], t2: ['B', 'A'], b1: ['C'], b2: [], p: 1 });

    // F: case IV, 2 + 1 + 1 = 4 not > 4; REPLACE: |T1| = 2 > 1 sends D to B1. A hit moves A to the head of T2.
    expect(run(arc, 'F A')).toEqual({ outcomes: 'MH', victims: ['D'] });
    expect(arc.snapshot()).toEqual({ t1: ['F', 'E'], t2: ['A', 'B'], b1: ['D', 'C'], b2: [], p: 1 });

    // G: case IV with |T1| + |B1| + 1 = 5 > 4 and B1 non-empty: drop C from B1, then REPLACE sends E to B1.
    expect(run(arc, 'G')).toEqual({ outcomes: 'M', victims: ['E'] });
    expect(arc.snapshot()).toEqual({ t1: ['G', 'F'], t2: ['A', 'B'], b1: ['E', 'D'], b2: [], p: 1 });

    // H: the same: drop D, F goes to B1.
    expect(run(arc, 'H')).toEqual({ outcomes: 'M', victims: ['F'] });
    expect(arc.snapshot()).toEqual({ t1: ['H', 'G'], t2: ['A', 'B'], b1: ['F', 'E'], b2: [], p: 1 });

    // E: B1 hit, p = 1 + max(0 / 2, 1) = 2; REPLACE: |T1| = 2 is not > p, so T2's LRU B goes to B2.
    expect(run(arc, 'E')).toEqual({ outcomes: 'M', victims: ['B'] });
    expect(arc.snapshot()).toEqual({ t1: ['H', 'G'], t2: ['E', 'A'], b1: ['F'], b2: ['B'], p: 2 });

    // B: B2 hit (case III), p = 2 - max(|B1| / |B2|, 1) = 1; REPLACE: |T1| = 2 > 1 sends G to B1.
    expect(run(arc, 'B')).toEqual({ outcomes: 'M', victims: ['G'] });
    expect(arc.snapshot()).toEqual({ t1: ['H'], t2: ['B', 'E', 'A'], b1: ['G', 'F'], b2: [], p: 1 });
  });

  it('REPLACE takes from T2 when T1 is empty', () => {
    const arc = new ArcPolicy<string>({ capacity: 2, unit: 'objects' });
    // A B, A hit: T1 [B] T2 [A]. C: REPLACE (1 > 0) B -> B1. B: B1 hit, p = 1; REPLACE: |T1| = 1 = p but the hit
    // was in B1, so T2's A goes to B2. A: B2 hit, p = 1 - max(0 / 1, 1) = 0; REPLACE: |T1| = 1 > 0: C -> B1.
    expect(run(arc, 'A B A C B A')).toEqual({ outcomes: 'MMHMMM', victims: ['B', 'A', 'C'] });
    expect(arc.snapshot()).toEqual({ t1: [], t2: ['A', 'B'], b1: ['C'], b2: [], p: 0 });
    // D: case IV, 0 + 1 + 1 = 2 not > 2; total 0 + 1 + 2 + 0 = 3 < 4; REPLACE with T1 empty: T2's B -> B2.
    // B: B2 hit, p stays 0; REPLACE: |T1| = 1 > 0: D -> B1.
    expect(run(arc, 'D B')).toEqual({ outcomes: 'MM', victims: ['B', 'D'] });
    expect(arc.snapshot()).toEqual({ t1: [], t2: ['B', 'A'], b1: ['D', 'C'], b2: [], p: 0 });
  });

  it('REPLACE takes from T1 when |T1| = p and the request hit B2', () => {
    const arc = new ArcPolicy<string>({ capacity: 3, unit: 'objects' });
    // A B C, A and B hit: T1 [C] T2 [B A]. D: C -> B1. C: B1 hit, p = 1, A -> B2 (|T1| = p, hit in B1).
    // E: |T1| = 1 = p, not a ghost hit: B -> B2. F: |T1| = 2 > 1: D -> B1.
    // D: B1 hit, p = min(1 + max(2 / 1, 1), 3) = 3; REPLACE: 2 < 3: C -> B2.
    expect(run(arc, 'A B C A B D C E F D')).toEqual({ outcomes: 'MMMHHMMMMM', victims: ['C', 'A', 'B', 'D', 'C'] });
    expect(arc.snapshot()).toEqual({ t1: ['F', 'E'], t2: ['D'], b1: [], b2: ['C', 'B', 'A'], p: 3 });
    // A: B2 hit, p = 3 - max(0 / 3, 1) = 2 = |T1|, and the hit was in B2: T1's E -> B1.
    expect(run(arc, 'A')).toEqual({ outcomes: 'M', victims: ['E'] });
    expect(arc.snapshot()).toEqual({ t1: ['F'], t2: ['A', 'D'], b1: ['E'], b2: ['C', 'B'], p: 2 });
  });

  it('peeks with the context of a ghost hit in flight', () => {
    const arc = new ArcPolicy<string>({ capacity: 3, unit: 'objects' });
    run(arc, 'A B C A B D C E F D'); // T1 [F E], T2 [D], B2 [C B A], p = 3 (see above)
    // Pressure (case IV): 2 + 0 + 1 + 3 >= 2c drops A from B2, REPLACE takes T2's D (|T1| = 2 < p);
    // then T2 is empty, so T1's E.
    expect(arc.peekVictims(2)).toEqual(['D', 'E']);
    // A hits B2: p = 2 = |T1|, so REPLACE takes T1's E first, then (|T1| = 1 < p) T2's D.
    expect(arc.access('A')).toBe(false);
    expect(arc.peekVictims(2)).toEqual(['E', 'D']);
    expect(arc.insert('A', 1)).toEqual(['E']);
  });

  it('evicts T1 without a ghost when T1 alone fills the cache', () => {
    const arc = new ArcPolicy<string>({ capacity: 3, unit: 'objects' });
    expect(run(arc, 'A B C D')).toEqual({ outcomes: 'MMMM', victims: ['A'] });
    expect(arc.snapshot()).toEqual({ t1: ['D', 'C', 'B'], t2: [], b1: [], b2: [], p: 0 });
  });

  it('sizes lists in bytes', () => {
    const arc = new ArcPolicy<string>({ capacity: 10, unit: 'bytes' });
    // A(4) B(4) A hit -> T1 [B] T2 [A]. C(6): case IV, 4 + 0 + 6 = 10 not > 10: REPLACE, 4 > p = 0: B -> B1.
    // Then 4 + 6 = 10 fits. X(11) is refused.
    expect(run(arc, 'A:4 B:4 A:4 C:6 X:11')).toEqual({ outcomes: 'MMHMR', victims: ['B'] });
    expect(arc.snapshot()).toEqual({ t1: ['C'], t2: ['A'], b1: ['B'], b2: [], p: 0 });
    // B(4): B1 hit, p = 0 + max(0 / 4, 1) = 1; REPLACE: 6 > 1: C -> B1; B enters T2.
    expect(run(arc, 'B:4')).toEqual({ outcomes: 'M', victims: ['C'] });
    expect(arc.snapshot()).toEqual({ t1: [], t2: ['B', 'A'], b1: ['C'], b2: [], p: 1 });
  });
});
