import { describe, expect, it } from 'vitest';
import { SeededRandom, policyNames, replay, type TraceRequest } from '@tiersync/policy';
import { TierSyncError } from '@tiersync/native/errors';
import { denseKeyBound, nextAccesses, replayObjects, replayObjectsOracle, replayPages, runExact } from './exact.js';
import { boundPolicy, checkPolicies, isOracle, makePolicy, withBound } from './policies.js';
import type { LlmTrace, ObjectTrace } from './trace/types.js';

function objects(ids: number[], sizes?: number[]): ObjectTrace {
  return {
    kind: 'object', source: 'test', times: new Float64Array(ids.length), keys: Uint32Array.from(ids),
    sizes: Float64Array.from(sizes ?? ids.map(() => 1)), length: ids.length, distinct: new Set(ids).size,
  };
}

function llm(requests: number[][]): LlmTrace {
  return {
    kind: 'llm', source: 'test', blockTokens: 512,
    requests: requests.map((p, i) => ({ timeMs: i, inputTokens: p.length * 512, outputTokens: 1, pages: Uint32Array.from(p) })),
    distinctPages: new Set(requests.flat()).size, pageRefs: requests.flat().length,
  };
}

const POLICIES = ['lru', 'fifo', 'clock', 'lfu', 'arc', 's3fifo', 'sieve'];

describe('exact mode on hand-made traces', () => {
  // A B A C B A, capacity 2 objects.
  const t = objects([0, 1, 0, 2, 1, 0]);

  it('LRU: A(m) B(m) A(h) C(m, evicts B) B(m, evicts A) A(m, evicts C) = 5 misses', () => {
    expect(runExact(t, { policy: 'lru', unit: 'objects', capacity: 2 })).toEqual({
      policy: 'lru', capacityBytes: null, capacityObjects: 2, requests: 6, misses: 5, bytesRequested: 6, bytesMissed: 5,
    });
  });

  it('FIFO: A(m) B(m) A(h) C(m, evicts A) B(h) A(m, evicts B) = 4 misses', () => {
    expect(runExact(t, { policy: 'fifo', unit: 'objects', capacity: 2 }).misses).toBe(4);
  });

  it('unbounded capacity misses only first accesses, for every policy, and reports null capacities', () => {
    for (const policy of POLICIES) {
      const r = runExact(t, { policy, unit: 'objects', capacity: Infinity });
      expect(r).toMatchObject({ misses: 3, capacityBytes: null, capacityObjects: null });
    }
  });

  it('byte capacity counts sizes: an object larger than the cache is never inserted', () => {
    const s = objects([0, 1, 0, 1], [60, 50, 60, 50]);
    // capacity 100: 0 (60) fits, 1 (50) evicts 0; 0 evicts 1; 1 evicts 0 → 4 misses
    expect(runExact(s, { policy: 'lru', unit: 'bytes', capacity: 100 })).toMatchObject({ capacityBytes: 100, capacityObjects: null, misses: 4, bytesRequested: 220, bytesMissed: 220 });
    // capacity 55: object 0 never fits; 1 hits the second time
    expect(runExact(s, { policy: 'lru', unit: 'bytes', capacity: 55 })).toMatchObject({ misses: 3, bytesMissed: 170 });
  });

  it('Mooncake page requests: prefix page hit ratio counts only the leading hits', () => {
    const trace = llm([[1, 2, 3], [1, 2, 4], [5, 2, 3]]);
    // unbounded: r2 hits 1,2 (prefix 2); r3 misses 5 then hits 2,3 outside the prefix.
    expect(runExact(trace, { policy: 'lru', unit: 'objects', capacity: Infinity })).toEqual({
      policy: 'lru', capacityBytes: null, capacityObjects: null, requests: 9, misses: 5, bytesRequested: 9, bytesMissed: 5, prefixPageHitRatio: 2 / 9,
    });
    // LRU of 2 pages: every access misses (worked out by hand in the module docs of this test).
    expect(runExact(trace, { policy: 'lru', unit: 'objects', capacity: 2 })).toMatchObject({ misses: 9, prefixPageHitRatio: 0 });
    // byte mode with 10-byte pages and 25 bytes: the same two pages fit
    expect(runExact(trace, { policy: 'lru', unit: 'bytes', capacity: 25, pageBytes: 10 })).toMatchObject({ capacityBytes: 25, misses: 9, bytesRequested: 90, bytesMissed: 90 });
  });

  it('refuses unknown policies and capacities a policy cannot take', () => {
    expect(() => runExact(t, { policy: 'nope', unit: 'objects', capacity: 2 })).toThrow(TierSyncError);
    expect(() => runExact(t, { policy: 's3fifo', unit: 'objects', capacity: 5 })).toThrow(/s3fifo with capacity 5/);
  });
});

