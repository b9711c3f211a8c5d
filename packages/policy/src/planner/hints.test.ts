/** The planner hands page parents and retention hints to the tiers' policies (wrappers/). */
import { describe, expect, it } from 'vitest';
import { Planner } from './planner.js';
import type { Move, PlannerConfig } from './types.js';

type M = Move<string>;

/** Every move lands; returns the keys evicted from `tier`. */
function run(p: Planner, moves: readonly M[], tier = 0): string[] {
  const evicted: string[] = [];
  const exec = (list: readonly M[]): void => {
    for (const m of list) {
      if (m.kind === 'refuse' || m.kind === 'wait' || m.kind === 'queue') continue;
      if (m.kind === 'evict' && m.tier === tier) evicted.push(...m.keys);
      exec(p.completed(m, { done: m.keys }));
    }
  };
  exec(moves);
  return evicted;
}

const chain = (name: string, n: number) => Array.from({ length: n }, (_, i) => `${name}${i}`);
const parentsOf = (keys: string[]) => keys.map((_, i) => (i === 0 ? null : keys[i - 1]!));
const one = (policy: string, capacityPages = 6): PlannerConfig => ({ tiers: [{ name: 'hbm', capacityPages, highWatermark: 1, lowWatermark: 1, policy }] });

describe('Planner hints', () => {
  it('prefix-aware tiers evict the tails of chains, learning parents from the store', () => {
    const plain = new Planner(one('lru'));
    const aware = new Planner(one('prefix-aware:lru'));
    for (const p of [plain, aware]) {
      run(p, p.store(chain('a', 3), { parents: parentsOf(chain('a', 3)) }));
      run(p, p.store(chain('b', 3), { parents: parentsOf(chain('b', 3)) }));
    }
    expect(run(plain, plain.store(['c0'], { parents: [null] }))).toEqual(['a0']);
    expect(run(aware, aware.store(['c0'], { parents: [null] }))).toEqual(['a2']);
    // What remains of chain a is still a usable prefix.
    expect(aware.lookup(chain('a', 3)).prefix).toBe(2);
    expect(plain.lookup(chain('a', 3)).prefix).toBe(0);
  });

  it('wrappers go around priority levels', () => {
    const p = new Planner({ ...one('prefix-aware:lru', 4), priorities: true });
    run(p, p.store(['x0', 'x1'], { parents: [null, 'x0'], priority: 5 }));
    run(p, p.store(['y0', 'y1'], { parents: [null, 'y0'] }));
    expect(run(p, p.store(['z0']))).toEqual(['y1']);
  });

  it('session-aware tiers keep pages expected back and drop finished ones first', () => {
    const p = new Planner(one('session-aware:lru', 4));
    run(p, p.store(['s0', 's1'], { retention: { expectedReturnMs: 5_000 }, now: 0 }));
    run(p, p.store(['t0', 't1'], { retention: { expectedReturnMs: 60_000 }, now: 10 }));
    expect(run(p, p.store(['u0'], { now: 20 }))).toEqual(['t1']);
    // Session s finishes: its pages go before anything else.
    p.retain(['s0', 's1'], { retention: { finished: true }, now: 30 });
    expect(run(p, p.store(['u1'], { now: 40 }))).toEqual(['s0']);
  });

  it('re-hints pages already held when a store names them again', () => {
    const p = new Planner(one('session-aware:lru', 4));
    run(p, p.store(['a', 'b'], { now: 0 }));
    run(p, p.store(['a', 'b', 'c'], { retention: { expectedReturnMs: 1_000 }, now: 1 }));
    run(p, p.store(['d'], { now: 2 }));
    // a and b (held before the hint) are expected back now: the unhinted d goes, not the least recent a.
    expect(run(p, p.store(['e'], { now: 3 }))).toEqual(['d']);
  });

  it('refuses bad hints and unknown wrappers by name', () => {
    expect(() => new Planner(one('prefix-aware:nope'))).toThrow(/unknown policy/);
    expect(() => new Planner(one('nope:lru'))).toThrow(/unknown policy/);
    const p = new Planner(one('lru'));
    expect(() => p.store(['a'], { retention: { expectedReturnMs: 5 } })).toThrow(/options.now/);
    expect(() => p.store(['a'], { parents: [] })).toThrow(/options.parents/);
    expect(() => p.store(['a'], { retention: { expectedReturnMs: -1 }, now: 0 })).toThrow(/expectedReturnMs/);
  });
});
