import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Tenants } from './tenants.js';

describe('Tenants key derivation', () => {
  it('derives the same stored keys one at a time and in a batch, and different ones per tenant', () => {
    const tenants = new Tenants(
      [
        { name: 'a', token: 'token-a', sharedMemory: true, maxLeasedPages: 10 },
        { name: 'b', token: 'token-b', sharedMemory: true, maxLeasedPages: 10 },
      ],
      { keySalt: 'salt' },
    );
    const a = tenants.identifyToken('token-a')!;
    const b = tenants.identifyToken('token-b')!;
    const keys = Array.from({ length: 500 }, () => randomBytes(32).toString('hex'));
    const batch = Tenants.storedKeys(a, keys);
    expect(batch).toEqual(keys.map((k) => Tenants.storedKey(a, k)));
    expect(batch.every((k) => /^[0-9a-f]{64}$/.test(k))).toBe(true);
    const other = Tenants.storedKeys(b, keys);
    expect(other.some((k, i) => k === batch[i])).toBe(false);
  });
});
