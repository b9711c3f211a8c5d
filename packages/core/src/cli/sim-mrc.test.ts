import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { bundledTrace, encodeOracleGeneral, parseOracleGeneral, runExact } from '../sim/index.js';
import { planSim, simCommand } from './index.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-sim-mrc-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

async function run(args: string[]): Promise<string> {
  const out: string[] = [];
  const log = vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
  try {
    expect(await simCommand.run(args)).toBe(0);
  } finally {
    log.mockRestore();
  }
  return out.join('\n');
}

describe('tiersync sim on streamed traces and --mrc', () => {
  const records = Array.from({ length: 30_000 }, (_, i) => ({ time: i, id: (i * 7919) % 4001, size: 1 + (i % 300) }));
  const file = path.join(tmp, 't.oracleGeneral');
  fs.writeFileSync(file, encodeOracleGeneral(records));
  const loaded = parseOracleGeneral(encodeOracleGeneral(records), file);

  it('an object trace is replayed streamed with the counts of the loaded trace, the bound included', async () => {
    const { results } = JSON.parse((await run(['--trace', file, '--policy', 'lru,s3fifo', '--objects', '100,1000', '--json', '--quiet'])).split('\n')[0]!) as { results: Array<{ policy: string; capacityObjects: number; misses: number }> };
    expect(results.map((r) => r.policy)).toEqual(['lru', 'lru', 's3fifo', 's3fifo', 'opt', 'opt']);
    for (const r of results) expect(r.misses).toBe(runExact(loaded, { policy: r.policy, unit: 'objects', capacity: r.capacityObjects }).misses);
    const { results: unbound } = JSON.parse(await run(['--trace', file, '--objects', '100', '--no-bound', '--json', '--quiet'])) as { results: unknown[] };
    expect(unbound).toHaveLength(1);
  });

  it('--mrc writes exact LRU and sampled curves, CSV, JSON and the report chart', async () => {
    const out = path.join(tmp, 'mrc');
    await run(['--trace', bundledTrace(), '--mrc', '--policy', 'lru,fifo', '--mrc-points', '8', '--sample-rate', '0.5', '--out', out, '--quiet']);
    const { mrc } = JSON.parse(fs.readFileSync(path.join(out, 'mrc.json'), 'utf8')) as { mrc: { footprint: number; curves: Array<{ policy: string; method: string; points: Array<{ capacity: number; missRatio: number }> }> } };
    expect(mrc.footprint).toBe(182_790);
    expect(mrc.curves.map((c) => [c.policy, c.method, c.points.length])).toEqual([['lru', 'stack-distance', 8], ['fifo', 'shards-replay', 8]]);
    expect(mrc.curves[0]!.points.at(-1)).toEqual({ capacity: 182_790, missRatio: 182_790 / 288_500 });
    expect(fs.readFileSync(path.join(out, 'mrc.csv'), 'utf8').split('\n')[0]).toBe('policy,method,sampleRate,unit,capacity,missRatio');
    expect(fs.readFileSync(path.join(out, 'report.html'), 'utf8')).toContain('data-chart="mrc"');
  });

  it('--mrc prints and writes the bounds beside the curves (text and mrc.csv, as --json and the report)', async () => {
    const out = path.join(tmp, 'mrc-bound');
    const text = await run(['--trace', file, '--mrc', '--policy', 'lru,opt', '--objects', '100,1000', '--out', out, '--quiet']);
    const opt = [100, 1000].map((capacity) => runExact(loaded, { policy: 'opt', unit: 'objects', capacity }));
    const ratios = opt.map((r) => r.misses / r.requests);
    expect(text).toContain(['opt (offline bound, full replay)', `           100 ${ratios[0]!.toFixed(4)}`, `          1000 ${ratios[1]!.toFixed(4)}`].join('\n'));
    const csv = fs.readFileSync(path.join(out, 'mrc.csv'), 'utf8').trim().split('\n');
    expect(csv.slice(-2)).toEqual([`opt,bound,1,objects,100,${ratios[0]}`, `opt,bound,1,objects,1000,${ratios[1]}`]);
  });

  it('--lru-sample-rate below 1 labels distinct and footprint as estimates (text, --json)', async () => {
    const sampled = await run(['--trace', file, '--mrc', '--lru-sample-rate', '0.5', '--mrc-points', '4', '--quiet']);
    expect(sampled.split('\n')[0]).toMatch(/^30000 requests, ~\d+ distinct, footprint ~\d+ \(estimated from the LRU sample at rate 0\.5\)$/);
    expect(JSON.parse(await run(['--trace', file, '--mrc', '--lru-sample-rate', '0.5', '--mrc-points', '4', '--quiet', '--json'])).mrc.estimated).toBe(true);
    const exact = await run(['--trace', file, '--mrc', '--mrc-points', '4', '--quiet']);
    expect(exact.split('\n')[0]).toBe('30000 requests, 4001 distinct, footprint 4001');
    expect(JSON.parse(await run(['--trace', file, '--mrc', '--mrc-points', '4', '--quiet', '--json'])).mrc.estimated).toBe(false);
  });

  it('refuses MRC options that do not fit', () => {
    expect(() => planSim(['--trace', file, '--objects', '10', '--sample-rate', '0.1'])).toThrow(/--sample-rate goes with --mrc/);
    expect(() => planSim(['--trace', file, '--mrc', '--sample-rate', '2'])).toThrow(/--sample-rate must be in \(0, 1\]/);
    expect(() => planSim(['--trace', file, '--mrc', '--policy', 'opt'])).toThrow(/besides opt/);
    // Sampling drops the page chains: a prefix- wrapper would draw its inner policy's curve under its own name.
    expect(() => planSim(['--trace', file, '--mrc', '--policy', 'lru,prefix-aware:sieve'])).toThrow(/--mrc cannot run 'prefix-aware:sieve'/);
    expect(() => planSim(['--trace', file, '--mrc', '--policy', 'prefix-hold:fifo'])).toThrow(/--mrc cannot run 'prefix-hold:fifo'/);
    expect(() => planSim(['--trace', file, '--mrc', '--policy', 'lru,opt'])).toThrow(/needs the capacities/);
    expect(() => planSim(['--trace', file, '--mrc', '--model', 'llama-3-8b'])).toThrow(/exact mode/);
    expect(planSim(['--trace', file, '--mrc', '--policy', 'lru,opt', '--objects', '10,20']).plan.jobs.map((j) => j.kind === 'exact' && j.job.policy)).toEqual(['opt', 'opt']);
  });
});
