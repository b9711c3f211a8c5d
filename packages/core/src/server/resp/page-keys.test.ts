import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { landedPageKeys, valuePageKeys } from './page-keys.js';

const SALT = Buffer.from(Array.from({ length: 32 }, (_, i) => i));

describe('RESP value page keys', () => {
  it('keep the derivation existing stores and manifests were written with', () => {
    // Pinned: these are what door.ts derived before the native derivation existed (same salt, tenant, key, generation).
    expect(valuePageKeys(SALT, 'default', 'key:__rand_int__', 7, 2)).toEqual([
      '72737076da6b2dc06b3e7944d32be823ef05d496509a8c67b129ced7a7fbd2fa0d69366d',
      '72737076eb25bbd91e2e764679b96b3dd70306252fd27076fa7c6b1b26e6fa1d793853d9',
    ]);
    expect(valuePageKeys(SALT, 'tenant-é', '\xff\x00k', 2 ** 40 + 3, 1)).toEqual(['72737076b564fe131be33cabc34d04371c432350b781e5853dfdc6f4b49d128a851946bc']);
    // The layout written out: salt, u32be tenant bytes, u32be key bytes, u64be generation, tenant, key, u32be page.
    const t = Buffer.from('default');
    const k = Buffer.from('key:__rand_int__', 'latin1');
    const head = Buffer.alloc(16);
    head.writeUInt32BE(t.length, 0);
    head.writeUInt32BE(k.length, 4);
    head.writeBigUInt64BE(7n, 8);
    const page1 = createHash('sha256').update(Buffer.concat([SALT, head, t, k, Buffer.from([0, 0, 0, 1])])).digest('hex');
    expect(valuePageKeys(SALT, 'default', 'key:__rand_int__', 7, 2)[1]).toBe(`72737076${page1}`);
  });

  it('are byte-identical from the native batch and from node:crypto, on random tenants, binary keys, generations and counts', () => {
    for (let round = 0; round < 20; round++) {
      const salt = randomBytes(32);
      const values = Array.from({ length: 1 + Math.floor(Math.random() * 12) }, () => {
        const key = randomBytes(Math.floor(Math.random() * 300));
        const tenant = ['default', 'a', 'tenant-é✓', ''][Math.floor(Math.random() * 4)]!;
        const generation = [0, 1, Math.floor(Math.random() * 2 ** 32), 2 ** 32 + 5, Number.MAX_SAFE_INTEGER][Math.floor(Math.random() * 5)]!;
        return { tenant, key, generation, count: Math.floor(Math.random() * 6) };
      });
      const native = landedPageKeys(salt, values);
      expect(native).toEqual(values.map((v) => valuePageKeys(salt, v.tenant, Buffer.from(v.key).toString('latin1'), v.generation, v.count)));
    }
    expect(landedPageKeys(SALT, [])).toEqual([]);
  });

  it('refuses a generation or count that cannot be a page key', () => {
    expect(() => landedPageKeys(SALT, [{ tenant: 'default', key: Buffer.from('k'), generation: -1, count: 1 }])).toThrow(/generation/);
    expect(() => landedPageKeys(SALT, [{ tenant: 'default', key: Buffer.from('k'), generation: 1.5, count: 1 }])).toThrow(/generation/);
    expect(() => landedPageKeys(SALT, [{ tenant: 'default', key: Buffer.from('k'), generation: 1, count: -1 }])).toThrow(/count/);
  });
});
