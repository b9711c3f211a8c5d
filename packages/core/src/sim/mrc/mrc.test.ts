import { describe, expect, it } from 'vitest';
import { runExact } from '../exact.js';
import { bundledTrace } from '../trace/bundled.js';
import { loadTrace } from '../trace/index.js';
import { missRatioCurves } from './curves.js';
import { traceChunks } from './sources.js';
import { StackDistance } from './stack-distance.js';
import { zipfTrace } from './zipf.js';

const BUNDLED = ['conversation_trace.jsonl.gz', 'synthetic_trace.jsonl.gz', 'AzureLLMInferenceTrace_code.csv.gz', 'AzureLLMInferenceTrace_conv.csv.gz'];
const load = (name: string) => loadTrace({ file: bundledTrace(name), format: name.includes('Azure') ? 'azure' : 'mooncake' });
const ratio = (r: { misses: number; requests: number }) => r.misses / r.requests;

describe('LRU stack distances', () => {
  it('give exactly the simulated LRU miss ratio at every capacity on every bundled trace', () => {
    for (const name of BUNDLED) {
      const trace = load(name);
      const distinct = trace.kind === 'llm' ? trace.distinctPages : trace.distinct;
      const caps = [1, 7, 100, Math.round(distinct / 20), Math.round(distinct / 4), distinct];
      const { curves, distinct: seen } = missRatioCurves(() => traceChunks(trace, 1), { policies: ['lru'], unit: 'objects', capacities: caps });
      expect(seen).toBe(distinct);
      expect(curves[0]!.method).toBe('stack-distance');
      for (const p of curves[0]!.points) expect(p.missRatio, `${name} @${p.capacity}`).toBeCloseTo(ratio(runExact(trace, { policy: 'lru', unit: 'objects', capacity: p.capacity })), 12);
    }
  });

  it('renumber their time slots without changing a distance', () => {
    // 5 keys over 200,000 accesses: the 65,536 slots are compacted several times.
    const small = new StackDistance(8);
    const large = new StackDistance(1 << 20);
    let x = 1;
    let differ = 0;
    for (let i = 0; i < 200_000; i++) {
      x = (x * 1103515245 + 12345) % 2 ** 31;
      const key = x % 5;
      if (small.access(key, 1) !== large.access(key, 1)) differ++;
    }
    expect(differ).toBe(0);
    expect(small.distinct).toBe(5);
  });

  it('in bytes track simulated LRU on variable sizes', () => {
    const trace = zipfTrace(200_000, 20_000);
    const caps = [2 ** 24, 2 ** 26, 2 ** 28];
    const { curves } = missRatioCurves(() => traceChunks(trace, 1), { policies: ['lru'], unit: 'bytes', capacities: caps });
    for (const p of curves[0]!.points) {
      const sim = runExact(trace, { policy: 'lru', unit: 'bytes', capacity: p.capacity });
      expect(Math.abs(p.missRatio - ratio(sim)), `@${p.capacity}`).toBeLessThan(0.002);
    }
  });
});

describe('SHARDS at 1%', () => {
  // 4 M requests over 2 M objects, Zipf 0.6: the scale SHARDS is meant for (a 1% sample holds ~40,000 accesses
  // of ~12,000 keys, and no handful of keys carries a large share of the accesses). Measured here: largest error
  // 0.0042, mean 0.0023 (Zipf 0.7 over 1 M objects: 0.0090 and 0.0047).
  const trace = zipfTrace(4_000_000, 2_000_000, 0.6);
  const policies = ['lru', 'fifo', 'clock', 'sieve', 's3fifo', 'arc'];
  const caps = [10_000, 50_000, 150_000, 400_000];

  it('is within 0.01 of full simulation for every policy and capacity', () => {
    const m = missRatioCurves(() => traceChunks(trace, 1), { policies, unit: 'objects', capacities: caps, sampleRate: 0.01, lruSampleRate: 0.01 });
    expect(m.curves.map((c) => c.method)).toEqual(['shards-stack-distance', ...policies.slice(1).map(() => 'shards-replay')]);
    for (const c of m.curves) {
      expect(c.points).toHaveLength(caps.length);
      for (const p of c.points) {
        const full = ratio(runExact(trace, { policy: c.policy, unit: 'objects', capacity: p.capacity }));
        expect(Math.abs(p.missRatio - full), `${c.policy} @${p.capacity}: ${p.missRatio} vs ${full}`).toBeLessThanOrEqual(0.01);
      }
    }
  }, 300_000);

  it('SHARDS-adj moves the estimate by the sample shortfall counted as hits', () => {
    const plain = missRatioCurves(() => traceChunks(trace, 1), { policies: ['lru'], unit: 'objects', capacities: [50_000], lruSampleRate: 0.01 });
    const adj = missRatioCurves(() => traceChunks(trace, 1), { policies: ['lru'], unit: 'objects', capacities: [50_000], lruSampleRate: 0.01, adjust: true });
    const sampled = plain.curves[0]!.sampledRequests;
    const expected = trace.length * 0.01;
    const plainMisses = plain.curves[0]!.points[0]!.missRatio * sampled;
    expect(adj.curves[0]!.points[0]!.missRatio).toBeCloseTo(plainMisses / expected, 9);
  });

  it('draws a default grid up to the footprint in two passes when no capacities are given', () => {
    let opened = 0;
    const m = missRatioCurves(() => (opened++, traceChunks(trace, 1)), { policies: ['lru', 'fifo'], unit: 'objects', points: 8 });
    expect(opened).toBe(2);
    expect(m.footprint).toBe(trace.distinct);
    const lru = m.curves[0]!.points;
    expect(lru.at(-1)!.capacity).toBe(trace.distinct);
    for (let i = 1; i < lru.length; i++) expect(lru[i]!.missRatio).toBeLessThanOrEqual(lru[i - 1]!.missRatio);
    expect(lru.at(-1)!.missRatio).toBeCloseTo(trace.distinct / trace.length, 12);
    expect(m.curves[1]!.points.map((p) => p.capacity)).toEqual(lru.map((p) => p.capacity));
  }, 60_000);

  it('names a policy that refuses a scaled capacity instead of failing the curve', () => {
    const m = missRatioCurves(() => traceChunks(trace, 1), { policies: ['s3fifo'], unit: 'objects', capacities: [100, 50_000], sampleRate: 0.01 });
    expect(m.curves[0]!.points.map((p) => p.capacity)).toEqual([50_000]);
    expect(m.curves[0]!.skipped?.[0]).toMatchObject({ capacity: 100 });
    expect(() => missRatioCurves(() => traceChunks(trace, 1), { policies: ['nope'], unit: 'objects' })).toThrow(/unknown policy 'nope'/);
    expect(() => missRatioCurves(() => traceChunks(trace, 1), { policies: ['lru'], unit: 'objects', sampleRate: 0 })).toThrow(/sampling rate must be in \(0, 1\]/);
  });
});
