import { randomFillSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { HostArena, TransferBatch, TransferEngine, crc32c, crc32cRanges } from './index.js';

describe('crc32cRanges', () => {
  it('gives the CRC32C of each range, off the JS thread, on one or several threads', async () => {
    const arena = HostArena.create({ capacity: 4 << 20 });
    try {
      randomFillSync(arena.view(0, 4 << 20));
      const offsets = Float64Array.from([0, 1, 4096, 100_003, (4 << 20) - 70_000, 5]);
      const lengths = Uint32Array.from([4096, 70_000, 1 << 20, 3, 70_000, 0]);
      const want = Array.from(offsets, (o, i) => crc32c(arena.view(o, lengths[i]!)));
      for (const threads of [1, 2, 7]) expect(Array.from(await crc32cRanges(arena, offsets, lengths, { threads }))).toEqual(want);
      expect(await crc32cRanges(arena, new Float64Array(0), new Uint32Array(0))).toEqual(new Uint32Array(0));
    } finally {
      arena.close();
    }
  });

  it('refuses ranges outside the arena and bad arguments before reading anything', () => {
    const arena = HostArena.create({ capacity: 1 << 16 });
    expect(() => crc32cRanges(arena, Float64Array.of(1 << 16), Uint32Array.of(1))).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => crc32cRanges(arena, Float64Array.of(0.5), Uint32Array.of(1))).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    expect(() => crc32cRanges(arena, Float64Array.of(0), new Uint32Array(2))).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    expect(() => crc32cRanges(arena, Float64Array.of(0), Uint32Array.of(1), { threads: 0 })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    arena.close();
    expect(() => crc32cRanges(arena, Float64Array.of(0), Uint32Array.of(1))).toThrow(expect.objectContaining({ code: 'ERR_CLOSED' }));
  });
});

describe('copy with checksum (one pass over memory)', () => {
  it('copies exact bytes and gives their CRC32C at any alignment and length, across the 3-stream block sizes', async () => {
    const src = HostArena.create({ capacity: 4 << 20 });
    const dst = HostArena.create({ capacity: 4 << 20 });
    const engine = new TransferEngine({ threads: 2 });
    try {
      randomFillSync(src.view(0, 4 << 20));
      const cases: Array<[number, number, number]> = [[0, 0, 1], [3, 5, 7], [1, 0, 24_575], [7, 9, 24_576], [0, 3, 24_577 + 768], [5, 0, 262_144 + 13], [0, 0, 1 << 20], [11, 13, (1 << 20) + 8191]];
      let dstAt = 0;
      const batch = new TransferBatch();
      const where: Array<[number, number, number]> = [];
      for (const [so, dOff, len] of cases) {
        const d = dstAt + dOff;
        batch.add(src, so * 4099, dst, d, len);
        where.push([so * 4099, d, len]);
        dstAt = d + len + 64;
      }
      const r = await engine.submit(batch, { checksums: true });
      where.forEach(([s, d, len], i) => {
        expect(Buffer.compare(Buffer.from(dst.view(d, len)), Buffer.from(src.view(s, len))), `case ${i}`).toBe(0);
        expect(r.checksums![i], `case ${i}`).toBe(crc32c(src.view(s, len)));
      });
    } finally {
      await engine.close();
      src.close();
      dst.close();
    }
  });
});
