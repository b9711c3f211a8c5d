import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TenantKeyspace, globMatch, type ValueEntry } from './keyspace.js';

const value = (length = 1) => ({ length, pages: [], expiresAt: 0 });

describe('globMatch (Redis glob)', () => {
  it('matches *, ?, classes, ranges, negation and escapes', () => {
    expect(globMatch('*', '')).toBe(true);
    expect(globMatch('user:*', 'user:42')).toBe(true);
    expect(globMatch('user:*', 'users:42')).toBe(false);
    expect(globMatch('h?llo', 'hallo')).toBe(true);
    expect(globMatch('h?llo', 'hllo')).toBe(false);
    expect(globMatch('h[ae]llo', 'hello')).toBe(true);
    expect(globMatch('h[^e]llo', 'hello')).toBe(false);
    expect(globMatch('h[a-b]llo', 'hbllo')).toBe(true);
    expect(globMatch('a\\*b', 'a*b')).toBe(true);
    expect(globMatch('a\\*b', 'axb')).toBe(false);
    expect(globMatch('*a*b*c*', 'xxaxxbxxcxx')).toBe(true);
    expect(globMatch('*a*b*c*', 'xxaxxcxxbxx')).toBe(false);
  });

  it('agrees with a regular expression for patterns of literals, * and ?', () => {
    const toRegex = (p: string) => new RegExp(`^${p.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^]*').replace(/\?/g, '[^]')}$`);
    fc.assert(
      fc.property(fc.string({ unit: fc.constantFrom('a', 'b', '*', '?'), maxLength: 8 }), fc.string({ unit: fc.constantFrom('a', 'b'), maxLength: 10 }), (p, t) => globMatch(p, t) === toRegex(p).test(t)),
      { numRuns: 2000 },
    );
  });
});

describe('TenantKeyspace', () => {
  it('SCAN returns every key present for the whole scan at least once, while others come and go', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 60 }), fc.integer({ min: 1, max: 9 }), fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 120 })), { maxLength: 80 }), (initial, count, churn) => {
        const ks = new TenantKeyspace();
        const dead: ValueEntry[] = [];
        const onDead = (e: ValueEntry) => dead.push(e);
        for (let i = 0; i < initial; i++) ks.set(`k${i}`, value(), onDead);
        // Keys k0..k{initial/2} stay for the whole scan; the rest and new ones churn between steps.
        const stable = Array.from({ length: Math.floor(initial / 2) }, (_, i) => `k${i}`);
        const seen = new Set<string>();
        let cursor = 0;
        let step = 0;
        do {
          const r = ks.scan(cursor, count, undefined, 0, onDead);
          for (const k of r.keys) seen.add(k);
          cursor = r.cursor;
          const op = churn[step++];
          if (op) {
            const key = `k${Math.floor(initial / 2) + op[1]}`;
            if (op[0]) ks.set(key, value(), onDead);
            else ks.delete(key, onDead);
          }
        } while (cursor !== 0 && step < 10_000);
        return stable.every((k) => seen.has(k));
      }),
      { numRuns: 300 },
    );
  });

  it('keeps a replaced key in its scan position and counts bytes of values and names', () => {
    const ks = new TenantKeyspace();
    const dead: ValueEntry[] = [];
    ks.set('a', value(10), (e) => dead.push(e));
    ks.set('bb', value(20), (e) => dead.push(e));
    const old = ks.get('a', 0, () => undefined)!;
    ks.set('a', value(5), (e) => dead.push(e));
    expect(dead).toEqual([old]);
    expect(ks.bytes).toBe(25);
    expect(ks.keyBytes).toBe(3);
    expect(ks.scan(0, 10, undefined, 0, () => undefined).keys).toEqual(['a', 'bb']);
    expect(ks.delete('a', () => undefined)).toBe(true);
    expect(ks.keyBytes).toBe(2);
  });

  it('drops expired keys when they are read or scanned', () => {
    const ks = new TenantKeyspace();
    const dead: ValueEntry[] = [];
    ks.set('t', { length: 1, pages: [], expiresAt: 100 }, () => undefined);
    ks.set('u', { length: 1, pages: [], expiresAt: 100 }, () => undefined);
    expect(ks.get('t', 99, (e) => dead.push(e))).toBeDefined();
    expect(ks.get('t', 100, (e) => dead.push(e))).toBeUndefined();
    expect(ks.scan(0, 10, undefined, 200, (e) => dead.push(e)).keys).toEqual([]);
    expect(dead).toHaveLength(2);
    expect(ks.size).toBe(0);
  });
});
