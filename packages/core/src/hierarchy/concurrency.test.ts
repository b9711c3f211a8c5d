import { afterEach, describe, expect, it } from 'vitest';
import { type HostArena, crc32c } from '@tiersync/native';
import type { TierSync } from './tier-sync.js';
import { PAGE, hierarchyFixture } from './test-fixtures.js';

const fx = hierarchyFixture({ model: 'concurrency-test@1', dirPrefix: 'tiersync-concurrent-', watermarks: { high: 0.9, low: 0.6 }, fsPages: 512 });
const { hierarchy, arena } = fx;
afterEach(fx.cleanup);

/** Context c: a prefix shared by every context (4 pages), one shared by pairs (2 pages), then its own 3 pages. */
function context(c: number): Uint32Array {
  const t = new Uint32Array(9 * 16);
  for (let i = 0; i < t.length; i++) {
    const page = Math.floor(i / 16);
    const owner = page < 4 ? 0 : page < 6 ? 1000 + (c >> 1) : 2000 + c;
    t[i] = (owner * 7919 + i * 13) % 60_000;
  }
  return t;
}

/** The bytes of a page are a function of its key, so whichever store writes a shared page, the bytes agree. */
function pagesFor(ts: TierSync, tokens: Uint32Array, a: HostArena, slot: number) {
  return ts.keysOf(tokens).map((k, i) => {
    const view = a.view((slot + i) * PAGE, PAGE);
    for (let b = 0; b < PAGE; b++) view[b] = k.charCodeAt(b % 64) ^ (b * 31) ^ (b >> 8);
    return { arena: a, offset: (slot + i) * PAGE, length: PAGE };
  });
}

describe('concurrent stores', () => {
  it('overlap their driver writes and stay consistent when their prefixes overlap', async () => {
    const ts = await hierarchy({ hbm: 24, host: 48 });
    const contexts = Array.from({ length: 12 }, (_, c) => context(c));
    const src = arena(12 * 9);
    const dst = arena(9);
    const ref = arena(9);
    // Count driver writes in flight on the first tier at once.
    const hbm = ts.tierDriver('hbm');
    const write = hbm.write.bind(hbm);
    let inFlight = 0;
    let most = 0;
    hbm.write = async (pages, o) => {
      inFlight++;
      most = Math.max(most, inFlight);
      try {
        return await write(pages, o);
      } finally {
        inFlight--;
      }
    };
    const results = await Promise.all(contexts.map((t, c) => ts.store(t, pagesFor(ts, t, src, c * 9))));
    await ts.flush();
    expect(most).toBeGreaterThan(1);
    // Every distinct page was written exactly once, whichever store got to it first.
    const distinct = new Set(contexts.flatMap((t) => ts.keysOf(t)));
    expect(results.reduce((n, r) => n + r.stored, 0)).toBe(distinct.size);
    expect(results.reduce((n, r) => n + r.dropped, 0)).toBe(0);
    for (const r of results) expect(r.stored + r.existing).toBe(9);
    // Every context is found whole and loads byte-exact.
    for (const t of contexts) {
      const hit = ts.lookup(t);
      expect(hit.pages.length).toBe(9);
      const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
      expect(r.missing).toEqual([]);
      pagesFor(ts, t, ref, 0);
      expect(crc32c(dst.view(0, 9 * PAGE))).toBe(crc32c(ref.view(0, 9 * PAGE)));
    }
    // The index, the drivers and the policies agree on what each tier holds.
    await ts.flush();
    const s = ts.stats();
    for (const tier of s.tiers) {
      expect(s.index.tiers[tier.name]!.ready).toBe(tier.pages);
      expect(tier.usedPages).toBe(tier.pages);
      expect(s.index.tiers[tier.name]!.pending).toBe(0);
    }
    expect(s.tiers[0]!.usedPages).toBeLessThanOrEqual(24);
  });

  it('a delete while a store is writing leaves neither index entry nor bytes behind', async () => {
    const ts = await hierarchy({ hbm: 24, host: 48 });
    const src = arena(9);
    const t = context(0);
    const keys = ts.keysOf(t);
    const hbm = ts.tierDriver('hbm');
    const write = hbm.write.bind(hbm);
    let deleting: Promise<unknown> | undefined;
    hbm.write = (pages, o) => {
      // The delete is queued while the write is in flight.
      deleting = ts.deleteKeys(keys.slice(0, 3));
      return write(pages, o);
    };
    const r = await ts.store(t, pagesFor(ts, t, src, 0));
    await deleting;
    await ts.flush();
    expect(r.stored).toBe(6);
    expect(ts.lookupKeys(keys).present).toEqual([false, false, false, true, true, true, true, true, true]);
    expect(await hbm.has(keys.slice(0, 3))).toEqual([false, false, false]);
    const s = ts.stats();
    expect(s.index.tiers.hbm!.ready).toBe(s.tiers[0]!.pages);
    expect(s.tiers[0]!.usedPages).toBe(6);
  });
});
