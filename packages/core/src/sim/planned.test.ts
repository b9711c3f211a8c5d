import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { TierSyncError } from '@tiersync/native/errors';
import { planSim, simCommand } from '../cli/index.js';
import { parseConfig } from '../hierarchy/index.js';
import { simHierarchy } from './hierarchy.js';
import { MODELS, kvBytesPerToken } from './model/presets.js';
import { replayPlanned } from './planned.js';
import { runTiered } from './tiered.js';
import { bundledTrace } from './trace/bundled.js';
import { readMooncake } from './trace/mooncake.js';
import type { LlmTrace } from './trace/types.js';
import { requestTokens, workloadPages } from './workload.js';

const LAYOUT = { tokensPerPage: 4, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 1, headDim: 8 } }] };
const PAGE = 4 * 2 * 8 * 2;

/** A request trace from lists of block ids (4-token blocks). */
function trace(...requests: number[][]): LlmTrace {
  return {
    kind: 'llm',
    source: 'test',
    blockTokens: 4,
    requests: requests.map((pages, i) => ({ timeMs: i, inputTokens: pages.length * 4, outputTokens: 1, pages: Uint32Array.from(pages) })),
    distinctPages: 1 + Math.max(...requests.flat()),
    pageRefs: requests.flat().length,
  };
}

function config(tiers: Array<Record<string, unknown>>, extra: Record<string, unknown> = {}) {
  return parseConfig({ model: 'm', layout: LAYOUT, tiers, ...extra });
}

afterEach(() => vi.restoreAllMocks());

