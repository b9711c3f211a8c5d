import { describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native';
import { ACCESS_BATCH_PAGES, ACCESS_MAX_PAGES, AccessBatch } from './access-batch.js';

/** An AccessBatch whose recorder keeps each call's keys. */
function batch(fail?: unknown) {
  const calls: string[][] = [];
  const failed: Array<{ error: unknown; pages: number }> = [];
  const b = new AccessBatch({
    record: async (keys) => {
      calls.push([...keys]);
      if (fail) throw fail;
    },
    onFailed: (error, pages) => failed.push({ error, pages }),
  });
  return { b, calls, failed };
}

describe('AccessBatch', () => {
  it('records the pages read since the last batch in one call, each once, in the order of their last read', async () => {
    const { b, calls } = batch();
    b.add(['p1', 'p2']);
    b.add(['p3', 'p1']);
    expect(b.size).toBe(3);
    await b.flush();
    expect(calls).toEqual([['p2', 'p3', 'p1']]);
    expect(b.size).toBe(0);
    await b.flush();
    expect(calls.length).toBe(1);
    b.close();
  });

  it('goes on its own after a short interval', async () => {
    const { b, calls } = batch();
    b.add(['p1']);
    const until = Date.now() + 5000;
    while (!calls.length && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    expect(calls).toEqual([['p1']]);
    b.close();
  });

  it('splits a large batch into calls of ACCESS_BATCH_PAGES, and drops reads of new pages past ACCESS_MAX_PAGES', async () => {
    const { b, calls } = batch();
    const keys = Array.from({ length: ACCESS_MAX_PAGES + 10 }, (_, i) => `k${i}`);
    b.add(keys);
    expect(b.size).toBe(ACCESS_MAX_PAGES);
    expect(b.dropped).toBe(10);
    // A page already held is still moved to the end when the set is full.
    b.add(['k0']);
    expect(b.dropped).toBe(10);
    await b.flush();
    expect(calls.length).toBe(ACCESS_MAX_PAGES / ACCESS_BATCH_PAGES);
    expect(calls.every((c) => c.length === ACCESS_BATCH_PAGES)).toBe(true);
    expect(calls.at(-1)!.at(-1)).toBe('k0');
    b.close();
  });

  it('reports a refused batch and goes on; after close() it notes nothing', async () => {
    const refusal = new TierSyncError('TierSync is closed', 'ERR_CLOSED');
    const { b, calls, failed } = batch(refusal);
    b.add(['p1', 'p2']);
    await b.flush();
    expect(failed).toEqual([{ error: refusal, pages: 2 }]);
    b.close();
    b.add(['p3']);
    expect(b.size).toBe(0);
    await b.flush();
    expect(calls.length).toBe(1);
  });
});
