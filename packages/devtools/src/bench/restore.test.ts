import { describe, expect, it } from 'vitest';
import { DeviceArena, HostArena, TransferBatch, TransferEngine } from '@tiersync/native';
import { Pattern, runRestoreBench, verifyDevice } from './restore.js';

describe('bench restore', () => {
  it('stores and restores a small context from host and from fs, byte-exact, and reports the JSON shape', async () => {
    const lines: string[] = [];
    // 64 tokens of 4 per page: 16 pages of 512 KiB (8 MiB).
    const r = await runRestoreBench({ tokens: 64, tokensPerPage: 4, repetitions: 2, dropCaches: false, layerwise: { bytes: 8 * 1024 * 1024, repetitions: 1 }, log: (l) => lines.push(l) });
    expect(r).toMatchObject({ suite: 'restore', layout: 'llama-3-8b', tokens: 64, tokensPerPage: 4, pageBytes: 512 * 1024, pages: 16, bytes: 16 * 512 * 1024, verified: true });
    for (const f of [r.fromHost, r.fromFs]) {
      for (const k of ['medianMs', 'baselineMs', 'ratio', 'pairRatio'] as const) {
        expect(typeof f[k]).toBe('number');
        expect(Number.isFinite(f[k])).toBe(true);
        expect(f[k]).toBeGreaterThan(0);
      }
      expect(f.runsMs).toHaveLength(2);
      expect(f.baselineRunsMs).toHaveLength(2);
    }
    // Layer-wise restores from every tier: 32 layer events per load, every byte checked; timings are figures only.
    expect(r.layerwise).toMatchObject({ layers: 32, pages: 16, pageBytes: 512 * 1024 });
    for (const tier of ['host', 'fs', 'peer', 'object'] as const) {
      const f = r.layerwise![tier]!;
      expect(f.verified).toBe(true);
      for (const k of ['firstLayerMs', 'totalMs', 'wholeMs', 'firstRatio', 'totalRatio', 'pairRatio'] as const) expect(f[k]).toBeGreaterThan(0);
      expect(f.firstLayerMs).toBeLessThanOrEqual(f.totalMs);
    }
    expect(r.layerwise!.host!.rangeReads && r.layerwise!.fs!.rangeReads && r.layerwise!.object!.rangeReads).toBe(true);
    // What the CLI prints with --json round-trips.
    const json = JSON.parse(JSON.stringify(r)) as Record<string, unknown>;
    expect(Object.keys(json)).toEqual(expect.arrayContaining(['suite', 'bytes', 'fromHost', 'fromFs']));
    expect(lines.some((l) => l.includes('from fs'))).toBe(true);
  });

  it('sizes the default context like Llama-3-8B: 128 KiB per token', async () => {
    // bytes -> tokens: 1 MiB = 8 tokens = 2 pages of 4 tokens.
    const r = await runRestoreBench({ bytes: 1024 * 1024, tokensPerPage: 4, repetitions: 1, dropCaches: false, layerwise: false });
    expect(r).toMatchObject({ tokens: 8, pages: 2, bytes: 1024 * 1024, verified: true });
  });

  it('catches a page that landed in the wrong slot', async () => {
    const pageBytes = 64 * 1024;
    const pattern = new Pattern(pageBytes);
    const engine = new TransferEngine({ threads: 1 });
    const host = HostArena.create({ capacity: 4 * pageBytes });
    const device = DeviceArena.create({ backend: 'sim', capacity: 4 * pageBytes });
    try {
      for (let p = 0; p < 4; p++) pattern.fill(host.view(p * pageBytes, pageBytes), p);
      const copy = async (order: number[]) => {
        const b = new TransferBatch();
        order.forEach((from, to) => b.add(host, from * pageBytes, device, to * pageBytes, pageBytes));
        await engine.submit(b);
      };
      await copy([0, 1, 2, 3]);
      expect(await verifyDevice(engine, device, 4, pattern)).toBe(true);
      await copy([0, 2, 1, 3]);
      expect(await verifyDevice(engine, device, 4, pattern)).toBe(false);
    } finally {
      host.close();
      device.close();
      await engine.close();
    }
  });
});
