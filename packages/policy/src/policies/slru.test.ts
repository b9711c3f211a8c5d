import { describe, expect, it } from 'vitest';
import { SlruPolicy } from './slru.js';
import { run } from '../test-helpers.js';

describe('SlruPolicy', () => {
  it('fills the lowest segment with room, promotes on hits and cools downwards (worked by hand)', () => {
    const slru = new SlruPolicy<string>({ capacity: 4, unit: 'objects', segments: 2 });
    expect(slru.segmentCapacity).toBe(2);
    // A B fill segment 0, C D go to segment 1 (the lowest with room), as libCacheSim's SLRU_insert.
    run(slru, 'A B C D');
    expect(slru.snapshot().segments).toEqual([['B', 'A'], ['D', 'C']]);
    // A hit in segment 0 moves A up; segment 1 is then over its share, so its tail C cools to segment 0.
    run(slru, 'A');
    expect(slru.snapshot().segments).toEqual([['C', 'B'], ['A', 'D']]);
    // The victim is the tail of the lowest non-empty segment.
    expect(run(slru, 'E')).toEqual({ outcomes: 'M', victims: ['B'] });
  });

  it('refuses an object larger than a segment, and a capacity below one unit per segment', () => {
    const slru = new SlruPolicy<string>({ capacity: 40, unit: 'bytes', segments: 4 });
    expect(slru.canAdmit('big', 11)).toBe(false);
    expect(slru.canAdmit('ok', 10)).toBe(true);
    expect(() => new SlruPolicy({ capacity: 3, unit: 'objects', segments: 4 })).toThrow(/segments/);
    expect(() => new SlruPolicy({ capacity: 30, segments: 17 })).toThrow(/options.segments/);
  });

  it('protects objects hit repeatedly from a one-time scan', () => {
    const slru = new SlruPolicy<string>({ capacity: 8, unit: 'objects', segments: 4 });
    run(slru, 'H1 H2 H1 H2 H1 H2 H1 H2');
    const scan = run(slru, Array.from({ length: 20 }, (_, i) => `S${i}`).join(' '));
    expect(scan.victims).not.toContain('H1');
    expect(run(slru, 'H1 H2').outcomes).toBe('HH');
  });
});
