import { describe, expect, it } from 'vitest';
import type { TierSync } from '../hierarchy/index.js';
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
});
