/**
 * Cross-check: each optimized policy against an independent, obviously correct reference written here with plain
 * arrays (index 0 = head / most recent) and O(n) scans, replayed on random traces with removals. Both must give
 * the same hit/miss sequence, the same victims in the same order, and the same final contents.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ArcPolicy } from './arc.js';
import { ClockPolicy } from './clock.js';
import { FifoPolicy } from './fifo.js';
import { LfuPolicy } from './lfu.js';
import { LruPolicy } from './lru.js';
import { S3FifoPolicy } from './s3fifo.js';
import { SievePolicy } from './sieve.js';
import type { CapacityUnit, EvictionPolicy } from '../types.js';

interface Entry {
  key: number;
  size: number;
  bit: number;
  freq: number;
  stamp: number;
}

type Op = { kind: 'request'; key: number; size: number } | { kind: 'remove'; key: number } | { kind: 'evict' };

/** The reference side: the same request flow as `replay`, written out. */
abstract class Naive {
  constructor(
    readonly capacity: number,
    readonly unit: CapacityUnit,
  ) {}

  cost(size: number): number {
    return this.unit === 'objects' ? 1 : size;
  }

  sum(list: Entry[]): number {
    return list.reduce((total, e) => total + this.cost(e.size), 0);
  }

  entry(key: number, size: number): Entry {
    return { key, size, bit: 0, freq: 0, stamp: 0 };
  }

  abstract resident(): Entry[];
  abstract access(key: number): boolean;
  abstract evict(incoming: number): number;
  abstract place(key: number, size: number): void;
  abstract remove(key: number): void;

  used(): number {
    return this.sum(this.resident());
  }

  canAdmit(_key: number, size: number): boolean {
    return this.cost(size) <= this.capacity;
  }

  insert(key: number, size: number): number[] {
    const victims: number[] = [];
    while (this.used() + this.cost(size) > this.capacity) victims.push(this.evict(this.cost(size)));
    this.place(key, size);
    return victims;
  }
}

class NaiveLru extends Naive {
  list: Entry[] = [];
  resident(): Entry[] {
    return this.list;
  }
  access(key: number): boolean {
    const i = this.list.findIndex((e) => e.key === key);
    if (i < 0) return false;
    this.list.unshift(...this.list.splice(i, 1));
    return true;
  }
  evict(): number {
    return this.list.pop()!.key;
  }
  place(key: number, size: number): void {
    this.list.unshift(this.entry(key, size));
  }
  remove(key: number): void {
    this.list = this.list.filter((e) => e.key !== key);
  }
}

class NaiveFifo extends NaiveLru {
  override access(key: number): boolean {
    return this.list.some((e) => e.key === key);
  }
}

class NaiveClock extends NaiveLru {
  override access(key: number): boolean {
    const e = this.list.find((x) => x.key === key);
    if (e) e.bit = 1;
    return e !== undefined;
  }
  override evict(): number {
    for (;;) {
      const tail = this.list.pop()!;
      if (tail.bit === 0) return tail.key;
      tail.bit = 0;
      this.list.unshift(tail);
    }
  }
}

class NaiveSieve extends NaiveClock {
  hand: Entry | null = null;
  override evict(): number {
    let i = this.hand ? this.list.indexOf(this.hand) : this.list.length - 1;
    while (this.list[i]!.bit === 1) {
      this.list[i]!.bit = 0;
      i = i === 0 ? this.list.length - 1 : i - 1;
    }
    const victim = this.list[i]!;
    this.hand = i > 0 ? this.list[i - 1]! : null;
    this.list.splice(i, 1);
    return victim.key;
  }
  override remove(key: number): void {
    const i = this.list.findIndex((e) => e.key === key);
    if (i < 0) return;
    if (this.list[i] === this.hand) this.hand = i > 0 ? this.list[i - 1]! : null;
    this.list.splice(i, 1);
  }
}

class NaiveLfu extends NaiveLru {
  clock = 0;
  override access(key: number): boolean {
    const e = this.list.find((x) => x.key === key);
    if (!e) return false;
    e.freq++;
    e.stamp = ++this.clock;
    return true;
  }
  override evict(): number {
    let best = this.list[0]!;
    for (const e of this.list) if (e.freq < best.freq || (e.freq === best.freq && e.stamp < best.stamp)) best = e;
    this.remove(best.key);
    return best.key;
  }
  override place(key: number, size: number): void {
    this.list.push({ ...this.entry(key, size), freq: 1, stamp: ++this.clock });
  }
}

class NaiveArc extends Naive {
  t1: Entry[] = [];
  t2: Entry[] = [];
  b1: Entry[] = [];
  b2: Entry[] = [];
  p = 0;
  ghostHit: 'b1' | 'b2' | null = null;

