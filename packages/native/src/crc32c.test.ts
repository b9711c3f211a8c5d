import { describe, expect, it } from 'vitest';
import { crc32c, TierSyncError } from './index.js';

describe('crc32c', () => {
  it('matches the standard check value for "123456789"', () => {
    expect(crc32c(new TextEncoder().encode('123456789'))).toBe(0xe3069283);
  });

  it('matches the iSCSI test vectors of RFC 3720 B.4', () => {
    expect(crc32c(new Uint8Array(32))).toBe(0x8a9136aa);
    expect(crc32c(new Uint8Array(32).fill(0xff))).toBe(0x62a8ab43);
    expect(crc32c(Uint8Array.from({ length: 32 }, (_, i) => i))).toBe(0x46dd794e);
    expect(crc32c(Uint8Array.from({ length: 32 }, (_, i) => 31 - i))).toBe(0x113fdb5c);
  });

  it('continues from a seed, at any split and alignment', () => {
    const data = Uint8Array.from({ length: 1000 }, (_, i) => (i * 7919) & 0xff);
    const whole = crc32c(data);
    for (const split of [0, 1, 3, 7, 8, 9, 500, 999, 1000]) {
      expect(crc32c(data.subarray(split), crc32c(data.subarray(0, split)))).toBe(whole);
    }
    expect(crc32c(new Uint8Array(0))).toBe(0);
  });

  it('refuses what is not bytes', () => {
    expect(() => crc32c('abc' as unknown as Uint8Array)).toThrow(TierSyncError);
  });
});
