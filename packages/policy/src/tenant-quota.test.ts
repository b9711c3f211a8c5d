import { describe, expect, it } from 'vitest';
import { TenantQuotaPolicy } from './tenant-quota.js';
import { run } from './test-helpers.js';

const firstLetter = (key: string): string => key[0]!;

describe('TenantQuotaPolicy', () => {
  it('makes a tenant at its quota evict its own objects (evict-own)', () => {
    const policy = new TenantQuotaPolicy<string>({ capacity: 10, unit: 'objects', tenantOf: firstLetter, quotas: { a: 4, b: 6 } });
    expect(run(policy, 'a1 a2 a3 a4 a5')).toEqual({ outcomes: 'MMMMM', victims: ['a1'] });
    expect(run(policy, 'b1 b2 b3 b4 b5 b6 b7')).toEqual({ outcomes: 'MMMMMMM', victims: ['b1'] });
    expect(policy.used).toBe(10);
  });

  it('chooses victims from the tenant furthest over its share', () => {
    const policy = new TenantQuotaPolicy<string>({ capacity: 10, unit: 'objects', tenantOf: firstLetter, quotas: { a: 4, b: 6 } });
    run(policy, 'a2 a3 a4 a5 b2 b3 b4 b5 b6 b7');
    policy.setQuota('a', 2);
    // a holds 4 of 2 (ratio 2), b 6 of 6 (ratio 1): a's LRU a2, then a3; at 2 of 2 the tie goes to 'a' (sorts first).
    expect(policy.peekVictims(3)).toEqual(['a2', 'a3', 'a4']);
    expect(policy.evict()).toBe('a2');
    expect(policy.tenantOfResident('b7')).toBe('b');
  });

  it('takes room from whoever is furthest over when a tenant within quota needs it', () => {
    const policy = new TenantQuotaPolicy<string>({ capacity: 10, unit: 'objects', tenantOf: firstLetter, quotas: { b: 5 } });
    run(policy, 'a1 a2 a3 a4 a5 a6 a7 a8 b1 b2');
    // b (2 of 5) inserts within quota but the cache is full: a holds 8 of 10 (0.8) > b's 0.4.
    expect(run(policy, 'b3')).toEqual({ outcomes: 'M', victims: ['a1'] });
  });

  it('refuses a tenant at its quota (refuse)', () => {
    const policy = new TenantQuotaPolicy<string>({
      capacity: 10,
      unit: 'objects',
      tenantOf: firstLetter,
      quotas: { a: 2 },
      overQuota: 'refuse',
    });
    expect(run(policy, 'a1 a2 a3 b1 a1')).toEqual({ outcomes: 'MMRMH', victims: [] });
    expect(policy.canAdmit('a9', 1)).toBe(false);
    expect(policy.canAdmit('b9', 1)).toBe(true);
  });

  it('counts quotas in bytes', () => {
    const policy = new TenantQuotaPolicy<string>({ capacity: 100, tenantOf: firstLetter, quotas: { a: 10 } });
    expect(run(policy, 'a1:6 a2:6 b1:50 a3:11')).toEqual({ outcomes: 'MMMR', victims: ['a1'] });
  });

  it('names what is malformed', () => {
    expect(() => new TenantQuotaPolicy({ capacity: 3, tenantOf: firstLetter as never, quotas: { a: -1 } })).toThrow(/quotas\["a"\]/);
    expect(() => new TenantQuotaPolicy({ capacity: 3, tenantOf: firstLetter as never, overQuota: 'wait' as never })).toThrow(/overQuota/);
    const policy = new TenantQuotaPolicy<string>({ capacity: 3, tenantOf: () => '' });
    expect(() => policy.access('x')).toThrow(/tenantOf/);
  });
});
