import { afterEach, describe, expect, it } from 'vitest';
import { type HostArena, crc32c } from '@tiersync/native';
import { TierSync } from './tier-sync.js';
import { PAGE, context, hierarchyFixture, key, layout } from './test-fixtures.js';

// 2 layers x 2 KV heads x 64 dims, bf16, 16 tokens per page = 16 KiB pages.
const fx = hierarchyFixture({
  model: 'policies-test@1',
  dirPrefix: 'tiersync-policies-',
  config: { promoteOnHit: false },
  watermarks: { high: 1, low: 1 },
  fsPages: 128,
});
const { hierarchy, arena } = fx;
afterEach(fx.cleanup);

function source(a: HostArena, first: number, count: number, seed: number) {
  const view = a.view(first * PAGE, count * PAGE);
  for (let b = 0; b < view.length; b += 97) view[b] = (seed + b) & 0xff;
  return Array.from({ length: count }, (_, i) => ({ arena: a, offset: (first + i) * PAGE, length: PAGE }));
}

async function loadAll(ts: TierSync, tokens: Uint32Array, dst: HostArena) {
  const hit = ts.lookup(tokens);
  return ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
}

describe('write modes', () => {
  it('write-back copies a page down only when it is evicted; write-through at once', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 }, [{}, { writeMode: 'write-back' }, { writeMode: 'write-through' }]);
    const src = arena(8);
    const a = context(1, 4);
    await ts.store(a, source(src, 0, 4, 1));
    await ts.flush();
    expect(ts.lookup(a).pages.map((p) => p.tiers)).toEqual(Array(4).fill(['hbm', 'fs']));
    const b = context(2, 4);
    await ts.store(b, source(src, 4, 4, 2));
    await ts.flush();
    // a was evicted from hbm. Its write-through copy on fs is a copy lower down, so nothing was demoted to host.
    expect(ts.lookup(a).pages.map((p) => p.tiers)).toEqual(Array(4).fill(['fs']));
    expect(ts.lookup(b).pages.map((p) => p.tiers)).toEqual(Array(4).fill(['hbm', 'fs']));
  });

  it('write-back demotes an evicted page that has no lower copy', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 }, [{}, { writeMode: 'write-back' }, {}]);
    const src = arena(8);
    const a = context(3, 4);
    await ts.store(a, source(src, 0, 4, 3));
    expect(ts.lookup(a).pages.map((p) => p.tiers)).toEqual(Array(4).fill(['hbm']));
    await ts.store(context(4, 4), source(src, 4, 4, 4));
    expect(ts.lookup(a).pages.map((p) => p.tiers)).toEqual(Array(4).fill(['host']));
  });

  it('selective copies a page down once loads hit it minHits times, and drops a cold page on eviction', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 }, [{}, { writeMode: { kind: 'selective', minHits: 2 } }, {}]);
    const src = arena(8);
    const dst = arena(8);
    const hot = context(5, 2);
    const cold = context(6, 2);
    await ts.store(hot, source(src, 0, 2, 5));
    await ts.store(cold, source(src, 2, 2, 6));
    await loadAll(ts, hot, dst);
    await ts.flush();
    expect(ts.lookup(hot).pages.map((p) => p.tiers)).toEqual([['hbm'], ['hbm']]);
    await loadAll(ts, hot, dst);
    await ts.flush();
    expect(ts.lookup(hot).pages.map((p) => p.tiers)).toEqual([['hbm', 'host'], ['hbm', 'host']]);
    // Pressure evicts both from hbm: the hot pages live on on host, the cold ones (never hit) are dropped.
    await ts.store(context(7, 4), source(src, 4, 4, 7));
    expect(ts.lookup(hot).pages.map((p) => p.tiers)).toEqual([['host'], ['host']]);
    expect(ts.lookup(cold).pages).toEqual([]);
    const r = await loadAll(ts, hot, dst);
    expect(r.loaded).toBe(2);
    expect(crc32c(dst.view(0, 2 * PAGE))).toBe(crc32c(src.view(0, 2 * PAGE)));
  });

  it("selective with coldOnEvict 'demote' keeps cold pages by demoting them", async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 }, [{}, { writeMode: { kind: 'selective', minHits: 5, coldOnEvict: 'demote' } }, {}]);
    const src = arena(8);
    const cold = context(8, 4);
    await ts.store(cold, source(src, 0, 4, 8));
    await ts.store(context(9, 4), source(src, 4, 4, 9));
    expect(ts.lookup(cold).pages.map((p) => p.tiers)).toEqual(Array(4).fill(['host']));
  });

  it('names a contradictory or malformed write mode', () => {
    const bad = (t: object) => {
      try {
        new TierSync({ model: 'm', layout, tiers: [{ url: 'hbm://sim?capacity=1MiB' }, { url: 'host://?capacity=1MiB', ...t }] } as never);
      } catch (e) {
        return (e as Error).message;
      }
      return 'accepted';
    };
    expect(bad({ writeThrough: true, writeMode: 'write-back' })).toMatch(/tiers.1.writeMode: writeThrough: true contradicts writeMode/);
    expect(bad({ writeMode: { kind: 'selective' } })).toMatch(/tiers.1.writeMode/);
    expect(bad({ writeMode: 'sometimes' })).toMatch(/tiers.1.writeMode/);
    expect(bad({ writeMode: { kind: 'selective', minHits: 2, coldOnEvict: 'demote' } })).toBe('accepted');
  });
});

