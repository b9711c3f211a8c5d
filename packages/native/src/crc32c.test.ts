import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { crc32c, crc32cCombine, crc32cImplementations, crc32cWith, formatCrc32c, probeMachine, TierSyncError, type Crc32cImplementation } from './index.js';

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

  describe('every implementation', () => {
    const { selected, available } = crc32cImplementations();
    // Deterministic pseudo-random bytes and draws (xorshift32), so a failure reproduces.
    let state = 0x9e3779b9;
    const next = () => {
      state ^= state << 13;
      state ^= state >>> 17;
      state ^= state << 5;
      return state >>> 0;
    };
    const random = Uint8Array.from({ length: 300_064 }, () => next() & 0xff);

    it('lists what this CPU runs and uses the fastest', () => {
      expect(available).toContain('table');
      expect(available).toContain(selected);
      if (process.arch === 'x64' && available.includes('hw3-clmul')) expect(selected).toBe('hw3-clmul');
      if (available.length === 1) expect(selected).toBe('table');
    });

    it('says whether it folds with VPCLMULQDQ, as the CPU flags allow, and the machine report names it', () => {
      const { folding } = crc32cImplementations();
      const flags = new Set(/^flags\s*:(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1]?.trim().split(/\s+/) ?? []);
      expect(folding).toBe(process.arch === 'x64' && selected === 'hw3-clmul' && flags.has('avx2') && flags.has('vpclmulqdq'));
      const report = probeMachine().crc32c;
      expect(report).toEqual({ implementation: selected, folding });
      expect(formatCrc32c(report)).toBe(folding ? `${selected} + VPCLMULQDQ folding` : selected);
    });

    it.each(available)('%s matches the check value and the RFC 3720 B.4 vectors', (impl) => {
      const vectors: Array<[Uint8Array, number]> = [
        [new TextEncoder().encode('123456789'), 0xe3069283],
        [new Uint8Array(32), 0x8a9136aa],
        [new Uint8Array(32).fill(0xff), 0x62a8ab43],
        [Uint8Array.from({ length: 32 }, (_, i) => i), 0x46dd794e],
        [Uint8Array.from({ length: 32 }, (_, i) => 31 - i), 0x113fdb5c],
        // RFC 3720 B.4: an iSCSI Read (10) command PDU.
        [
          Uint8Array.from([
            0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18, 0x28, 0, 0,
            0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0,
          ]),
          0xd9963a56,
        ],
      ];
      for (const [bytes, want] of vectors) expect(crc32cWith(impl, bytes)).toBe(want);
    });

    it.each(available)('%s equals the table path at random lengths, alignments and seeds, copying or not', (impl) => {
      // Edges of the three-stream rounds (24 KiB) and of x86-64's mixed fold + crc32 rounds (20 KiB), and 64 KiB (a
      // peer chunk).
      const sizes = [0, 1, 7, 8, 9, 23, 24, 25, 95, 96, 97, 191, 192, 193, 767, 768, 769, 4096, 24_575, 24_576, 24_577, 49_152 + 24 * 5 + 3];
      sizes.push(20_479, 20_480, 20_481, 2 * 20_480 + 1_000, 65_536);
      for (let k = 0; k < 60; k++) sizes.push(next() % 300_000);
      for (const n of sizes) {
        const offset = next() % 64;
        const view = random.subarray(offset, offset + n);
        const seed = next();
        const want = crc32cWith('table', view, seed);
        expect(crc32cWith(impl, view, seed), `${impl}, ${n} bytes at +${offset}`).toBe(want);
        const copy = new Uint8Array(n + 8);
        const at = next() % 8;
        const dst = copy.subarray(at, at + n);
        expect(crc32cWith(impl, view, seed, dst), `${impl} copying ${n} bytes`).toBe(want);
        expect(Buffer.compare(dst.subarray(0, n), view)).toBe(0);
      }
      // crc32c() itself goes through the selected implementation.
      expect(crc32c(random)).toBe(crc32cWith('table', random));
    });

    it('refuses unknown or unavailable implementations and short copy destinations', () => {
      expect(() => crc32cWith('nope' as Crc32cImplementation, random)).toThrow(TierSyncError);
      for (const impl of ['table', 'hw1', 'hw3', 'hw3-clmul'] as const) {
        if (!available.includes(impl)) expect(() => crc32cWith(impl, random)).toThrow(/not available/);
      }
      expect(() => crc32cWith('table', random.subarray(0, 10), 0, new Uint8Array(9))).toThrow(TierSyncError);
    });
  });

  it('refuses what is not bytes', () => {
    expect(() => crc32c('abc' as unknown as Uint8Array)).toThrow(TierSyncError);
  });
});
