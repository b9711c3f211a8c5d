import { describe, expect, it } from 'vitest';
import { SeededRandom } from './random.js';

describe('SeededRandom', () => {
  it('repeats its sequence for a seed and differs across seeds', () => {
    const a = new SeededRandom(42);
    const b = new SeededRandom(42);
    const first = Array.from({ length: 8 }, () => a.nextUint32());
    expect(Array.from({ length: 8 }, () => b.nextUint32())).toEqual(first);
    expect(new SeededRandom(43).nextUint32()).not.toBe(first[0]);
    // Pinned values (checked against the reference C xoshiro128** with this seeding): any change to the generator
    // changes every seeded decision downstream.
    expect(first.slice(0, 3)).toMatchInlineSnapshot(`
      [
        2837322924,
        544945897,
        479756282,
      ]
    `);
  });

  it('draws floats in [0, 1) and unbiased integers in [0, bound)', () => {
    const random = new SeededRandom(0);
    const counts = new Array<number>(6).fill(0);
    let outside = 0;
    for (let i = 0; i < 60_000; i++) {
      const x = random.next();
      if (!(x >= 0 && x < 1)) outside++;
      counts[random.nextInt(6)]!++;
    }
    expect(outside).toBe(0);
    for (const count of counts) expect(Math.abs(count - 10_000)).toBeLessThan(500);
    expect(() => random.nextInt(0)).toThrow(/bound/);
    expect(() => new SeededRandom(-1)).toThrow(/seed/);
  });
});