describe('priorities', () => {
  it('evicts lower-priority pages first, whatever their recency', async () => {
    for (const priorities of [false, true]) {
      const ts = await hierarchy({ hbm: 4, host: 16 }, undefined, { priorities });
      const src = arena(12);
      const vip = context(10, 2);
      await ts.store(vip, source(src, 0, 2, 10), priorities ? { priority: 5 } : {});
      await ts.store(context(11, 2), source(src, 2, 2, 11));
      await ts.store(context(12, 2), source(src, 4, 2, 12));
      const tiers = ts.lookup(vip).pages.map((p) => p.tier);
      // LRU alone evicts the oldest pages (vip); with priorities vip stays and the newer low-priority pages go.
      expect(tiers).toEqual(priorities ? ['hbm', 'hbm'] : ['host', 'host']);
    }
  });

  it('refuses a priority without config.priorities, and a non-integer one', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 });
    const src = arena(2);
    expect(() => ts.store(context(13, 1), source(src, 0, 1, 13), { priority: 2 })).toThrow(/needs config.priorities: true/);
    const tp = await hierarchy({ hbm: 4, host: 16 }, undefined, { priorities: true });
    expect(() => tp.store(context(13, 1), source(src, 0, 1, 13), { priority: 1.5 })).toThrow(/priority must be a safe integer/);
  });
});

describe('per-tenant quotas', () => {
  // hbm holds 8 pages; tenant x may use 6 of them, tenant y 2.
  const quotas = (overQuota: 'evict-own' | 'refuse') => ({ tenantQuotas: { shares: { x: 0.75, y: 0.25 }, overQuota } });

  it("evict-own: a tenant over its share evicts its own pages, not another tenant's older ones", async () => {
    const ts = await hierarchy({ hbm: 8, host: 16 }, undefined, quotas('evict-own'));
    const src = arena(8);
    const xs = [1, 2, 3, 4].map((n) => key(100 + n));
    const ys = [1, 2, 3, 4].map((n) => key(200 + n));
    await ts.storeKeys(xs, source(src, 0, 4, 1), { tenant: 'x' });
    await ts.storeKeys(ys.slice(0, 2), source(src, 4, 2, 2), { tenant: 'y' });
    const r = await ts.storeKeys(ys.slice(2), source(src, 6, 2, 3), { tenant: 'y' });
    expect(r.stored).toBe(2);
    expect(ts.lookupKeys(xs).pages.map((p) => p.tier)).toEqual(['hbm', 'hbm', 'hbm', 'hbm']);
    expect(ts.lookupKeys(ys).pages.map((p) => p.tier)).toEqual(['host', 'host', 'hbm', 'hbm']);
    expect(ts.stats().tiers[0]!.usedPages).toBe(6);
  });

  it('refuse: a store that would take a tenant over its share is dropped, counted, and not visible', async () => {
    const ts = await hierarchy({ hbm: 8, host: 16 }, undefined, quotas('refuse'));
    const src = arena(8);
    const ys = [1, 2, 3].map((n) => key(300 + n));
    expect(await ts.storeKeys(ys.slice(0, 2), source(src, 0, 2, 4), { tenant: 'y' })).toMatchObject({ stored: 2, dropped: 0 });
    expect(await ts.storeKeys(ys.slice(2), source(src, 2, 1, 5), { tenant: 'y' })).toMatchObject({ stored: 0, dropped: 1 });
    expect(ts.lookupKeys(ys).present).toEqual([true, true, false]);
    expect(await ts.tierDriver('hbm').has([ys[2]!])).toEqual([false]);
    // Another tenant is not affected.
    expect(await ts.storeKeys([key(400)], source(src, 3, 1, 6), { tenant: 'x' })).toMatchObject({ stored: 1 });
  });
});
