import { closeSync, openSync, readSync, writeSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { type HostArena, crc32c } from '@tiersync/native';
import type { FsTier } from '@tiersync/tiers';
import { type LayerEvent, TierSync } from './tier-sync.js';
import { readPlan } from './layerwise.js';
import { hierarchyFixture } from './test-fixtures.js';

// A hybrid layout: 4 sliding-window layers and 2 full-attention layers, 2 KV heads of 64, bf16, 16 tokens per page.
// Per layer and page: 16 tokens x 2 (K,V) x 2 heads x 64 x 2 bytes = 8 KiB; the page is 48 KiB.
const layout = {
  tokensPerPage: 16,
  dtype: 'bf16',
  groups: [
    { name: 'sliding', layers: [0, 1, 3, 4], slidingWindow: 64, attention: { type: 'mha', kvHeads: 2, headDim: 64 } },
    { name: 'full', layers: [2, 5], attention: { type: 'mha', kvHeads: 2, headDim: 64 } },
  ],
};
const LAYER = 8 * 1024;
const PAGE = 6 * LAYER;
const fx = hierarchyFixture({
  model: 'layerwise-test@1',
  dirPrefix: 'tiersync-layerwise-',
  layout,
  page: PAGE,
  config: { promoteOnHit: false },
  watermarks: { high: 1, low: 0.5 },
  fsPages: 64,
});
const { arena } = fx;
afterEach(fx.cleanup);

/** `hostUrl` is appended to the host tier's URL (e.g. `&verify=true`). */
function hierarchy(pages: { hbm: number; host: number }, hostUrl = '') {
  return fx.hierarchy(pages, [{}, { url: `host://?capacity=${pages.host * PAGE}${hostUrl}` }]);
}

function tokens(seed: number, pages: number): Uint32Array {
  return Uint32Array.from({ length: pages * 16 }, (_, i) => (seed * 7919 + i * 31) % 32_000);
}

function fill(a: HostArena, pages: number, seed: number) {
  const view = a.view(0, pages * PAGE);
  for (let b = 0; b < view.length; b++) view[b] = (seed + b * 13 + (b >> 9)) & 0xff;
  return Array.from({ length: pages }, (_, i) => ({ arena: a, offset: i * PAGE, length: PAGE }));
}

/** Stores `t` as growing prefixes of `step`, 2 x `step`, ... pages, so later stores push the first pages down the tiers. */
async function storeInSteps(ts: TierSync, t: Uint32Array, src: HostArena, seed: number, step: number) {
  const n = t.length / 16;
  for (let k = step; k <= n; k += step) await ts.store(t.subarray(0, k * 16), fill(src, n, seed).slice(0, k));
}

describe('layerwise load', () => {
  it('knows the byte range of each layer group, and of runs of layers within a group', async () => {
    const ts = await hierarchy({ hbm: 8, host: 8 });
    expect(ts.layerRanges()).toEqual([
      { group: 'sliding', layers: [0, 1, 3, 4], offset: 0, length: 4 * LAYER },
      { group: 'full', layers: [2, 5], offset: 4 * LAYER, length: 2 * LAYER },
    ]);
    expect(ts.layerRanges({ layersPerEvent: 3 }).map((r) => [r.group, r.layers, r.offset, r.length])).toEqual([
      ['sliding', [0, 1, 3], 0, 3 * LAYER],
      ['sliding', [4], 3 * LAYER, LAYER],
      ['full', [2, 5], 4 * LAYER, 2 * LAYER],
    ]);
    expect(() => ts.layerRanges({ layersPerEvent: 0 })).toThrow(/layersPerEvent must be an integer >= 1/);
  });

  it('plans reads: the first two ranges alone, then runs of adjacent ranges up to a byte cap', () => {
    const KB = 1024;
    const layers = (n: number, length: number) => Array.from({ length: n }, (_, i) => ({ group: 'g', layers: [i], offset: i * length, length }));
    // 32 layers of 64 KiB (Llama-3-8B, 2 MiB pages): 1, 1, then 4 a read (256 KiB cap): 10 reads, not 32.
    const plan = readPlan(layers(32, 64 * KB));
    expect(plan.map((p) => p.to - p.from)).toEqual([1, 1, 4, 4, 4, 4, 4, 4, 4, 2]);
    expect(plan.every((p, i) => p.offset === p.from * 64 * KB && p.length === (p.to - p.from) * 64 * KB && (i === 0 || p.from === plan[i - 1]!.to))).toBe(true);
    // From disks and networks (1 MiB cap): 4 reads.
    expect(readPlan(layers(32, 64 * KB), 1024 * KB).map((p) => p.to - p.from)).toEqual([1, 1, 16, 14]);
    expect(readPlan(layers(6, 8 * KB), 16 * KB).map((p) => [p.from, p.to])).toEqual([[0, 1], [1, 2], [2, 4], [4, 6]]);
    // Ranges larger than the cap, or not adjacent, are read alone.
    expect(readPlan(layers(3, 512 * KB)).map((p) => p.to - p.from)).toEqual([1, 1, 1]);
    const gap = [
      { group: 'a', layers: [0], offset: 0, length: KB },
      { group: 'a', layers: [1], offset: KB, length: KB },
      { group: 'a', layers: [2], offset: 2 * KB, length: KB },
      { group: 'b', layers: [3], offset: 8 * KB, length: KB },
    ];
    expect(readPlan(gap).map((p) => [p.from, p.to])).toEqual([[0, 1], [1, 2], [2, 3], [3, 4]]);
    expect(readPlan([])).toEqual([]);
  });

  it('delivers every range of every page in layer order, each exact when its event fires', async () => {
    // 12 pages over hbm (4), host and fs: ranged reads from memory tiers, verified ranged reads from fs.
    const ts = await hierarchy({ hbm: 4, host: 4 });
    const n = 12;
    const src = arena(n);
    const dst = arena(n);
    const t = tokens(1, n);
    await storeInSteps(ts, t, src, 5, 4);
    const hit = ts.lookup(t);
    expect(hit.pages.length).toBe(n);
    expect(new Set(hit.pages.map((p) => p.tier))).toEqual(new Set(['hbm', 'host', 'fs']));
    const events: Array<LayerEvent & { exact: boolean }> = [];
    const emitted: number[] = [];
    ts.on('load:layer', (e) => emitted.push(e.index));
    const r = await ts.load(
      hit,
      hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })),
      {
        layerwise: true,
        layersPerEvent: 2,
        onLayer: (e) => {
          // At the event, this range of every page is already in place (checked before any later range lands).
          let exact = true;
          for (let i = 0; i < n; i++) exact &&= crc32c(dst.view(i * PAGE + e.offset, e.length)) === crc32c(src.view(i * PAGE + e.offset, e.length));
          events.push({ ...e, exact });
        },
      },
    );
    expect(r).toMatchObject({ loaded: n, missing: [], bytes: n * PAGE });
    expect(events.map((e) => [e.index, e.of, e.group, e.layers, e.pages, e.exact])).toEqual([
      [0, 3, 'sliding', [0, 1], n, true],
      [1, 3, 'sliding', [3, 4], n, true],
      [2, 3, 'full', [2, 5], n, true],
    ]);
    expect(emitted).toEqual([0, 1, 2]);
    expect(crc32c(dst.view(0, n * PAGE))).toBe(crc32c(src.view(0, n * PAGE)));
  });

  it("reads range r of every page before any page's range r+1", async () => {
    const ts = await hierarchy({ hbm: 8, host: 8 });
    const src = arena(4);
    const dst = arena(4);
    const t = tokens(2, 4);
    await ts.store(t, fill(src, 4, 9));
    const reads: Array<{ offset: number; length: number } | undefined> = [];
    const hbm = ts.tierDriver('hbm');
    const read = hbm.read.bind(hbm);
    hbm.read = (pages, o) => {
      for (const p of pages) reads.push(p.range);
      return read(pages, o);
    };
    const hit = ts.lookup(t);
    await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })), { layerwise: true });
    // Two ranges (one per group), each read for the 4 pages: range 0 first, then range 1.
    expect(reads).toEqual([...Array(4).fill({ offset: 0, length: 4 * LAYER }), ...Array(4).fill({ offset: 4 * LAYER, length: 2 * LAYER })]);
    expect(crc32c(dst.view(0, 4 * PAGE))).toBe(crc32c(src.view(0, 4 * PAGE)));
  });

  it('never reports a page whose copy failed its checksum; it is missing, not delivered', async () => {
    const ts = await hierarchy({ hbm: 2, host: 2 });
    const n = 6;
    const src = arena(n);
    const dst = arena(n);
    const t = tokens(3, n);
    await storeInSteps(ts, t, src, 11, 2);
    const hit = ts.lookup(t);
    const onFs = hit.pages.findIndex((p) => p.tier === 'fs');
    expect(onFs).toBeGreaterThanOrEqual(0);
    // Damage the fs copy behind the tier's back.
    const at = (ts.tierDriver('fs') as FsTier).locate(hit.pages[onFs]!.key)!;
    const fd = openSync(at.path, 'r+');
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, at.dataOffset + 5 * LAYER + 17);
    b[0] = b[0]! ^ 0x5a;
    writeSync(fd, b, 0, 1, at.dataOffset + 5 * LAYER + 17);
    closeSync(fd);
    const failures: string[] = [];
    ts.on('integrity:failed', (e) => failures.push(e.key));
    const events: LayerEvent[] = [];
    const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })), { layerwise: true, onLayer: (e) => events.push(e) });
    expect(hit.pages[onFs]!.tiers).toEqual(['fs']);
    expect(r.missing).toEqual([onFs]);
    expect(events.map((e) => e.pages)).toEqual([n - 1, n - 1]);
    expect(failures).toEqual([hit.pages[onFs]!.key]);
    for (let i = 0; i < n; i++) {
      if (r.missing.includes(i)) continue;
      expect(crc32c(dst.view(i * PAGE, PAGE))).toBe(crc32c(src.view(i * PAGE, PAGE)));
    }
  });

  it('falls back to whole verified reads when the memory tier verifies on read', async () => {
    const ts = await hierarchy({ hbm: 2, host: 8 }, '&verify=true');
    const src = arena(6);
    const dst = arena(6);
    const t = tokens(4, 6);
    await storeInSteps(ts, t, src, 13, 2);
    const hit = ts.lookup(t);
    expect(hit.pages.length).toBe(6);
    expect(hit.pages.some((p) => p.tier === 'host')).toBe(true);
    const events: LayerEvent[] = [];
    const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })), { layerwise: true, onLayer: (e) => events.push(e) });
    expect(r.loaded).toBe(6);
    expect(events.map((e) => e.pages)).toEqual([6, 6]);
    expect(crc32c(dst.view(0, 6 * PAGE))).toBe(crc32c(src.view(0, 6 * PAGE)));
  });

  describe('from the fs tier (verified range reads)', () => {
    function readAt(path: string, at: number): number {
      const fd = openSync(path, 'r');
      const b = Buffer.alloc(1);
      readSync(fd, b, 0, 1, at);
      closeSync(fd);
      return b[0]!;
    }
    /** A hierarchy of one fs tier whose chunk CRCs are one layer (8 KiB) long. */
    async function fsOnly(chunk = LAYER) {
      const dir = fx.tempDir();
      return fx.opened(new TierSync({ model: 'layerwise-test@1', layout, promoteOnHit: false, tiers: [{ url: `fs://${dir}/fs?capacity=${64 * PAGE}&crcChunk=${chunk}` }] } as ConstructorParameters<typeof TierSync>[0]));
    }
    function flip(ts: TierSync, key: string, at: number) {
      const where = (ts.tierDriver('fs') as FsTier).locate(key)!;
      const fd = openSync(where.path, 'r+');
      const b = Buffer.alloc(1);
      readSync(fd, b, 0, 1, where.dataOffset + at);
      b[0] = b[0]! ^ 0x5a;
      writeSync(fd, b, 0, 1, where.dataOffset + at);
      closeSync(fd);
    }
    /** Records every read the fs driver is asked for (its ranges), without changing what it does. */
    function recordReads(ts: TierSync) {
      const reads: Array<{ offset: number; length: number } | undefined> = [];
      const fs = ts.tierDriver('fs');
      const read = fs.read.bind(fs);
      fs.read = (pages, o) => {
        for (const p of pages) reads.push(p.range);
        return read(pages, o);
      };
      return reads;
    }

    it('with one range in flight, emits the first event once only the first range of every page has been read, bytes exact, in layer order', async () => {
      const ts = await fsOnly();
      expect(ts.tierDriver('fs').capabilities).toMatchObject({ rangeReads: true, verifiesOnRead: true });
      const n = 4;
      const src = arena(n);
      const dst = arena(n);
      const t = tokens(6, n);
      await ts.store(t, fill(src, n, 21));
      const hit = ts.lookup(t);
      expect(hit.pages.map((p) => p.tier)).toEqual(Array(n).fill('fs'));
      const reads = recordReads(ts);
      const seen: Array<{ index: number; readsSoFar: number; exact: boolean; pages: number }> = [];
      const r = await ts.load(
        hit,
        hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })),
        {
          layerwise: true,
          layersPerEvent: 1,
          rangesInFlight: 1,
          onLayer: (e) => {
            let exact = true;
            for (let i = 0; i < n; i++) exact &&= crc32c(dst.view(i * PAGE + e.offset, e.length)) === crc32c(src.view(i * PAGE + e.offset, e.length));
            seen.push({ index: e.index, readsSoFar: reads.length, exact, pages: e.pages });
          },
        },
      );
      const ranges = ts.layerRanges({ layersPerEvent: 1 });
      expect(ranges.length).toBe(6);
      const plan = readPlan(ranges);
      // Range 0 alone, range 1 alone, then the rest in one read (a page is 48 KiB, under the cap).
      expect(plan.map((p) => [p.from, p.to])).toEqual([[0, 1], [1, 2], [2, 6]]);
      expect(r).toMatchObject({ loaded: n, missing: [], bytes: n * PAGE });
      // Every read was a range read of every page, in page order of the ranges.
      expect(reads).toEqual(plan.flatMap((p) => Array(n).fill({ offset: p.offset, length: p.length })));
      // The first event fired once range 0 of the n pages was in and before anything else was asked for; each next
      // read starts after the events of the one before.
      expect(seen.map((e) => e.index)).toEqual([0, 1, 2, 3, 4, 5]);
      expect(seen[0]!.readsSoFar).toBe(n);
      const readOf = (k: number) => plan.findIndex((p) => k >= p.from && k < p.to);
      expect(seen.map((e) => e.readsSoFar)).toEqual(ranges.map((_, k) => (readOf(k) + 1) * n));
      expect(seen.every((e) => e.exact && e.pages === n)).toBe(true);
      expect(crc32c(dst.view(0, n * PAGE))).toBe(crc32c(src.view(0, n * PAGE)));
    });

    it('never reports a corrupted range: the page stops counting from that range on, and ends up missing', async () => {
      const ts = await fsOnly();
      const n = 4;
      const src = arena(n);
      const dst = arena(n);
      const t = tokens(7, n);
      await ts.store(t, fill(src, n, 23));
      const hit = ts.lookup(t);
      flip(ts, hit.pages[1]!.key, 17); // range 0 (layer 0) of page 1
      flip(ts, hit.pages[2]!.key, 3 * LAYER + 5); // range 3 (layer 4) of page 2
      const failures: string[] = [];
      const codes: string[] = [];
      ts.on('integrity:failed', (e) => {
        failures.push(e.key);
        codes.push(e.error.code);
      });
      const events: LayerEvent[] = [];
      // Six ranges in flight: page 2's damaged range 3 is read (and fails) before events 1 and 2, which still count it.
      const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })), { layerwise: true, layersPerEvent: 1, rangesInFlight: 6, onLayer: (e) => events.push(e) });
      expect(codes).toEqual(['ERR_CHECKSUM', 'ERR_CHECKSUM']);
      expect(r.missing).toEqual([1, 2]);
      expect(r.loaded).toBe(n - 2);
      // Page 1 is never counted; page 2 only for the ranges read before the read that holds its damaged range 3
      // (reads: [0], [1], [2, 6)), whose bytes were verified.
      expect(readPlan(ts.layerRanges({ layersPerEvent: 1 }))[2]).toMatchObject({ from: 2, to: 6 });
      expect(events.map((e) => e.pages)).toEqual([3, 3, 2, 2, 2, 2]);
      expect(failures.sort()).toEqual([hit.pages[1]!.key, hit.pages[2]!.key].sort());
      for (const i of [0, 3]) expect(crc32c(dst.view(i * PAGE, PAGE))).toBe(crc32c(src.view(i * PAGE, PAGE)));
    });

    /**
     * Wraps the fs driver's read: counts calls in flight (and the most at once), and holds each call until
     * `hold(rangeOffset)` resolves, so tests choose the order in which ranges complete.
     */
    function gateReads(ts: TierSync, hold: (offset: number, signal: AbortSignal | undefined) => Promise<void>) {
      const state = { active: 0, most: 0, calls: 0, signals: [] as Array<AbortSignal | undefined> };
      const fs = ts.tierDriver('fs');
      const read = fs.read.bind(fs);
      fs.read = async (pages, o) => {
        state.calls++;
        state.active++;
        state.most = Math.max(state.most, state.active);
        state.signals.push(o?.signal);
        try {
          await hold(pages[0]?.range?.offset ?? -1, o?.signal);
          return await read(pages, o);
        } finally {
          state.active--;
        }
      };
      return state;
    }
    const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

    it('keeps a bounded window of ranges in flight and reports them in order, each verified and exact, even when they complete out of order', async () => {
      const ts = await fsOnly();
      const n = 3;
      const src = arena(n);
      const dst = arena(n);
      const t = tokens(9, n);
      await ts.store(t, fill(src, n, 31));
      const hit = ts.lookup(t);
      const ranges = ts.layerRanges({ layersPerEvent: 1 });
      // Earlier ranges are held longer, so within a window the later ones land first.
      const gate = gateReads(ts, (offset) => delay(offset < 0 ? 0 : 40 - (offset / LAYER) * 6));
      const seen: Array<{ index: number; exact: boolean; active: number; calls: number }> = [];
      const r = await ts.load(
        hit,
        hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })),
        {
          layerwise: true,
          layersPerEvent: 1,
          rangesInFlight: 2,
          onLayer: (e) => {
            let exact = true;
            for (let i = 0; i < n; i++) exact &&= crc32c(dst.view(i * PAGE + e.offset, e.length)) === crc32c(src.view(i * PAGE + e.offset, e.length));
            seen.push({ index: e.index, exact, active: gate.active, calls: gate.calls });
          },
        },
      );
      expect(r).toMatchObject({ loaded: n, missing: [], bytes: n * PAGE, byTier: { fs: n } });
      expect(seen.map((e) => e.index)).toEqual(ranges.map((_, k) => k));
      expect(seen.every((e) => e.exact)).toBe(true);
      // One call per read (one source tier): [0], [1], [2, 6); the first read goes alone, then the window (2) is
      // used: reads 1 and 2 run at once, read 2 lands first, and its events still wait for read 1's.
      const plan = readPlan(ranges);
      expect(plan.length).toBe(3);
      expect(gate.calls).toBe(plan.length);
      expect(gate.most).toBe(2);
      const readOf = (k: number) => plan.findIndex((p) => k >= p.from && k < p.to);
      expect(seen.map((e) => e.calls)).toEqual(ranges.map((_, k) => (readOf(k) === 0 ? 1 : 3)));
      expect(crc32c(dst.view(0, n * PAGE))).toBe(crc32c(src.view(0, n * PAGE)));
    });

    it('an aborted load stops: no event after the abort, ERR_ABORTED once no read of it is still running', async () => {
      const ts = await fsOnly();
      const n = 2;
      const src = arena(n);
      const dst = arena(n);
      const t = tokens(10, n);
      await ts.store(t, fill(src, n, 37));
      const hit = ts.lookup(t);
      const gate = gateReads(ts, () => delay(15));
      const stop = new AbortController();
      const events: number[] = [];
      const load = ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })), {
        layerwise: true,
        layersPerEvent: 1,
        signal: stop.signal,
        onLayer: (e) => {
          events.push(e.index);
          if (e.index === 1) stop.abort();
        },
      });
      await expect(load).rejects.toMatchObject({ code: 'ERR_ABORTED' });
      expect(events).toEqual([0, 1]);
      expect(gate.active).toBe(0);
      // Every driver call got the load's signal, which the abort fired.
      expect(gate.signals.every((sig) => sig?.aborted === true)).toBe(true);
      // An already aborted signal stops the load before any read.
      const calls = gate.calls;
      await expect(ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })), { layerwise: true, signal: AbortSignal.abort() })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
      expect(gate.calls).toBe(calls);
      // A whole load takes the signal too: aborted while its read waits, it rejects rather than call pages missing.
      const whole = new AbortController();
      const wholeLoad = ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })), { signal: whole.signal });
      whole.abort();
      await expect(wholeLoad).rejects.toMatchObject({ code: 'ERR_ABORTED' });
      expect(gate.active).toBe(0);
      // The hierarchy is unharmed: the same pages load whole afterwards.
      const again = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
      expect(again).toMatchObject({ loaded: n, missing: [] });
      expect(crc32c(dst.view(0, n * PAGE))).toBe(crc32c(src.view(0, n * PAGE)));
    });

    it('a load past its deadline stops with ERR_TIMEOUT after the events it could give', async () => {
      const dir = fx.tempDir();
      const ts = await fx.opened(
        new TierSync({ model: 'layerwise-test@1', layout, promoteOnHit: false, deadlines: { loadMs: 300 }, tiers: [{ url: `fs://${dir}/fs?capacity=${64 * PAGE}&crcChunk=${LAYER}` }] } as ConstructorParameters<typeof TierSync>[0]),
      );
      const n = 2;
      const src = arena(n);
      const dst = arena(n);
      const t = tokens(11, n);
      await ts.store(t, fill(src, n, 41));
      const hit = ts.lookup(t);
      // Range 2 never answers until its call is aborted (a stalled tier).
      const gate = gateReads(ts, (offset, signal) =>
        offset === 2 * LAYER ? new Promise<void>((resolve) => (signal?.aborted ? resolve() : signal?.addEventListener('abort', () => resolve(), { once: true }))) : Promise.resolve(),
      );
      const events: number[] = [];
      const started = Date.now();
      await expect(ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })), { layerwise: true, layersPerEvent: 1, onLayer: (e) => events.push(e.index) })).rejects.toMatchObject({
        code: 'ERR_TIMEOUT',
        message: expect.stringMatching(/300 ms deadline/),
      });
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
      expect(events).toEqual([0, 1]);
      expect(gate.active).toBe(0);
    });

    it('refuses a bad rangesInFlight or signal', async () => {
      const ts = await fsOnly();
      const hit = ts.lookup(tokens(12, 1));
      for (const rangesInFlight of [0, 65, 1.5]) {
        await expect(ts.load(hit, [], { layerwise: true, rangesInFlight })).rejects.toMatchObject({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/rangesInFlight must be an integer 1..64/) });
      }
      await expect(ts.load(hit, [], { signal: {} as AbortSignal })).rejects.toMatchObject({ code: 'ERR_INVALID_ARGUMENT' });
    });

    it('falls back to another copy when the fs copy of a range is corrupted', async () => {
      // Two fs tiers: 'near' (ranged, fastest) and 'far', which holds a write-through copy of every page.
      const dir = fx.tempDir();
      const url = (sub: string) => `fs://${dir}/${sub}?capacity=${64 * PAGE}&crcChunk=${LAYER}`;
      const ts = await fx.opened(
        new TierSync({ model: 'layerwise-test@1', layout, promoteOnHit: false, tiers: [{ name: 'near', url: url('near') }, { name: 'far', url: url('far'), writeThrough: true }] } as ConstructorParameters<typeof TierSync>[0]),
      );
      const n = 4;
      const src = arena(n);
      const dst = arena(n);
      const t = tokens(8, n);
      await ts.store(t, fill(src, n, 29));
      await ts.flush();
      const hit = ts.lookup(t);
      expect(hit.pages.map((p) => [...p.tiers].sort())).toEqual(Array(n).fill(['far', 'near']));
      const where = (ts.tierDriver('near') as FsTier).locate(hit.pages[2]!.key)!;
      const fd = openSync(where.path, 'r+');
      writeSync(fd, Buffer.from([0xee ^ readAt(where.path, where.dataOffset + 4 * LAYER + 3)]), 0, 1, where.dataOffset + 4 * LAYER + 3); // range 1 of page 2
      closeSync(fd);
      const events: LayerEvent[] = [];
      const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })), { layerwise: true, onLayer: (e) => events.push(e) });
      expect(r).toMatchObject({ loaded: n, missing: [] });
      expect(r.byTier).toMatchObject({ far: 1 });
      expect(events.map((e) => e.pages)).toEqual([n, n]);
      expect(crc32c(dst.view(0, n * PAGE))).toBe(crc32c(src.view(0, n * PAGE)));
    });
  });
});
