import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TtlPins } from './ttl-pins.js';

describe('TtlPins', () => {
  it('holds keys until their deadline, reporting only changes of the held state', () => {
    const pins = new TtlPins<string>();
    expect(pins.hold(['a', 'b', 'b'], 100, 50).held).toEqual(['a', 'b']); // until 150
    const second = pins.hold(['b', 'c'], 120, 100); // until 220
    expect(second.held).toEqual(['c']);
    expect(pins.holdCount('b')).toBe(2);
    expect(pins.nextExpiry()).toBe(150);
    expect(pins.expire(149)).toEqual([]);
    expect(pins.expire(150)).toEqual(['a']); // b is still held by the second hold
    expect(pins.isHeld('b')).toBe(true);
    expect(pins.release(second.id)).toEqual(['b', 'c']);
    expect(pins.release(second.id)).toEqual([]);
    expect([pins.size, pins.nextExpiry(), [...pins.keys()]]).toEqual([0, undefined, []]);
  });

  it('expires earliest deadline first, ties in creation order', () => {
    const pins = new TtlPins<number>();
    pins.hold([3], 0, 30);
    pins.hold([1], 0, 10);
    pins.hold([2], 0, 10);
    expect(pins.expire(100)).toEqual([1, 2, 3]);
  });

  it('agrees with a naive record of holds', () => {
    type Op = { kind: 'hold'; keys: number[]; ttl: number } | { kind: 'release'; which: number } | { kind: 'expire' };
    const op = fc.oneof(
      fc.record({ kind: fc.constant('hold' as const), keys: fc.array(fc.integer({ min: 0, max: 6 }), { maxLength: 4 }), ttl: fc.integer({ min: 1, max: 20 }) }),
      fc.record({ kind: fc.constant('release' as const), which: fc.nat(30) }),
      fc.record({ kind: fc.constant('expire' as const) }),
    );
    fc.assert(
      fc.property(fc.array(fc.tuple(op, fc.integer({ min: 0, max: 5 })), { maxLength: 80 }), (steps) => {
        const pins = new TtlPins<number>();
        const naive: { id: number; keys: Set<number>; until: number }[] = [];
        const ids: number[] = [];
        let now = 0;
        const heldNaive = (): Set<number> => new Set(naive.flatMap((h) => [...h.keys]));
        for (const [step, advance] of steps as [Op, number][]) {
          now += advance;
          const before = heldNaive();
          let reported: number[];
          if (step.kind === 'hold') {
            const { id, held } = pins.hold(step.keys, now, step.ttl);
            ids.push(id);
            naive.push({ id, keys: new Set(step.keys), until: now + step.ttl });
            reported = held;
            expect(new Set(reported)).toEqual(new Set([...heldNaive()].filter((k) => !before.has(k))));
            continue;
          }
          if (step.kind === 'release') {
            const id = ids[step.which % Math.max(ids.length, 1)];
            if (id === undefined) continue;
            reported = pins.release(id as never);
            const i = naive.findIndex((h) => h.id === id);
            if (i >= 0) naive.splice(i, 1);
          } else {
            reported = pins.expire(now);
            for (let i = naive.length - 1; i >= 0; i--) if (naive[i]!.until <= now) naive.splice(i, 1);
          }
          const after = heldNaive();
          expect(new Set(reported)).toEqual(new Set([...before].filter((k) => !after.has(k))));
          expect(new Set(pins.keys())).toEqual(after);
        }
      }),
      { numRuns: 200 },
    );
  });

  it('names what is malformed', () => {
    const pins = new TtlPins<number>();
    expect(() => pins.hold([1], 0, 0)).toThrow(/ttl/);
    expect(() => pins.hold([Number.NaN], 0, 1)).toThrow(/keys\[0\]/);
    expect(() => pins.hold([1], Number.POSITIVE_INFINITY, 1)).toThrow(/now/);
    expect(() => pins.expire(Number.NaN)).toThrow(/now/);
  });
});
