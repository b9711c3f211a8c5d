/**
 * The conformance suite every policy runs: random operation sequences (requests, removals, pins, unpins,
 * evictions, peeks, resets) checked against a model of the resident set after every step.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LruPolicy } from './policies/lru.js';
import { createPolicy, policyNames, PolicyRegistry } from './registry.js';
import { PriorityPolicy } from './priority.js';
import { TenantQuotaPolicy } from './tenant-quota.js';
import type { CapacityUnit, EvictionPolicy } from './types.js';

type Op =
  | { kind: 'request'; key: number; size: number }
  | { kind: 'remove'; key: number }
  | { kind: 'pin'; key: number }
  | { kind: 'unpin'; key: number }
  | { kind: 'evict' }
  | { kind: 'peek'; count: number }
  | { kind: 'reset' };

interface Setup {
  unit: CapacityUnit;
  capacity: number;
}

type Factory = (setup: Setup) => EvictionPolicy<number>;

/** A custom policy: it runs behind the contract's checks (internal/checked-policy.ts), which must pass it untouched. */
const custom = new PolicyRegistry(false);
custom.register('custom-lru', (options) => new LruPolicy(options));

const factories: [string, Factory][] = [
  ['custom-lru (checked)', ({ unit, capacity }) => custom.create<number>('custom-lru', { unit, capacity })],
  ...policyNames().map((name): [string, Factory] => [
    name,
    ({ unit, capacity }) =>
      // S3-FIFO needs a small queue of at least 2 units.
      createPolicy<number>(name, { unit, capacity, ...(name === 's3fifo' ? { smallRatio: 0.5 } : {}) }),
  ]),
  [
    'priority(lru, sieve)',
    ({ unit, capacity }) =>
      new PriorityPolicy<number>({
        capacity,
        unit,
        priorityOf: (key) => key % 3,
        create: (options, priority) => createPolicy(priority === 1 ? 'sieve' : 'lru', options),
      }),
  ],
  // The wrappers without hints decide exactly as their inner policy (wrappers/*.test.ts exercise the hints).
  ...['prefix-aware:lru', 'prefix-hold:fifo', 'session-aware:s3fifo', 'prefix-aware:session-aware:sieve', 'prefix-aware:clock'].map((spec): [string, Factory] => [
    spec,
    ({ unit, capacity }) => createPolicy<number>(spec, { unit, capacity, ...(spec.endsWith('s3fifo') ? { smallRatio: 0.5 } : {}) } as never),
  ]),
  [
    'tenant-quota(arc)',
    ({ unit, capacity }) =>
      new TenantQuotaPolicy<number>({
        capacity,
        unit,
        tenantOf: (key) => (key % 2 === 0 ? 'even' : 'odd'),
        quotas: { even: Math.ceil(capacity / 2), odd: capacity },
        create: (options) => createPolicy('arc', options),
      }),
  ],
];

const setups: fc.Arbitrary<Setup> = fc.oneof(
  fc.record({ unit: fc.constant<CapacityUnit>('objects'), capacity: fc.integer({ min: 4, max: 16 }) }),
  fc.record({ unit: fc.constant<CapacityUnit>('bytes'), capacity: fc.integer({ min: 16, max: 80 }) }),
);

const ops = (keys: number): fc.Arbitrary<Op[]> => {
  const key = fc.integer({ min: 0, max: keys });
  return fc.array(
    fc.oneof(
      { weight: 30, arbitrary: fc.record({ kind: fc.constant('request' as const), key, size: fc.integer({ min: 1, max: 12 }) }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('remove' as const), key }) },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('pin' as const), key }) },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('unpin' as const), key }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('evict' as const)}) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('peek' as const), count: fc.integer({ min: 0, max: 6 }) }) },
      { weight: 1, arbitrary: fc.constant({ kind: 'reset' as const }) },
    ),
    { maxLength: 120, size: 'max' },
  );
};

/** A setup, an operation sequence over about twice as many keys as fit, and a peek depth. */
const scenario = setups.chain((setup) =>
  fc.tuple(fc.constant(setup), ops(setup.unit === 'objects' ? setup.capacity * 2 : 20), fc.integer({ min: 0, max: 8 })),
);

/** Policies whose victims for an insert depend on the incoming object (peekVictims assumes none). */
const INCOMING_DEPENDENT = new Set(['arc', '2q', 'wtinylfu']);

