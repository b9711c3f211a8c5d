import { describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native/errors';
import { retentionHints } from './retention.js';
import { runTiered, type TierConfig } from './tiered.js';
import { generateMultiRoundQa } from './trace/multi-round-qa.js';
import { workloadPages } from './workload.js';

describe('retention hints from a trace', () => {
  // Two sessions sharing page 0 (a system prompt): A = [0,1,2] at 0 then [0,1,2,3] at 50; B = [0,5,6] at 10.
  const pages = [Uint32Array.of(0, 1, 2), Uint32Array.of(0, 5, 6), Uint32Array.of(0, 1, 2, 3)];
  const times = [0, 10, 50];

  it('a turn with a later turn expects its session back then (all its pages); a last turn finishes its private pages', () => {
    const h = retentionHints(pages, times);
    expect(h[0]).toEqual({ pages: [0, 1, 2], hint: { expectedReturnMs: 50 } });
    expect(h[1]).toEqual({ pages: [1, 2], hint: { finished: true } });
    // A's last turn: its own pages 1, 2, 3, never the shared page 0.
    expect(h[2]).toEqual({ pages: [1, 2, 3], hint: { finished: true } });
  });

  it('finishedOnly says nothing while a session goes on; noise stays within its factor', () => {
    expect(retentionHints(pages, times, { finishedOnly: true })[0]!.hint).toBeUndefined();
    for (let seed = 1; seed < 40; seed++) {
      const wait = (retentionHints(pages, times, { noise: 1, seed })[0]!.hint as { expectedReturnMs: number }).expectedReturnMs;
      expect(wait).toBeGreaterThanOrEqual(25 - 1e-9);
      expect(wait).toBeLessThanOrEqual(100 + 1e-9);
    }
    expect(() => retentionHints(pages, times, { noise: -1 })).toThrow(TierSyncError);
  });

  it('a session-aware tier fed the hints finds at least the prefix pages plain LRU finds on multi-round QA', () => {
    const qa = generateMultiRoundQa({ users: 12, rounds: 4 });
    const pageBytes = 512 * 128 * 1024;
    const hbm: TierConfig = { name: 'hbm', capacityBytes: 40 * pageBytes, readBytesPerSec: 0, writeBytesPerSec: 0, latencySec: 0, parallelism: 1 };
    const job = { model: 'llama-3-8b', accelerator: 'h100', compute: { chips: 1 }, tiers: [hbm] };
    const plain = runTiered(qa, { ...job, policy: 'lru' });
    const hinted = runTiered(qa, { ...job, policy: 'session-aware:lru', retention: {} });
    expect(hinted.pageHitRatio).toBeGreaterThanOrEqual(plain.pageHitRatio);
    expect(hinted.ttft.mean).toBeLessThanOrEqual(plain.ttft.mean + 1e-12);
    // Hints alone change nothing for a policy that ignores them.
    expect(runTiered(qa, { ...job, policy: 'lru', retention: {} }).pageHitRatio).toBe(plain.pageHitRatio);
    expect(workloadPages(qa, 512).pages).toHaveLength(48);
  });
});
