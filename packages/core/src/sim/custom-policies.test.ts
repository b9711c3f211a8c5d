/**
 * Custom policies (registerPolicy) in the simulator: their answers are checked as live, their factories see the
 * options they would see live, and their failures name them.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { registerPolicy, type EvictionPolicy, type PolicyOptions } from '@tiersync/policy';
import { main } from '../cli/index.js';
import { parseConfig } from '../hierarchy/index.js';
import { runExact } from './exact.js';
import { capacityRefusal, checkTierPolicy } from './policies.js';
import { replayPlanned } from './planned.js';
import { bundledTrace } from './trace/bundled.js';
import type { LlmTrace, ObjectTrace } from './trace/types.js';
import { workloadPages } from './workload.js';

/** A Map-backed LRU (objects: every key costs 1) written from scratch, as a user would; `evicts: false` never evicts. */
class MapLru implements EvictionPolicy<number> {
  readonly name = 'map-lru';
  readonly unit = 'objects' as const;
  readonly capacity: number;
  readonly map = new Map<number, number>();
  constructor(
    options: PolicyOptions,
    readonly evicts = true,
  ) {
    this.capacity = options.capacity;
  }
  get count() {
    return this.map.size;
  }
  get used() {
    return this.map.size;
  }
  get usedBytes() {
    return [...this.map.values()].reduce((a, b) => a + b, 0);
  }
  readonly pinnedCount = 0;
  readonly pinnedUsed = 0;
  has(k: number) {
    return this.map.has(k);
  }
  sizeOf(k: number) {
    return this.map.get(k);
  }
  keys() {
    return this.map.keys();
  }
  access(k: number) {
    const s = this.map.get(k);
    if (s === undefined) return false;
    this.map.delete(k);
    this.map.set(k, s);
    return true;
  }
  canAdmit(k: number) {
    return !this.map.has(k);
  }
  insert(k: number, size: number) {
    const victims: number[] = [];
    while (this.evicts && this.map.size >= this.capacity) victims.push(this.evict()!);
    this.map.set(k, size);
    return victims;
  }
  evict() {
    const v = this.map.keys().next().value;
    if (v !== undefined) this.map.delete(v);
    return v;
  }
  peekVictims(n: number) {
    return [...this.map.keys()].slice(0, n);
  }
  remove(k: number) {
    return this.map.delete(k);
  }
  pin() {
    return 0;
  }
  unpin() {
    return 0;
  }
  pinCount() {
    return 0;
  }
  reset() {
    this.map.clear();
  }
}
registerPolicy('test-map-lru', (o) => new MapLru(o) as never);
registerPolicy('test-never-evicts', (o) => new MapLru(o, false) as never);

/** MapLru whose 3rd insert throws. */
class ThrowsLate extends MapLru {
  inserts = 0;
  override insert(k: number, size: number) {
    if (++this.inserts === 3) throw new Error(`insert #${this.inserts} exploded`);
    return super.insert(k, size);
  }
}
registerPolicy('test-throws-late', (o) => new ThrowsLate(o) as never);
/** A factory with a bug above 1000 objects (a TypeError), and one that refuses (RangeError) below 10. */
registerPolicy('test-buggy', (o) => {
  if (o.capacity > 1000) (null as unknown as { x: number }).x;
  return new MapLru(o) as never;
});
registerPolicy('test-min-10', (o) => {
  if (o.capacity < 10) throw new RangeError(`capacity must be at least 10, got ${o.capacity}`);
  return new MapLru(o) as never;
});
/** A factory that validates its options, as packages/policy/README.md asks: it refuses any it does not know. */
registerPolicy('test-strict', (o) => {
  for (const k of Object.keys(o)) if (k !== 'capacity' && k !== 'unit') throw new RangeError(`unknown option ${k}`);
  return new MapLru(o) as never;
});

afterEach(() => vi.restoreAllMocks());

function objects(ids: number[]): ObjectTrace {
  return {
    kind: 'object', source: 'test', times: new Float64Array(ids.length), keys: Uint32Array.from(ids),
    sizes: Float64Array.from(ids.map(() => 1)), length: ids.length, distinct: new Set(ids).size,
  };
}

function llm(requests: number[][]): LlmTrace {
  return {
    kind: 'llm', source: 'test', blockTokens: 512,
    requests: requests.map((p, i) => ({ timeMs: i, inputTokens: p.length * 512, outputTokens: 1, pages: Uint32Array.from(p) })),
    distinctPages: new Set(requests.flat()).size, pageRefs: requests.flat().length,
  };
}