  resident(): Entry[] {
    return [...this.t1, ...this.t2];
  }
  take(list: Entry[], key: number): Entry | undefined {
    const i = list.findIndex((e) => e.key === key);
    return i < 0 ? undefined : list.splice(i, 1)[0];
  }
  access(key: number): boolean {
    this.ghostHit = null;
    const inT1 = this.take(this.t1, key);
    if (inT1) {
      this.t2.unshift(inT1);
      return true;
    }
    const inT2 = this.take(this.t2, key);
    if (inT2) {
      this.t2.unshift(inT2);
      return true;
    }
    if (this.b1.some((e) => e.key === key)) {
      this.p = Math.min(this.p + Math.max(this.sum(this.b2) / this.sum(this.b1), 1), this.capacity);
      this.take(this.b1, key);
      this.ghostHit = 'b1';
    } else if (this.b2.some((e) => e.key === key)) {
      this.p = Math.max(this.p - Math.max(this.sum(this.b1) / this.sum(this.b2), 1), 0);
      this.take(this.b2, key);
      this.ghostHit = 'b2';
    }
    return false;
  }
  replace(): number {
    const t1 = this.sum(this.t1);
    if ((t1 > 0 && (t1 > this.p || (t1 === this.p && this.ghostHit === 'b2'))) || this.t2.length === 0) {
      const e = this.t1.pop()!;
      this.b1.unshift(e);
      return e.key;
    }
    const e = this.t2.pop()!;
    this.b2.unshift(e);
    return e.key;
  }
  evict(incoming: number): number {
    if (this.ghostHit !== null) return this.replace();
    const [t1, t2, b1, b2] = [this.sum(this.t1), this.sum(this.t2), this.sum(this.b1), this.sum(this.b2)];
    if (t1 + b1 + incoming > this.capacity) {
      if (b1 > 0) {
        this.b1.pop();
        return this.replace();
      }
      return this.t1.pop()!.key;
    }
    if (t1 + b1 + t2 + b2 >= 2 * this.capacity && b2 > 0) this.b2.pop();
    return this.replace();
  }
  place(key: number, size: number): void {
    (this.ghostHit !== null ? this.t2 : this.t1).unshift(this.entry(key, size));
    this.ghostHit = null;
  }
  remove(key: number): void {
    for (const list of [this.t1, this.t2, this.b1, this.b2]) this.take(list, key);
  }
}

class NaiveS3Fifo extends Naive {
  small: Entry[] = [];
  main: Entry[] = [];
  ghost: Entry[] = [];
  ghostHit: number | null = null;
  readonly smallCap: number;
  readonly mainCap: number;
  readonly ghostCap: number;

  constructor(
    capacity: number,
    unit: CapacityUnit,
    readonly smallRatio: number,
    readonly threshold: number,
  ) {
    super(capacity, unit);
    this.smallCap = Math.floor(capacity * smallRatio);
    this.mainCap = capacity - this.smallCap;
    this.ghostCap = Math.floor(capacity * 0.9);
  }
  resident(): Entry[] {
    return [...this.small, ...this.main];
  }
  access(key: number): boolean {
    this.ghostHit = null;
    const e = this.resident().find((x) => x.key === key);
    if (e) {
      e.freq = Math.min(e.freq + 1, 3);
      return true;
    }
    const g = this.ghost.findIndex((x) => x.key === key);
    if (g >= 0) {
      this.ghost.splice(g, 1);
      this.ghostHit = key;
    }
    return false;
  }
  override canAdmit(key: number, size: number): boolean {
    const c = this.cost(size);
    if (c > this.capacity) return false;
    return this.ghostHit === key ? c <= this.smallCap : c < this.smallCap;
  }
  evict(): number {
    for (;;) {
      if (this.small.length === 0 || this.sum(this.main) > this.mainCap) {
        for (;;) {
          const e = this.main.pop()!;
          if (e.freq === 0) return e.key;
          e.freq = Math.min(e.freq, 3) - 1;
          this.main.unshift(e);
        }
      }
      while (this.small.length > 0) {
        const e = this.small.pop()!;
        if (e.freq >= this.threshold) {
          e.freq = 0;
          this.main.unshift(e);
          continue;
        }
        const c = this.cost(e.size);
        if (c <= this.ghostCap) {
          while (this.sum(this.ghost) + c > this.ghostCap) this.ghost.pop();
          this.ghost.unshift(e);
        }
        return e.key;
      }
    }
  }
  place(key: number, size: number): void {
    (this.ghostHit === key ? this.main : this.small).unshift(this.entry(key, size));
    this.ghostHit = null;
  }
  remove(key: number): void {
    this.small = this.small.filter((e) => e.key !== key);
    this.main = this.main.filter((e) => e.key !== key);
    this.ghost = this.ghost.filter((e) => e.key !== key);
  }
}

