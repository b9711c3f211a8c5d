import { describe, expect, it } from 'vitest';
import { Planner } from './planner.js';
import type { Move, PlannerConfig } from './types.js';

type M = Move<string>;

/**
 * A counting executor: runs moves depth first, every place/copy lands, every evict frees (except keys pinned at
 * execution time), queued copies run right after (drained). Returns the log of executed moves.
 */
function run(p: Planner, moves: readonly M[], log: M[] = [], fail: (m: M) => boolean = () => false): M[] {
  const queue: M[] = [];
  const exec = (list: readonly M[]): void => {
    for (const m of list) {
      log.push(m);
      if (m.kind === 'refuse' || m.kind === 'wait') continue;
      if (m.kind === 'queue') {
        queue.push(m);
        continue;
      }
      if (m.kind === 'evict') {
        const kept = m.keys.filter((k) => p.isPinned(k));
        exec(p.completed(m, { done: m.keys.filter((k) => !kept.includes(k)), failed: kept }));
        continue;
      }
      exec(p.completed(m, fail(m) ? { done: [], failed: m.keys } : { done: m.keys }));
    }
  };
  exec(moves);
  while (queue.length) {
    const q = queue.shift()!;
    if (q.kind === 'queue') exec(p.dequeue(q));
  }
  return log;
}

const keys = (prefix: string, n: number, from = 0) => Array.from({ length: n }, (_, i) => `${prefix}${from + i}`);
const two = (over: Partial<PlannerConfig> = {}, lower: PlannerConfig['tiers'][number]['writeMode'] = 'write-back'): PlannerConfig => ({
  tiers: [
    { name: 'hbm', capacityPages: 10, highWatermark: 0.8, lowWatermark: 0.5 },
    { name: 'host', capacityPages: 100, writeMode: lower },
  ],
  ...over,
});
const kinds = (log: readonly M[]) => log.map((m) => (m.kind === 'copy' ? `copy:${m.why}:${m.from}>${m.to}:${m.keys.length}` : m.kind === 'evict' ? `evict:${m.tier}:${m.keys.length}` : m.kind === 'place' ? `place:${m.tier}:${m.keys.length}` : m.kind === 'queue' ? `queue:${m.why}:${m.to}:${m.keys.length}` : `${m.kind}:${m.tier}:${m.keys.length}`));

