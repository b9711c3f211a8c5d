import { describe, expect, it } from 'vitest';
import { PinTable } from './pins.js';

describe('PinTable', () => {
  it('reports each key once when it becomes held and once when released, across load and TTL pins', () => {
    const t = new PinTable<string>();
    const a = t.beginLoad(['k1', 'k2', 'k1']);
    expect(a.held).toEqual(['k1', 'k2']);
    expect(t.hold(['k2', 'k3'], 'user', 10)).toEqual(['k3']);
    const b = t.beginLoad(['k1']);
    expect(b.held).toEqual([]);
    expect(t.endLoad(a.id)).toEqual([]); // k1 still loaded by b, k2 held by the TTL pin
    expect(t.endLoad(a.id)).toEqual([]); // ending twice is harmless
    expect(t.endLoad(b.id)).toEqual(['k1']);
    expect(t.expire(9)).toEqual([]);
    expect(t.expire(10)).toEqual(['k2', 'k3']);
    expect(t.heldCount).toBe(0);
  });

  it('one TTL pin per owner and key: pinning again moves the deadline, release is per owner', () => {
    const t = new PinTable<string>();
    t.hold(['k'], 'a', 10);
    t.hold(['k'], 'a', 30);
    t.hold(['k'], 'b', 20);
    expect(t.ttlPins()).toEqual([
      { key: 'k', owner: 'a', expiresAt: 30 },
      { key: 'k', owner: 'b', expiresAt: 20 },
    ]);
    expect(t.nextExpiry()).toBe(20);
    expect(t.expire(25)).toEqual([]); // a's old deadline 10 is stale, b's pin ends, a's holds
    expect(t.isHeld('k')).toBe(true);
    expect(t.release(['k'], 'b')).toEqual({ removed: 0, released: [] });
    expect(t.release(['k'], 'a')).toEqual({ removed: 1, released: ['k'] });
    expect(t.nextExpiry()).toBeUndefined();
  });

  it('checks its arguments', () => {
    const t = new PinTable<string>();
    expect(() => t.hold(['k'], '', 1)).toThrow(/owner/);
    expect(() => t.hold(['k'], 'a', Number.NaN)).toThrow(/expiresAt/);
    expect(() => t.expire(Number.POSITIVE_INFINITY)).toThrow(/now/);
  });
});
