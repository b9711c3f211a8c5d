import { describe, expect, it } from 'vitest';
import { StagingArea } from './staging.js';

describe('StagingArea', () => {
  it('allocates first fit, merges neighbours on release, and refuses a double release', () => {
    const s = new StagingArea(1 << 20);
    try {
      const a = s.tryAllocate(1000)!;
      const b = s.tryAllocate(64)!;
      const c = s.tryAllocate((1 << 20) - 1024 - 64)!;
      expect([a.offset, b.offset, c.offset]).toEqual([0, 1024, 1088]);
      expect(s.tryAllocate(1)).toBeUndefined();
      expect(s.offsetOf(b.bytes)).toBe(1024);
      expect(s.offsetOf(new Uint8Array(8))).toBe(-1);
      s.release(a);
      s.release(b);
      expect(() => s.release(b)).toThrow(/released twice/);
      expect(s.tryAllocate(1088)!.offset).toBe(0);
    } finally {
      s.close();
    }
  });

  it('wakes waiters when room frees, and times out otherwise', async () => {
    const s = new StagingArea(1 << 20);
    try {
      const all = s.tryAllocate(1 << 20)!;
      await expect(s.waitForRoom(4096, 50)).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
      await expect(s.waitForRoom(2 << 20, 50)).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
      const waiting = s.allocate(4096, 5000);
      setTimeout(() => s.release(all), 20);
      expect((await waiting).offset).toBe(0);
      expect(s.usedBytes).toBe(4096);
    } finally {
      s.close();
    }
  });
});
