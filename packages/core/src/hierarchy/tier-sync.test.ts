import { rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { HostArena, TierSyncError, crc32c } from '@tiersync/native';
import { TierSync } from './tier-sync.js';
import type { TierSyncConfig } from './config.js';
import { PAGE, context, hierarchyFixture, layout } from './test-fixtures.js';

// A small layout: 2 layers x 2 KV heads x 64 dims, bf16, 16 tokens per page = 16 KiB pages.
const fx = hierarchyFixture({ model: 'test-model@1', dirPrefix: 'tiersync-hier-', watermarks: { high: 1, low: 0.75 }, fsPages: 256 });
afterEach(fx.cleanup);

function hierarchy(pages: { hbm: number; host: number }, extra: Partial<TierSyncConfig> = {}) {
  return fx.hierarchy(pages, [{}, {}, { writeThrough: false }], extra);
}

/** Fills `n` source pages with bytes derived from the context's key, so any mix-up shows. */
function sourcePages(ts: TierSync, arena: HostArena, tokens: Uint32Array, first = 0) {
  const keys = ts.keysOf(tokens);
  return keys.map((k, i) => {
    const view = arena.view((first + i) * PAGE, PAGE);
    for (let b = 0; b < PAGE; b += 64) view[b] = k.charCodeAt(b % k.length) ^ (b & 0xff);
    return { arena, offset: (first + i) * PAGE, length: PAGE };
  });
}

describe('TierSync', () => {
  it('stores, looks up the longest prefix and loads byte-exact', async () => {
    const ts = await hierarchy({ hbm: 16, host: 32 });
    const src = HostArena.create({ capacity: 64 * PAGE });
    const dst = HostArena.create({ capacity: 64 * PAGE });
    const tokens = context(1, 8);
    const stored = await ts.store(tokens, sourcePages(ts, src, tokens));
    expect(stored).toMatchObject({ stored: 8, existing: 0, dropped: 0 });
    // A longer context sharing the first 8 pages finds exactly those.
    const longer = Uint32Array.from([...tokens, ...context(2, 4)]);
    const hit = ts.lookup(longer);
    expect(hit.pages.length).toBe(8);
    expect(hit.tokens).toBe(128);
    expect(hit.pages.every((p) => p.tier === 'hbm')).toBe(true);
    const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
    expect(r).toMatchObject({ loaded: 8, missing: [], byTier: { hbm: 8 } });
    expect(crc32c(dst.view(0, 8 * PAGE))).toBe(crc32c(src.view(0, 8 * PAGE)));
    // Storing the longer context writes only its 4 new pages.
    const again = await ts.store(longer, sourcePages(ts, src, longer));
    expect(again).toMatchObject({ stored: 4, existing: 8 });
  });

  it('demotes under pressure and loads demoted pages from the lower tier, then promotes them', async () => {
    const ts = await hierarchy({ hbm: 8, host: 64 });
    const events: string[] = [];
    ts.on('block:demoted', (e) => events.push(`demoted ${e.keys.length} ${e.from}->${e.to}`));
    ts.on('block:promoted', (e) => events.push(`promoted ${e.keys.length}`));
    const src = HostArena.create({ capacity: 64 * PAGE });
    const dst = HostArena.create({ capacity: 64 * PAGE });
    const a = context(3, 6);
    const b = context(4, 6);
    await ts.store(a, sourcePages(ts, src, a, 0));
    await ts.store(b, sourcePages(ts, src, b, 6));
    expect(events.some((e) => e.startsWith('demoted') && e.endsWith('hbm->host'))).toBe(true);
    const hit = ts.lookup(a);
    expect(hit.pages.length).toBe(6);
    expect(hit.pages.some((p) => p.tier === 'host')).toBe(true);
    const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
    expect(r.loaded).toBe(6);
    expect(r.byTier.host).toBeGreaterThan(0);
    expect(crc32c(dst.view(0, 6 * PAGE))).toBe(crc32c(src.view(0, 6 * PAGE)));
    await ts.flush();
    expect(events.some((e) => e.startsWith('promoted'))).toBe(true);
    const s = ts.stats();
    expect(s.tiers[0]!.usedPages).toBeLessThanOrEqual(8);
  });

  it('reports exactly which pages went missing between lookup and load', async () => {
    const ts = await hierarchy({ hbm: 16, host: 16 });
    const src = HostArena.create({ capacity: 16 * PAGE });
    const dst = HostArena.create({ capacity: 16 * PAGE });
    const tokens = context(5, 4);
    await ts.store(tokens, sourcePages(ts, src, tokens));
    const hit = ts.lookup(tokens);
    // Page 2 disappears from its tier behind the index's back (as after a crash of a volatile tier).
    await ts.tierDriver('hbm').delete([hit.pages[2]!.key]);
    const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
    expect(r.missing).toEqual([2]);
    expect(r.loaded).toBe(3);
    expect(crc32c(dst.view(3 * PAGE, PAGE))).toBe(crc32c(src.view(3 * PAGE, PAGE)));
    // The index forgot the lost copy: the next lookup stops before it.
    expect(ts.lookup(tokens).pages.length).toBe(2);
  });

  it('refuses bad input with typed errors and stores nothing half-way', async () => {
    const ts = await hierarchy({ hbm: 16, host: 16 });
    const src = HostArena.create({ capacity: 16 * PAGE });
    const tokens = context(6, 2);
    expect(() => ts.store(tokens, [{ arena: src, offset: 0, length: PAGE }])).toThrow(/2 page\(s\) needed, 1 given/);
    expect(() => ts.store(tokens, [{ arena: src, offset: 0, length: 100 }, { arena: src, offset: PAGE, length: PAGE }])).toThrow(/page size 16384/);
    expect(() => ts.store(new Uint32Array(0), [])).toThrow(TierSyncError);
    expect(ts.lookup(tokens).pages).toEqual([]);
  });

  it('a load into a bad destination throws, naming it, instead of answering every page missing', async () => {
    const ts = await hierarchy({ hbm: 16, host: 16 });
    const src = fx.arena(4);
    const dst = fx.arena(2);
    const tokens = context(7, 2);
    await ts.store(tokens, sourcePages(ts, src, tokens));
    const hit = ts.lookup(tokens);
    const into = (second: Partial<{ arena: unknown; offset: number }>) => [{ arena: dst, offset: 0, length: PAGE }, { arena: dst, offset: PAGE, length: PAGE, ...second }] as Parameters<TierSync['load']>[1];
    const refusal = (second: Partial<{ arena: unknown; offset: number }>) => ts.load(hit, into(second)).then(() => undefined, (e: TierSyncError) => `${e.code}: ${e.message}`);
    expect(await refusal({ offset: 2 * PAGE })).toMatch(/^ERR_OUT_OF_RANGE: into\[1\]: .* exceeds the arena's/);
    expect(await refusal({ offset: -1 })).toMatch(/^ERR_INVALID_ARGUMENT: into\[1\]\.offset must be an integer >= 0/);
    expect(await refusal({ offset: Number.NaN })).toMatch(/^ERR_INVALID_ARGUMENT: into\[1\]\.offset/);
    expect(await refusal({ arena: null })).toMatch(/^ERR_INVALID_ARGUMENT: into\[1\]\.arena must be a HostArena or DeviceArena/);
    const closed = HostArena.create({ capacity: 2 * PAGE });
    closed.close();
    expect(await refusal({ arena: closed, offset: 0 })).toMatch(/^ERR_CLOSED: into\[1\]\.arena is closed/);
    expect(ts.stats().counters.pagesMissing).toBe(0);
    // A good destination still loads both.
    expect(await ts.load(hit, into({}))).toMatchObject({ loaded: 2, missing: [] });
  });

  it('opens once: a second open or one after close is refused; an open that fails part way closes the tiers it opened', async () => {
    const ts = await hierarchy({ hbm: 16, host: 16 });
    await expect(ts.open()).rejects.toMatchObject({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/called already/) });
    expect(ts.stats().tiers.map((t) => t.name)).toEqual(['hbm', 'host', 'fs']);
    await ts.close();
    await expect(ts.open()).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    // The index cannot open (its path is a folder) after the fs tier took its folder's lock.
    const dir = fx.tempDir();
    const config = (index: string) => ({ model: 'test-model@1', layout, tiers: [{ url: `host://?capacity=${16 * PAGE}` }, { url: `fs://${dir}/fs?capacity=${64 * PAGE}` }], index: { path: index } }) as TierSyncConfig;
    const failed = new TierSync(config(dir));
    await expect(failed.open()).rejects.toThrow();
    await failed.close();
    const again = await fx.opened(new TierSync(config(`${dir}/index.sqlite`)));
    expect(again.stats().tiers.map((t) => t.name)).toEqual(['host', 'fs']);
  });

  it('names the config field that is wrong', () => {
    const bad = (c: object) => {
      try {
        new TierSync({ model: 'm', layout, tiers: [{ url: 'hbm://sim?capacity=1MiB' }], ...c } as never);
      } catch (e) {
        return `${(e as TierSyncError).code}: ${(e as Error).message}`;
      }
      return 'accepted';
    };
    expect(bad({ tiers: [] })).toMatch(/ERR_CONFIG: config tiers/);
    expect(bad({ tiers: [{ url: 'hbm://sim?capacity=1MiB', highWatermark: 2 }] })).toMatch(/tiers.0.highWatermark/);
    expect(bad({ tiers: [{ url: 'hbm://sim?capacity=1MiB', policy: 'belady-online' }] })).toMatch(/unknown policy 'belady-online'/);
    expect(bad({ tiers: [{ url: 'hbm://sim?capacity=1MiB', policy: 'opt' }] })).toMatch(/tiers.0.policy: 'opt' is an offline bound/);
    expect(bad({ model: '' })).toMatch(/config model/);
    expect(bad({ colour: 'red' })).toMatch(/ERR_CONFIG/);
    expect(bad({ layout: 'llama-9000' })).toMatch(/^ERR_CONFIG: config layout: unknown preset 'llama-9000' \(presets: llama-3-8b, /);
    expect(bad({ layout: { tokensPerPage: 16 } })).toMatch(/^ERR_CONFIG: config layout: /);
  });
});

describe('TierSync admission and backpressure', () => {
  it('stores a page only after it was looked up k times', async () => {
    const ts = await hierarchy({ hbm: 16, host: 16 }, { admission: { kind: 'lookups', lookups: 2 } });
    const src = HostArena.create({ capacity: 8 * PAGE });
    const tokens = context(7, 3);
    const pages = sourcePages(ts, src, tokens);
    expect(await ts.store(tokens, pages)).toMatchObject({ stored: 0, notAdmitted: 3 });
    ts.lookup(tokens);
    expect(await ts.store(tokens, pages)).toMatchObject({ stored: 0, notAdmitted: 3 });
    ts.lookup(tokens);
    expect(await ts.store(tokens, pages)).toMatchObject({ stored: 3, notAdmitted: 0 });
    expect(ts.lookup(tokens).pages.length).toBe(3);
  });

  it('drops write-through copies beyond the queue bound instead of blocking the store', async () => {
    const dir = fx.tempDir();
    const ts = await fx.opened(
      new TierSync({
        model: 'test-model@1',
        layout,
        maxQueuedPages: 2,
        tiers: [{ url: `host://?capacity=${32 * PAGE}` }, { url: `fs://${dir}/fs?capacity=${64 * PAGE}`, writeThrough: true }],
      }),
    );
    const src = HostArena.create({ capacity: 8 * PAGE });
    const tokens = context(8, 4);
    const r = await ts.store(tokens, sourcePages(ts, src, tokens));
    expect(r.stored).toBe(4);
    expect(r.writeThroughDropped).toBe(4); // 4 pages > a queue of 2: the whole batch is dropped, counted
    const small = context(9, 2);
    expect((await ts.store(small, sourcePages(ts, src, small))).writeThroughDropped).toBe(0);
    await ts.flush();
    expect(ts.stats().tiers[1]!.pages).toBe(2);
  });
});

describe('TierSync pins', () => {
  it('holds a pinned prefix on its tier under pressure until the pin expires', async () => {
    const ts = await hierarchy({ hbm: 8, host: 64 });
    const src = HostArena.create({ capacity: 64 * PAGE });
    const kept = context(20, 4);
    await ts.store(kept, sourcePages(ts, src, kept, 0));
    expect(ts.pin(kept, { ttlMs: 400 }).length).toBe(4);
    for (let c = 0; c < 3; c++) {
      const other = context(30 + c, 6);
      await ts.store(other, sourcePages(ts, src, other, 4 + c * 6));
    }
    // Under pressure the first tier gave up other pages, never the pinned ones.
    expect(ts.lookup(kept).pages.map((p) => p.tier)).toEqual(['hbm', 'hbm', 'hbm', 'hbm']);
    await new Promise((r) => setTimeout(r, 500));
    const more = context(40, 8);
    await ts.store(more, sourcePages(ts, src, more, 30));
    expect(ts.lookup(kept).pages.some((p) => p.tier !== 'hbm')).toBe(true);
  });

  it('a durable pin survives a restart: the reopened planner holds it before any move runs', async () => {
    const dir = fx.tempDir();
    const shm = `/dev/shm/tiersync-test-pins-${process.pid}`;
    const config = {
      model: 'test-model@1',
      layout,
      tiers: [
        { url: `host://?capacity=${8 * PAGE}&shm=${shm}`, highWatermark: 1, lowWatermark: 0.75 },
        { url: `fs://${dir}/fs?capacity=${256 * PAGE}` },
      ],
      index: { path: `${dir}/index.sqlite` },
    } as TierSyncConfig;
    const src = HostArena.create({ capacity: 32 * PAGE });
    try {
      const kept = context(60, 4);
      const first = await fx.opened(new TierSync(config));
      await first.store(kept, sourcePages(first, src, kept, 0));
      expect(first.pin(kept, { ttlMs: 60_000 }).length).toBe(4);
      await first.close();
      const ts = await fx.opened(new TierSync(config));
      const keys = ts.keysOf(kept);
      expect(keys.every((k) => ts.planner.isPinned(k))).toBe(true);
      for (let c = 0; c < 3; c++) {
        const other = context(61 + c, 6);
        await ts.store(other, sourcePages(ts, src, other, 4 + c * 6));
      }
      // The host tier (8 pages) turned over its other pages; the pinned prefix stayed.
      expect(ts.lookup(kept).pages.map((p) => p.tier)).toEqual(['host', 'host', 'host', 'host']);
      expect(ts.unpin(kept)).toBe(4);
      expect(keys.some((k) => ts.planner.isPinned(k))).toBe(false);
    } finally {
      src.close();
      rmSync(shm, { force: true });
    }
  });

  it('a first tier mostly pinned still stores while unpinned victims exist (victims are chosen among unpinned pages)', async () => {
    // watermarks high 1, low 0.75: making room for 20 pages on a full 400-page tier frees 120 victims; the 300 least
    // recently used pages are pinned, so a peek at the first victims finds only pinned pages.
    const ts = await hierarchy({ hbm: 400, host: 1024 });
    const src = HostArena.create({ capacity: 420 * PAGE });
    const pinned = context(50, 300);
    await ts.store(pinned, sourcePages(ts, src, pinned, 0));
    const rest = context(51, 100);
    await ts.store(rest, sourcePages(ts, src, rest, 300));
    expect(ts.pin(pinned, { ttlMs: 60_000 }).length).toBe(300);
    const more = context(52, 20);
    const r = await ts.store(more, sourcePages(ts, src, more, 400));
    expect(r).toMatchObject({ stored: 20, dropped: 0 });
    expect(ts.lookup(pinned).pages.every((p) => p.tier === 'hbm')).toBe(true);
    expect(ts.lookup(more).pages.every((p) => p.tier === 'hbm')).toBe(true);
    // While a load holds pages, its pins live in the planner, not in SQLite rows.
    const hit = ts.lookup(more);
    const dst = HostArena.create({ capacity: 20 * PAGE });
    const loading = ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
    expect(hit.pages.every((p) => ts.planner.isPinned(p.key))).toBe(true);
    await loading;
    expect(hit.pages.some((p) => ts.planner.isPinned(p.key))).toBe(false);
    src.close();
    dst.close();
  });
});