describe('Planner', () => {
  it('places below the high watermark without evicting', () => {
    const p = new Planner(two());
    const log = run(p, p.store(keys('a', 8)));
    expect(kinds(log)).toEqual(['place:0:8']);
    expect(p.view(0).usedPages).toBe(8);
    expect(p.view(0).reservedPages).toBe(0);
  });

  it('over the high watermark frees victims down to the low one, demoting them first (write-back)', () => {
    const p = new Planner(two());
    run(p, p.store(keys('a', 8)));
    const log = run(p, p.store(['b0']));
    // used 8 + 1 > floor(0.8*10): down to floor(0.5*10) = 5, so 3 LRU victims, copied to host, then freed.
    expect(kinds(log)).toEqual(['copy:demote:0>1:3', 'evict:0:3', 'place:0:1']);
    const copy = log[0] as Extract<M, { kind: 'copy' }>;
    expect(copy.keys).toEqual(['a0', 'a1', 'a2']);
    expect(p.view(0).usedPages).toBe(6);
    expect([...p.keysOn(1)].sort()).toEqual(['a0', 'a1', 'a2']);
    expect(p.lookup(['a0', 'a3', 'zz'])).toEqual({ tiers: [1, 0, -1], prefix: 2 });
  });

  it('the demote copy runs before the evict that frees its victims (depth first)', () => {
    const p = new Planner(two());
    run(p, p.store(keys('a', 8)));
    const moves = p.store(['b0']);
    expect(moves.map((m) => m.kind)).toEqual(['copy', 'place']);
    const copy = moves[0] as Extract<M, { kind: 'copy' }>;
    // Until the copy is reported, the victims are still readable on tier 0 (leaving) and reserved on tier 1.
    expect(p.holds(0, 'a0')).toBe(true);
    expect(p.view(0).leavingPages).toBe(3);
    expect(p.view(1).reservedPages).toBe(3);
    const follow = p.completed(copy, { done: copy.keys });
    expect(follow).toMatchObject([{ kind: 'evict', tier: 0, keys: ['a0', 'a1', 'a2'], why: 'room' }]);
  });

  it('victims whose demote copy fails (a full or unreachable peer tier) go to the tier below it, not away', () => {
    const three: PlannerConfig = {
      tiers: [
        { name: 'host', capacityPages: 10, highWatermark: 0.8, lowWatermark: 0.5 },
        { name: 'peer', capacityPages: 100, writeMode: 'write-back' },
        { name: 'fs', capacityPages: 100, writeMode: 'write-back' },
      ],
    };
    const p = new Planner(three);
    run(p, p.store(keys('a', 8)));
    const log = run(p, p.store(['b0']), [], (m) => m.kind === 'copy' && m.to === 1);
    expect(kinds(log)).toEqual(['copy:demote:0>1:3', 'copy:demote:0>2:3', 'evict:0:3', 'place:0:1']);
    for (const k of keys('a', 3)) expect([p.holds(0, k), p.holds(1, k), p.holds(2, k)]).toEqual([false, false, true]);
    expect(p.view(1).reservedPages).toBe(0);
    // With no tier left to try, the victims are freed (the last tier's copy failed too).
    const q = new Planner(three);
    run(q, q.store(keys('a', 8)));
    const lost = run(q, q.store(['b0']), [], (m) => m.kind === 'copy');
    expect(kinds(lost)).toEqual(['copy:demote:0>1:3', 'copy:demote:0>2:3', 'evict:0:3', 'place:0:1']);
    expect(q.lookup(['a0'])).toEqual({ tiers: [-1], prefix: 0 });
  });

  it('victims the next tier has no room for (pinned full) are demoted past it', () => {
    const p = new Planner({
      tiers: [
        { name: 'host', capacityPages: 10, highWatermark: 0.8, lowWatermark: 0.5 },
        { name: 'peer', capacityPages: 2, highWatermark: 1, lowWatermark: 1, writeMode: 'write-back' },
        { name: 'fs', capacityPages: 100, writeMode: 'write-back' },
      ],
    });
    // Fill the peer tier with pages pinned there, so makeRoom finds no victim.
    run(p, p.adopt(1, ['p0', 'p1']));
    p.pin(['p0', 'p1'], { owner: 'test', now: 0, ttl: 60_000 });
    run(p, p.store(keys('a', 8)));
    const log = run(p, p.store(['b0']));
    expect(kinds(log).filter((k) => k.startsWith('copy') || k.startsWith('evict:0'))).toEqual(['copy:demote:0>2:3', 'evict:0:3']);
    for (const k of keys('a', 3)) expect(p.holds(2, k)).toBe(true);
  });

  it('write-through queues a background copy of every stored page; dequeue copies from the fastest holder', () => {
    const p = new Planner(two({}, 'write-through'));
    const log = run(p, p.store(keys('a', 3)));
    expect(kinds(log)).toEqual(['place:0:3', 'queue:write-through:1:3', 'copy:write-through:0>1:3']);
    expect([...p.keysOn(1)].sort()).toEqual(['a0', 'a1', 'a2']);
    // Victims that already have a lower copy are freed without a demote copy.
    run(p, p.store(keys('b', 6)));
    const more = run(p, p.store(['c0']));
    expect(kinds(more)).toEqual(['evict:0:4', 'place:0:1', 'queue:write-through:1:1', 'copy:write-through:0>1:1']);
    expect(kinds(more).filter((k) => k.startsWith('copy:demote'))).toEqual([]);
  });

  it('write-through: a victim whose queued copy has not run yet is demoted before it is freed, never lost', () => {
    const p = new Planner(two({}, 'write-through'));
    // Runs everything but the queued copies, which wait (a background queue behind the stores).
    const waiting: M[] = [];
    const exec = (list: readonly M[], log: M[] = []): M[] => {
      for (const m of list) {
        log.push(m);
        if (m.kind === 'queue') waiting.push(m);
        else if (m.kind !== 'refuse' && m.kind !== 'wait') exec(p.completed(m, { done: m.keys }), log);
      }
      return log;
    };
    exec(p.store(keys('a', 8)));
    // Over the high watermark: the oldest pages are victims while their write-through copies still wait.
    const log = exec(p.store(['b0']));
    expect(kinds(log)).toEqual(['copy:demote:0>1:3', 'evict:0:3', 'place:0:1', 'queue:write-through:1:1']);
    for (const k of keys('a', 3)) expect([p.holds(0, k), p.holds(1, k)]).toEqual([false, true]);
    // The queued copies then run: the demoted pages are below already, the rest copy from tier 0.
    const late = waiting.splice(0).flatMap((q) => exec(p.dequeue(q as Extract<M, { kind: 'queue' }>)));
    expect(kinds(late)).toEqual(['copy:write-through:0>1:5', 'copy:write-through:0>1:1']);
    for (const k of [...keys('a', 8), 'b0']) expect(p.holds(1, k)).toBe(true);
  });

  it('a dropped background copy (full queue) is reported failed and leaves nothing on its way', () => {
    const p = new Planner(two({}, 'write-through'));
    const moves = p.store(['a0']);
    const place = moves[0] as Extract<M, { kind: 'place' }>;
    const follow = p.completed(place, { done: ['a0'] });
    const q = follow[0] as Extract<M, { kind: 'queue' }>;
    expect(q.kind).toBe('queue');
    expect(p.completed(q, { done: [], failed: q.keys })).toEqual([]);
    expect(p.holds(1, 'a0')).toBe(false);
    // Now a store of the same key elsewhere is not 'present' on tier 1: a new queue can be planned.
    expect(() => p.completed(q, { done: [] })).toThrow(/not waiting/);
  });

  it('selective: copies down once a page reaches minHits; cold victims are dropped', () => {
    const p = new Planner(two({}, { kind: 'selective', minHits: 2 }));
    run(p, p.store(keys('a', 8)));
    expect(kinds(run(p, p.load([{ key: 'a7', tier: 0 }])))).toEqual([]);
    expect(kinds(run(p, p.load([{ key: 'a7', tier: 0 }])))).toEqual(['queue:selective:1:1', 'copy:selective:0>1:1']);
    // Overflow: cold victims a0..a2 (0 hits) are freed without a copy.
    expect(kinds(run(p, p.store(['b0'])))).toEqual(['evict:0:3', 'place:0:1']);
    expect(p.lookup(['a0'])).toEqual({ tiers: [-1], prefix: 0 });
  });

  it('promotes a page served from a lower tier into tier 0 (promoteOnHit), not when disabled', () => {
    const p = new Planner(two());
    run(p, p.store(keys('a', 8)));
    run(p, p.store(['b0'])); // a0..a2 now on host only
    const log = run(p, p.load([{ key: 'a0', tier: 1 }, { key: 'a3', tier: 0 }]));
    expect(kinds(log)).toEqual(['queue:promote:0:1', 'copy:promote:1>0:1']);
    expect(p.holds(0, 'a0')).toBe(true);
    const q = new Planner(two({ promoteOnHit: false }));
    run(q, q.store(keys('a', 8)));
    run(q, q.store(['b0']));
    expect(run(q, q.load([{ key: 'a0', tier: 1 }]))).toEqual([]);
  });

  it('a promotion whose room cascades down to its source tier never frees its source page', () => {
    const tier = (name: string) => ({ name, capacityPages: 2, highWatermark: 1, lowWatermark: 1, policy: 'fifo' });
    const p = new Planner({ tiers: [tier('hbm'), tier('host')] });
    for (const k of ['a', 'b', 'c', 'd']) run(p, p.store([k]));
    expect([...p.keysOn(1)].sort()).toEqual(['a', 'b']);
    // a is promoted from host; hbm's victim c is demoted into a full host, whose FIFO victim would be a itself.
    const log = run(p, p.load([{ key: 'a', tier: 1 }]));
    expect(kinds(log)).toEqual(['queue:promote:0:1', 'evict:1:1', 'copy:demote:0>1:1', 'evict:0:1', 'copy:promote:1>0:1']);
    expect((log[1] as Extract<M, { kind: 'evict' }>).keys).toEqual(['b']);
    expect(p.holds(0, 'a')).toBe(true);
    expect(p.isPinned('a')).toBe(false);
  });

  it('admission: stores a page only once it was looked up k times', () => {
    const p = new Planner(two({ admission: { kind: 'lookups', lookups: 2 } }));
    p.lookup(['a0', 'a1']);
    expect(p.store(['a0', 'a1'])).toMatchObject([{ kind: 'refuse', reason: 'not-admitted', keys: ['a0', 'a1'] }]);
    p.noteLookups(['a0']); // the same count as lookup(), without the answer
    const moves = p.store(['a0', 'a1']);
    expect(moves).toMatchObject([
      { kind: 'refuse', reason: 'not-admitted', keys: ['a1'] },
      { kind: 'place', keys: ['a0'] },
    ]);
  });

  it('refuses keys it already knows (landed, or on their way)', () => {
    const p = new Planner(two());
    const first = p.store(['a0']);
    expect(p.store(['a0', 'a1'])).toMatchObject([{ kind: 'refuse', reason: 'present', keys: ['a0'] }, { kind: 'place', keys: ['a1'] }]);
    run(p, first);
  });

  it('victims are chosen among unpinned pages: a tier full of pins still places while unpinned victims exist', () => {
    const p = new Planner({ tiers: [{ name: 'hbm', capacityPages: 10, highWatermark: 1, lowWatermark: 1 }] });
    run(p, p.store(keys('a', 10)));
    // The 8 least recently used pages are pinned: a peek-then-filter would see only pinned victims.
    p.pin(keys('a', 8), { owner: 'user', now: 0, ttl: 1000 });
    const log = run(p, p.store(['b0', 'b1']));
    expect(kinds(log)).toEqual(['evict:0:2', 'place:0:2']);
    expect((log[0] as Extract<M, { kind: 'evict' }>).keys).toEqual(['a8', 'a9']);
    // Everything pinned: nothing to free, the store is refused for room.
    p.pin(['b0', 'b1'], { owner: 'user', now: 0, ttl: 1000 });
    expect(p.store(['c0'])).toMatchObject([{ kind: 'refuse', reason: 'no-room', keys: ['c0'] }]);
  });

  it('load pins hold pages while a load reads them; an evict that meets a pin keeps the page', () => {
    const p = new Planner({ tiers: [{ name: 'hbm', capacityPages: 4, highWatermark: 1, lowWatermark: 1 }] });
    run(p, p.store(keys('a', 4)));
    const moves = p.store(['b0']); // victim a0 chosen, not yet freed
    const evict = moves[0] as Extract<M, { kind: 'evict' }>;
    expect(evict.keys).toEqual(['a0']);
    const pin = p.beginLoad(['a0']); // a load starts reading a0 before the evict runs
    expect(p.isPinned('a0')).toBe(true);
    const follow = p.completed(evict, { done: [], failed: ['a0'] });
    expect(follow).toEqual([]);
    expect(p.holds(0, 'a0')).toBe(true);
    p.endLoad(pin);
    expect(p.isPinned('a0')).toBe(false);
    // a0 is back in the policy, so b0 landing pushes the next victim out (the policy's capacity holds).
    const log = run(p, moves.slice(1));
    expect(kinds(log)).toEqual(['place:0:1', 'evict:0:1']);
    expect((log[1] as Extract<M, { kind: 'evict' }>).keys).toEqual(['a1']);
    expect(p.view(0).usedPages).toBe(4);
  });

  it('a page kept by its evict (refused by the tier) gives its slot back by freeing another victim', () => {
    const p = new Planner({ tiers: [{ name: 'hbm', capacityPages: 4, highWatermark: 1, lowWatermark: 0.5 }] });
    run(p, p.store(keys('a', 4)));
    const moves = p.store(['b0', 'b1']);
    const evict = moves[0] as Extract<M, { kind: 'evict' }>;
    expect(evict.keys).toEqual(['a0', 'a1']);
    // The tier refuses to free a0: a2 goes instead, so the two placed pages still fit.
    const follow = p.completed(evict, { done: ['a1'], failed: ['a0'] });
    expect(follow).toMatchObject([{ kind: 'evict', keys: ['a2'] }]);
    run(p, follow);
    run(p, moves.slice(1));
    expect(p.view(0).usedPages).toBe(4);
    expect(p.holds(0, 'a0')).toBe(true);
    // A tier that refuses everything: no endless chain of victims.
    const more = p.store(['c0']);
    const e2 = more[0] as Extract<M, { kind: 'evict' }>;
    expect(p.completed(e2, { done: [], failed: e2.keys })).toEqual([]);
  });

  it('TTL pins: expire(now) releases them and frees what they kept over the watermark', () => {
    const p = new Planner({ tiers: [{ name: 'hbm', capacityPages: 4, highWatermark: 1, lowWatermark: 0.5 }] });
    run(p, p.store(keys('a', 4)));
    p.pin(keys('a', 4), { owner: 'user', now: 100, ttl: 50 });
    expect(p.nextExpiry()).toBe(150);
    expect(p.store(['b0'])).toMatchObject([{ kind: 'refuse', reason: 'no-room' }]);
    expect(p.expire(149)).toEqual([]);
    expect(p.isPinned('a0')).toBe(true);
    expect(p.expire(150)).toEqual([]); // at capacity, not over the high watermark: nothing to free
    expect(p.isPinned('a0')).toBe(false);
    // used 4 + 1 over the high watermark: down to floor(0.5 * 4) = 2.
    expect(kinds(run(p, p.store(['b0'])))).toEqual(['evict:0:2', 'place:0:1']);
    // Unpin by owner before the deadline.
    p.pin(['b0'], { owner: 'x', now: 0, ttl: 10 });
    expect(p.unpin(['b0'], 'y')).toBe(0);
    expect(p.unpin(['b0'], 'x')).toBe(1);
    expect(p.isPinned('b0')).toBe(false);
  });

  it('tenant quotas: a tenant at its share with overQuota refuse has its extra pages refused on landing', () => {
    const p = new Planner({ tiers: [{ name: 'hbm', capacityPages: 10, highWatermark: 1, lowWatermark: 1 }], tenantQuotas: { shares: { a: 0.2 }, overQuota: 'refuse' } });
    const log = run(p, p.store(keys('a', 3), { tenant: 'a' }));
    expect(kinds(log)).toEqual(['place:0:3', 'evict:0:1']);
    expect((log[1] as Extract<M, { kind: 'evict' }>).why).toBe('refused');
    expect(p.view(0).usedPages).toBe(2);
    // Other tenants are unaffected.
    expect(kinds(run(p, p.store(keys('b', 5))))).toEqual(['place:0:5']);
  });

  it('tenant quotas evict-own: a tenant over its share loses its own pages, not others', () => {
    const p = new Planner({ tiers: [{ name: 'hbm', capacityPages: 10, highWatermark: 1, lowWatermark: 1 }], tenantQuotas: { shares: { a: 0.2 } } });
    run(p, p.store(keys('b', 5)));
    const log = run(p, p.store(keys('a', 3), { tenant: 'a' }));
    expect(kinds(log)).toEqual(['place:0:3', 'evict:0:1']);
    expect((log[1] as Extract<M, { kind: 'evict' }>).keys).toEqual(['a0']);
  });

  it('priorities: lower levels are evicted first', () => {
    const p = new Planner({ tiers: [{ name: 'hbm', capacityPages: 4, highWatermark: 1, lowWatermark: 1 }], priorities: true });
    run(p, p.store(['hi0', 'hi1'], { priority: 5 }));
    run(p, p.store(['lo0', 'lo1']));
    const log = run(p, p.store(['x0', 'x1']));
    expect((log[0] as Extract<M, { kind: 'evict' }>).keys).toEqual(['lo0', 'lo1']);
    expect(() => new Planner(two()).store(['a'], { priority: 1 })).toThrow(/priorities/);
  });

  it('waitForRoom: answers wait (and changes nothing) while reserved slots are what is missing', () => {
    const p = new Planner({ tiers: [{ name: 'hbm', capacityPages: 4, highWatermark: 1, lowWatermark: 1 }] });
    const first = p.store(keys('a', 4));
    expect(p.store(['b0'], { waitForRoom: true })).toEqual([{ kind: 'wait', tier: 0, keys: ['b0'] }]);
    expect(p.view(0).reservedPages).toBe(4);
    run(p, first);
    expect(kinds(run(p, p.store(['b0'], { waitForRoom: true })))).toEqual(['evict:0:1', 'place:0:1']);
  });

  it('a failed place forgets its keys; a failed demote still frees the victims', () => {
    const p = new Planner(two());
    run(p, p.store(keys('a', 8)));
    const log = run(p, p.store(['b0']), [], (m) => m.kind === 'copy');
    expect(kinds(log)).toEqual(['copy:demote:0>1:3', 'evict:0:3', 'place:0:1']);
    expect(p.lookup(['a0'])).toEqual({ tiers: [-1], prefix: 0 });
    const moves = p.store(['c0']);
    const place = moves.find((m) => m.kind === 'place') as Extract<M, { kind: 'place' }>;
    p.completed(place, { done: [], failed: ['c0'] });
    expect(p.lookup(['c0']).tiers).toEqual([-1]);
    expect(p.view(0).reservedPages).toBe(0);
  });

  it('adopt and room serve pages written from outside', () => {
    const p = new Planner(two({}, 'write-through'));
    expect(p.room(0, 3)).toEqual({ fit: 3, moves: [] });
    const log = run(p, p.adopt(0, ['x0', 'x1', 'x2']));
    expect(kinds(log)).toEqual(['queue:write-through:1:3', 'copy:write-through:0>1:3']);
    expect(p.view(0).usedPages).toBe(3);
  });

  it('restore: pages found at open become resident; past a lowered capacity they are demoted and freed', () => {
    const p = new Planner(two());
    expect(p.restore(1, ['x0', 'x1'])).toEqual([]);
    expect(p.lookup(['x0']).tiers).toEqual([1]);
    const log = run(p, p.restore(0, keys('a', 12)));
    expect(kinds(log)).toEqual(['copy:demote:0>1:2', 'evict:0:2']);
    expect(p.view(0).usedPages).toBe(10);
  });

  it('is deterministic: the same config and requests give the same moves', () => {
    const trace = (p: Planner) => {
      const log: M[] = [];
      let seed = 7;
      const rnd = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
      for (let i = 0; i < 300; i++) {
        const ks = keys('k', 1 + Math.floor(rnd() * 4), Math.floor(rnd() * 40));
        const found = p.lookup(ks);
        run(p, p.load(ks.slice(0, found.prefix).map((key, j) => ({ key, tier: found.tiers[j]! }))), log);
        run(p, p.store(ks.slice(found.prefix)), log);
        if (i % 50 === 0) p.pin(ks, { owner: 'u', now: i, ttl: 30 });
        run(p, p.expire(i), log);
      }
      return JSON.stringify(log);
    };
    const cfg: PlannerConfig = {
      tiers: [
        { name: 'hbm', capacityPages: 8, policy: 'arc' },
        { name: 'host', capacityPages: 20, policy: 's3fifo', writeMode: 'write-through' },
        { name: 'fs', capacityPages: 30, policy: 'sieve' },
      ],
      admission: { kind: 'lookups', lookups: 1 },
    };
    const a = trace(new Planner(cfg));
    expect(a).toBe(trace(new Planner(cfg)));
    expect(a.length).toBeGreaterThan(1000);
  });

  it('checks its config', () => {
    expect(() => new Planner({ tiers: [] })).toThrow(/config.tiers/);
    expect(() => new Planner({ tiers: [{ name: 'a', capacityPages: 0 }] })).toThrow(/capacityPages/);
    expect(() => new Planner({ tiers: [{ name: 'a', capacityPages: 1, policy: 'nope' }] })).toThrow(/unknown policy/);
    expect(() => new Planner({ tiers: [{ name: 'a', capacityPages: 1, highWatermark: 0.5, lowWatermark: 0.6 }] })).toThrow(/lowWatermark/);
    expect(() => new Planner({ tiers: [{ name: 'a', capacityPages: 1 }, { name: 'a', capacityPages: 1 }] })).toThrow(/twice/);
  });
});