describe('workload pages', () => {
  it('equal block ids get equal page ids only after equal prefixes (chained, as live keys)', () => {
    const w = workloadPages(trace([1, 2], [1, 2, 3], [5, 2]), 4);
    expect(Array.from(w.pages[0]!)).toEqual([0, 1]);
    expect(Array.from(w.pages[1]!)).toEqual([0, 1, 2]);
    // block 2 after block 5 is another page than block 2 after block 1
    expect(Array.from(w.pages[2]!)).toEqual([3, 4]);
    expect(w.distinctPages).toBe(5);
  });

  it('splits blocks into pages when tokensPerPage divides them, and refuses otherwise', () => {
    const w = workloadPages(trace([7, 8]), 2);
    expect(Array.from(w.pages[0]!)).toEqual([0, 1, 2, 3]);
    expect(() => workloadPages(trace([1]), 3)).toThrow(/tokensPerPage \(3\) must divide the trace's 4-token blocks/);
    try {
      workloadPages(trace([1]), 8);
    } catch (e) {
      expect((e as TierSyncError).code).toBe('ERR_CONFIG');
    }
  });

  it('tokens start each page with its block and slot, so pages differ exactly when (block, slot) do', () => {
    const t = requestTokens(Uint32Array.from([9, 9]), 4, 2);
    expect(Array.from(t.subarray(0, 2))).toEqual([9, 0]);
    expect(Array.from(t.subarray(2, 4))).toEqual([9, 1]);
    expect(Array.from(t.subarray(4, 6))).toEqual([9, 0]);
  });
});

describe('hierarchy config for the simulator', () => {
  it('names, capacities in pages, write modes and watermarks as the live hierarchy reads them', () => {
    const h = simHierarchy(config([{ url: `hbm://sim?capacity=${10 * PAGE + 5}` }, { url: 'host://?capacity=1MiB', writeThrough: true, policy: 's3fifo' }, { url: 's3://b/p' }]));
    expect(h.pageBytes).toBe(PAGE);
    expect(h.tiers.map((t) => [t.name, t.capacityPages])).toEqual([['hbm', 10], ['host', 2 ** 20 / PAGE], ['object', Math.floor(Number.MAX_SAFE_INTEGER / PAGE)]]);
    expect(h.planner.tiers[1]).toMatchObject({ writeMode: 'write-through', policy: 's3fifo', highWatermark: 0.95, lowWatermark: 0.85 });
    expect(h.planner.tiers[2]!.writeMode).toBe('write-back');
    expect(() => simHierarchy(config([{ url: 'hbm://sim?capacity=10' }]))).toThrow(/holds no 128-byte page/);
  });
});

describe('counting the planner', () => {
  it('counts stores, demotions, evictions, hits and promotions as the planner decides them', () => {
    // HBM holds 2 pages and frees exactly what a placement needs; host (write-back) holds 10.
    const c = config([
      { url: `hbm://sim?capacity=${2 * PAGE}`, highWatermark: 1, lowWatermark: 1 },
      { url: `host://?capacity=${10 * PAGE}`, highWatermark: 1, lowWatermark: 1 },
    ]);
    // 1: stores pages a, b. 2: c (a is demoted to host and evicted). 3: looks up a (host hit), promotes it (b demoted).
    const r = replayPlanned({ config: c, workload: workloadPages(trace([1], [1, 2], [3]), 4) });
    // Pages of another size than the config's: a config error, typed.
    expect(() => replayPlanned({ config: c, workload: workloadPages(trace([1]), 2) })).toThrow(expect.objectContaining({ code: 'ERR_CONFIG', message: "the workload has 2-token pages, the config's layout 4" }));
    expect(r.counters).toEqual({
      requests: 3,
      lookupPages: 4,
      prefixPageHits: 1,
      tiers: [
        { tier: 'hbm', hits: 1, inserts: 3, demotions: 1, evictions: 1, promotions: 0 },
        { tier: 'host', hits: 0, inserts: 1, demotions: 0, evictions: 0, promotions: 0 },
      ],
    });
    const r2 = replayPlanned({ config: c, workload: workloadPages(trace([1], [1, 2], [3], [1]), 4) });
    expect(r2.counters.tiers).toEqual([
      { tier: 'hbm', hits: 1, inserts: 4, demotions: 2, evictions: 2, promotions: 1 },
      { tier: 'host', hits: 1, inserts: 2, demotions: 0, evictions: 0, promotions: 0 },
    ]);
    expect(r2.tiers.map((t) => t.usedPages)).toEqual([2, 2]);
  });

  it('write-through copies every stored page down; a full queue drops copies as live does', () => {
    const tiers = [{ url: `hbm://sim?capacity=${100 * PAGE}` }, { url: `host://?capacity=${100 * PAGE}`, writeMode: 'write-through' }];
    const w = workloadPages(trace([1, 2, 3], [4, 5]), 4);
    expect(replayPlanned({ config: config(tiers), workload: w }).counters.tiers[1]!.inserts).toBe(5);
    // a queue of 2 pages cannot take a request's 3-page copy, but takes the 2-page one
    expect(replayPlanned({ config: config(tiers, { maxQueuedPages: 2 }), workload: w }).counters.tiers[1]!.inserts).toBe(2);
  });

  it('the tiered TTFT model runs the same planner: loading every found page, its counters are the replay\'s', () => {
    const t = readMooncake(bundledTrace());
    const small = { ...t, requests: t.requests.slice(0, 150) };
    const c = parseConfig({
      model: 'm',
      layout: { ...LAYOUT, tokensPerPage: 512 },
      tiers: [{ url: `hbm://sim?capacity=${60 * 16384}` }, { url: `host://?capacity=${200 * 16384}`, policy: 'arc' }, { url: 'fs:///nowhere?capacity=1GiB', writeMode: 'write-through' }],
    });
    const h = simHierarchy(c);
    const cost = h.tiers.map((x) => ({ name: x.name, capacityBytes: 0, readBytesPerSec: 1e9, writeBytesPerSec: 1e9, latencySec: 0, parallelism: 1 }));
    const tiered = runTiered(small, { policy: 'lru', model: 'llama-3-8b', accelerator: 'h100', compute: { chips: 1 }, tiers: cost, hierarchy: h, costAware: false });
    const replay = replayPlanned({ config: c, workload: workloadPages(small, 512) });
    expect(tiered.counters).toEqual(replay.counters);
    expect(tiered.tiers[0]!.capacityBytes).toBe(60 * 512 * kvBytesPerToken(MODELS['llama-3-8b']!));
    expect(tiered.pageHitRatio).toBeCloseTo(replay.counters.prefixPageHits / replay.counters.lookupPages, 12);
  });
});

describe('tiersync sim --config', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-sim-config-'));
  afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
  const file = path.join(tmp, 'h.yaml');
  fs.writeFileSync(
    file,
    ['model: m', 'layout: { tokensPerPage: 512, dtype: bf16, groups: [{ name: full, layers: 1, attention: { type: mha, kvHeads: 1, headDim: 8 } }] }', 'tiers:', '  - { url: "hbm://sim?capacity=1MiB", name: hbm }', '  - { url: "fs://{tmp}/fs?capacity=8MiB", name: disk }', 'http: { port: 0 }', ''].join('\n'),
  );

  it('prints the counters of the replay through the planner as its last line', async () => {
    const out: string[] = [];
    vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
    expect(await simCommand.run(['--config', file, '--requests', '80', '--json', '--quiet'])).toBe(0);
    const last = JSON.parse(out.at(-1)!) as { counters: { requests: number; tiers: Array<{ tier: string }> } };
    const c = parseConfig({ model: 'm', layout: { ...LAYOUT, tokensPerPage: 512 }, tiers: [{ url: 'hbm://sim?capacity=1MiB', name: 'hbm' }, { url: 'fs:///x?capacity=8MiB', name: 'disk' }] });
    expect(last).toEqual({ counters: replayPlanned({ config: c, workload: workloadPages(readMooncake(bundledTrace()), 512, 80) }).counters });
    expect(last.counters.requests).toBe(80);
    expect(last.counters.tiers.map((t) => t.tier)).toEqual(['hbm', 'disk']);
  });

  it('--policy runs every tier with each policy; capacity flags are refused', () => {
    const { plan } = planSim(['--config', file, '--policy', 'lru,sieve']);
    expect(plan.mode).toBe('planned');
    expect(plan.jobs.map((j) => j.kind === 'planned' && j.job.policy)).toEqual(['lru', 'sieve']);
    expect(() => planSim(['--config', file, '--host', '1GiB'])).toThrow(/--host does not go with --config/);
    expect(() => planSim(['--config', path.join(tmp, 'missing.yaml')])).toThrow(/does not exist/);
  });

  it('refuses opt / opt-size wherever the planner runs them (it never knows the future: they would run as LRU)', () => {
    const refused = (args: string[]) => {
      const err = (() => {
        try {
          planSim(args);
        } catch (e) {
          return e;
        }
      })();
      expect(err, args.join(' ')).toBeInstanceOf(TierSyncError);
      expect(err).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/policy 'opt(-size)?' needs each request's next access.*exact mode/) });
    };
    refused(['--config', file, '--policy', 'lru,opt']);
    refused(['--config', file, '--model', 'llama-3-8b', '--policy', 'opt-size']);
    refused(['--trace', bundledTrace(), '--model', 'llama-3-8b', '--hbm', '2GiB', '--policy', 'lru,opt']);
    // The planner's executor refuses it too (library callers, jobs built by hand; the config loader refuses an
    // oracle in a config file's own tiers).
    const hbm = { name: 'hbm', capacityBytes: 2 ** 30, readBytesPerSec: 0, writeBytesPerSec: 0, latencySec: 0, parallelism: 1 };
    expect(() => runTiered(readMooncake(bundledTrace()), { policy: 'opt', model: 'llama-3-8b', accelerator: 'h100', tiers: [hbm] })).toThrow(/tier hbm: policy 'opt' needs/);
  });

  it('a tier too small for its policy is an ERR_CONFIG naming the tier, its pages and the least it needs', () => {
    const c = config([{ url: `hbm://sim?capacity=${8 * PAGE}`, policy: 's3fifo' }]);
    const err = (() => {
      try {
        replayPlanned({ config: c, workload: workloadPages(trace([1, 2]), 4) });
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(TierSyncError);
    expect(err).toMatchObject({ code: 'ERR_CONFIG', message: expect.stringMatching(/^tier hbm holds 8 pages, too few for policy s3fifo: it needs at least 20 pages/) });
    // 20 pages is indeed enough.
    expect(() => replayPlanned({ config: config([{ url: `hbm://sim?capacity=${20 * PAGE}`, policy: 's3fifo' }]), workload: workloadPages(trace([1, 2]), 4) })).not.toThrow();
  });

  it('with --model, the TTFT model runs over the config\'s tiers', () => {
    const { plan } = planSim(['--config', file, '--model', 'llama-3-8b', '--accelerator', 'h100']);
    expect(plan.mode).toBe('tiered');
    const job = plan.jobs[0]!;
    expect(job.kind === 'tiered' && job.job.hierarchy?.tiers.map((t) => t.name)).toEqual(['hbm', 'disk']);
  });
});
