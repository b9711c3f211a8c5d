import { describe, expect, it } from 'vitest';
import { IntSlotMap } from './int-map.js';

/** A small deterministic generator (mulberry32). */
function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

describe('IntSlotMap', () => {
  it('matches a Map under random sets, gets and deletes, through growth and long probe runs', () => {
    for (const [seed, range] of [[1, 64], [2, 5000], [3, 2 ** 31 - 1]] as const) {
      const random = rng(seed);
      const map = new IntSlotMap();
      const model = new Map<number, number>();
      const wrong: string[] = [];
      for (let op = 0; op < 40_000; op++) {
        const key = Math.floor(random() * range);
        const r = random();
        if (r < 0.45) {
          map.set(key, op);
          model.set(key, op);
        } else if (r < 0.75) {
          if (map.delete(key) !== model.delete(key)) wrong.push(`op ${op}: delete(${key})`);
        } else if (map.get(key) !== (model.get(key) ?? -1)) wrong.push(`op ${op}: get(${key})`);
        if (map.size !== model.size) wrong.push(`op ${op}: size ${map.size}, expected ${model.size}`);
      }
      expect(wrong.slice(0, 5)).toEqual([]);
      for (const [key, slot] of model) expect(map.get(key)).toBe(slot);
    }
  });

  it('keeps every key of a colliding run reachable after deleting from its middle', () => {
    // Keys spaced by the table size share low bits; with Fibonacci hashing many still collide in a 16-cell table.
    const map = new IntSlotMap();
    const keys = [0, 1, 2, 3, 4, 5, 6];
    keys.forEach((k, i) => map.set(k, i));
    expect(map.delete(3)).toBe(true);
    expect(map.delete(3)).toBe(false);
    for (const [i, k] of keys.entries()) expect(map.get(k)).toBe(k === 3 ? -1 : i);
    map.clear();
    expect([map.size, map.get(0)]).toEqual([0, -1]);
    map.set(2 ** 31 - 1, 7);
    expect(map.get(2 ** 31 - 1)).toBe(7);
  });
});