describe('custom policies in exact mode', () => {
  // A B A C B A, capacity 2 objects: LRU misses 5.
  const t = objects([0, 1, 0, 2, 1, 0]);

  it('a well-behaved one counts as the built-in it imitates', () => {
    expect(runExact(t, { policy: 'test-map-lru', unit: 'objects', capacity: 2 }).misses).toBe(runExact(t, { policy: 'lru', unit: 'objects', capacity: 2 }).misses);
  });

  it('its factory gets the options a live tier gives it: no denseKeys (the built-ins take them)', () => {
    expect(runExact(t, { policy: 'test-strict', unit: 'objects', capacity: 2 }).misses).toBe(5);
    expect(runExact(llm([[1, 2, 3], [1, 2, 3]]), { policy: 'test-strict', unit: 'objects', capacity: 8 }).misses).toBe(3);
  });

  it('one that never evicts is refused, naming the rule, instead of beating LRU', () => {
    expect(() => runExact(t, { policy: 'test-never-evicts', unit: 'objects', capacity: 2 })).toThrow(
      /policy test-never-evicts: insert\(\) broke a rule: used <= capacity after insert\(\): 3 > 2 objects/,
    );
    expect(() => runExact(llm([[1, 2, 3], [1, 2, 3]]), { policy: 'test-never-evicts', unit: 'objects', capacity: 2 })).toThrow(/used <= capacity/);
  });
});

describe('a failing policy stops a simulation with an error naming it', () => {
  it('exact mode: ERR_INVALID_ARGUMENT naming the policy and the call', () => {
    expect(() => runExact(objects([0, 1, 2, 3]), { policy: 'test-throws-late', unit: 'objects', capacity: 2 })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', message: 'policy test-throws-late: insert() threw: Error: insert #3 exploded' }),
    );
  });

  it('through the planner (--config, tiered): ERR_CONFIG naming the policy, the tier and the call', () => {
    const LAYOUT = { tokensPerPage: 4, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 1, headDim: 8 } }] };
    const PAGE = 4 * 2 * 8 * 2;
    const config = parseConfig({
      model: 'm',
      layout: LAYOUT,
      tiers: [
        { url: `hbm://sim?capacity=${2 * PAGE}`, highWatermark: 1, lowWatermark: 1 },
        { url: `host://?capacity=${10 * PAGE}`, name: 'host', policy: 'test-throws-late', highWatermark: 1, lowWatermark: 1 },
      ],
    });
    const requests = [[1], [2], [3], [4], [5], [6]].map((pages, i) => ({ timeMs: i, inputTokens: 4, outputTokens: 1, pages: Uint32Array.from(pages) }));
    const trace: LlmTrace = { kind: 'llm', source: 'test', blockTokens: 4, requests, distinctPages: 7, pageRefs: 6 };
    expect(() => replayPlanned({ config, workload: workloadPages(trace, 4) })).toThrow(
      expect.objectContaining({ code: 'ERR_CONFIG', tier: 'host', message: 'policy test-throws-late on tier host: insert() threw: Error: insert #3 exploded' }),
    );
  });

  it('the CLI reports it with that code, not as an internal error', async () => {
    const out: string[] = [];
    vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
    vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const code = await main(['sim', '--trace', bundledTrace(), '--requests', '20', '--objects', '64', '--policy', 'test-throws-late', '--no-bound', '--threads', '1', '--json', '--quiet']);
    expect(code).toBe(1);
    expect(JSON.parse(out.join('\n'))).toEqual({ error: { code: 'ERR_INVALID_ARGUMENT', message: 'policy test-throws-late: insert() threw: Error: insert #3 exploded' } });
  });
});

describe('a factory that fails is not a policy refusing a capacity', () => {
  it('only a RangeError is a refusal: a point to leave out of a sweep, with the least a tier takes', () => {
    expect(capacityRefusal('test-min-10', 5, 'objects')).toBe('capacity must be at least 10, got 5');
    expect(capacityRefusal('test-min-10', 10, 'objects')).toBeUndefined();
    expect(() => checkTierPolicy('hbm', 'test-min-10', 5)).toThrow('tier hbm holds 5 pages, too few for policy test-min-10: it needs at least 10 pages (capacity must be at least 10, got 5)');
  });

  it('anything else fails, naming the policy and the error (it was reported as a refusal and the point skipped)', () => {
    expect(capacityRefusal('test-buggy', 500, 'objects')).toBeUndefined();
    expect(() => capacityRefusal('test-buggy', 2000, 'objects')).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/^policy test-buggy with capacity 2000 objects: TypeError: Cannot read properties of null/) }),
    );
    expect(() => checkTierPolicy('host', 'test-buggy', 2048)).toThrow(
      expect.objectContaining({ code: 'ERR_CONFIG', message: expect.stringMatching(/^tier host: policy test-buggy with capacity 2048 objects: TypeError: /) }),
    );
  });

  it('tiersync sim fails on it instead of listing the point as refused', async () => {
    const out: string[] = [];
    vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
    vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const code = await main(['sim', '--trace', bundledTrace(), '--requests', '20', '--objects', '500,2000', '--policy', 'test-buggy', '--no-bound', '--threads', '1', '--json', '--quiet']);
    expect(code).toBe(1);
    expect(JSON.parse(out.join('\n')).error).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/^policy test-buggy with capacity 2000 objects: TypeError: /) });
  });
});
