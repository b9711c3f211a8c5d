import { describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native/errors';
import { runExact } from './exact.js';
import { ACCELERATORS, MODELS, STORAGE, kvBytesPerToken } from './model/presets.js';
import { combine, computeSpec, defaultHbmKvBytes, loadSeconds, prefillFlops } from './model/ttft.js';
import { runTiered, type TierConfig } from './tiered.js';
import { generateMultiRoundQa } from './trace/multi-round-qa.js';

describe('model presets', () => {
  it('KV bytes per token follow the published configs', () => {
    expect(kvBytesPerToken(MODELS['llama-3-8b']!)).toBe(2 * 32 * 8 * 128 * 2); // 128 KiB
    expect(kvBytesPerToken(MODELS['llama-3-70b']!)).toBe(2 * 80 * 8 * 128 * 2); // 320 KiB
    expect(kvBytesPerToken(MODELS['qwen3-235b-a22b']!)).toBe(2 * 94 * 4 * 128 * 2);
    expect(kvBytesPerToken(MODELS['qwen3-coder-480b-a35b']!)).toBe(2 * 62 * 8 * 128 * 2);
    expect(kvBytesPerToken(MODELS['deepseek-v3']!)).toBe(61 * (512 + 64) * 2); // MLA latent + RoPE key
  });

  it('every preset names its source', () => {
    for (const table of [ACCELERATORS, STORAGE, MODELS]) for (const p of Object.values(table)) expect(p.source.length).toBeGreaterThan(10);
  });
});

describe('TTFT model', () => {
  const c = computeSpec(MODELS['llama-3-8b']!, ACCELERATORS.h100!, { chips: 1, mfu: 0.5 });

  it('prefill FLOPs: 2 x params per token plus causal attention', () => {
    const m = MODELS['llama-3-8b']!;
    expect(prefillFlops(m, 1, 0)).toBeCloseTo(2 * 8.03e9 + 4 * 32 * 32 * 128 * 1, -3);
    expect(prefillFlops(m, 10, 100) - prefillFlops(m, 10, 0)).toBeCloseTo(4 * 32 * 32 * 128 * 10 * 100, -3);
  });

  it('layer-wise overlap: L-stage pipeline of compute and load', () => {
    const L = 32;
    expect(combine(c, 1, 2)).toBeCloseTo(2 / L + ((L - 1) * 2) / L + 1 / L);
    expect(combine({ ...c, layerwise: false }, 1, 2)).toBe(3);
    expect(combine(c, 1, 0)).toBe(1);
  });

  it('loads at the lesser of tier and host-link bandwidth, plus a latency per wave', () => {
    const link = 63e9 * 0.8;
    const host = STORAGE.host!;
    expect(loadSeconds(c, host, 64, 64e9)).toBeCloseTo(64e9 / link + host.latencySec, 9);
    const nvme = STORAGE['local-nvme']!;
    expect(loadSeconds(c, nvme, 33, 6.9e9)).toBeCloseTo(1 + 2 * nvme.latencySec, 9);
  });

  it('default chips hold the weights; the HBM KV pool is what is left', () => {
    const q = computeSpec(MODELS['qwen3-235b-a22b']!, ACCELERATORS['tpu-v7x']!);
    expect(q.chips).toBe(3); // 470 GB x 1.2 over 192 GiB chips
    expect(defaultHbmKvBytes(q)).toBeCloseTo(3 * 192 * 2 ** 30 * 0.9 - 470e9, -3);
    expect(() => defaultHbmKvBytes(computeSpec(MODELS['qwen3-235b-a22b']!, ACCELERATORS.h100!, { chips: 1 }))).toThrow(TierSyncError);
  });
});

describe('tiered replay', () => {
  const qa = generateMultiRoundQa({ users: 8, rounds: 4, systemPromptTokens: 2048, historyTokens: 8192, questionTokens: 256, answerTokens: 256 });
  const hbm = (bytes: number): TierConfig => ({ name: 'hbm', capacityBytes: bytes, readBytesPerSec: 0, writeBytesPerSec: 0, latencySec: 0, parallelism: 1 });
  const host = (bytes: number): TierConfig => ({ name: 'host', ...STORAGE.host!, capacityBytes: bytes });
  const page = 512 * kvBytesPerToken(MODELS['llama-3-8b']!);
  const job = { policy: 'lru', model: 'llama-3-8b', accelerator: 'h100', compute: { chips: 1 } };

  it('an unbounded HBM finds exactly the prefix pages exact mode finds', () => {
    const r = runTiered(qa, { ...job, tiers: [hbm(2 ** 50)], costAware: false });
    const e = runExact(qa, { policy: 'lru', unit: 'objects', capacity: Infinity });
    expect(r.pageHitRatio).toBeCloseTo(e.prefixPageHitRatio!, 12);
    expect(r.tiers[0]!.readBytes).toBe(0);
    expect(r.ttft.mean).toBeLessThan(r.noCacheTtft.mean);
  });

  it('a small HBM over a large host: hits come from the host and are counted as bytes read', () => {
    const r = runTiered(qa, { ...job, tiers: [hbm(30 * page), host(2 ** 40)], costAware: false });
    const [h, x] = r.tiers;
    expect(x!.hitPages).toBeGreaterThan(0);
    expect(x!.readBytes).toBe(x!.hitPages * page);
    expect(h!.peakUsedBytes).toBeLessThanOrEqual(30 * page);
    // same total found pages as with an unbounded HBM: the host holds everything HBM drops
    const big = runTiered(qa, { ...job, tiers: [hbm(2 ** 50)], costAware: false });
    expect(r.pageHitRatio).toBeCloseTo(big.pageHitRatio, 12);
    expect(r.ttft.p50).toBeGreaterThanOrEqual(big.ttft.p50);
    expect(r.occupancy.timeMs.length).toBeGreaterThan(1);
    expect(r.occupancy.usedBytes).toHaveLength(2);
  });

  it('cost-aware restore never does worse than loading everything', () => {
    const slow: TierConfig = { name: 'gcs', ...STORAGE.gcs!, capacityBytes: 2 ** 45 };
    const all = runTiered(qa, { ...job, tiers: [hbm(10 * page), slow], costAware: false });
    const aware = runTiered(qa, { ...job, tiers: [hbm(10 * page), slow], costAware: true });
    expect(aware.ttft.mean).toBeLessThanOrEqual(all.ttft.mean + 1e-12);
  });

  it('is deterministic', () => {
    const a = runTiered(qa, { ...job, policy: 's3fifo', tiers: [hbm(40 * page), host(60 * page)] });
    const b = runTiered(qa, { ...job, policy: 's3fifo', tiers: [hbm(40 * page), host(60 * page)] });
    expect(a).toEqual(b);
  });
});
