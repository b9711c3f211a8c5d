// `tiersync bench agent` through its launcher in @tiersync/devtools: the benchmark script is found in this repository,
// runs in a child process on the tiny model, and reports the suite's JSON shape with identical continuations
// (restored from host RAM and from a cold fs tier). Times are not asserted here: they belong to the benchmark.
import { describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native';
import { locateAgentBench, runAgentBench } from '../packages/devtools/src/bench/agent.js';

describe('tiersync bench agent (launcher)', () => {
  it('runs the small scenario end to end and reports identical continuations from host and fs', async () => {
    expect(locateAgentBench()).toMatch(/examples\/agent-server\/bench\.mjs$/);
    const report = await runAgentBench({ args: ['--model', 'tiny', '--tokens', '300', '--repetitions', '1'], timeoutMs: 120_000 });
    expect(report).toMatchObject({ suite: 'agent', promptTokens: 300, llamaThreads: 1, identical: true });
    expect(report.restore.map((r) => r.tier)).toEqual(['host', 'fs']);
    for (const r of report.restore) {
      expect(r.ttftMs).toBeGreaterThan(0);
      expect(r.speedup).toBeGreaterThan(0);
      expect(r.fileDetourMs).toBeGreaterThan(0);
    }
  });

  it('gives a typed error when the benchmark cannot run', async () => {
    const e = await runAgentBench({ script: '/nonexistent/bench.mjs', timeoutMs: 30_000 }).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(TierSyncError);
    expect((e as TierSyncError).code).toBe('ERR_IO');
  });
});
