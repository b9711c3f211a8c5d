/**
 * The tests both prefix wrappers (`prefix-aware:`, `prefix-hold:`) must pass alike, as one suite run over each
 * (excluded from the build by tsconfig's `src/test-*.ts`). Each wrapper's own test file adds what is its own.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createPolicy } from './registry.js';
import { LruPolicy } from './policies/lru.js';
import type { EvictionPolicy } from './types.js';
import type { ChainTreePolicy } from './wrappers/chain-tree.js';

/** A prefix wrapper's constructor. */
export type ChainWrapperClass = new (inner: EvictionPolicy<string>) => ChainTreePolicy<string>;

/** Inserts a chain of keys, each the parent of the next. */
export function chain(p: ChainTreePolicy<string>, keys: string[], parent: string | null = null): string[] {
  const evicted: string[] = [];
  let prev = parent;
  for (const k of keys) {
    p.access(k);
    evicted.push(...p.insert(k, 1, { parent: prev }));
    prev = k;
  }
  return evicted;
}

/** The shared suite, titled `title`, over `Wrapper` (registered by name as `kind:<policy>`). */
export function describeChainWrapper(title: string, kind: string, Wrapper: ChainWrapperClass): void {
  describe(title, () => {
    it('evicts the least recently used leaf, not the least recently used page', () => {
      const p = new Wrapper(new LruPolicy<string>({ capacity: 5, unit: 'objects' }));
      chain(p, ['a', 'b', 'c']);
      chain(p, ['d', 'e']);
      // Plain LRU would take 'a' (the root of the oldest chain), stranding b and c.
      expect(chain(p, ['f'])).toEqual(['c']);
      expect(chain(p, ['g'])).toEqual(['b']);
      expect(chain(p, ['h'])).toEqual(['a']);
      expect(p.peekVictims(5)).toEqual(['e', 'd', 'f', 'g', 'h']);
    });

    it('drops pages stranded by a removed ancestor first, whatever their recency', () => {
      const p = new Wrapper(new LruPolicy<string>({ capacity: 5, unit: 'objects' }));
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
      const p = new Wrapper(new LruPolicy<string>({ capacity: 4, unit: 'objects' }));
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
      const p = new Wrapper(new LruPolicy<string>({ capacity: 3, unit: 'objects' }));
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
      const p = createPolicy<number>(`${kind}:s3fifo`, { capacity: 100, unit: 'objects' });
      expect(p.name).toBe(`${kind}:s3fifo`);
      expect(p).toBeInstanceOf(Wrapper);
    });

    it('victims never leave a live descendant behind (random chains over every base policy)', () => {
      const bases = ['lru', 'fifo', 'clock', 'sieve', 'arc', 's3fifo'];
      fc.assert(
        fc.property(
          fc.constantFrom(...bases),
          fc.integer({ min: 4, max: 24 }),
          fc.array(fc.tuple(fc.integer({ min: 0, max: 6 }), fc.integer({ min: 1, max: 8 }), fc.integer({ min: 0, max: 9 })), { maxLength: 80 }),
          (base, capacity, requests) => {
            const p = new Wrapper(createPolicy<string>(base, { capacity, unit: 'objects', ...(base === 's3fifo' ? { smallRatio: 0.5 } : {}) } as never));
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
  });
}
