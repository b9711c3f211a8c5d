import { describe, expect, it } from 'vitest';
import { PageAllocator, type Slot } from './index.js';

describe('PageAllocator', () => {
  it('hands out every slot once, then refuses all-or-nothing', () => {
    const a = new PageAllocator({ capacity: 10 * 4096 + 100, pageBytes: 4096 });
    expect(a.slots).toBe(10);
    const first = a.allocate(7)!;
    expect(new Set(first).size).toBe(7);
    expect(a.allocate(4)).toBeUndefined();
    expect(a.freeCount).toBe(3);
    const rest = a.allocate(3)!;
    expect([...first, ...rest].sort((x, y) => x - y)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(a.allocate(1)).toBeUndefined();
    expect(a.allocate(0)).toEqual([]);
  });

  it('reuses freed slots first and refuses double frees', () => {
    const a = new PageAllocator({ capacity: 4 * 64, pageBytes: 64 });
    const s = a.allocate(4)!;
    a.free([s[2]!]);
    expect(a.allocate(1)).toEqual([s[2]]);
    a.free([s[0]!]);
    expect(() => a.free([s[0]!])).toThrow(/not allocated/);
    expect(() => a.free([99 as Slot])).toThrow(/out of range/);
    expect(a.offset(3 as Slot)).toBe(192);
  });

  it('hands out each batch in ascending order, so slots freed together come back as one run', () => {
    const a = new PageAllocator({ capacity: 16, pageBytes: 1 });
    const s = a.allocate(8)!;
    expect(s).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    a.free(s);
    expect(a.allocate(8)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('reserves given slots for recovery', () => {
    const a = new PageAllocator({ capacity: 8, pageBytes: 1 });
    a.reserve([1, 5]);
    expect(a.isUsed(1) && a.isUsed(5)).toBe(true);
    const got = a.allocate(6)!;
    expect(got).not.toContain(1);
    expect(got).not.toContain(5);
    expect(() => a.reserve([1])).toThrow(/already used/);
    expect(() => a.reserve([8])).toThrow(/out of range/);
  });

  it('refuses a capacity smaller than one page', () => {
    expect(() => new PageAllocator({ capacity: 10, pageBytes: 4096 })).toThrow(/capacity/);
    expect(() => new PageAllocator({ capacity: 4096, pageBytes: 0 })).toThrow(/pageBytes/);
  });
});
