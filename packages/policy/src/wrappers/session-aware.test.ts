import { describe, expect, it } from 'vitest';
import { createPolicy } from '../registry.js';
import { LruPolicy } from '../policies/lru.js';
import { S3FifoPolicy } from '../policies/s3fifo.js';
import { SessionAwarePolicy } from './session-aware.js';

const lru = (capacity: number) => new SessionAwarePolicy(new LruPolicy<string>({ capacity, unit: 'objects' }));

describe('SessionAwarePolicy', () => {
  it('evicts finished pages first, then unhinted ones, and pages expected back last', () => {
    const p = lru(3);
    p.insert('waiting', 1, { retention: { returnAt: 1000, now: 0 } });
    p.insert('plain', 1);
    p.insert('done', 1, { retention: { finished: true } });
    expect(p.bandOf('waiting')).toBe('expected');
    expect(p.peekVictims(3)).toEqual(['done', 'plain', 'waiting']);
    expect(p.insert('d', 1)).toEqual(['done']);
    expect(p.insert('e', 1)).toEqual(['plain']);
    expect(p.insert('f', 1)).toEqual(['d']);
    expect(p.has('waiting')).toBe(true);
  });

  it('among pages expected back, the one due back last goes first; a store is never refused', () => {
    const p = lru(3);
    p.insert('soon', 1, { retention: { returnAt: 100, now: 0 } });
    p.insert('late', 1, { retention: { returnAt: 900, now: 0 } });
    p.insert('mid', 1, { retention: { returnAt: 500, now: 0 } });
    expect(p.canAdmit('new', 1)).toBe(true);
    expect(p.insert('new', 1)).toEqual(['late']);
    expect(p.evict()).toBe('new');
    expect(p.evict()).toBe('mid');
  });

  it('an overdue page rejoins the inner order; a hit brings an expected page back in', () => {
    const p = lru(3);
    p.insert('a', 1, { retention: { returnAt: 10, now: 0 } });
    p.insert('b', 1, { retention: { returnAt: 1000, now: 0 } });
    // Overdue after twice its expected wait (overdueFactor 1): at 20.
    p.insert('c', 1, { retention: { returnAt: 2000, now: 25 } });
    expect(p.bandOf('a')).toBe('inner');
    expect(p.access('b')).toBe(true);
    expect(p.bandOf('b')).toBe('inner');
    expect(p.peekVictims(3)).toEqual(['a', 'b', 'c']);
  });

  it('hint() re-bands resident pages and keeps their pins', () => {
    const p = lru(2);
    p.insert('a', 1);
    p.insert('b', 1);
    p.pin('a');
    expect(p.hint('a', { retention: { finished: true, now: 5 } })).toBe(true);
    expect(p.bandOf('a')).toBe('finished');
    expect(p.pinCount('a')).toBe(1);
    expect(p.pinnedCount).toBe(1);
    // Pinned: not a victim although finished.
    expect(p.evict()).toBe('b');
    expect(p.unpin('a')).toBe(0);
    expect(p.evict()).toBe('a');
    expect(p.hint('gone', { retention: { finished: true } })).toBe(false);
  });

  it('a page hinted by several sessions is due back at the soonest return still ahead', () => {
    const p = lru(3);
    p.insert('shared', 1, { retention: { returnAt: 100, now: 0 } });
    p.hint('shared', { retention: { returnAt: 900, now: 10 } });
    p.insert('other', 1, { retention: { returnAt: 500, now: 10 } });
    expect(p.peekVictims(2)).toEqual(['other', 'shared']);
    // Once 100 has passed, a newer hint replaces it.
    p.hint('shared', { retention: { returnAt: 950, now: 150 } });
    expect(p.peekVictims(2)).toEqual(['shared', 'other']);
  });

  it('without hints it decides exactly as its inner policy', () => {
    const a = new SessionAwarePolicy(new S3FifoPolicy<number>({ capacity: 50, unit: 'objects' }));
    const b = new S3FifoPolicy<number>({ capacity: 50, unit: 'objects' });
    let x = 7;
    for (let i = 0; i < 5000; i++) {
      x = (x * 48271) % 2147483647;
      const key = x % 200;
      const hitA = a.access(key);
      expect(b.access(key)).toBe(hitA);
      if (!hitA && a.canAdmit(key, 1)) expect(a.insert(key, 1)).toEqual(b.insert(key, 1));
    }
  });

  it('refuses a malformed hint by name', () => {
    const p = createPolicy<string>('session-aware:lru', { capacity: 4, unit: 'objects' });
    expect(() => p.insert('a', 1, { retention: { returnAt: Number.NaN, now: 0 } })).toThrow(/returnAt/);
    expect(() => p.insert('a', 1, { retention: { finished: false } as never })).toThrow(/finished/);
  });
});