interface Setup {
  name: string;
  capacity: number;
  unit: CapacityUnit;
  smallRatio: number;
  threshold: number;
}

function build(setup: Setup): [EvictionPolicy<number>, Naive] {
  const { capacity, unit } = setup;
  switch (setup.name) {
    case 'lru':
      return [new LruPolicy({ capacity, unit }), new NaiveLru(capacity, unit)];
    case 'fifo':
      return [new FifoPolicy({ capacity, unit }), new NaiveFifo(capacity, unit)];
    case 'clock':
      return [new ClockPolicy({ capacity, unit }), new NaiveClock(capacity, unit)];
    case 'sieve':
      return [new SievePolicy({ capacity, unit }), new NaiveSieve(capacity, unit)];
    case 'lfu':
      return [new LfuPolicy({ capacity, unit }), new NaiveLfu(capacity, unit)];
    case 'arc':
      return [new ArcPolicy({ capacity, unit }), new NaiveArc(capacity, unit)];
    default: {
      const options = { capacity, unit, smallRatio: setup.smallRatio, moveToMainThreshold: setup.threshold };
      return [new S3FifoPolicy(options), new NaiveS3Fifo(capacity, unit, setup.smallRatio, setup.threshold)];
    }
  }
}

/** Runs the ops on both sides and returns what each observed. */
function drive(policy: EvictionPolicy<number>, naive: Naive, ops: Op[]): void {
  const seen: string[] = [];
  const expected: string[] = [];
  for (const op of ops) {
    if (op.kind === 'remove') {
      policy.remove(op.key);
      naive.remove(op.key);
      continue;
    }
    if (op.kind === 'evict') {
      seen.push(`evict ${policy.evict()}`);
      expected.push(`evict ${naive.resident().length > 0 ? naive.evict(0) : undefined}`);
      continue;
    }
    const { key, size } = op;
    // Peeking first also checks that peeking changes nothing.
    policy.peekVictims(3);
    if (policy.access(key)) seen.push(`hit ${key}`);
    else if (!policy.canAdmit(key, size)) seen.push(`refuse ${key}`);
    else seen.push(`miss ${key} evict ${policy.insert(key, size).join(',')}`);
    if (naive.access(key)) expected.push(`hit ${key}`);
    else if (!naive.canAdmit(key, size)) expected.push(`refuse ${key}`);
    else expected.push(`miss ${key} evict ${naive.insert(key, size).join(',')}`);
  }
  expect(seen).toEqual(expected);
  const contents = (keys: Iterable<number>): number[] => [...keys].sort((a, b) => a - b);
  expect(contents(policy.keys())).toEqual(contents(naive.resident().map((e) => e.key)));
  expect(policy.used).toBe(naive.used());
}

const NAMES = ['lru', 'fifo', 'clock', 'sieve', 'lfu', 'arc', 's3fifo'] as const;

const setups = (name: string): fc.Arbitrary<Setup> =>
  fc
    .record({
      unit: fc.constantFrom<CapacityUnit>('objects', 'bytes'),
      capacity: fc.integer({ min: 1, max: 24 }),
      smallRatio: fc.constantFrom(0.1, 0.25, 0.5),
      threshold: fc.integer({ min: 1, max: 3 }),
    })
    .map((s) => ({ ...s, name, capacity: name === 's3fifo' ? Math.max(s.capacity, Math.ceil(2 / s.smallRatio)) : s.capacity }))
    .map((s) => (s.unit === 'bytes' ? { ...s, capacity: s.capacity * 4 } : s));

const opsFor = (keys: number): fc.Arbitrary<Op[]> =>
  fc.array(
    fc.oneof(
      {
        weight: 20,
        arbitrary: fc.record({
          kind: fc.constant('request' as const),
          key: fc.integer({ min: 0, max: keys }),
          size: fc.integer({ min: 1, max: 12 }),
        }),
      },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('remove' as const), key: fc.integer({ min: 0, max: keys }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('evict' as const) }) },
    ),
    { maxLength: 400, size: 'max' },
  );

/** Enough distinct keys to make hits, misses and ghost hits all common. */
const keysFor = (setup: Setup): number =>
  Math.max(3, setup.unit === 'bytes' ? Math.round(setup.capacity / 4) : Math.round(setup.capacity * 1.5));

describe('optimized policies agree with naive array-based references', () => {
  for (const name of NAMES) {
    it(`${name}: identical hits, misses, refusals and victims on random traces`, () => {
      fc.assert(
        fc.property(
          setups(name).chain((setup) => fc.tuple(fc.constant(setup), opsFor(keysFor(setup)))),
          ([setup, ops]) => {
            const [policy, naive] = build(setup);
            drive(policy, naive, ops);
          },
        ),
        { numRuns: 300 },
      );
    });
  }
});
