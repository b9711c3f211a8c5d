import { describe, expect, it } from 'vitest';
import { checkPromotionRule, promotionTarget } from './promotion.js';

describe('promotionTarget', () => {
  it('promotes to the top, one tier up, or never', () => {
    expect(promotionTarget({ kind: 'to-top' }, 2, 1)).toBe(0);
    expect(promotionTarget({ kind: 'one-up' }, 2, 1)).toBe(1);
    expect(promotionTarget({ kind: 'never' }, 2, 5)).toBeUndefined();
    expect(promotionTarget({ kind: 'to-top' }, 0, 5)).toBeUndefined(); // already on top
  });

  it('waits for minHits and respects the ceiling', () => {
    expect(promotionTarget({ kind: 'to-top', minHits: 3 }, 2, 2)).toBeUndefined();
    expect(promotionTarget({ kind: 'to-top', minHits: 3 }, 2, 3)).toBe(0);
    expect(promotionTarget({ kind: 'to-top', ceiling: 1 }, 3, 1)).toBe(1);
    expect(promotionTarget({ kind: 'one-up', ceiling: 1 }, 1, 1)).toBeUndefined();
    expect(promotionTarget({ kind: 'one-up', ceiling: 1 }, 3, 1)).toBe(2);
  });

  it('names what is malformed', () => {
    expect(() => promotionTarget({ kind: 'sideways' } as never, 1, 1)).toThrow(/rule.kind/);
    expect(() => checkPromotionRule({ kind: 'to-top', minHits: 0 })).toThrow(/rule.minHits/);
    expect(() => promotionTarget({ kind: 'to-top' }, -1, 1)).toThrow(/tier/);
    expect(() => promotionTarget({ kind: 'to-top' }, 1, 0)).toThrow(/hits/);
  });
});
