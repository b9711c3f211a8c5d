import { describe, expect, it } from 'vitest';
import { agentQa, evictionLabCommand, runPrefixBench } from './eviction-lab.js';

describe('eviction lab benches', () => {
  it('prefix: every base policy with and without the wrapper on every bundled trace and capacity', () => {
    const r = runPrefixBench({ policies: ['lru', 's3fifo'], fractions: [0.05], requests: 300 });
    expect(r.cells).toHaveLength(4 * 2);
    for (const c of r.cells) {
      expect(c.plain).toBeGreaterThanOrEqual(0);
      expect(c.wrapped).toBeLessThanOrEqual(1);
      expect(c.gain).toBeCloseTo(c.wrapped - c.plain, 4);
    }
  });

  it('prefix --policies: refuses a name that is no registered policy, naming it', async () => {
    await expect(evictionLabCommand(['prefix', '--policies', 'lru,no-such-policy'])).rejects.toMatchObject({
      code: 'ERR_INVALID_ARGUMENT',
      message: expect.stringContaining("'no-such-policy'"),
    });
  });

  it('agent QA: each user extends its own conversation, turns ordered in time', () => {
    const t = agentQa({ users: 3, rounds: 4 });
    expect(t.requests).toHaveLength(12);
    for (let i = 1; i < t.requests.length; i++) expect(t.requests[i]!.timeMs).toBeGreaterThanOrEqual(t.requests[i - 1]!.timeMs);
    // The shared system prompt's 4 full pages open every request.
    const first = t.requests[0]!.pages.slice(0, 4);
    for (const q of t.requests) expect([...q.pages.slice(0, 4)]).toEqual([...first]);
    expect(t.distinctPages).toBeLessThan(t.pageRefs);
  });
});