describe('chain-aware wrappers in exact mode get each page\'s parent', () => {
  // Chain 1 -> 2 -> 3, then an unrelated page 4, then the chain again; 3 pages of room.
  const t = llm([[1, 2, 3], [4], [1, 2, 3]]);

  it('a prefix- wrapper evicts the chain\'s leaf, not its root: 5 misses where bare FIFO misses 7', () => {
    // FIFO: 4 evicts 1 (the root), and the chain then misses 1, 2, 3 again. The wrappers evict the leaf 3: the
    // chain's return hits 1 and 2 (its prefix) and misses 3 only.
    expect(runExact(t, { policy: 'fifo', unit: 'objects', capacity: 3 })).toMatchObject({ misses: 7, prefixPageHitRatio: 0 });
    for (const policy of ['prefix-aware:fifo', 'prefix-hold:fifo', 'prefix-aware:lru']) {
      expect(runExact(t, { policy, unit: 'objects', capacity: 3 }), policy).toMatchObject({ misses: 5, prefixPageHitRatio: 2 / 7 });
    }
  });

  it('OPT stays a lower bound of the wrapped policies on chained requests', () => {
    // Requests walk a tree of pages: each page's id is fixed by its parent and its branch, as chained keys are.
    const rng = new SeededRandom(7);
    const ids = new Map<string, number>();
    const requests: number[][] = [];
    for (let i = 0; i < 3000; i++) {
      const pages: number[] = [];
      let parent = -1;
      const depth = 1 + rng.nextInt(12);
      for (let d = 0; d < depth; d++) {
        const branch = `${parent}/${rng.next() < 0.8 ? 0 : rng.nextInt(8)}`;
        if (!ids.has(branch)) ids.set(branch, ids.size);
        parent = ids.get(branch)!;
        pages.push(parent);
      }
      requests.push(pages);
    }
    const tree = llm(requests);
    for (const capacity of [30, 120]) {
      const bound = runExact(tree, { policy: 'opt', unit: 'objects', capacity }).misses;
      for (const inner of ['lru', 'fifo', 'sieve', 's3fifo', 'arc']) {
        for (const wrapper of ['prefix-aware', 'prefix-hold']) {
          const policy = `${wrapper}:${inner}`;
          expect(runExact(tree, { policy, unit: 'objects', capacity }).misses, policy).toBeGreaterThanOrEqual(bound);
        }
      }
    }
  });
});

describe('the inlined loop matches @tiersync/policy replay()', () => {
  const rng = new SeededRandom(11);
  const n = 20_000;
  const ids: number[] = [];
  const sizes: number[] = [];
  const sizeOf = new Map<number, number>();
  for (let i = 0; i < n; i++) {
    // skewed popularity: a hot set and a long tail
    const id = rng.next() < 0.7 ? rng.nextInt(300) : rng.nextInt(5000);
    if (!sizeOf.has(id)) sizeOf.set(id, 1 + rng.nextInt(1000));
    ids.push(id);
    sizes.push(sizeOf.get(id)!);
  }
  const trace = objects(ids, sizes);
  const requests: TraceRequest<number>[] = ids.map((key, i) => ({ key, size: sizes[i]! }));

  for (const policy of POLICIES) {
    it(`${policy}: objects and bytes mode`, () => {
      for (const [unit, capacity] of [['objects', 200], ['objects', 1000], ['bytes', 100_000], ['bytes', 400_000]] as const) {
        const ours = replayObjects(makePolicy(policy, capacity, unit), trace);
        const ref = replay(makePolicy(policy, capacity, unit), requests);
        expect(ours.misses).toBe(ref.misses);
        expect(ours.bytesMissed).toBe(ref.missBytes);
      }
    });
  }
});

