import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
import type { HostTier } from '@tiersync/tiers';
import { TierSync } from '../hierarchy/index.js';
import { PageRecorder, RECORD_BATCH_PAGES, type UnrecordedPage } from './page-recorder.js';

function pages(n: number, from = 0): UnrecordedPage[] {
  return Array.from({ length: n }, (_, i) => ({ key: (from + i).toString(16).padStart(64, '0'), length: 4096, crc32c: i }));
}

describe('PageRecorder', () => {
  it('records a large commit in index transactions of at most RECORD_BATCH_PAGES, and other work runs between them', async () => {
    const batches: number[] = [];
    const events: string[] = [];
    const ts = {
      adoptPages: async (_tier: string, batch: readonly UnrecordedPage[]) => {
        batches.push(batch.length);
        events.push(`batch ${batch.length}`);
      },
    } as unknown as TierSync;
    const recorder = new PageRecorder({ ts, tierName: 'host' });
    const all = pages(2 * RECORD_BATCH_PAGES + 100);
    recorder.add(all);
    // A request arriving after the first batch started (a pin of the pages just stored) runs before the last one.
    setImmediate(() => events.push('request'));
    await recorder.recorded();
    expect(batches).toEqual([RECORD_BATCH_PAGES, RECORD_BATCH_PAGES, 100]);
    expect(events.indexOf('request')).toBeLessThan(events.length - 1);
    expect(recorder.size).toBe(0);
  });

  it('drops early (without the index) only pages that are not in the batch being recorded', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const ts = { adoptPages: async () => gate } as unknown as TierSync;
    const recorder = new PageRecorder({ ts, tierName: 'host' });
    const all = pages(RECORD_BATCH_PAGES + 10);
    recorder.add(all);
    await new Promise((r) => setImmediate(r)); // the first batch is being recorded now
    const freed: string[] = [];
    const tier = { deleteNow: (keys: string[]) => (freed.push(...keys), { deleted: keys, pinned: [] }) };
    const first = all[0]!.key;
    const last = all[all.length - 1]!.key;
    const r = recorder.dropEarly(tier as never, [first, last]);
    expect(r.deleted).toEqual([last]);
    expect(r.rest).toEqual([first]);
    release();
    await recorder.recorded();
    expect(recorder.has(last)).toBe(false);
  });

  it('records a batch the index failed to record (its disk full) again after a pause, without holding up waiters', async () => {
    let failures = 2;
    const recorded: string[] = [];
    const ts = {
      adoptPages: async (_tier: string, batch: readonly UnrecordedPage[]) => {
        if (failures-- > 0) throw Object.assign(new Error('index: the filesystem holding the index is full'), { code: 'ERR_IO' });
        recorded.push(...batch.map((p) => p.key));
      },
    } as unknown as TierSync;
    const failed: number[] = [];
    const recorder = new PageRecorder({ ts, tierName: 'host', onFailed: (batch) => failed.push(batch.length) });
    const all = pages(3);
    recorder.add(all);
    // A caller waiting for the recorder is not held up by a batch waiting for its retry.
    await recorder.recorded();
    expect(failed).toEqual([3]);
    expect(recorder.has(all[0]!.key)).toBe(true);
    const until = Date.now() + 10_000;
    while (recorder.size && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    expect(failed).toEqual([3, 3]);
    expect(recorded.sort()).toEqual(all.map((p) => p.key).sort());
    expect(recorder.size).toBe(0);
    recorder.close();
  });

  it('reserves room although the first victims the planner picks are pages leases pinned in the tier', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-recorder-'));
    const PAGE = 8192;
    const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
    const ts = new TierSync({ model: 'recorder@1', layout, tiers: [{ url: `host://?capacity=${64 * PAGE}`, name: 'host', highWatermark: 1, lowWatermark: 0.75 }, { url: `fs://${dir}/fs?capacity=${256 * PAGE}`, name: 'fs', writeThrough: true }] });
    await ts.open();
    const src = HostArena.create({ capacity: 60 * PAGE });
    try {
      const stored = pages(60).map((p) => p.key);
      await ts.storeKeys(stored, stored.map((_, i) => ({ arena: src, offset: i * PAGE, length: PAGE })));
      await ts.flush();
      const host = ts.tierDriver('host') as HostTier;
      // Leases pin the oldest pages in the tier only (the planner does not know): its least recently used, its victims.
      const leased = stored.slice(0, 16);
      expect(host.pinRemote(leased).every(Boolean)).toBe(true);
      const recorder = new PageRecorder({ ts, tierName: 'host' });
      const fresh = pages(16, 1000).map((p) => p.key);
      // 60 + 16 do not fit the 64 slots: room must be made, and the pinned victims cannot go.
      const got = await recorder.reserve(host, fresh);
      expect(got).toBeDefined();
      expect(Array.from(got!.offsets).every((o) => o >= 0)).toBe(true);
      host.commitRemote(fresh, got!.offsets, new Uint32Array(16), new Uint32Array(16), () => false);
      host.unpin(leased);
    } finally {
      src.close();
      await ts.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