/** Applies `op` and checks the policy against the model; returns a line describing what was observed. */
function step(policy: EvictionPolicy<number>, model: Map<number, { size: number; pins: number }>, op: Op): string {
  const cost = (size: number): number => (policy.unit === 'objects' ? 1 : size);
  const evicted = (victim: number): void => {
    const entry = model.get(victim);
    expect(entry, `victim ${victim} was resident`).toBeDefined();
    expect(entry!.pins, `victim ${victim} was not pinned`).toBe(0);
    model.delete(victim);
  };
  let line: string;
  switch (op.kind) {
    case 'request': {
      if (policy.access(op.key)) {
        expect(model.has(op.key)).toBe(true);
        line = 'hit';
      } else {
        expect(model.has(op.key)).toBe(false);
        if (!policy.canAdmit(op.key, op.size)) {
          expect(() => policy.insert(op.key, op.size)).toThrow(RangeError);
          line = 'refused';
        } else {
          // An insert evicts what peek announced, except where the victims depend on the incoming object: ARC's
          // case IV, 2Q's ghost hits (Am's own share), W-TinyLFU's window overflow.
          const predicted = INCOMING_DEPENDENT.has(policy.name) ? undefined : policy.peekVictims(policy.count);
          const victims = policy.insert(op.key, op.size);
          if (predicted !== undefined && policy.name !== 'tenant-quota') {
            expect(victims).toEqual(predicted.slice(0, victims.length));
          }
          victims.forEach(evicted);
          expect(new Set(victims).size).toBe(victims.length);
          model.set(op.key, { size: op.size, pins: 0 });
          expect(policy.has(op.key)).toBe(true);
          expect(policy.sizeOf(op.key)).toBe(op.size);
          line = `miss ${victims.join(',')}`;
        }
      }
      break;
    }
    case 'remove': {
      const removed = policy.remove(op.key);
      expect(removed).toBe(model.has(op.key));
      model.delete(op.key);
      expect(policy.has(op.key)).toBe(false);
      line = `remove ${removed}`;
      break;
    }
    case 'pin': {
      const pins = policy.pin(op.key);
      const entry = model.get(op.key);
      if (entry) entry.pins++;
      expect(pins).toBe(entry?.pins ?? 0);
      line = `pin ${pins}`;
      break;
    }
    case 'unpin': {
      const pins = policy.unpin(op.key);
      const entry = model.get(op.key);
      if (entry && entry.pins > 0) entry.pins--;
      expect(pins).toBe(entry?.pins ?? 0);
      line = `unpin ${pins}`;
      break;
    }
    case 'evict': {
      const victim = policy.evict();
      const evictable = [...model.values()].some((e) => e.pins === 0);
      expect(victim !== undefined).toBe(evictable);
      if (victim !== undefined) evicted(victim);
      line = `evict ${victim}`;
      break;
    }
    case 'peek': {
      const victims = policy.peekVictims(op.count);
      expect(policy.peekVictims(op.count)).toEqual(victims);
      const evictable = [...model.values()].filter((e) => e.pins === 0).length;
      expect(victims.length).toBe(Math.min(op.count, evictable));
      expect(new Set(victims).size).toBe(victims.length);
      for (const victim of victims) expect(model.get(victim)?.pins).toBe(0);
      line = `peek ${victims.join(',')}`;
      break;
    }
    case 'reset':
      policy.reset();
      model.clear();
      line = 'reset';
      break;
  }
  const entries = [...model.values()];
  expect(policy.count).toBe(model.size);
  expect(policy.used).toBe(entries.reduce((sum, e) => sum + cost(e.size), 0));
  expect(policy.usedBytes).toBe(entries.reduce((sum, e) => sum + e.size, 0));
  expect(policy.used).toBeLessThanOrEqual(policy.capacity);
  expect(policy.pinnedCount).toBe(entries.filter((e) => e.pins > 0).length);
  expect(policy.pinnedUsed).toBe(entries.reduce((sum, e) => sum + (e.pins > 0 ? cost(e.size) : 0), 0));
  expect(new Set(policy.keys())).toEqual(new Set(model.keys()));
  return line;
}

describe.each(factories)('%s conforms', (_name, factory) => {
  it('keeps used, count and pins exact, never over capacity, never evicting a pinned object', () => {
    fc.assert(
      fc.property(scenario, ([setup, sequence]) => {
        const policy = factory(setup);
        const model = new Map<number, { size: number; pins: number }>();
        for (const op of sequence) step(policy, model, op);
      }),
      { numRuns: 60 },
    );
  });

  it('peekVictims(n) names exactly the next n evictions and changes nothing', () => {
    fc.assert(
      fc.property(scenario, ([setup, sequence, n]) => {
        const peeking = factory(setup);
        const plain = factory(setup);
        const peekingModel = new Map<number, { size: number; pins: number }>();
        const plainModel = new Map<number, { size: number; pins: number }>();
        const seen: string[] = [];
        const expected: string[] = [];
        for (const op of sequence) {
          peeking.peekVictims(n);
          seen.push(step(peeking, peekingModel, op));
          expected.push(step(plain, plainModel, op));
        }
        expect(seen).toEqual(expected);
        const predicted = peeking.peekVictims(n);
        const actual: number[] = [];
        for (let i = 0; i < n; i++) {
          const victim = peeking.evict();
          if (victim === undefined) break;
          actual.push(victim);
        }
        expect(actual).toEqual(predicted);
      }),
      { numRuns: 40 },
    );
  });

  it('behaves like a fresh policy after reset', () => {
    fc.assert(
      fc.property(scenario, scenario, ([setup, before], [, after]) => {
        const used = factory(setup);
        const fresh = factory(setup);
        const model = new Map<number, { size: number; pins: number }>();
        for (const op of before) step(used, model, op);
        used.reset();
        expect([used.count, used.used, used.usedBytes, used.pinnedCount, [...used.keys()]]).toEqual([0, 0, 0, 0, []]);
        const usedModel = new Map<number, { size: number; pins: number }>();
        const freshModel = new Map<number, { size: number; pins: number }>();
        for (const op of after) expect(step(used, usedModel, op)).toBe(step(fresh, freshModel, op));
      }),
      { numRuns: 20 },
    );
  });

  it('rejects bad arguments with errors naming them', () => {
    const policy = factory({ unit: 'bytes', capacity: 64 });
    expect(() => policy.access(Number.NaN)).toThrow(/key/);
    expect(() => policy.access({} as unknown as number)).toThrow(TypeError);
    expect(() => policy.insert(1, 0)).toThrow(/size/);
    expect(() => policy.insert(1, 1.5)).toThrow(RangeError);
    expect(() => policy.canAdmit(1, -1)).toThrow(/size/);
    expect(() => policy.peekVictims(-1)).toThrow(/count/);
    policy.insert(1, 8);
    expect(() => policy.insert(1, 8)).toThrow(/already resident/);
    expect(() => factory({ unit: 'pages' as CapacityUnit, capacity: 64 })).toThrow(/unit/);
    expect(() => factory({ unit: 'bytes', capacity: 0 })).toThrow(/capacity/);
  });
});
