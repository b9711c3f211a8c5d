import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { TierSyncError } from '@tiersync/native/errors';
import { LruPolicy, registerPolicy } from '@tiersync/policy';
import { planSim, simCommand } from '../cli/index.js';
import type { SweepJob } from './jobs.js';
import { checkPolicies } from './policies.js';
import { runSweep, workerScript } from './sweep.js';
import { encodeOracleGeneral } from './trace/oracle-general.js';

const conversation = path.resolve(__dirname, '../../traces/conversation_trace.jsonl.gz');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-sweep-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

function capture(): { out: string[]; restore: () => void } {
  const out: string[] = [];
  const spy = vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
  return { out, restore: () => spy.mockRestore() };
}

afterEach(() => vi.restoreAllMocks());

describe('sweeps', () => {
  const jobs: SweepJob[] = ['lru', 'fifo', 's3fifo'].flatMap((policy) =>
    [2000, 20000].map((capacity) => ({ kind: 'exact' as const, job: { policy, unit: 'objects' as const, capacity } })),
  );

  it('worker threads give the same results, in job order, as the calling thread', async () => {
    const source = { file: conversation, format: 'mooncake' as const };
    const ticks: number[] = [];
    const inline = await runSweep({ source, jobs, threads: 1 });
    const threaded = await runSweep({ source, jobs, threads: 2, progress: { tick: () => void ticks.push(1), done() {} } });
    expect(threaded).toEqual(inline);
    expect(ticks).toHaveLength(jobs.length);
    expect(inline.map((r) => r.kind === 'exact' && `${r.result.policy}@${r.result.capacityObjects}`)).toEqual(jobs.map((j) => j.kind === 'exact' && `${j.job.policy}@${j.job.capacity}`));
    if (workerScript() === null) console.warn('no compiled worker.js (run `tsc -b packages/core`): the threaded sweep ran inline');
  });

  it('a failing job rejects with a TierSyncError, from workers too', async () => {
    const bad: SweepJob[] = [{ kind: 'exact', job: { policy: 's3fifo', unit: 'objects', capacity: 3 } }, ...jobs];
    for (const threads of [1, 2]) {
      await expect(runSweep({ source: { file: conversation, format: 'mooncake' }, jobs: bad, threads })).rejects.toThrow(TierSyncError);
    }
  });

  it('a tier too small for its policy is the same ERR_CONFIG inline and from workers, naming the tier', async () => {
    // 1 GiB of HBM holds 16 llama-3-8b pages of 512 tokens; S3-FIFO needs 20 (a small queue of 2).
    const hbm = { name: 'hbm', capacityBytes: 2 ** 30, readBytesPerSec: 0, writeBytesPerSec: 0, latencySec: 0, parallelism: 1 };
    const job: SweepJob = { kind: 'tiered', job: { policy: 's3fifo', model: 'llama-3-8b', accelerator: 'h100', tiers: [hbm] } };
    for (const threads of [1, 2]) {
      const err = await runSweep({ source: { file: conversation, format: 'mooncake', requests: 20 }, jobs: [job, job], threads }).catch((e: unknown) => e);
      expect(err, `threads ${threads}`).toBeInstanceOf(TierSyncError);
      expect(err).toMatchObject({ code: 'ERR_CONFIG', message: expect.stringMatching(/^tier hbm holds 16 pages, too few for policy s3fifo: it needs at least 20 pages/) });
    }
  });

  it('an untyped failure stays untyped from workers (no made-up ERR_INVALID_ARGUMENT)', async () => {
    const bogus = { kind: 'tiered', job: undefined } as unknown as SweepJob;
    for (const threads of [1, 2]) {
      const err = await runSweep({ source: { file: conversation, format: 'mooncake', requests: 5 }, jobs: [bogus, bogus], threads }).catch((e: unknown) => e);
      expect(err, `threads ${threads}`).toBeInstanceOf(Error);
      expect(err, `threads ${threads}`).not.toBeInstanceOf(TierSyncError);
    }
  });
});

// Registered by this script only: a sweep worker (a fresh module graph) does not have it.
registerPolicy('test-script-lru', (options) => new LruPolicy(options));
const fixture = path.resolve(__dirname, 'custom-policy.fixture.mjs');

