/**
 * The conformance suite every tier driver passes (`@tiersync/tiers/testing`). A driver's test file calls
 * `tierConformance(name, harness)` with a harness that creates drivers over fresh storage; the suite then checks
 * the behaviour the hierarchy relies on, through the TierDriver interface only.
 */
import { HostArena, TierSyncError, TransferEngine, crc32c } from '@tiersync/native';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PageKey, ReadOutcome, TierContext, TierDriver } from './driver.js';

export interface ConformanceHarness {
  /** Page slot size the harness's drivers use. */
  pageBytes: number;
  /** How many full pages the driver's capacity holds (the suite fills it to test ERR_TIER_FULL). */
  capacityPages: number;
  /** A new, opened driver over fresh, empty storage. */
  create(context: TierContext): Promise<TierDriver>;
  /** Persistent drivers: a new, opened driver over the storage of the last one created (already closed). */
  reopen?(context: TierContext): Promise<TierDriver>;
  /** Damages the stored copy of `key` (flips bytes of its payload) behind the driver's back. */
  corrupt?(driver: TierDriver, key: PageKey): Promise<void>;
  /** Removes everything the harness made. */
  cleanup?(): Promise<void>;
}

/** Deterministic 32-hex-character keys. */
export function testKey(n: number, salt = 0): PageKey {
  return ((n * 2654435761 + salt * 40503) >>> 0).toString(16).padStart(8, '0') + n.toString(16).padStart(24, '0');
}

function fill(view: Uint8Array, seed: number): void {
  let x = seed * 747796405 + 2891336453;
  for (let i = 0; i < view.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    view[i] = x >>> 24;
  }
}

async function expectCode(p: Promise<unknown> | (() => unknown), code: string): Promise<TierSyncError> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    expect(e).toBeInstanceOf(TierSyncError);
    expect((e as TierSyncError).code).toBe(code);
    return e as TierSyncError;
  }
  throw new Error(`expected ${code}`);
}

