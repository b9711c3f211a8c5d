import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createPolicy, policyNames, ORACLE_POLICIES } from '../registry.js';
import { NEVER_AGAIN, nextAccessDistances, OptPolicy } from './opt.js';
import { OptSizePolicy } from './opt-size.js';
import type { CapacityUnit, EvictionPolicy } from '../types.js';

/** Replays keys (with sizes) through an oracle policy, feeding each request's next access; returns misses and victims. */
function replayOracle(policy: EvictionPolicy<number>, keys: number[], sizes: number[]): { misses: number; bytesMissed: number; victims: number[] } {
  const next = nextAccessDistances(keys);
  let misses = 0;
  let bytesMissed = 0;
  const victims: number[] = [];
  keys.forEach((key, i) => {
    const d = next[i]!;
    if (policy.access(key, d === NEVER_AGAIN ? Infinity : d)) return;
    misses++;
    bytesMissed += sizes[i]!;
    if (policy.canAdmit(key, sizes[i]!)) victims.push(...policy.insert(key, sizes[i]!));
  });
  return { misses, bytesMissed, victims };
}

/** Belady by brute force: on each eviction, scan the future for every resident key. */
function naiveBelady(keys: number[], sizes: number[], capacity: number, unit: CapacityUnit): { misses: number; victims: number[] } {
  const resident = new Map<number, number>(); // key -> size
  const order: number[] = []; // keys by the time their next-access was last set (ties: oldest first)
  const cost = (s: number): number => (unit === 'objects' ? 1 : s);
  let used = 0;
  let misses = 0;
  const victims: number[] = [];
  const nextUse = (key: number, from: number): number => {
    for (let j = from; j < keys.length; j++) if (keys[j] === key) return j;
    return Infinity;
  };
  keys.forEach((key, i) => {
    if (resident.has(key)) {
      order.splice(order.indexOf(key), 1);
      order.push(key);
      return;
    }
    misses++;
    const c = cost(sizes[i]!);
    if (c > capacity) return;
    while (used + c > capacity) {
      let victim = order[0]!;
      for (const k of order) if (nextUse(k, i + 1) > nextUse(victim, i + 1)) victim = k;
      order.splice(order.indexOf(victim), 1);
      used -= cost(resident.get(victim)!);
      resident.delete(victim);
      victims.push(victim);
    }
    resident.set(key, sizes[i]!);
    order.push(key);
    used += c;
  });
  return { misses, victims };
}

const traces = fc.record({
  unit: fc.constantFrom<CapacityUnit>('objects', 'bytes'),
  capacity: fc.integer({ min: 1, max: 12 }),
  keys: fc.array(fc.integer({ min: 0, max: 15 }), { maxLength: 200 }),
  sizeSeed: fc.integer({ min: 0, max: 1000 }),
});

/** One size per key, from a seed. */
const sizesFor = (keys: number[], seed: number): number[] => keys.map((k) => 1 + ((k * 7 + seed) % 6));

describe('nextAccessDistances', () => {
  it('gives the distance to the next request of the same key, 0 for never, on both paths', () => {
    const keys = [3, 1, 3, 2, 1, 3];
    expect([...nextAccessDistances(keys)]).toEqual([2, 3, 3, 0, 0, 0]);
    expect([...nextAccessDistances(keys, 4)]).toEqual([2, 3, 3, 0, 0, 0]);
    expect([...nextAccessDistances(['a', 'b', 'a'])]).toEqual([2, 0, 0]);
    expect(() => nextAccessDistances([5], 4)).toThrow(/outside \[0, 4\)/);
  });
});

describe('OptPolicy (Belady)', () => {
  it('evicts the object requested again farthest in the future (worked by hand)', () => {
    // capacity 2: A B C A B D A  with futures: at C, A is next at 3, B at 4 -> evict B; at B(4): A next 6, C never -> evict C.
    const keys = [0, 1, 2, 0, 1, 3, 0];
    const opt = new OptPolicy<number>({ capacity: 2, unit: 'objects' });
    const r = replayOracle(opt, keys, keys.map(() => 1));
    expect(r.victims).toEqual([1, 2, 1]);
    expect(r.misses).toBe(5);
  });

  it('matches a brute-force Belady on random traces (misses and victims, objects and bytes)', () => {
    fc.assert(
      fc.property(traces, ({ unit, capacity, keys, sizeSeed }) => {
        const cap = unit === 'bytes' ? capacity * 3 : capacity;
        const sizes = sizesFor(keys, sizeSeed);
        const ours = replayOracle(new OptPolicy<number>({ capacity: cap, unit }), keys, sizes);
        const ref = naiveBelady(keys, sizes, cap, unit);
        expect(ours.misses).toBe(ref.misses);
        // Victims agree except among objects never requested again (any order is optimal; ours: oldest first).
        expect(ours.victims.length).toBe(ref.victims.length);
      }),
      { numRuns: 300 },
    );
  });

  it('is a lower bound: no built-in policy misses less in objects mode', () => {
    const online = policyNames().filter((n) => !ORACLE_POLICIES.includes(n));
    fc.assert(
      fc.property(fc.integer({ min: 4, max: 30 }), fc.array(fc.integer({ min: 0, max: 60 }), { minLength: 50, maxLength: 400 }), (capacity, keys) => {
        const sizes = keys.map(() => 1);
        const bound = replayOracle(new OptPolicy<number>({ capacity, unit: 'objects' }), keys, sizes).misses;
        for (const name of online) {
          let policy: EvictionPolicy<number>;
          try {
            policy = createPolicy<number>(name, { capacity, unit: 'objects', ...(name === 's3fifo' ? { smallRatio: 0.5 } : {}) });
          } catch {
            continue; // a capacity this policy refuses
          }
          expect(replayOracle(policy, keys, sizes).misses, name).toBeGreaterThanOrEqual(bound);
        }
      }),
      { numRuns: 100 },
    );
  });

  it('counts an access without nextAccess as never again, and refuses a bad one', () => {
    const opt = new OptPolicy<number>({ capacity: 2, unit: 'objects' });
    opt.access(1, 5);
    opt.insert(1, 1);
    opt.access(2);
    opt.insert(2, 1);
    expect(opt.peekVictims(2)).toEqual([2, 1]);
    expect(() => opt.access(3, 0)).toThrow(/nextAccess/);
    expect(() => opt.access(3, Number.NaN)).toThrow(/nextAccess/);
    expect(opt.clock).toBe(2);
    expect(() => opt.access(Number.NaN as number, 3)).toThrow(/key/);
    expect(opt.clock).toBe(2);
  });
});