describe('custom policies in sweeps', () => {
  const source = { file: conversation, format: 'mooncake' as const, requests: 2000 };
  const exact = (policy: string, capacity: number): SweepJob => ({ kind: 'exact', job: { policy, unit: 'objects', capacity } });
  const misses = (results: Awaited<ReturnType<typeof runSweep>>) => results.map((r) => r.kind === 'exact' && `${r.result.policy}@${r.result.capacityObjects}: ${r.result.misses}`);

  it('a policy the calling script registered runs, on its thread, whatever the threads (it was \"unknown policy\" with workers)', async () => {
    const jobs = [exact('lru', 500), exact('test-script-lru', 500), exact('fifo', 500), exact('test-script-lru', 2000)];
    const inline = await runSweep({ source, jobs, threads: 1 });
    const threaded = await runSweep({ source, jobs, threads: 2 });
    expect(misses(threaded)).toEqual(misses(inline));
    // The custom LRU counts as LRU.
    expect(threaded[1]).toEqual({ ...threaded[0], result: { ...(threaded[0] as { result: object }).result, policy: 'test-script-lru' } });
  });

  it('policyModules are loaded by every worker (and the calling thread)', async () => {
    const jobs = [exact('test-module-lru', 500), exact('lru', 500), exact('test-module-lru', 2000)];
    const threaded = await runSweep({ source, jobs, threads: 2, policyModules: [fixture] });
    expect(misses(threaded)).toEqual(misses(await runSweep({ source, jobs, threads: 1 })));
    expect(() => checkPolicies(['test-module-lru'])).not.toThrow();
    await expect(runSweep({ source, jobs, threads: 2, policyModules: [path.join(tmp, 'missing.mjs')] })).rejects.toThrow(/policy module .*missing\.mjs cannot be loaded/);
  });

  it('an unknown policy says how to register one', () => {
    expect(() => checkPolicies(['mine'])).toThrow(/unknown policy 'mine'; known: .*; a custom policy must be registered \(registerPolicy\) by a module this process loads: `tiersync sim --policy-module FILE`/);
  });

  it('tiersync sim --policy-module FILE: the same results with workers as without', async () => {
    const run = async (threads: string) => {
      const c = capture();
      const code = await simCommand.run(['--trace', conversation, '--requests', '2000', '--policy-module', fixture, '--policy', 'test-module-lru,lru', '--objects', '500,2000', '--no-bound', '--json', '--quiet', '--threads', threads]);
      c.restore();
      expect(code).toBe(0);
      return JSON.parse(c.out.at(-1)!) as { results: Array<{ policy: string; misses: number }> };
    };
    const two = await run('2');
    expect(two).toEqual(await run('1'));
    expect(two.results.map((r) => r.policy)).toEqual(['test-module-lru', 'test-module-lru', 'lru', 'lru']);
    expect(simCommand.usage).toContain('--policy-module FILE');
  });
});

