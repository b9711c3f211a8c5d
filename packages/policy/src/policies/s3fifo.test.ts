import { describe, expect, it } from 'vitest';
import { S3FifoPolicy } from './s3fifo.js';
import { run } from '../test-helpers.js';

describe('S3FifoPolicy', () => {
  it('sizes its queues like libCacheSim', () => {
    const s3 = new S3FifoPolicy({ capacity: 1000, unit: 'bytes' });
    expect([s3.smallCapacity, s3.mainCapacity, s3.ghostCapacity, s3.moveToMainThreshold]).toEqual([100, 900, 900, 2]);
    const odd = new S3FifoPolicy({ capacity: 25, unit: 'objects' });
    expect([odd.smallCapacity, odd.mainCapacity, odd.ghostCapacity]).toEqual([2, 23, 22]);
  });

  it('moves hot objects to main, remembers cold ones in the ghost, and sends ghost hits to main (by hand)', () => {
    // small = 2, main = 2, ghost = floor(4 * 0.9) = 3; an object hit once in small moves to main.
    const s3 = new S3FifoPolicy<string>({ capacity: 4, unit: 'objects', smallRatio: 0.5, moveToMainThreshold: 1 });
    // Everything enters small; A and C are hit.
    expect(run(s3, 'A B C D A C')).toEqual({ outcomes: 'MMMMHH', victims: [] });
    // E: small's tail A (hit) moves to main, B (cold) is evicted into the ghost.
    // F: C (hit) moves to main, D is evicted into the ghost.
    expect(run(s3, 'E F')).toEqual({ outcomes: 'MM', victims: ['B', 'D'] });
    expect(s3.snapshot()).toMatchObject({ small: ['F', 'E'], main: ['C', 'A'], ghost: ['D', 'B'] });
    // B is in the ghost: it goes straight to main (still a miss); E is evicted from small to make room.
    expect(run(s3, 'B')).toEqual({ outcomes: 'M', victims: ['E'] });
    expect(s3.snapshot()).toMatchObject({ small: ['F'], main: ['B', 'C', 'A'], ghost: ['E', 'D'] });
    // A hit. G: main holds 3 > 2, so evict from main: A (freq 1) is reinserted with freq 0, C is evicted
    // (main evictions leave no ghost).
    expect(run(s3, 'A G')).toEqual({ outcomes: 'HM', victims: ['C'] });
    expect(s3.snapshot()).toMatchObject({ small: ['G', 'F'], main: ['A', 'B'], ghost: ['E', 'D'] });
    // C is not in the ghost: small. F is evicted into the ghost, which now holds its 3 entries.
    // D hits the ghost: into main, G evicted from small into the ghost (3 + 1 > 3 drops nothing: D left it).
    expect(run(s3, 'C D')).toEqual({ outcomes: 'MM', victims: ['F', 'G'] });
    expect(s3.snapshot()).toMatchObject({ small: ['C'], main: ['D', 'A', 'B'], ghost: ['G', 'F', 'E'] });
    // H: main over its share again; its tail B has freq 0.
    expect(run(s3, 'H')).toEqual({ outcomes: 'M', victims: ['B'] });
    expect(s3.snapshot()).toMatchObject({ small: ['H', 'C'], main: ['D', 'A'], ghost: ['G', 'F', 'E'] });
  });

  it('with the default threshold 2, one hit in small is not enough to reach main', () => {
    const s3 = new S3FifoPolicy<string>({ capacity: 20, unit: 'objects' }); // small 2, main 18, ghost 18
    const fill = Array.from({ length: 20 }, (_, i) => `K${i + 1}`).join(' ');
    expect(run(s3, `${fill} K1 K2 K2`).outcomes).toBe(`${'M'.repeat(20)}HHH`);
    // K21: K1 (1 hit) is evicted into the ghost. K22: K2 (2 hits) moves to main, K3 is evicted.
    // K1: ghost hit, into main; K4 is evicted from small.
    expect(run(s3, 'K21 K22 K1')).toEqual({ outcomes: 'MMM', victims: ['K1', 'K3', 'K4'] });
    expect(s3.snapshot()).toMatchObject({ main: ['K1', 'K2'], ghost: ['K4', 'K3'] });
  });

  it('refuses objects as large as the small queue, and objects larger than the cache', () => {
    const s3 = new S3FifoPolicy<string>({ capacity: 100, unit: 'bytes' }); // small 10, main 90, ghost 90
    expect(s3.canAdmit('A', 10)).toBe(false);
    expect(run(s3, 'A:10 B:9 C:101 B:9')).toEqual({ outcomes: 'RMRH', victims: [] });
    expect([s3.used, s3.count]).toEqual([9, 1]);
  });

  it('counts ghost sizes in bytes and forgets the oldest ghosts first', () => {
    const s3 = new S3FifoPolicy<string>({ capacity: 10, unit: 'bytes', smallRatio: 0.4 }); // small 4, main 6, ghost 9
    // A B C D (3 bytes each, 12 > 10): D evicts A (cold, into the ghost: 3 bytes).
    expect(run(s3, 'A:3 B:3 C:3 D:3')).toEqual({ outcomes: 'MMMM', victims: ['A'] });
    // E F G: each evicts the small tail into the ghost: B, C, D; the ghost holds 9 bytes at most, so A goes.
    expect(run(s3, 'E:3 F:3 G:3')).toEqual({ outcomes: 'MMM', victims: ['B', 'C', 'D'] });
    expect(s3.snapshot()).toMatchObject({ ghost: ['D', 'C', 'B'], used: { small: 9, main: 0, ghost: 9 } });
    // B is remembered: into main, E evicted into the ghost (A's 3 bytes were dropped for D already).
    // A is forgotten: a plain miss into small; F evicted into the ghost drops the oldest ghost, C.
    expect(run(s3, 'B:3 A:3')).toEqual({ outcomes: 'MM', victims: ['E', 'F'] });
    expect(s3.snapshot()).toMatchObject({ small: ['A', 'G'], main: ['B'], ghost: ['F', 'E', 'D'] });
  });

  it('passes over pinned objects in small and falls back to main', () => {
    const s3 = new S3FifoPolicy<string>({ capacity: 4, unit: 'objects', smallRatio: 0.5, moveToMainThreshold: 1 });
    run(s3, 'A B C D A C E F'); // small [F E], main [C A]
    s3.pin('E');
    s3.pin('F');
    // small holds no unpinned object: evict from main, tail first (A then C, both freq 0).
    expect(s3.peekVictims(4)).toEqual(['A', 'C']);
    expect(run(s3, 'G')).toEqual({ outcomes: 'M', victims: ['A'] });
    expect(s3.snapshot()).toMatchObject({ small: ['G', 'F', 'E'], main: ['C'] });
  });
});
