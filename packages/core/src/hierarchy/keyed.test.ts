import { afterEach, describe, expect, it } from 'vitest';
import { type HostArena, TierSyncError, crc32c } from '@tiersync/native';
import { PAGE, hierarchyFixture, key } from './test-fixtures.js';

// 2 layers x 2 KV heads x 64 dims, bf16, 16 tokens per page = 16 KiB pages.
const fx = hierarchyFixture({ model: 'keyed-test@1', dirPrefix: 'tiersync-keyed-', watermarks: { high: 1, low: 0.5 }, fsPages: 256 });
const { hierarchy, arena } = fx;
afterEach(fx.cleanup);

/** Writes `length` bytes derived from `seed` at page slot `slot` of `a`. */
function fill(a: HostArena, slot: number, length: number, seed: number) {
  const view = a.view(slot * PAGE, length);
  for (let b = 0; b < length; b++) view[b] = (seed * 31 + b * 7) & 0xff;
  return { arena: a, offset: slot * PAGE, length };
}

describe('TierSync key-based API', () => {
  it('stores values of any length up to a page, finds exactly the keys present, loads them byte-exact', async () => {
    const ts = await hierarchy({ hbm: 16, host: 16 });
    const src = arena(8);
    const dst = arena(8);
    const lengths = [1, 100, 4097, PAGE];
    const keys = lengths.map((_, i) => key(i + 1));
    const r = await ts.storeKeys(keys, lengths.map((len, i) => fill(src, i, len, i + 1)));
    expect(r).toMatchObject({ stored: 4, existing: 0, dropped: 0 });
    // Present keys in input order, absent ones flagged; not a prefix: a miss in the middle does not stop the answer.
    const asked = [keys[0]!, key(99), keys[2]!, keys[1]!, keys[3]!];
    const hit = ts.lookupKeys(asked);
    expect(hit.present).toEqual([true, false, true, true, true]);
    expect(hit.indices).toEqual([0, 2, 3, 4]);
    expect(hit.pages.map((p) => p.length)).toEqual([1, 4097, 100, PAGE]);
    expect(hit.pages.every((p) => p.tier === 'hbm')).toBe(true);
    // Destinations sized to each value's own length.
    const into = hit.pages.map((p, j) => ({ arena: dst, offset: j * PAGE, length: p.length }));
    const loaded = await ts.load(hit, into);
    expect(loaded).toMatchObject({ loaded: 4, missing: [], bytes: 1 + 4097 + 100 + PAGE });
    const srcSlot = [0, 2, 1, 3];
    hit.pages.forEach((p, j) => expect(crc32c(dst.view(j * PAGE, p.length))).toBe(crc32c(src.view(srcSlot[j]! * PAGE, p.length))));
    // Storing again is a no-op.
    expect(await ts.storeKeys([keys[1]!], [fill(src, 1, 100, 2)])).toMatchObject({ stored: 0, existing: 1 });
  });

  it('keeps short values exact through demotion to host and fs and back', async () => {
    const ts = await hierarchy({ hbm: 4, host: 4 });
    const src = arena(16);
    const dst = arena(16);
    const keys = Array.from({ length: 12 }, (_, i) => key(100 + i));
    const lengths = keys.map((_, i) => 1 + ((i * 4099) % PAGE));
    for (let i = 0; i < keys.length; i += 3) {
      await ts.storeKeys(keys.slice(i, i + 3), lengths.slice(i, i + 3).map((len, j) => fill(src, i + j, len, 100 + i + j)));
    }
    const hit = ts.lookupKeys(keys);
    expect(hit.present.every(Boolean)).toBe(true);
    expect(new Set(hit.pages.map((p) => p.tier)).size).toBeGreaterThan(1);
    const r = await ts.load(hit, hit.pages.map((p, j) => ({ arena: dst, offset: j * PAGE, length: p.length })));
    expect(r.missing).toEqual([]);
    keys.forEach((_, j) => expect(crc32c(dst.view(j * PAGE, lengths[j]!))).toBe(crc32c(src.view(j * PAGE, lengths[j]!))));
  });

  it('store(tokens) and the key API share one index: token pages are found by their keys', async () => {
    const ts = await hierarchy({ hbm: 16, host: 16 });
    const src = arena(4);
    const tokens = Uint32Array.from({ length: 48 }, (_, i) => i * 13);
    await ts.store(tokens, [0, 1, 2].map((i) => fill(src, i, PAGE, i)));
    const keys = ts.keysOf(tokens);
    expect(ts.lookupKeys([keys[2]!, keys[0]!]).present).toEqual([true, true]);
    expect((await ts.deleteKeys([keys[1]!])).deleted).toEqual([keys[1]!]);
    // The prefix now stops before the deleted page; the page after it is still there by key.
    expect(ts.lookup(tokens).pages.length).toBe(1);
    expect(ts.lookupKeys(keys).present).toEqual([true, false, true]);
  });

  it('deletes from every tier and the index; pinned pages are kept and reported', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 });
    const src = arena(8);
    const keys = Array.from({ length: 8 }, (_, i) => key(200 + i));
    await ts.storeKeys(keys.slice(0, 4), [0, 1, 2, 3].map((i) => fill(src, i, 500 + i, i)));
    await ts.storeKeys(keys.slice(4), [4, 5, 6, 7].map((i) => fill(src, i, 500 + i, i)));
    const before = ts.lookupKeys(keys);
    expect(before.pages.some((p) => p.tier === 'host')).toBe(true);
    expect(ts.pinKeys([keys[0]!, key(998)], { ttlMs: 60_000 })).toEqual([keys[0]!]);
    const r = await ts.deleteKeys([...keys, key(999)]);
    expect(r.missing).toEqual([key(999)]);
    expect(r.deleted.sort()).toEqual(keys.slice(1).sort());
    expect(r.pinned).toEqual([keys[0]!]);
    expect(ts.unpinKeys([keys[0]!])).toBe(1);
    expect(ts.lookupKeys(keys).present).toEqual([true, false, false, false, false, false, false, false]);
    for (const name of ['hbm', 'host', 'fs']) expect(await ts.tierDriver(name).has(keys.slice(1))).toEqual(keys.slice(1).map(() => false));
    // A page a driver holds pinned (as during a read) is kept on that tier and reported.
    const holder = ts.lookupKeys([keys[0]!]).pages[0]!.tier;
    ts.tierDriver(holder).pin([keys[0]!]);
    const kept = await ts.deleteKeys([keys[0]!]);
    expect(kept).toMatchObject({ deleted: [], pinned: [keys[0]!] });
    expect(ts.lookupKeys([keys[0]!]).present).toEqual([true]);
    ts.tierDriver(holder).unpin([keys[0]!]);
    expect((await ts.deleteKeys([keys[0]!])).deleted).toEqual([keys[0]!]);
    expect(ts.lookupKeys([keys[0]!]).present).toEqual([false]);
  });

  it('eviction keeps a page its driver holds pinned (a client lease) on its tier, in the index and the planner', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 }, [{}, {}, { writeThrough: false }]);
    const src = arena(8);
    const dst = arena(1);
    const keys = Array.from({ length: 8 }, (_, i) => key(300 + i));
    await ts.storeKeys(keys.slice(0, 4), [0, 1, 2, 3].map((i) => fill(src, i, PAGE, 600 + i)));
    // keys[0] is hbm's first victim; its driver refuses to free it.
    ts.tierDriver('hbm').pin([keys[0]!]);
    await ts.storeKeys(keys.slice(4, 6), [4, 5].map((i) => fill(src, i, PAGE, 600 + i)));
    const hit = ts.lookupKeys([keys[0]!]);
    expect(hit.pages[0]!.tier).toBe('hbm');
    expect(ts.planner.holds(0, keys[0]!)).toBe(true);
    const r = await ts.load(hit, [{ arena: dst, offset: 0, length: PAGE }]);
    expect(r).toMatchObject({ loaded: 1, missing: [], byTier: { hbm: 1 } });
    expect(Buffer.from(dst.view(0, PAGE)).equals(Buffer.from(src.view(0, PAGE)))).toBe(true);
    ts.tierDriver('hbm').unpin([keys[0]!]);
    // Pins that need not survive a restart are held in memory only.
    ts.pinKeys([keys[1]!], { ttlMs: 60_000, owner: 'client:1', durable: false });
    expect(ts.planner.isPinned(keys[1]!)).toBe(true);
    expect(ts.unpinKeys([keys[1]!], 'client:1', { durable: false })).toBe(1);
    expect(ts.planner.isPinned(keys[1]!)).toBe(false);
  });

  it('reports pages deleted between lookup and load as missing', async () => {
    const ts = await hierarchy({ hbm: 16, host: 16 });
    const src = arena(4);
    const dst = arena(4);
    const keys = [key(300), key(301), key(302)];
    await ts.storeKeys(keys, [0, 1, 2].map((i) => fill(src, i, 1000, i)));
    const hit = ts.lookupKeys(keys);
    await ts.deleteKeys([keys[1]!]);
    const r = await ts.load(hit, hit.pages.map((p, j) => ({ arena: dst, offset: j * PAGE, length: p.length })));
    expect(r.missing).toEqual([1]);
    expect(r.loaded).toBe(2);
  });

  it('refuses bad keys and sizes with typed errors, storing nothing', async () => {
    const ts = await hierarchy({ hbm: 16, host: 16 });
    const src = arena(4);
    const code = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        return `${(e as TierSyncError).code}: ${(e as Error).message}`;
      }
      return 'accepted';
    };
    expect(code(() => ts.storeKeys(['XYZ'], [fill(src, 0, 10, 0)]))).toMatch(/ERR_INVALID_ARGUMENT: keys\[0\] must be a page key/);
    expect(code(() => ts.storeKeys([key(1), key(1)], [fill(src, 0, 10, 0), fill(src, 1, 10, 0)]))).toMatch(/keys\[1\] .* appears twice/);
    expect(code(() => ts.storeKeys([key(1)], []))).toMatch(/1 page\(s\) needed/);
    expect(code(() => ts.storeKeys([key(1)], [{ arena: src, offset: 0, length: PAGE + 1 }]))).toMatch(/pages\[0\].length must be an integer in \[1, 16384\]/);
    expect(code(() => ts.storeKeys([key(1)], [{ arena: src, offset: 0, length: 0 }]))).toMatch(/pages\[0\].length/);
    expect(code(() => ts.lookupKeys(['nothex'] as string[]))).toMatch(/keys\[0\] must be a page key/);
    expect(code(() => ts.deleteKeys([key(1), key(1)]))).toMatch(/appears twice/);
    expect(ts.lookupKeys([key(1)]).present).toEqual([false]);
    // A destination shorter than the page's recorded length is refused before anything moves.
    await ts.storeKeys([key(2)], [fill(src, 0, 300, 0)]);
    const hit = ts.lookupKeys([key(2)]);
    await expect(ts.load(hit, [{ arena: src, offset: PAGE, length: 299 }])).rejects.toThrow(/into\[0\].length must be in \[300, 16384\]/);
  });
});