export function tierConformance(name: string, makeHarness: () => ConformanceHarness | Promise<ConformanceHarness>): void {
  describe(`${name}: TierDriver conformance`, () => {
    let h: ConformanceHarness;
    let engine: TransferEngine;
    let context: TierContext;
    let src: HostArena;
    let dst: HostArena;
    const open: TierDriver[] = [];
    const make = async () => {
      const d = await h.create(context);
      open.push(d);
      return d;
    };

    beforeAll(async () => {
      h = await makeHarness();
      engine = new TransferEngine({ threads: 2 });
      context = { engine, pageBytes: h.pageBytes, fingerprint: 'conformance/v1' };
      const bytes = (h.capacityPages + 8) * h.pageBytes;
      src = HostArena.create({ capacity: bytes });
      dst = HostArena.create({ capacity: bytes });
      fill(src.view(0, bytes), 1);
    });
    afterAll(async () => {
      for (const d of open) await d.close();
      await engine.close();
      await h.cleanup?.();
    });

    const page = (i: number, length = h.pageBytes) => ({ key: testKey(i), source: { arena: src, offset: i * h.pageBytes, length } });
    const into = (key: PageKey, i: number, length = h.pageBytes) => ({ key, into: { arena: dst, offset: i * h.pageBytes, length } });
    const same = (i: number, length = h.pageBytes) => Buffer.compare(src.view(i * h.pageBytes, length), dst.view(i * h.pageBytes, length)) === 0;

    it('declares its capabilities', async () => {
      const d = await make();
      const c = d.capabilities;
      expect(['hbm', 'host', 'fs', 'object', 'peer']).toContain(c.kind);
      for (const f of ['persistent', 'remote', 'zeroCopy', 'verifiesOnRead'] as const) expect(typeof c[f]).toBe('boolean');
      expect(c.memoryKinds.length).toBeGreaterThan(0);
      expect(d.url).not.toMatch(/secret=(?!\*\*\*)/);
    });

    it('round-trips pages of many sizes byte-exact, with their CRC32C', async () => {
      const d = await make();
      const sizes = [1, 7, 4095, 4096, 4097, h.pageBytes - 1, h.pageBytes].filter((n) => n >= 1 && n <= h.pageBytes);
      const pages = sizes.map((n, i) => page(i, n));
      const w = await d.write(pages);
      expect(w.written).toEqual(pages.map((p) => p.key));
      expect(w.crc32c).toEqual(pages.map((p) => crc32c(src.view(p.source.offset, p.source.length))));
      const r = await d.read(pages.map((p, i) => into(p.key, i)));
      r.forEach((o, i) => {
        expect(o).toMatchObject({ key: pages[i]!.key, status: 'hit', length: sizes[i], crc32c: w.crc32c[i] });
        expect(same(i, sizes[i])).toBe(true);
      });
      expect(await d.has([...pages.map((p) => p.key), testKey(999)])).toEqual([...pages.map(() => true), false]);
      const s = d.stats();
      expect(s.pages).toBe(pages.length);
      expect(s.usedBytes).toBe(sizes.reduce((a, b) => a + b, 0));
    });

    it('reads sub-page ranges byte-exact when it declares rangeReads (verified ranges on tiers that verify on read)', async () => {
      const d = await make();
      if (d.capabilities.rangeReads !== true) return;
      await d.write([page(2), page(3, 5000)]);
      const half = Math.floor(h.pageBytes / 2);
      const r = await d.read([
        { key: testKey(2), into: { arena: dst, offset: 2 * h.pageBytes + half, length: h.pageBytes - half }, range: { offset: half, length: h.pageBytes - half } },
        { key: testKey(3), into: { arena: dst, offset: 3 * h.pageBytes + 100, length: 900 }, range: { offset: 100, length: 900 } },
      ]);
      expect(r.map((o) => (o.status === 'hit' ? o.length : o.status))).toEqual([h.pageBytes - half, 900]);
      expect(Buffer.compare(src.view(2 * h.pageBytes + half, h.pageBytes - half), dst.view(2 * h.pageBytes + half, h.pageBytes - half))).toBe(0);
      expect(Buffer.compare(src.view(3 * h.pageBytes + 100, 900), dst.view(3 * h.pageBytes + 100, 900))).toBe(0);
      // A range past the page's own length (5000 bytes) is refused before anything moves.
      await expectCode(d.read([{ key: testKey(3), into: { arena: dst, offset: 0, length: 1000 }, range: { offset: 4500, length: 1000 } }]), 'ERR_OUT_OF_RANGE');
    });

    it('answers a missing page with a miss, and rewrites of a stored key with existing', async () => {
      const d = await make();
      await d.write([page(0)]);
      const again = await d.write([page(0), page(1)]);
      expect(again.existing).toEqual([testKey(0)]);
      expect(again.written).toEqual([testKey(1)]);
      const r = await d.read([into(testKey(77), 0), into(testKey(1), 1)]);
      expect(r[0]).toEqual({ key: testKey(77), status: 'miss' });
      expect(r[1]!.status).toBe('hit');
      expect(same(1)).toBe(true);
    });

    it('never returns a corrupted copy as data: reports ERR_CHECKSUM', async (ctx) => {
      const d = await make();
      if (!d.capabilities.verifiesOnRead || !h.corrupt) return ctx.skip();
      await d.write([page(2), page(3)]);
      await h.corrupt(d, testKey(2));
      const r = await d.read([into(testKey(2), 2), into(testKey(3), 3)]);
      const bad = r[0] as Extract<ReadOutcome, { status: 'error' }>;
      expect(bad.status).toBe('error');
      expect(bad.error.code).toBe('ERR_CHECKSUM');
      expect(r[1]!.status).toBe('hit');
      expect(same(3)).toBe(true);
      expect(d.stats().checksumFailures).toBeGreaterThan(0);
    });

    it('enforces capacity: ERR_TIER_FULL and nothing of the refused batch visible', async () => {
      const d = await make();
      const first = Array.from({ length: h.capacityPages - 1 }, (_, i) => page(i));
      await d.write(first);
      const before = d.stats();
      const over = [page(h.capacityPages - 1), page(h.capacityPages), page(h.capacityPages + 1)];
      await expectCode(d.write(over), 'ERR_TIER_FULL');
      expect(await d.has(over.map((p) => p.key))).toEqual([false, false, false]);
      expect(d.stats().usedBytes).toBe(before.usedBytes);
      expect(d.stats().pages).toBe(before.pages);
      // Room frees on delete.
      const del = await d.delete([testKey(0), testKey(1)]);
      expect(del.deleted.sort()).toEqual([testKey(0), testKey(1)].sort());
      await d.write(over);
      const r = await d.read(over.map((p, i) => into(p.key, h.capacityPages - 1 + i)));
      expect(r.every((o) => o.status === 'hit')).toBe(true);
      expect(same(h.capacityPages + 1)).toBe(true);
    });

    it('runs concurrent batches', async () => {
      const d = await make();
      const groups = Array.from({ length: 4 }, (_, g) => Array.from({ length: Math.max(1, Math.floor((h.capacityPages - 1) / 4)) }, (_, i) => page(g * 1000 + i, h.pageBytes)));
      // Source offsets of page(i) must exist: use modulo placement inside the arena.
      const placed = groups.map((gr) => gr.map((p, i) => ({ ...p, source: { ...p.source, offset: (i % h.capacityPages) * h.pageBytes } })));
      await Promise.all(placed.map((gr) => d.write(gr)));
      const reads = await Promise.all(placed.map((gr) => d.read(gr.map((p, i) => ({ key: p.key, into: { arena: dst, offset: i * h.pageBytes, length: h.pageBytes } })))));
      expect(reads.flat().every((o) => o.status === 'hit')).toBe(true);
      expect(d.stats().pages).toBe(placed.flat().length);
    });

    it('close() waits for work in flight, then refuses new work', async () => {
      const d = await h.create(context);
      const pages = Array.from({ length: Math.min(4, h.capacityPages) }, (_, i) => page(i));
      const pending = d.write(pages);
      const closing = d.close();
      const outcome = await pending.then(
        () => 'written',
        (e: TierSyncError) => e.code,
      );
      expect(['written', 'ERR_CLOSED']).toContain(outcome);
      await closing;
      await expectCode(() => d.write([page(9)]), 'ERR_CLOSED');
      await expectCode(() => d.read([into(testKey(0), 0)]), 'ERR_CLOSED');
    });

    it('pins: a pinned page is not deleted until unpinned as many times', async () => {
      const d = await make();
      await d.write([page(4)]);
      d.pin([testKey(4)]);
      d.pin([testKey(4)]);
      expect((await d.delete([testKey(4)])).pinned).toEqual([testKey(4)]);
      d.unpin([testKey(4)]);
      expect((await d.delete([testKey(4)])).pinned).toEqual([testKey(4)]);
      d.unpin([testKey(4)]);
      expect((await d.delete([testKey(4)])).deleted).toEqual([testKey(4)]);
      expect(await d.has([testKey(4)])).toEqual([false]);
    });

    it('refuses every bad input with a typed error and loses nothing stored', async () => {
      const d = await make();
      await d.write([page(5)]);
      const bad: Array<[() => unknown, string]> = [
        [() => d.write([{ key: 'Not-Hex', source: page(6).source }]), 'ERR_INVALID_ARGUMENT'],
        [() => d.write([{ key: '../../etc/passwd', source: page(6).source }]), 'ERR_INVALID_ARGUMENT'],
        [() => d.write([{ ...page(6), source: { arena: src, offset: 0, length: h.pageBytes + 1 } }]), 'ERR_INVALID_ARGUMENT'],
        [() => d.write([{ ...page(6), source: { arena: src, offset: src.capacity - 10, length: 100 } }]), 'ERR_OUT_OF_RANGE'],
        [() => d.write([{ ...page(6), source: { arena: src, offset: -1, length: 10 } }]), 'ERR_INVALID_ARGUMENT'],
        [() => d.write([{ ...page(6), source: { arena: {} as HostArena, offset: 0, length: 10 } }]), 'ERR_INVALID_ARGUMENT'],
        [() => d.write([page(6), page(6)]), 'ERR_INVALID_ARGUMENT'],
        [() => d.write('pages' as never), 'ERR_INVALID_ARGUMENT'],
        [() => d.read([{ key: testKey(5), into: { arena: dst, offset: 0, length: 0 } }]), 'ERR_INVALID_ARGUMENT'],
        [() => d.read([{ key: 'xyz', into: { arena: dst, offset: 0, length: 10 } }]), 'ERR_INVALID_ARGUMENT'],
        [() => d.has([42 as unknown as string]), 'ERR_INVALID_ARGUMENT'],
        [() => d.delete(['/tmp/x'.padEnd(20, 'a')]), 'ERR_INVALID_ARGUMENT'],
      ];
      for (const [fn, code] of bad) await expectCode(fn, code);
      // A destination smaller than the stored page: refused up front, or (remote tiers, which learn the length on
      // arrival) reported for that page; never delivered as data.
      const small = await d.read([{ key: testKey(5), into: { arena: dst, offset: 0, length: h.pageBytes - 1 } }]).then(
        (r) => (r[0]!.status === 'error' ? r[0]!.error.code : r[0]!.status),
        (e: TierSyncError) => e.code,
      );
      expect(small).toBe('ERR_OUT_OF_RANGE');
      const r = await d.read([into(testKey(5), 5)]);
      expect(r[0]!.status).toBe('hit');
      expect(same(5)).toBe(true);
    });

    it('reopen sees the same pages (persistent drivers)', async (ctx) => {
      const d = await h.create(context);
      if (!d.capabilities.persistent || !h.reopen) {
        await d.close();
        return ctx.skip();
      }
      const pages = [page(0), page(1, 5000), page(2, 1)];
      const w = await d.write(pages);
      await d.close();
      const again = await h.reopen(context);
      open.push(again);
      const listed = new Map<string, number>();
      for await (const p of again.list()) listed.set(p.key, p.crc32c);
      for (const [i, p] of pages.entries()) expect(listed.get(p.key)).toBe(w.crc32c[i]);
      const r = await again.read(pages.map((p, i) => into(p.key, i)));
      expect(r.map((o) => o.status)).toEqual(['hit', 'hit', 'hit']);
      expect(same(0) && same(1, 5000) && same(2, 1)).toBe(true);
    });

    it('reopen lists the namespace, parent and position each page was written with (persistent drivers)', async (ctx) => {
      const d = await h.create(context);
      if (!d.capabilities.persistent || !h.reopen) {
        await d.close();
        return ctx.skip();
      }
      const ns = 'ab'.repeat(32);
      const metas = [{ namespace: ns, parent: null, position: 0 }, { namespace: ns, parent: testKey(0), position: 1 }, { namespace: 'c0ffee', parent: testKey(9), position: 2 ** 32 - 1 }, undefined];
      const pages = metas.map((meta, i) => (meta ? { ...page(i, 100 + i), meta } : page(i, 100 + i)));
      await expectCode(() => d.write([{ ...page(5), meta: { namespace: 'NOT-HEX', parent: null, position: 0 } }]), 'ERR_INVALID_ARGUMENT');
      await expectCode(() => d.write([{ ...page(5), meta: { namespace: ns, parent: null, position: -1 } }]), 'ERR_INVALID_ARGUMENT');
      await d.write(pages);
      await d.close();
      const again = await h.reopen(context);
      open.push(again);
      const listed = new Map<string, unknown>();
      for await (const p of again.list()) listed.set(p.key, p.meta);
      expect(listed.size).toBe(pages.length);
      metas.forEach((meta, i) => expect(listed.get(testKey(i))).toEqual(meta));
    });
  });
}
