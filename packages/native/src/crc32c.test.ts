import { describe, expect, it } from 'vitest';
import { crc32c, crc32cCombine, TierSyncError } from './index.js';

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

  it('combines the checksums of two parts into the checksum of the whole, at any split', () => {
    const data = Uint8Array.from({ length: 70_000 }, (_, i) => (i * 2654435761) >>> 13 & 0xff);
    const whole = crc32c(data);
    for (const split of [0, 1, 5, 64, 4096, 65_536, 69_999, 70_000]) {
      expect(crc32cCombine(crc32c(data.subarray(0, split)), crc32c(data.subarray(split)), data.length - split)).toBe(whole);
    }
    // Many equal chunks then a short one, folded left to right (how the fs tier derives a page's checksum).
    let folded = 0;
    for (let at = 0; at < data.length; at += 4096) {
      const part = data.subarray(at, Math.min(at + 4096, data.length));
      folded = at === 0 ? crc32c(part) : crc32cCombine(folded, crc32c(part), part.length);
    }
    expect(folded).toBe(whole);
    expect(() => crc32cCombine(1, 2, -1)).toThrow(TierSyncError);
  });

  it('continues from a seed, at any split and alignment', () => {
    const data = Uint8Array.from({ length: 1000 }, (_, i) => (i * 7919) & 0xff);
    const whole = crc32c(data);
    for (const split of [0, 1, 3, 7, 8, 9, 500, 999, 1000]) {
      expect(crc32c(data.subarray(split), crc32c(data.subarray(0, split)))).toBe(whole);
    }
    expect(crc32c(new Uint8Array(0))).toBe(0);
  });

  it('computes the same values on the SSE4.2 and table paths', async () => {
    const { native } = await import('./addon.js');
    for (const n of [0, 1, 7, 8, 9, 63, 64, 4096, 100_003]) {
      const data = Uint8Array.from({ length: n }, (_, i) => (i * 131 + n) & 0xff);
      for (const offset of [0, 1, 3]) {
        const view = data.subarray(Math.min(offset, n));
        expect(native.crc32c(view, 0, true)).toBe(crc32c(view));
        expect(native.crc32c(view, 0x12345678, true)).toBe(crc32c(view, 0x12345678));
      }
    }
    expect(native.crc32c(new TextEncoder().encode('123456789'), 0, true)).toBe(0xe3069283);
  });

  it('refuses what is not bytes', () => {
    expect(() => crc32c('abc' as unknown as Uint8Array)).toThrow(TierSyncError);
  });
});
