/**
 * The default path keeps non-negative int32 keys in a typed-array hash (int-map.ts) and every other key in a `Map`
 * with the last lookup remembered. Whichever table a key lands in, every built-in policy must make the same
 * decisions: the same random operation sequence is replayed with integer keys, with string keys, and with a mix of
 * integers, strings and non-integer numbers, and everything observable must agree once keys are mapped back.
 */
import { describe, expect, it } from 'vitest';
import { createPolicy } from '../registry.js';
import { SeededRandom } from '../random.js';
import type { CapacityUnit, EvictionPolicy, PolicyKey, PolicyOptions } from '../types.js';

// W-TinyLFU is left out: its sketch hashes the key's value, so other keys rightly collide differently.
const POLICIES = ['lru', 'fifo', 'clock', 'sieve', 'lfu', 'arc', 's3fifo', 'mru', 'slru', 'lirs', '2q', 'lfuda', 'gdsf', 'opt', 'opt-size'] as const;
const KEYS = 24;

/** Key encodings, each one-to-one on 0..KEYS-1. */
const ENCODINGS: Record<string, (k: number) => PolicyKey> = {
  int: (k) => k,
  string: (k) => `page-${k}`,
  mixed: (k) => (k % 3 === 0 ? k : k % 3 === 1 ? String(k) : -k - 0.5),
};

function run(name: string, unit: CapacityUnit, capacity: number, seed: number, encode: (k: number) => PolicyKey): unknown[] {
  const options: PolicyOptions & { smallRatio?: number } = { unit, capacity };
  if (name === 's3fifo' && capacity * 0.1 < 2) options.smallRatio = 0.5;
  const policy: EvictionPolicy<PolicyKey> = createPolicy<PolicyKey>(name, options);
  const decode = new Map<PolicyKey, number>();
  for (let k = 0; k < KEYS; k++) decode.set(encode(k), k);
  const back = (keys: PolicyKey[]): number[] => keys.map((key) => decode.get(key)!);
  const random = new SeededRandom(seed);
  const out: unknown[] = [];
  for (let op = 0; op < 600; op++) {
    const k = random.nextUint32() % KEYS;
    const key = encode(k);
    const size = unit === 'objects' ? 1 : 1 + (random.nextUint32() % 4);
    const r = random.nextUint32() % 100;
    if (r < 60) {
      if (policy.access(key)) out.push('hit');
      else out.push(policy.canAdmit(key, size) ? back(policy.insert(key, size)) : 'refused');
    } else if (r < 68) out.push(policy.remove(key));
    else if (r < 76) out.push(policy.pin(key));
    else if (r < 86) out.push(policy.unpin(key));
    else if (r < 91) {
      const victim = policy.evict();
      out.push(victim === undefined ? undefined : decode.get(victim));
    } else if (r < 96) out.push(back(policy.peekVictims(random.nextUint32() % 4)));
    else if (r < 97) policy.reset();
    else out.push([policy.has(key), policy.sizeOf(key), policy.pinCount(key)]);
    out.push([policy.count, policy.used, policy.pinnedCount, back([...policy.keys()]).sort((a, b) => a - b)]);
  }
  return out;
}

describe('default key path: integer, string and mixed keys give the same decisions', () => {
  for (const name of POLICIES) {
    it(name, () => {
      for (const unit of ['objects', 'bytes'] as const) {
        for (let seed = 1; seed <= 6; seed++) {
          // At least 4 units: SLRU and 2Q need one per segment.
          const capacity = unit === 'objects' ? 4 + (seed % 5) * 2 : 8 + seed * 3;
          const ints = run(name, unit, capacity, seed, ENCODINGS.int!);
          expect(run(name, unit, capacity, seed, ENCODINGS.string!), `${unit} ${capacity} seed ${seed}: strings`).toEqual(ints);
          expect(run(name, unit, capacity, seed, ENCODINGS.mixed!), `${unit} ${capacity} seed ${seed}: mixed`).toEqual(ints);
        }
      }
    });
  }
});
