import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { TierSyncError } from './errors.js';
import { respPageKeys } from './resp.js';

/** The derivation written out with node:crypto (core/server/resp/page-keys.ts is the JavaScript one in use). */
function reference(salt: Uint8Array, tag: string, tenant: string, key: Uint8Array, generation: number, count: number): string[] {
  const t = Buffer.from(tenant, 'utf8');
  const head = Buffer.alloc(16);
  head.writeUInt32BE(t.length, 0);
  head.writeUInt32BE(key.length, 4);
  head.writeBigUInt64BE(BigInt(generation), 8);
  return Array.from({ length: count }, (_, i) => {
    const index = Buffer.alloc(4);
    index.writeUInt32BE(i, 0);
    return tag + createHash('sha256').update(Buffer.concat([salt, head, t, key, index])).digest('hex');
  });
}

describe('respPageKeys', () => {
  it('derives each value page key as SHA-256 of salt, lengths, generation, tenant, key and page index', () => {
    for (let round = 0; round < 10; round++) {
      const salt = randomBytes(1 + Math.floor(Math.random() * 64));
      const values = Array.from({ length: Math.floor(Math.random() * 10) }, (_, i) => ({
        tenant: i % 3 === 0 ? 'tenant-✓' : 'default',
        key: randomBytes(Math.floor(Math.random() * 200)),
        generation: i % 2 ? Number.MAX_SAFE_INTEGER - i : i,
        count: Math.floor(Math.random() * 5),
      }));
      expect(respPageKeys(salt, '72737076', values)).toEqual(values.flatMap((v) => reference(salt, '72737076', v.tenant, v.key, v.generation, v.count)));
    }
    // Many pages of one value (one absorbed prefix, one copied state per page).
    const salt = randomBytes(32);
    expect(respPageKeys(salt, '', [{ tenant: 'x', key: Buffer.alloc(0), generation: 3, count: 300 }])).toEqual(reference(salt, '', 'x', Buffer.alloc(0), 3, 300));
  });

  it('refuses malformed input with TierSyncError', () => {
    const ok = { tenant: 'default', key: Buffer.from('k'), generation: 1, count: 1 };
    expect(() => respPageKeys('salt' as unknown as Uint8Array, 't', [ok])).toThrow(TierSyncError);
    expect(() => respPageKeys(Buffer.alloc(4), 't', [{ ...ok, generation: 2 ** 53 }])).toThrow(/generation/);
    expect(() => respPageKeys(Buffer.alloc(4), 't', [{ ...ok, count: 1.5 }])).toThrow(/count/);
    expect(() => respPageKeys(Buffer.alloc(4), 't', [{ ...ok, key: 'k' as unknown as Uint8Array }])).toThrow(/keys\[0\]/);
    expect(() => respPageKeys(Buffer.alloc(4), 't', [{ ...ok, tenant: 5 as unknown as string }])).toThrow(/tenants\[0\]/);
  });
});
