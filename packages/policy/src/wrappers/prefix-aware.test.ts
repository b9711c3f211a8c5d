import { describe, expect, it } from 'vitest';
import { chain, describeChainWrapper } from '../test-chain-wrappers.js';
import { TwoQPolicy } from '../policies/twoq.js';
import { PrefixAwarePolicy } from './prefix-aware.js';

describeChainWrapper('PrefixAwarePolicy', 'prefix-aware', PrefixAwarePolicy);

describe('PrefixAwarePolicy (its own)', () => {
  it('trims the victim\'s subtree in the inner policy\'s order: a shared root ranked first keeps its hot branches', () => {
    // 2Q ranks A1in's tail first whatever its hits: the shared root s stays there while its branches come and go.
    const inner = new TwoQPolicy<string>({ capacity: 16, unit: 'objects' });
    const p = new PrefixAwarePolicy(inner);
    chain(p, ['s', 'x1']);
    // x1 returns from A1out: it is hot (Am).
    expect(p.evictKey('x1')).toBe(true);
    chain(p, ['x1'], 's');
    chain(p, ['y1', 'y2', 'y3', 'y4', 'y5', 'y6'], 's');
    expect(inner.snapshot().main).toEqual(['x1']);
    // 2Q's order: s, then y1 and y2 (A1in over its share), then x1 (Am).
    expect(inner.peekVictims(4)).toEqual(['s', 'y1', 'y2', 'x1']);
    // The oldest branch (x1, hot) is not taken first: 2Q ranks y1 first below s, so the y chain goes, tail first.
    expect(p.peekVictims(2)).toEqual(['y6', 'y5']);
    expect([p.evict(), p.evict()]).toEqual(['y6', 'y5']);
    expect(p.has('x1')).toBe(true);
    // Trimmed pages are 2Q ghosts (A1out): they come back hot.
    expect(inner.snapshot().out).toEqual(['y5', 'y6']);
  });
});
