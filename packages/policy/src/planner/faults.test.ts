import { describe, expect, it } from 'vitest';
import { PolicyError } from '../errors.js';
import { LruPolicy } from '../policies/lru.js';
import { registerPolicy } from '../registry.js';
import type { PageHint, PolicyOptions } from '../types.js';
import { Planner } from './planner.js';
import type { Move, PlannerConfig } from './types.js';

type M = Move<string>;

/** LRU that throws on its `throwAt`-th insert (and on every one after `throwFrom`, when set), before changing anything. */
class FaultyLru extends LruPolicy<string> {
  inserts = 0;
  constructor(
    options: PolicyOptions,
    readonly throwAt: number,
    readonly throwFrom = Infinity,
  ) {
    super(options);
  }
  override insert(key: string, size: number, hint?: PageHint<string>): string[] {
    this.inserts++;
    if (this.inserts === this.throwAt || this.inserts >= this.throwFrom) throw new Error(`insert #${this.inserts} exploded`);
    return super.insert(key, size, hint);
  }
}
/** LRU that, from its `from`-th insert on, also names as a victim a page it keeps (the oldest other one). */
class PhantomLru extends LruPolicy<string> {
  inserts = 0;
  constructor(
    options: PolicyOptions,
    readonly from: number,
  ) {
    super(options);
  }
  override insert(key: string, size: number, hint?: PageHint<string>): string[] {
    const victims = super.insert(key, size, hint);
    if (++this.inserts < this.from) return victims;
    const kept = this.peekVictims(1)[0];
    return kept === undefined || kept === key ? victims : [...victims, kept];
  }
}
registerPolicy('test-phantom-lru', (o) => new PhantomLru(o as PolicyOptions, 25) as never);

let throwAt = 0;
let throwFrom = Infinity;
registerPolicy('test-faulty-lru', (o) => new FaultyLru(o as PolicyOptions, throwAt, throwFrom) as never);

/**
 * An executor with a ledger of what each tier really holds (its "driver"), as the live hierarchy has: a place or
 * copy writes keys there (never past the tier's capacity: a full tier refuses the write, as a driver would), an
 * evict frees them (except keys pinned then). A store whose planner call throws fails as it would live, and the
 * next one goes on. Background copies run right after each request.
 */
class Ledger {
  readonly held: Set<string>[];
  constructor(
    readonly p: Planner,
    readonly capacity: readonly number[],
  ) {
    this.held = capacity.map(() => new Set());
  }

  /** Stores `keys`; answers the keys placed, or the error the planner threw. */
  store(keys: readonly string[]): { placed: number; dropped: number } | Error {
    try {
      const moves = this.p.store(keys);
      let placed = 0;
      let dropped = 0;
      for (const m of moves) {
        if (m.kind === 'refuse' && m.reason !== 'present') dropped += m.keys.length;
        if (m.kind === 'place') placed += m.keys.length;
      }
      this.run(moves);
      return { placed, dropped };
    } catch (e) {
      return e as Error;
    }
  }

  run(moves: readonly M[]): void {
    const queue: M[] = [];
    const exec = (list: readonly M[]): void => {
      for (const m of list) {
        switch (m.kind) {
          case 'refuse':
          case 'wait':
            continue;
          case 'queue':
            queue.push(m);
            continue;
          case 'evict': {
            const kept = m.keys.filter((k) => this.p.isPinned(k));
            const done = m.keys.filter((k) => !kept.includes(k));
            for (const k of done) this.held[m.tier]!.delete(k);
            exec(this.p.completed(m, { done, failed: kept }));
            continue;
          }
          case 'place':
          case 'copy': {
            const to = m.kind === 'place' ? m.tier : m.to;
            const tier = this.held[to]!;
            const done: string[] = [];
            for (const k of m.keys) {
              if (tier.size >= this.capacity[to]!) continue; // the driver is full: this write fails
              tier.add(k);
              done.push(k);
            }
            exec(this.p.completed(m, { done, failed: m.keys.filter((k) => !done.includes(k)) }));
            continue;
          }
        }
      }
    };
    exec(moves);
    while (queue.length) {
      const q = queue.shift()!;
      if (q.kind === 'queue') exec(this.p.dequeue(q));
    }
  }

