import { describe, expect, it } from 'vitest';
import { GdsfPolicy } from './gdsf.js';
import { run } from '../test-helpers.js';

describe('GdsfPolicy', () => {
  it('ranks by L + frequency x 1e6 / size and ages with the last victim (worked by hand)', () => {
    const gdsf = new GdsfPolicy<string>({ capacity: 10, unit: 'bytes' });
    run(gdsf, 'A:5 B:2 A:5');
    expect(gdsf.priorityOf('A')).toBe((2 * 1e6) / 5); // 400,000
    expect(gdsf.priorityOf('B')).toBe(1e6 / 2); // 500,000
    // C (4 bytes) needs room: A has the lowest priority and goes, L becomes 400,000.
    expect(run(gdsf, 'C:4')).toEqual({ outcomes: 'M', victims: ['A'] });
    expect(gdsf.age).toBe(400_000);
    expect(gdsf.priorityOf('C')).toBe(400_000 + 1e6 / 4);
  });

  it('prefers keeping small objects: a large one-off object goes before small ones of equal frequency', () => {
    const gdsf = new GdsfPolicy<string>({ capacity: 100, unit: 'bytes' });
    run(gdsf, 'S1:10 S2:10 BIG:60 S3:10');
    expect(gdsf.peekVictims(1)).toEqual(['BIG']);
  });

  it('equal priorities leave oldest first', () => {
    const gdsf = new GdsfPolicy<string>({ capacity: 3, unit: 'objects' });
    run(gdsf, 'A B C');
    expect(gdsf.peekVictims(3)).toEqual(['A', 'B', 'C']);
  });
});
