import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createPolicy } from '../registry.js';
import { LruPolicy } from '../policies/lru.js';
import { TwoQPolicy } from '../policies/twoq.js';
import { PrefixAwarePolicy } from './prefix-aware.js';

/** Inserts a chain of keys, each the parent of the next. */
function chain(p: PrefixAwarePolicy<string>, keys: string[], parent: string | null = null): string[] {
  const evicted: string[] = [];
  let prev = parent;
  for (const k of keys) {
    p.access(k);
    evicted.push(...p.insert(k, 1, { parent: prev }));
    prev = k;
  }
  return evicted;
}

describe('PrefixAwarePolicy', () => {
  it('evicts the least recently used leaf, not the least recently used page', () => {
    const p = new PrefixAwarePolicy(new LruPolicy<string>({ capacity: 5, unit: 'objects' }));
    chain(p, ['a', 'b', 'c']);
    chain(p, ['d', 'e']);
    // Plain LRU would take 'a' (the root of the oldest chain), stranding b and c.
    expect(chain(p, ['f'])).toEqual(['c']);
    expect(chain(p, ['g'])).toEqual(['b']);
    expect(chain(p, ['h'])).toEqual(['a']);
    expect(p.peekVictims(5)).toEqual(['e', 'd', 'f', 'g', 'h']);
  });

  it('drops pages stranded by a removed ancestor first, whatever their recency', () => {
    const p = new PrefixAwarePolicy(new LruPolicy<string>({ capacity: 5, unit: 'objects' }));
    chain(p, ['x', 'y']);
    chain(p, ['a', 'b', 'c']);
    expect(p.remove('b')).toBe(true);
    expect(p.isStranded('c')).toBe(true);
    expect(p.strandedCount).toBe(1);
    expect(p.peekVictims(1)).toEqual(['c']);
    expect(p.evict()).toBe('c');
    expect(p.strandedCount).toBe(0);
    // 'a' lost its only child: a leaf again, and the oldest one.
    expect(p.evict()).toBe('y');
  });

  it('a page stored without its parent is stranded until the parent arrives', () => {
    const p = new PrefixAwarePolicy(new LruPolicy<string>({ capacity: 4, unit: 'objects' }));
    p.insert('k', 1, { parent: 'j' });
    expect(p.isStranded('k')).toBe(true);
    p.insert('j', 1, { parent: null });
    expect(p.isStranded('k')).toBe(false);
    expect(p.parentOf('k')).toBe('j');
    // j holds a child now: the victim is k (the leaf), then j.
    expect(p.evict()).toBe('k');
    expect(p.evict()).toBe('j');
  });

  it('never takes the ancestors of a pinned page, and counts only the caller pins', () => {
    const p = new PrefixAwarePolicy(new LruPolicy<string>({ capacity: 3, unit: 'objects' }));
    chain(p, ['a', 'b', 'c']);
    expect(p.pin('c')).toBe(1);
    expect(p.pinnedCount).toBe(1);
    expect(p.pinnedUsed).toBe(1);
    expect(p.pinCount('b')).toBe(0);
    expect(p.evict()).toBeUndefined();
    expect(p.unpin('c')).toBe(0);
    expect(p.evict()).toBe('c');
  });

  it('is created by name, around any policy', () => {
    const p = createPolicy<number>('prefix-aware:s3fifo', { capacity: 100, unit: 'objects' });
    expect(p.name).toBe('prefix-aware:s3fifo');
    expect(p).toBeInstanceOf(PrefixAwarePolicy);
  });

  it('victims never leave a live descendant behind (random chains over every base policy)', () => {
    const bases = ['lru', 'fifo', 'clock', 'sieve', 'arc', 's3fifo'];
    fc.assert(
      fc.property(
        fc.constantFrom(...bases),
        fc.integer({ min: 4, max: 24 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 6 }), fc.integer({ min: 1, max: 8 }), fc.integer({ min: 0, max: 9 })), { maxLength: 80 }),
        (base, capacity, requests) => {
          const p = new PrefixAwarePolicy(createPolicy<string>(base, { capacity, unit: 'objects', ...(base === 's3fifo' ? { smallRatio: 0.5 } : {}) } as never));
          const check = (victims: string[], strandedBefore: Set<string>): void => {
            for (const v of victims) {
              if (strandedBefore.has(v)) continue;
              for (const k of p.keys()) expect(p.parentOf(k) === v && !p.isStranded(k), `${v} left before its child ${k}`).toBe(false);
            }
          };
          for (const [conversation, length, op] of requests) {
            const stranded = new Set([...p.keys()].filter((k) => p.isStranded(k)));
            if (op === 0) {
              const v = p.evict();
              if (v !== undefined) check([v], stranded);
              continue;
            }
            let parent: string | null = null;
            for (let j = 0; j < length; j++) {
              const key = `${conversation}:${j}`;
              if (!p.access(key) && p.canAdmit(key, 1)) check(p.insert(key, 1, { parent }), stranded);
              parent = key;
            }
            expect(p.count).toBeLessThanOrEqual(capacity);
            expect(p.pinnedCount).toBe(0);
          }
        },
      ),
      { numRuns: 150 },
    );
  });

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