describe('tiersync sim command', () => {
  it('exact mode prints the reference shape as JSON', async () => {
    const file = path.join(tmp, 'a.oracleGeneral');
    // A B A C B A with sizes 1: LRU capacity 2 misses 5, FIFO 4 (see exact.test.ts)
    fs.writeFileSync(file, encodeOracleGeneral([0, 1, 0, 2, 1, 0].map((id, time) => ({ time, id, size: 1 }))));
    const c = capture();
    const code = await simCommand.run(['--trace', file, '--format', 'oracleGeneral', '--policy', 'lru,fifo', '--objects', '2,inf', '--json', '--quiet', '--threads', '1']);
    c.restore();
    expect(code).toBe(0);
    expect(JSON.parse(c.out.at(-1)!)).toEqual({
      results: [
        { policy: 'lru', capacityBytes: null, capacityObjects: 2, requests: 6, misses: 5, bytesRequested: 6, bytesMissed: 5 },
        { policy: 'lru', capacityBytes: null, capacityObjects: null, requests: 6, misses: 3, bytesRequested: 6, bytesMissed: 3 },
        { policy: 'fifo', capacityBytes: null, capacityObjects: 2, requests: 6, misses: 4, bytesRequested: 6, bytesMissed: 4 },
        { policy: 'fifo', capacityBytes: null, capacityObjects: null, requests: 6, misses: 3, bytesRequested: 6, bytesMissed: 3 },
        // the bound every exact sweep runs beside the chosen policies: Belady misses 4 (C evicts A, needed last)
        { policy: 'opt', capacityBytes: null, capacityObjects: 2, requests: 6, misses: 4, bytesRequested: 6, bytesMissed: 4 },
        { policy: 'opt', capacityBytes: null, capacityObjects: null, requests: 6, misses: 3, bytesRequested: 6, bytesMissed: 3 },
      ],
    });
  });

  it('mooncake with --capacity inf reports the reuse ceiling', async () => {
    const c = capture();
    await simCommand.run(['--trace', conversation, '--capacity', 'inf', '--json', '--quiet', '--threads', '1']);
    c.restore();
    const [r] = (JSON.parse(c.out.at(-1)!) as { results: Array<Record<string, number>> }).results;
    expect(r).toMatchObject({ requests: 288500, misses: 182790, capacityBytes: null });
    expect(r!.prefixPageHitRatio).toBeGreaterThan(0.36);
    expect(r!.prefixPageHitRatio).toBeLessThan(0.37);
  });

  it('writes JSON, CSV and HTML with --out', async () => {
    const out = path.join(tmp, 'out');
    const c = capture();
    await simCommand.run(['--workload', 'multi-round-qa', '--users', '4', '--rounds', '3', '--model', 'llama-3-8b', '--accelerator', 'h100', '--policy', 'lru,s3fifo', '--hbm', '2GiB', '--host', '2GiB,8GiB', '--out', out, '--quiet', '--threads', '1']);
    c.restore();
    expect(JSON.parse(fs.readFileSync(path.join(out, 'results.json'), 'utf8')).results).toHaveLength(4);
    expect(fs.readFileSync(path.join(out, 'results.csv'), 'utf8').split('\n')[0]).toMatch(/^label,policy,model/);
    expect(fs.readFileSync(path.join(out, 'report.html'), 'utf8')).toMatch(/<svg class="chart" data-chart="ttft-cdf"/);
  });

  it('rejects bad options with ERR_INVALID_ARGUMENT', () => {
    expect(() => planSim(['--objects', '10'])).toThrow(/--trace FILE/);
    expect(() => planSim(['--trace', conversation, '--objects', '10', '--capacity', '1MiB'])).toThrow(/exactly one of/);
    expect(() => planSim(['--trace', conversation, '--capacity', '12 parsecs'])).toThrow(/--capacity: expected a size/);
    expect(() => planSim(['--trace', conversation, '--objects', '10', '--policy', 'nope'])).toThrow(/unknown policy 'nope'/);
    expect(() => planSim(['--trace', conversation, '--format', 'parquet', '--objects', '1'])).toThrow(/--format must be one of/);
    expect(() => planSim(['--trace', conversation, '--model', 'gpt-9'])).toThrow(/unknown model/);
    expect(() => planSim(['--trace', conversation, '--model', 'llama-3-8b', '--storage', 'tape:1TiB'])).toThrow(/unknown storage preset/);
  });

  it('checks --out before simulating: a path under a file fails with ERR_IO naming it', async () => {
    const file = path.join(tmp, 'not-a-folder');
    fs.writeFileSync(file, '');
    // The trace is broken: had the sweep run first, its error would be the trace's.
    const trace = path.join(tmp, 'broken-for-out.jsonl');
    fs.writeFileSync(trace, '{"timestamp":0,');
    const err = await simCommand.run(['--trace', trace, '--objects', '10', '--quiet', '--threads', '1', '--out', path.join(file, 'sub')]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TierSyncError);
    expect(err).toMatchObject({ code: 'ERR_IO', message: expect.stringContaining(`--out ${path.join(file, 'sub')}`) });
  });

  it('names the file and line of a broken trace', async () => {
    const file = path.join(tmp, 'broken.jsonl');
    fs.writeFileSync(file, '{"timestamp":0,"input_length":512,"output_length":1,"hash_ids":[1]}\n{"timestamp":1,');
    await expect(simCommand.run(['--trace', file, '--objects', '10', '--quiet', '--threads', '1'])).rejects.toThrow(/broken\.jsonl: line 2: not valid JSON/);
  });
});