describe('the dense-key fast path', () => {
  it('denseKeyBound: 1 + the largest id for dense ids, undefined when ids are too sparse', () => {
    expect(denseKeyBound(objects([0, 1, 0, 2, 1, 0]))).toBe(3);
    expect(denseKeyBound(objects([]))).toBe(1);
    expect(denseKeyBound(llm([[1, 2, 3], [1, 2, 4], [5, 2, 3]]))).toBe(6);
    // sparse but small: still dense enough (the map costs 4 bytes per possible id)
    expect(denseKeyBound(objects([0, 60_000]))).toBe(60_001);
    expect(denseKeyBound(objects([0, 70_000]))).toBeUndefined(); // above 4 x 2 distinct + 2^16
    expect(denseKeyBound(objects([0, 2 ** 31 + 5]))).toBeUndefined();
    expect(denseKeyBound(llm([[3, 2 ** 30]]))).toBeUndefined();
  });

  it('runExact gives the same results on sparse ids (the Map path)', () => {
    const ids = [0, 2 ** 31 + 5, 0, 7, 2 ** 31 + 5, 0];
    expect(denseKeyBound(objects(ids))).toBeUndefined();
    const dense = runExact(objects([0, 2, 0, 1, 2, 0]), { policy: 'lru', unit: 'objects', capacity: 2 });
    expect(runExact(objects(ids), { policy: 'lru', unit: 'objects', capacity: 2 })).toEqual(dense);
  });

  const rng = new SeededRandom(23);
  const ids: number[] = [];
  const sizes: number[] = [];
  const sizeOf = new Map<number, number>();
  for (let i = 0; i < 20_000; i++) {
    const id = rng.next() < 0.6 ? rng.nextInt(400) : rng.nextInt(6000);
    if (!sizeOf.has(id)) sizeOf.set(id, 1 + rng.nextInt(1000));
    ids.push(id);
    sizes.push(sizeOf.get(id)!);
  }
  const trace = objects(ids, sizes);
  const pages: number[][] = [];
  for (let i = 0; i < ids.length; i += 8) pages.push(ids.slice(i, i + 8));
  const pageTrace = llm(pages);

  for (const policy of POLICIES) {
    it(`${policy}: dense-key and Map-keyed policies count the same misses (objects and pages)`, () => {
      const bound = denseKeyBound(trace)!;
      expect(bound).toBe(Math.max(...ids) + 1);
      for (const [unit, capacity] of [['objects', 200], ['objects', 1000], ['bytes', 100_000], ['bytes', 400_000]] as const) {
        const dense = replayObjects(makePolicy(policy, capacity, unit, { denseKeyBound: bound }), trace);
        expect(dense).toEqual(replayObjects(makePolicy(policy, capacity, unit), trace));
        const densePages = replayPages(makePolicy(policy, capacity, unit, { denseKeyBound: bound }), pageTrace, 100);
        expect(densePages).toEqual(replayPages(makePolicy(policy, capacity, unit), pageTrace, 100));
      }
    });
  }
});

describe('oracle policies (opt, opt-size) in exact mode', () => {
  it('feeds Belady the trace\'s next accesses: A B A C B A at 2 objects misses 4 (C evicts A, needed last)', () => {
    const t = objects([0, 1, 0, 2, 1, 0]);
    expect(runExact(t, { policy: 'opt', unit: 'objects', capacity: 2 }).misses).toBe(4);
    // opt-size bypasses C (never requested again): A and B stay, so only the 3 first accesses miss
    expect(runExact(t, { policy: 'opt-size', unit: 'objects', capacity: 2 }).misses).toBe(3);
    expect([...nextAccesses(t)]).toEqual([2, 3, 3, 0, 0, 0]);
  });

  it('next accesses of a page trace count page references in replay order', () => {
    const trace = llm([[1, 2, 3], [1, 2, 4], [5, 2, 3]]);
    expect([...nextAccesses(trace)]).toEqual([3, 3, 6, 0, 3, 0, 0, 0, 0]);
    expect(runExact(trace, { policy: 'opt', unit: 'objects', capacity: Infinity })).toMatchObject({ misses: 5, prefixPageHitRatio: 2 / 9 });
  });

  const rng = new SeededRandom(5);
  const ids: number[] = [];
  const sizes: number[] = [];
  const sizeOf = new Map<number, number>();
  for (let i = 0; i < 20_000; i++) {
    const id = rng.next() < 0.7 ? rng.nextInt(300) : rng.nextInt(5000);
    if (!sizeOf.has(id)) sizeOf.set(id, 1 + rng.nextInt(1000));
    ids.push(id);
    sizes.push(sizeOf.get(id)!);
  }
  const trace = objects(ids, sizes);

  it('Belady is a lower bound of every online policy (objects), and dense and Map paths agree', () => {
    const online = policyNames().filter((n) => !isOracle(n));
    for (const capacity of [200, 1000]) {
      const bound = runExact(trace, { policy: 'opt', unit: 'objects', capacity }).misses;
      expect(replayObjectsOracle(makePolicy('opt', capacity, 'objects'), trace, nextAccesses(trace)).misses).toBe(bound);
      for (const policy of online) expect(runExact(trace, { policy, unit: 'objects', capacity }).misses, policy).toBeGreaterThanOrEqual(bound);
    }
  });

  it('opt-size misses fewer bytes than every online policy in bytes mode on a size-varied trace', () => {
    for (const capacity of [100_000, 400_000]) {
      const bound = runExact(trace, { policy: 'opt-size', unit: 'bytes', capacity }).bytesMissed;
      for (const policy of policyNames().filter((n) => !isOracle(n))) {
        expect(runExact(trace, { policy, unit: 'bytes', capacity }).bytesMissed, policy).toBeGreaterThan(bound);
      }
    }
  });

  it('a sweep runs the bound beside the chosen policies (opt by objects, opt-size by bytes); oracles cannot be wrapped', () => {
    expect(withBound(['lru', 's3fifo'], 'objects')).toEqual(['lru', 's3fifo', 'opt']);
    expect(withBound(['lru'], 'bytes')).toEqual(['lru', 'opt-size']);
    expect(withBound(['opt', 'lru'], 'bytes')).toEqual(['opt', 'lru']);
    expect(boundPolicy('bytes')).toBe('opt-size');
    expect(() => checkPolicies(['prefix-aware:opt'])).toThrow(/cannot be wrapped/);
  });
});
