import { describe, expect, it } from 'vitest';
import { PriorityPolicy } from './priority.js';
import { SievePolicy } from './policies/sieve.js';
import { run } from './test-helpers.js';

const byPrefix = (key: string): number => (key.startsWith('H') ? 1 : 0);

describe('PriorityPolicy', () => {
  it('evicts the lowest priority first, LRU within a level (worked by hand, 4 objects)', () => {
    const policy = new PriorityPolicy<string>({ capacity: 4, unit: 'objects', priorityOf: byPrefix });
    expect(run(policy, 'H1 L1 H2 L2 L3 H3 L4 H4')).toEqual({ outcomes: 'MMMMMMMM', victims: ['L1', 'L2', 'L3', 'L4'] });
    // H1 hits (most recent in its level); L5 finds level 0 empty, so the high level gives its LRU, H2.
    expect(run(policy, 'H1 L5')).toEqual({ outcomes: 'HM', victims: ['H2'] });
    expect(policy.peekVictims(4)).toEqual(['L5', 'H3', 'H4', 'H1']);
    expect(policy.priorityOf('L5')).toBe(0);
  });

  it('reaches a higher level when the lower one is pinned', () => {
    const policy = new PriorityPolicy<string>({ capacity: 3, unit: 'objects', priorityOf: byPrefix });
    run(policy, 'L1 H1 L2');
    policy.pin('L1');
    policy.pin('L2');
    expect(run(policy, 'L3')).toEqual({ outcomes: 'M', victims: ['H1'] });
    expect(policy.evict()).toBe('L3');
    expect(policy.evict()).toBeUndefined();
  });

  it('uses the inner policy it is given, per level', () => {
    const policy = new PriorityPolicy<string>({
      capacity: 3,
      unit: 'objects',
      priorityOf: byPrefix,
      create: (options) => new SievePolicy(options),
    });
    // SIEVE within level 0: L1 is visited, so L2 goes first.
    expect(run(policy, 'L1 L2 H1 L1 L3')).toEqual({ outcomes: 'MMMHM', victims: ['L2'] });
  });

  it('names what is malformed', () => {
    expect(() => new PriorityPolicy({ capacity: 3, priorityOf: 1 as never })).toThrow(/options.priorityOf/);
    const policy = new PriorityPolicy<string>({ capacity: 3, priorityOf: () => 0.5 });
    expect(() => policy.access('a')).toThrow(/safe integer/);
  });
});