  /** Every tier's ledger is what the planner thinks it holds, with nothing left in flight. */
  expectConsistent(): void {
    for (let i = 0; i < this.held.length; i++) {
      const v = this.p.view(i);
      expect({ tier: i, reserved: v.reservedPages, leaving: v.leavingPages }).toEqual({ tier: i, reserved: 0, leaving: 0 });
      expect({ tier: i, keys: [...this.p.keysOn(i)].sort() }).toEqual({ tier: i, keys: [...this.held[i]!].sort() });
    }
  }
}

const config = (policy: string): PlannerConfig => ({
  tiers: [
    { name: 'hbm', capacityPages: 20, highWatermark: 0.9, lowWatermark: 0.7, policy },
    { name: 'host', capacityPages: 400, writeMode: 'write-back' },
  ],
});
const batch = (n: number) => Array.from({ length: 8 }, (_, i) => `r${n}p${i}`);

describe('Planner: a policy that fails', () => {
  it('one throw on an insert neither wedges the tier nor loses track of pages; it is reported once, typed', () => {
    throwAt = 30; // the 30th page landing on hbm: the 6th of the 4th store's 8, after victims were collected
    throwFrom = Infinity;
    const errors: PolicyError[] = [];
    const p = new Planner(config('test-faulty-lru'), { onPolicyError: (e) => errors.push(e) });
    const ledger = new Ledger(p, [20, 400]);
    const results = Array.from({ length: 4 }, (_, n) => ledger.store(batch(n)));
    // The page whose insert threw left hbm and (write-back: no copy below yet) is gone; the rest of its store,
    // before and after it, is resident.
    expect(p.lookup(['r3p5']).tiers).toEqual([-1]);
    expect(p.lookup(['r3p0', 'r3p4', 'r3p6', 'r3p7']).tiers).toEqual([0, 0, 0, 0]);
    ledger.expectConsistent();
    // A long workload after it: every store succeeds, every page is placed, the ledgers match the planner's.
    for (let n = 4; n < 60; n++) results.push(ledger.store(batch(n)));
    expect(results.filter((r) => r instanceof Error)).toEqual([]);
    expect(results.map((r) => (r as { placed: number }).placed)).toEqual(Array(60).fill(8));
    ledger.expectConsistent();
    expect(p.view(0).usedPages).toBeGreaterThanOrEqual(12);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(PolicyError);
    expect(errors[0]).toMatchObject({ code: 'ERR_POLICY', policy: 'test-faulty-lru', tier: 'hbm', call: 'insert' });
    expect(errors[0]!.message).toBe('policy test-faulty-lru on tier hbm: insert() threw: Error: insert #30 exploded');
    expect(p.view(0).policyErrors).toBe(1);
    expect(p.view(1).policyErrors).toBe(0);
  });

  it('a custom policy naming victims it keeps is caught by its checks; the tiers stay what the planner says', () => {
    const errors: PolicyError[] = [];
    const p = new Planner(config('test-phantom-lru'), { onPolicyError: (e) => errors.push(e) });
    const ledger = new Ledger(p, [20, 400]);
    for (let n = 0; n < 20; n++) expect(ledger.store(batch(n))).not.toBeInstanceOf(Error);
    ledger.expectConsistent();
    expect(errors.length).toBeGreaterThan(0);
    expect(errors[0]).toMatchObject({ policy: 'test-phantom-lru', tier: 'hbm', call: 'insert' });
    expect(errors[0]!.message).toMatch(/^policy test-phantom-lru on tier hbm: insert\(\) broke a rule: a victim is no longer resident: has\("r\d+p\d+"\) is still true/);
  });

  it('a policy that throws on every insert leaves the hierarchy consistent, its pages refused on that tier', () => {
    throwAt = 0;
    throwFrom = 15;
    const errors: PolicyError[] = [];
    const p = new Planner(config('test-faulty-lru'), { onPolicyError: (e) => errors.push(e) });
    const ledger = new Ledger(p, [20, 400]);
    for (let n = 0; n < 20; n++) expect(ledger.store(batch(n))).not.toBeInstanceOf(Error);
    ledger.expectConsistent();
    expect(errors.length).toBeGreaterThan(100);
    expect(p.view(0).policyErrors).toBe(errors.length);
  });
});