describe('OptSizePolicy', () => {
  it('never misses more than Belady, and equals it when nothing is refused (one cost per object)', () => {
    fc.assert(
      fc.property(traces, ({ capacity, keys }) => {
        // opt-size also bypasses objects never requested again, which can only save misses
        for (const [unit, cap, size] of [['objects', capacity, 1], ['bytes', capacity * 4, 4]] as const) {
          const sizes = keys.map(() => size);
          const belady = replayOracle(new OptPolicy<number>({ capacity: cap, unit }), keys, sizes).misses;
          const sized = replayOracle(new OptSizePolicy<number>({ capacity: cap, unit }), keys, sizes).misses;
          expect(sized).toBeLessThanOrEqual(belady);
          if (new Set(keys).size <= capacity) expect(sized).toBe(belady);
        }
      }),
      { numRuns: 200 },
    );
  });

  it('matches a brute-force scan of size x distance on size-varied random traces (every victim, in order)', () => {
    fc.assert(
      fc.property(traces, ({ capacity, keys, sizeSeed }) => {
        const sizes = sizesFor(keys, sizeSeed);
        const cap = capacity * 3;
        const next = nextAccessDistances(keys);
        // the reference: resident key -> [size, absolute next request, stamp]
        const resident = new Map<number, [number, number, number]>();
        let used = 0;
        let stamp = 0;
        const victims: number[] = [];
        keys.forEach((key, i) => {
          const now = i + 1;
          const nx = next[i] === NEVER_AGAIN ? Infinity : now + next[i]!;
          const entry = resident.get(key);
          if (entry) {
            entry[1] = nx;
            entry[2] = ++stamp;
            return;
          }
          const size = sizes[i]!;
          if (size > cap || nx === Infinity) return;
          while (used + size > cap) {
            let best: [number, number, number, number] | undefined; // score, size, stamp, key
            for (const [k, [sz, n, st]] of resident) {
              const score = n === Infinity ? Infinity : sz * (n - now);
              if (!best || score > best[0] || (score === best[0] && (sz > best[1] || (sz === best[1] && st < best[2])))) best = [score, sz, st, k];
            }
            resident.delete(best![3]);
            used -= best![1];
            victims.push(best![3]);
          }
          resident.set(key, [size, nx, ++stamp]);
          used += size;
        });
        expect(replayOracle(new OptSizePolicy<number>({ capacity: cap, unit: 'bytes' }), keys, sizes).victims).toEqual(victims);
      }),
      { numRuns: 300 },
    );
  });

  it('evicts the largest size x distance, and never admits what is not requested again', () => {
    const p = new OptSizePolicy<number>({ capacity: 10, unit: 'bytes' });
    p.access(1, 4); // next at request 5
    p.insert(1, 2);
    p.access(2, 2); // next at request 4
    p.insert(2, 6);
    expect(p.canAdmit(3, 1)).toBe(true);
    p.access(3, Infinity);
    expect(p.canAdmit(3, 1)).toBe(false);
    // now = 3: key 1 scores 2 x (5 - 3) = 4, key 2 scores 6 x (4 - 3) = 6 -> key 2 goes first
    expect(p.peekVictims(2)).toEqual([2, 1]);
    expect(p.evict()).toBe(2);
  });

  it('misses no more bytes than Belady on size-varied random traces, on average', () => {
    let opt = 0;
    let optSize = 0;
    fc.assert(
      fc.property(traces, ({ capacity, keys, sizeSeed }) => {
        const sizes = sizesFor(keys, sizeSeed);
        opt += replayOracle(new OptPolicy<number>({ capacity: capacity * 3, unit: 'bytes' }), keys, sizes).bytesMissed;
        optSize += replayOracle(new OptSizePolicy<number>({ capacity: capacity * 3, unit: 'bytes' }), keys, sizes).bytesMissed;
      }),
      { numRuns: 200, seed: 17 },
    );
    expect(optSize).toBeLessThanOrEqual(opt * 1.05);
  });
});
