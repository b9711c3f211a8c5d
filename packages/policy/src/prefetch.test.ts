import { describe, expect, it } from 'vitest';
import { prefetchPlan } from './prefetch.js';

describe('prefetchPlan', () => {
  it('picks the next pages held only on slower tiers, within the lookahead', () => {
    //            0  1  2  3  4  5  6
    const tiers = [0, 0, 1, 0, 2, 3, 1];
    expect(prefetchPlan(tiers, 2)).toEqual([2, 4, 5]);
    expect(prefetchPlan(tiers, 2, { lookahead: 2 })).toEqual([2]);
    expect(prefetchPlan(tiers, 0, { lookahead: 10, targetTier: 1 })).toEqual([4, 5]);
    expect(prefetchPlan(tiers, 7)).toEqual([]);
  });

  it('stops at the first page no tier holds', () => {
    expect(prefetchPlan([2, 2, undefined, 2], 0)).toEqual([0, 1]);
    expect(prefetchPlan([0, undefined, 3], 0, { lookahead: 8 })).toEqual([]);
  });

  it('names what is malformed', () => {
    expect(() => prefetchPlan([0, 1], 3)).toThrow(/position/);
    expect(() => prefetchPlan([0, -1], 0)).toThrow(/tiers\[1\]/);
    expect(() => prefetchPlan('01' as never, 0)).toThrow(/tiers/);
    expect(() => prefetchPlan([0], 0, { lookahead: -1 })).toThrow(/options.lookahead/);
  });
});
