import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, openSync, readSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena, TierSyncError, TransferBatch, TransferEngine, crc32c, probeDirect, type SubmitOptions, type TransferResult } from '@tiersync/native';
import type { PageKey, TierContext } from '../driver.js';
import { testKey, tierConformance } from '../testing.js';
import { HEADER_BYTES, geometryFor, slotsFor } from './config.js';
import { FsTier, parseFsUrl } from './index.js';

const PAGE = 64 * 1024;
const SLOTS_PER_SLAB = 4;
/** One slab file: 4 KiB of headers (4 x 512, padded) + 4 page slots. */
const SLAB = 4096 + SLOTS_PER_SLAB * PAGE;
const folders: string[] = [];
const newFolder = () => {
  const f = mkdtempSync(join(tmpdir(), 'tiersync-fs-test-'));
  folders.push(f);
  return f;
};
const urlOf = (folder: string, pages: number, extra = '') => `fs://${folder}?capacity=${(pages / SLOTS_PER_SLAB) * SLAB}&slab=${SLAB}${extra}`;

afterAll(() => {
  for (const f of folders) rmSync(f, { recursive: true, force: true });
});

function conformance(name: string, extra: string): void {
  tierConformance(name, () => {
    let last = '';
    return {
      pageBytes: PAGE,
      capacityPages: 16,
      async create(context) {
        last = newFolder();
        const t = new FsTier(urlOf(last, 16, extra), context);
        await t.open();
        return t;
      },
      async reopen(context) {
        const t = new FsTier(urlOf(last, 16, extra), context);
        await t.open();
        return t;
      },
      // Flip one payload byte in the slab file, behind the driver's back.
      async corrupt(driver, key) {
        const at = (driver as FsTier).locate(key)!;
        flipByte(at.path, at.dataOffset + Math.min(10, at.length - 1));
      },
    };
  });
}

conformance('fs:// (direct=auto)', '');
conformance('fs:// (direct=never, buffered)', '&direct=never');
conformance('fs:// (4 KiB CRC chunks)', '&crcChunk=4KiB');

function flipByte(path: string, offset: number): void {
  const fd = openSync(path, 'r+');
  try {
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, offset);
    b[0] = b[0]! ^ 0xff;
    writeSync(fd, b, 0, 1, offset);
  } finally {
    closeSync(fd);
  }
}

function readAt(path: string, offset: number, length: number): Buffer {
  const fd = openSync(path, 'r');
  try {
    const b = Buffer.alloc(length);
    readSync(fd, b, 0, length, offset);
    return b;
  } finally {
    closeSync(fd);
  }
}

function writeAt(path: string, offset: number, bytes: Uint8Array): void {
  const fd = openSync(path, 'r+');
  try {
    writeSync(fd, bytes, 0, bytes.length, offset);
  } finally {
    closeSync(fd);
  }
}

async function codeOf(p: Promise<unknown> | (() => unknown)): Promise<TierSyncError> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    expect(e).toBeInstanceOf(TierSyncError);
    return e as TierSyncError;
  }
  throw new Error('expected a TierSyncError');
}

/** An engine that can hold back or fail the header batches (all descriptors 512 bytes) of a write. */
class FaultyEngine extends TransferEngine {
  mode: 'pass' | 'hold-headers' | 'fail-headers' = 'pass';
  held = 0;
  override submit(batch: TransferBatch, options?: SubmitOptions): Promise<TransferResult> {
    const headers = batch.length > 0 && batch.bytes === batch.length * HEADER_BYTES && options?.checksums !== true;
    if (headers && this.mode === 'hold-headers') {
      this.held++;
      return new Promise(() => {}); // the process "dies" before the headers reach the disk
    }
    if (headers && this.mode === 'fail-headers') {
      this.mode = 'pass';
      return Promise.reject(new TierSyncError('injected header write failure', 'ERR_IO'));
    }
    return super.submit(batch, options);
  }
}

describe('fs tier', () => {
  let engine: TransferEngine;
  let src: HostArena;
  let dst: HostArena;
  const ctx = (fingerprint = 'model-a', pageBytes = PAGE, e: TransferEngine = engine): TierContext => ({ engine: e, pageBytes, fingerprint });
  const page = (i: number, length = PAGE) => ({ key: testKey(i, 7), source: { arena: src, offset: i * PAGE, length } });
  const into = (i: number, length = PAGE) => ({ key: testKey(i, 7), into: { arena: dst, offset: i * PAGE, length } });
  const same = (i: number, length = PAGE) => Buffer.compare(src.view(i * PAGE, length), dst.view(i * PAGE, length)) === 0;
  const keysOf = async (t: FsTier) => {
    const out: PageKey[] = [];
    for await (const p of t.list()) out.push(p.key);
    return out.sort();
  };
  const open = async (url: string, context = ctx()) => {
    const t = new FsTier(url, context);
    await t.open();
    return t;
  };

  beforeAll(() => {
    engine = new TransferEngine({ threads: 2 });
    src = HostArena.create({ capacity: 40 * PAGE });
    dst = HostArena.create({ capacity: 40 * PAGE });
    const v = src.view(0, 40 * PAGE);
    for (let i = 0; i < v.length; i++) v[i] = (i * 2654435761) >>> 24;
  });
  afterAll(async () => {
    await engine.close();
  });

  it('keeps only a manifest, numbered slab files and a lock in its folder', async () => {
    const folder = newFolder();
    const t = await open(urlOf(folder, 16));
    await t.write([page(0), page(5), page(9)]);
    expect(readdirSync(folder).sort()).toEqual(['lock', 'manifest.json', 'slab-000000.tsd']);
    const manifest = JSON.parse(readFileSync(join(folder, 'manifest.json'), 'utf8'));
    expect(manifest).toMatchObject({ format: 'tiersync-fs', version: 2, pageBytes: PAGE, slotsPerSlab: 4, fingerprint: 'model-a' });
    expect(t.openNote).toMatch(/new folder/);
    await t.close();
    expect(readdirSync(folder).sort()).toEqual(['manifest.json', 'slab-000000.tsd']);
  });

  it('creates slabs on demand, adjacent slots for one batch', async () => {
    const folder = newFolder();
    const t = await open(urlOf(folder, 16));
    await t.write([page(0), page(1), page(2), page(3), page(4)]);
    expect(readdirSync(folder).filter((n) => n.startsWith('slab-')).sort()).toEqual(['slab-000000.tsd', 'slab-000001.tsd']);
    const slots = [0, 1, 2, 3, 4].map((i) => t.locate(testKey(i, 7))!.slot).sort((a, b) => a - b);
    expect(slots).toEqual([0, 1, 2, 3, 4]);
    await t.close();
  });

  it('recovers after a crash between the data and the header batch: the page is absent, its slot reusable', async () => {
    const folder = newFolder();
    const faulty = new FaultyEngine({ threads: 2 });
    const a = await open(urlOf(folder, 8), ctx('model-a', PAGE, faulty));
    await a.write([page(0), page(1)]);
    faulty.mode = 'hold-headers';
    void a.write([page(2), page(3)]);
    while (faulty.held === 0) await new Promise((r) => setTimeout(r, 5));
    // The data of pages 2 and 3 is durable in slots 2 and 3; their headers never were written.
    expect(await a.has([testKey(2, 7)])).toEqual([false]);
    a.simulateCrash();
    expect(readdirSync(folder)).toContain('lock');

    const b = await open(urlOf(folder, 8));
    expect(await keysOf(b)).toEqual([testKey(0, 7), testKey(1, 7)].sort());
    expect(b.recovery).toMatchObject({ pages: 2, torn: 0, invalid: 0 });
    expect(b.stats()).toMatchObject({ pages: 2, usedBytes: 2 * PAGE, capacityBytes: 8 * PAGE });
    expect((await b.read([into(2), into(3)])).map((o) => o.status)).toEqual(['miss', 'miss']);
    // All 6 free slots are usable again.
    await b.write([2, 3, 4, 5, 6, 7].map((i) => page(i)));
    const r = await b.read([0, 1, 2, 3, 4, 5, 6, 7].map((i) => into(i)));
    expect(r.every((o) => o.status === 'hit')).toBe(true);
    expect([0, 1, 2, 3, 4, 5, 6, 7].every((i) => same(i))).toBe(true);
    await b.close();
    await faulty.close();
  });

  it('drops torn headers, bad self-checksums and misplaced headers at open, counts them, never serves them', async () => {
    const folder = newFolder();
    const a = await open(urlOf(folder, 8));
    await a.write([page(0), page(1), page(2)]);
    const at = [0, 1, 2].map((i) => a.locate(testKey(i, 7))!);
    await a.close();
    const slab = at[0]!.path;
    const header0 = readAt(slab, at[0]!.headerOffset, HEADER_BYTES);
    // Slot 1: one byte of its key flipped -> self-checksum fails.
    flipByte(slab, at[1]!.headerOffset + 60);
    // Slot 3 (free): the first half of a header only, as a write cut short leaves it.
    writeAt(slab, 3 * HEADER_BYTES, header0.subarray(0, HEADER_BYTES / 2));
    // Slot 2: a valid header copied from slot 0: checksum fine, but it names another slot (and duplicates key 0).
    writeAt(slab, at[2]!.headerOffset, header0);

    const b = await open(urlOf(folder, 8));
    expect(b.recovery).toMatchObject({ pages: 1, torn: 2, invalid: 1, duplicates: 0 });
    expect(b.openNote).toMatch(/dropped 2 torn, 1 invalid slot\(s\)/);
    expect(await keysOf(b)).toEqual([testKey(0, 7)]);
    const r = await b.read([into(0), into(1), into(2)]);
    expect(r.map((o) => o.status)).toEqual(['hit', 'miss', 'miss']);
    expect(same(0)).toBe(true);
    expect(b.stats()).toMatchObject({ pages: 1, usedBytes: PAGE });
    await b.close();

    // Dropped slots were cleared on disk: a second open finds nothing to drop, and all 7 free slots take pages.
    const c = await open(urlOf(folder, 8));
    expect(c.recovery).toMatchObject({ pages: 1, torn: 0, invalid: 0 });
    expect(readAt(slab, 3 * HEADER_BYTES, HEADER_BYTES).every((x) => x === 0)).toBe(true);
    await c.write([1, 2, 3, 4, 5, 6, 7].map((i) => page(i)));
    expect((await codeOf(c.write([page(8)]))).code).toBe('ERR_TIER_FULL');
    await c.close();
  });

  it('keeps the newer copy when two headers claim one key (a clear cut short, then a rewrite)', async () => {
    const folder = newFolder();
    const a = await open(urlOf(folder, 4));
    await a.write([page(0)]);
    const old = a.locate(testKey(0, 7))!;
    const oldHeader = readAt(old.path, old.headerOffset, HEADER_BYTES);
    await a.delete([testKey(0, 7)]);
    await a.write([page(1)]); // reuses the freed slot
    await a.write([page(0)]); // a newer copy in another slot
    expect(a.locate(testKey(1, 7))!.slot).toBe(old.slot);
    await a.close();
    writeAt(old.path, old.headerOffset, oldHeader); // as if the delete's clear and page 1's header never landed

    const b = await open(urlOf(folder, 4));
    expect(b.recovery).toMatchObject({ pages: 1, duplicates: 1 });
    expect(b.locate(testKey(0, 7))!.slot).not.toBe(old.slot);
    const r = await b.read([into(0)]);
    expect(r[0]!.status).toBe('hit');
    expect(same(0)).toBe(true);
    await b.close();
    const c = await open(urlOf(folder, 4));
    expect(c.recovery).toMatchObject({ pages: 1, duplicates: 0 });
    await c.close();
  });

  it('a failed header batch frees the slots after clearing them, and leaves nothing visible', async () => {
    const folder = newFolder();
    const faulty = new FaultyEngine({ threads: 1 });
    const t = await open(urlOf(folder, 4), ctx('model-a', PAGE, faulty));
    faulty.mode = 'fail-headers';
    const e = await codeOf(t.write([page(0), page(1)]));
    expect(e.code).toBe('ERR_IO');
    expect(e.tier).toBe('fs');
    expect(await t.has([testKey(0, 7), testKey(1, 7)])).toEqual([false, false]);
    expect(t.stats()).toMatchObject({ pages: 0, usedBytes: 0, errors: 1 });
    expect(t.quarantinedSlots).toBe(0);
    await t.write([0, 1, 2, 3].map((i) => page(i))); // every slot is free again
    await t.close();
    await faulty.close();
  });

  it('refuses a folder written under another fingerprint or page size, naming the field', async () => {
    const folder = newFolder();
    const a = await open(urlOf(folder, 8), ctx('model-a'));
    await a.write([page(0)]);
    await a.close();
    const fp = await codeOf(open(urlOf(folder, 8), ctx('model-b')));
    expect(fp.code).toBe('ERR_GEOMETRY_MISMATCH');
    expect(fp.tier).toBe('fs');
    expect(fp.message).toMatch(/fingerprint mismatch: .* records fingerprint 'model-a', expected 'model-b'/);
    const ps = await codeOf(open(urlOf(folder, 8).replace(/slab=\d+/, `slab=${4096 + 4 * 2 * PAGE}`), ctx('model-a', 2 * PAGE)));
    expect(ps.code).toBe('ERR_GEOMETRY_MISMATCH');
    expect(ps.message).toMatch(/page size mismatch: .* records page size 65536 bytes, this hierarchy uses 131072/);
    const sl = await codeOf(open(urlOf(folder, 8).replace(/slab=\d+/, `slab=${4096 + 8 * PAGE}`)));
    expect(sl.message).toMatch(/slab size mismatch/);
    // The refusals changed nothing and released the folder.
    const again = await open(`fs://${folder}?capacity=${2 * SLAB}`);
    expect(await keysOf(again)).toEqual([testKey(0, 7)]);
    await again.close();
  });

  it('refuses slab files without a manifest, and a second opener of the same folder', async () => {
    const folder = newFolder();
    const t = await open(urlOf(folder, 4));
    const twice = await codeOf(open(urlOf(folder, 4)));
    expect(twice.code).toBe('ERR_UNAVAILABLE');
    await t.close();
    // A lock file left behind names nobody: the kernel lock is what counts, and nobody holds it.
    writeFileSync(join(folder, 'lock'), JSON.stringify({ pid: 1, host: 'elsewhere', since: 'then' }));
    await (await open(urlOf(folder, 4))).close();
    rmSync(join(folder, 'manifest.json'));
    writeFileSync(join(folder, 'slab-000000.tsd'), '');
    expect((await codeOf(open(urlOf(folder, 4)))).code).toBe('ERR_GEOMETRY_MISMATCH');
  });

  it('opens a version-1 folder: upgrades its manifest, lists its old slots without meta, writes new ones with it', async () => {
    const folder = newFolder();
    const a = await open(urlOf(folder, 8));
    await a.write([page(0), page(1)]);
    const at = a.locate(testKey(0, 7))!;
    await a.close();
    // Slot of page 0 rewritten as a version-1 header (ASCII key at 48, no chunk CRCs, no meta); manifest back to 1.
    const h = readAt(at.path, at.headerOffset, HEADER_BYTES);
    const v1 = Buffer.alloc(HEADER_BYTES);
    h.copy(v1, 0, 0, 48);
    v1.writeUInt16LE(1, 4);
    v1.writeUInt32LE(0, 28);
    v1.write(testKey(0, 7), 48, 'latin1');
    v1.writeUInt32LE(crc32c(v1.subarray(0, 508)), 508);
    writeAt(at.path, at.headerOffset, v1);
    const manifestPath = join(folder, 'manifest.json');
    writeFileSync(manifestPath, JSON.stringify({ ...JSON.parse(readFileSync(manifestPath, 'utf8')), version: 1 }));

    const meta = { namespace: 'ef'.repeat(32), parent: testKey(0, 7), position: 1 };
    const b = await open(urlOf(folder, 8));
    expect(b.openNote).toMatch(/upgraded to version 2/);
    expect(JSON.parse(readFileSync(manifestPath, 'utf8')).version).toBe(2);
    expect(b.recovery).toMatchObject({ pages: 2, torn: 0, invalid: 0 });
    await b.write([{ ...page(2), meta }]);
    const listed = new Map<string, unknown>();
    for await (const p of b.list()) listed.set(p.key, p.meta);
    expect(listed.get(testKey(0, 7))).toBeUndefined();
    expect(listed.has(testKey(0, 7))).toBe(true);
    expect(listed.get(testKey(2, 7))).toEqual(meta);
    const r = await b.read([into(0), into(1), into(2)]);
    expect(r.map((o) => o.status)).toEqual(['hit', 'hit', 'hit']);
    expect(same(0) && same(1) && same(2)).toBe(true);
    await b.close();
    // A folder of a version this build does not know is refused, naming it.
    writeFileSync(manifestPath, JSON.stringify({ ...JSON.parse(readFileSync(manifestPath, 'utf8')), version: 3 }));
    expect((await codeOf(open(urlOf(folder, 8)))).message).toMatch(/format version is 3, this build reads versions 1 and 2/);
  });

  it('accounts capacity across reopen, growth and shrinking', async () => {
    const folder = newFolder();
    const a = await open(urlOf(folder, 16));
    await a.write(Array.from({ length: 10 }, (_, i) => page(i, PAGE - i)));
    await a.delete([testKey(3, 7)]);
    const used = a.stats().usedBytes;
    await a.close();

    const b = await open(urlOf(folder, 16));
    expect(b.stats()).toMatchObject({ pages: 9, usedBytes: used, capacityBytes: 16 * PAGE });
    expect(await b.has([testKey(3, 7)])).toEqual([false]);
    await b.write(Array.from({ length: 7 }, (_, i) => page(10 + i)));
    expect((await codeOf(b.write([page(20)]))).code).toBe('ERR_TIER_FULL');
    expect(b.stats().pages).toBe(16);
    await b.close();

    // Grow by one full slab and a partial one (2 more slots): the last slab file is extended, not rewritten.
    const grown = await open(`fs://${folder}?capacity=${5 * SLAB + 4096 + 2 * PAGE}`);
    expect(grown.stats()).toMatchObject({ pages: 16, capacityBytes: 22 * PAGE });
    await grown.write(Array.from({ length: 6 }, (_, i) => page(20 + i)));
    expect((await codeOf(grown.write([page(30)]))).code).toBe('ERR_TIER_FULL');
    const r = await grown.read(Array.from({ length: 6 }, (_, i) => into(20 + i)));
    expect(r.every((o) => o.status === 'hit')).toBe(true);
    await grown.close();

    // Shrink to two slabs while later slots hold pages: refused, nothing on disk changed (no acknowledged page is
    // dropped to honour a capacity).
    const slabsBefore = readdirSync(folder).filter((n) => n.startsWith('slab-')).sort();
    const refused = await codeOf(open(`fs://${folder}?capacity=${2 * SLAB}`));
    expect(refused.code).toBe('ERR_CONFIG');
    expect(refused.message).toMatch(new RegExp(`capacity ${2 * SLAB} bytes holds 8 page slot\\(s\\), but 14 page\\(s\\) in ${folder} sit in slots past them`));
    expect(refused.message).toContain(`at least ${5 * SLAB + 4096 + 2 * PAGE} bytes`);
    expect(refused.message).toMatch(/remove the folder's slab files/);
    expect(readdirSync(folder).filter((n) => n.startsWith('slab-')).sort()).toEqual(slabsBefore);
    const again = await open(`fs://${folder}?capacity=${5 * SLAB + 4096 + 2 * PAGE}`);
    expect(again.stats().pages).toBe(22);
    expect(again.recovery.beyondCapacity).toBe(0);

    // Once the slots past the new capacity are empty, shrinking works: slab files past it are removed.
    const outside: PageKey[] = [];
    for await (const p of again.list()) if (again.locate(p.key)!.slot >= 8) outside.push(p.key);
    expect(outside.length).toBe(14);
    await again.delete(outside);
    await again.close();
    const small = await open(`fs://${folder}?capacity=${2 * SLAB}`);
    expect(small.stats()).toMatchObject({ pages: 8, capacityBytes: 8 * PAGE });
    expect(small.recovery.beyondCapacity).toBe(0);
    expect(readdirSync(folder).filter((n) => n.startsWith('slab-')).length).toBe(2);
    await small.close();
  });

  it('refuses a capacity cut inside a slab that would drop its last pages, and names the least capacity that keeps them', async () => {
    const folder = newFolder();
    const a = await open(urlOf(folder, 8));
    await a.write(Array.from({ length: 7 }, (_, i) => page(i)));
    expect([5, 6].map((i) => a.locate(testKey(i, 7))!.slot)).toEqual([5, 6]);
    await a.close();

    // 5 slots: slots 5 and 6 hold pages. The least capacity keeping them is one full slab and 3 slots of the next.
    const e = await codeOf(open(`fs://${folder}?capacity=${SLAB + 4096 + 1 * PAGE}&slab=${SLAB}`));
    expect(e).toBeInstanceOf(TierSyncError);
    expect(e.code).toBe('ERR_CONFIG');
    expect((e as TierSyncError).tier).toBe('fs');
    expect(e.message).toContain('2 page(s)');
    expect(e.message).toContain(`at least ${SLAB + 4096 + 3 * PAGE} bytes`);
    // The least capacity named is enough, and every page is still there.
    const b = await open(`fs://${folder}?capacity=${SLAB + 4096 + 3 * PAGE}&slab=${SLAB}`);
    expect(b.stats().pages).toBe(7);
    const r = await b.read([0, 1, 2, 3, 4, 5, 6].map((i) => into(i)));
    expect(r.every((o) => o.status === 'hit')).toBe(true);
    await b.close();
  });

  it('drops, when shrinking, an old copy past the capacity of a page also held inside it', async () => {
    const folder = newFolder();
    const a = await open(urlOf(folder, 8));
    await a.write([1, 2, 3, 4].map((i) => page(i)));
    await a.write([page(0)]);
    const old = a.locate(testKey(0, 7))!;
    expect(old.slot).toBe(4);
    const oldHeader = readAt(old.path, old.headerOffset, HEADER_BYTES);
    await a.delete([testKey(0, 7), testKey(1, 7)]);
    await a.write([page(0)]); // the newer copy, inside the smaller capacity below
    expect(a.locate(testKey(0, 7))!.slot).toBeLessThan(4);
    await a.delete([2, 3, 4].map((i) => testKey(i, 7)));
    await a.close();
    writeAt(old.path, old.headerOffset, oldHeader); // as if the delete's clear never landed

    const small = await open(urlOf(folder, 4));
    expect(small.recovery).toMatchObject({ pages: 1, beyondCapacity: 1 });
    expect(readdirSync(folder).filter((n) => n.startsWith('slab-')).length).toBe(1);
    expect((await small.read([into(0)]))[0]!.status).toBe('hit');
    expect(same(0)).toBe(true);
    await small.close();
  });

  it('serves concurrent writes of the same key once: first wins, no slot leaked', async () => {
    const folder = newFolder();
    const t = await open(urlOf(folder, 4));
    const [x, y] = await Promise.all([t.write([page(0), page(1)]), t.write([page(1), page(2)])]);
    expect([...x.written, ...y.written].sort()).toEqual([testKey(0, 7), testKey(1, 7), testKey(2, 7)].sort());
    expect([...x.existing, ...y.existing]).toEqual([testKey(1, 7)]);
    expect(x.crc32c[1]).toBe(y.crc32c[0]);
    expect(t.stats().pages).toBe(3);
    await t.write([page(3)]); // the fourth slot is still free
    expect((await codeOf(t.write([page(4)]))).code).toBe('ERR_TIER_FULL');
    await t.close();
  });

  it('uses O_DIRECT for aligned pages with direct=auto and never with direct=never', async (c) => {
    if (!probeDirect(tmpdir()).supported) return c.skip();
    for (const [mode, expectDirect] of [
      ['auto', true],
      ['never', false],
    ] as const) {
      const e = new TransferEngine({ threads: 1 });
      const t = await open(urlOf(newFolder(), 4, `&direct=${mode}`), ctx('model-a', PAGE, e));
      await t.write([page(0), page(1)]);
      await t.read([into(0), into(1)]);
      expect(same(0) && same(1)).toBe(true);
      const s = e.stats();
      expect(s.directOps > 0).toBe(expectDirect);
      expect(s.bufferedOps).toBeGreaterThan(0); // headers are always buffered
      await t.close();
      await e.close();
    }
  });

  it('direct=always takes aligned pages and refuses misaligned ones', async () => {
    if (!probeDirect(tmpdir()).supported) return;
    const t = await open(urlOf(newFolder(), 4, '&direct=always&crcChunk=4KiB'));
    await t.write([page(0)]);
    expect((await t.read([into(0)]))[0]!.status).toBe('hit');
    // Ranges whose destination is not 4 KiB aligned go through the aligned staging area.
    dst.view(0, PAGE).fill(0);
    const ranged = await t.read([{ key: testKey(0, 7), into: { arena: dst, offset: 200, length: 3 * 4096 }, range: { offset: 100, length: 3 * 4096 } }]);
    expect(ranged[0]).toMatchObject({ status: 'hit', length: 3 * 4096 });
    expect(Buffer.compare(src.view(100, 3 * 4096), dst.view(200, 3 * 4096))).toBe(0);
    expect((await codeOf(t.write([page(1, 100)]))).code).toBe('ERR_MISALIGNED');
    await t.write([page(2)]); // the refused write freed its slot
    expect(t.stats().pages).toBe(2);
    await t.close();
    expect((await codeOf(open(urlOf(newFolder(), 4, '&direct=always'), ctx('m', 1000)))).code).toBe('ERR_CONFIG');
  });

  it('verify=full drops pages whose bytes no longer match at open', async () => {
    const folder = newFolder();
    const a = await open(urlOf(folder, 8));
    await a.write([page(0), page(1), page(2, 5000)]);
    const at = a.locate(testKey(2, 7))!;
    await a.close();
    flipByte(at.path, at.dataOffset + 4999);
    const plain = await open(urlOf(folder, 8));
    expect(plain.recovery.pages).toBe(3); // headers alone cannot tell
    const r = await plain.read([into(2, PAGE)]);
    expect(r[0]!.status).toBe('error');
    await plain.close();
    const full = await open(urlOf(folder, 8, '&verify=full'));
    expect(full.recovery).toMatchObject({ pages: 2, corrupt: 1 });
    expect(await keysOf(full)).toEqual([testKey(0, 7), testKey(1, 7)].sort());
    await full.close();
  });

  describe('verified range reads (per-chunk CRC32Cs)', () => {
    const CHUNK = 4096;
    const ranged = (i: number, offset: number, length: number) => ({ key: testKey(i, 7), into: { arena: dst, offset: i * PAGE + offset, length }, range: { offset, length } });
    const sameRange = (i: number, offset: number, length: number) => Buffer.compare(src.view(i * PAGE + offset, length), dst.view(i * PAGE + offset, length)) === 0;
    const clear = (i: number) => dst.view(i * PAGE, PAGE).fill(0);

    it('returns the exact bytes of aligned and unaligned ranges, and declares rangeReads', async () => {
      const t = await open(urlOf(newFolder(), 8, `&crcChunk=${CHUNK}`));
      expect(t.capabilities).toMatchObject({ rangeReads: true, verifiesOnRead: true });
      await t.write([page(0), page(1, 5000)]);
      clear(0);
      clear(1);
      const cases: Array<[number, number, number]> = [
        [0, 0, CHUNK],
        [0, CHUNK, 3 * CHUNK],
        [0, 100, 9000],
        [0, PAGE - 10, 10],
        [1, 4000, 1000],
        [1, 0, 5000],
      ];
      const r = await t.read(cases.map(([i, o, l]) => ranged(i, o, l)));
      expect(r.map((o) => (o.status === 'hit' ? o.length : o.status))).toEqual(cases.map((c) => c[2]));
      for (const [i, o, l] of cases) expect(sameRange(i, o, l)).toBe(true);
      expect(t.stats().bytesRead).toBe(cases.reduce((a, c) => a + c[2], 0));
      await t.close();
    });

    it('a flipped byte inside the range fails it (ERR_CHECKSUM, no hit); one outside the range does not', async () => {
      const folder = newFolder();
      const t = await open(urlOf(folder, 8, `&crcChunk=${CHUNK}`));
      await t.write([page(2)]);
      const at = t.locate(testKey(2, 7))!;
      flipByte(at.path, at.dataOffset + 5 * CHUNK + 7); // inside chunk 5
      const r = await t.read([ranged(2, 5 * CHUNK, 100), ranged(2, 4 * CHUNK + 10, CHUNK + 20), ranged(2, 0, 5 * CHUNK), ranged(2, 6 * CHUNK, 2 * CHUNK)]);
      expect(r[0]).toMatchObject({ status: 'error', error: { code: 'ERR_CHECKSUM' } });
      expect(r[1]).toMatchObject({ status: 'error', error: { code: 'ERR_CHECKSUM' } });
      expect(r[2]).toMatchObject({ status: 'hit', length: 5 * CHUNK });
      expect(r[3]).toMatchObject({ status: 'hit', length: 2 * CHUNK });
      expect(sameRange(2, 0, 5 * CHUNK) && sameRange(2, 6 * CHUNK, 2 * CHUNK)).toBe(true);
      // The whole page is still checked against its CRC32C.
      expect((await t.read([into(2)]))[0]).toMatchObject({ status: 'error', error: { code: 'ERR_CHECKSUM' } });
      expect(t.stats().checksumFailures).toBe(3);
      await t.close();
      // Chunk CRCs survive a reopen (they live in the slot header).
      const again = await open(urlOf(folder, 8, `&crcChunk=${CHUNK}`));
      const r2 = await again.read([ranged(2, 5 * CHUNK + 1, 10), ranged(2, 0, CHUNK)]);
      expect(r2.map((o) => o.status)).toEqual(['error', 'hit']);
      await again.close();
    });

    it('a partly covered chunk is checked whole: a flip in its part outside the range still fails the range', async () => {
      const t = await open(urlOf(newFolder(), 8, `&crcChunk=${CHUNK}`));
      await t.write([page(3)]);
      const at = t.locate(testKey(3, 7))!;
      flipByte(at.path, at.dataOffset + 2 * CHUNK + 4000); // chunk 2, outside [2*CHUNK, +100)
      clear(3);
      const r = await t.read([ranged(3, 2 * CHUNK, 100)]);
      expect(r[0]).toMatchObject({ status: 'error', error: { code: 'ERR_CHECKSUM' } });
      // Bytes of a failed staged chunk are never copied to the destination.
      expect(dst.view(3 * PAGE + 2 * CHUNK, 100).every((b) => b === 0)).toBe(true);
      await t.close();
    });

    it('reads old-format slots (no chunk CRCs) whole, verified against the page CRC32C', async () => {
      const folder = newFolder();
      const t = await open(urlOf(folder, 8, `&crcChunk=${CHUNK}`));
      await t.write([page(4), page(5)]);
      const a4 = t.locate(testKey(4, 7))!;
      const a5 = t.locate(testKey(5, 7))!;
      await t.close();
      // Rewrite both headers as the format before chunk CRCs: word 28 and bytes 176..508 zero, self-checksum redone.
      for (const at of [a4, a5]) {
        const h = readAt(at.path, at.headerOffset, HEADER_BYTES);
        h.fill(0, 28, 32);
        h.fill(0, 176, 508);
        h.writeUInt32LE(crc32c(h.subarray(0, 508)), 508);
        const fd = openSync(at.path, 'r+');
        writeSync(fd, h, 0, HEADER_BYTES, at.headerOffset);
        closeSync(fd);
      }
      flipByte(a5.path, a5.dataOffset + PAGE - 1); // page 5: damaged far outside the range read below
      const old = await open(urlOf(folder, 8, `&crcChunk=${CHUNK}`));
      expect(old.recovery).toMatchObject({ pages: 2, torn: 0, invalid: 0 });
      clear(4);
      const r = await old.read([ranged(4, 100, 9000), ranged(5, 0, 100)]);
      expect(r[0]).toMatchObject({ status: 'hit', length: 9000 });
      expect(sameRange(4, 100, 9000)).toBe(true);
      expect(dst.view(4 * PAGE, 100).every((b) => b === 0)).toBe(true);
      // Whole-page check for an old slot: the damage outside the range fails it.
      expect(r[1]).toMatchObject({ status: 'error', error: { code: 'ERR_CHECKSUM' } });
      clear(4);
      expect((await old.read([into(4)]))[0]).toMatchObject({ status: 'hit', length: PAGE });
      expect(same(4)).toBe(true);
      await old.close();
    });

    it('refuses ranges outside the page and destinations shorter than the range', async () => {
      const t = await open(urlOf(newFolder(), 8));
      await t.write([page(6, 5000)]);
      await expect(t.read([ranged(6, 4500, 1000)])).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
      await expect(t.read([{ ...ranged(6, 0, 1000), into: { arena: dst, offset: 0, length: 999 } }])).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
      await t.close();
    });
  });

  it('checks CRC32C against what the caller said it wrote', async () => {
    const t = await open(urlOf(newFolder(), 4));
    const good = crc32c(src.view(0, PAGE));
    const w = await t.write([{ ...page(0), crc32c: good }, { ...page(1), crc32c: 1 }]);
    expect(w.crc32c[0]).toBe(good);
    expect(t.stats().checksumFailures).toBe(1);
    await t.close();
  });
});

describe('fs URLs', () => {
  it('parses the folder and options', () => {
    expect(parseFsUrl('fs:///mnt/filestore/kv?capacity=2TiB')).toMatchObject({
      path: '/mnt/filestore/kv',
      capacity: 2 * 2 ** 40,
      slab: undefined,
      direct: 'auto',
      verify: 'headers',
      preallocate: true,
    });
    expect(parseFsUrl('fs:///data/kv/?capacity=1GiB&slab=256MiB&direct=never&verify=full&preallocate=false')).toMatchObject({
      path: '/data/kv',
      slab: 256 * 2 ** 20,
      direct: 'never',
      verify: 'full',
      preallocate: false,
    });
    expect(parseFsUrl('fs:///kv?capacity=1GiB').crcChunk).toBe(64 * 1024);
    expect(parseFsUrl('fs:///kv?capacity=1GiB&crcChunk=256KiB').crcChunk).toBe(256 * 1024);
    expect(() => parseFsUrl('fs:///kv?capacity=1GiB&crcChunk=1000')).toThrow(/crcChunk/);
    expect(parseFsUrl('fs:///a%20b/kv?capacity=1GiB').path).toBe('/a b/kv');
  });

  it('names what is wrong', () => {
    const cases: Array<[string, RegExp]> = [
      ['fs:///mnt/kv', /option 'capacity'/],
      ['fs:///mnt/kv?capacity=lots', /option 'capacity' must be a capacity like 64GiB/],
      ['fs:///mnt/kv?capacity=1GiB&slab=0', /option 'slab' must be a slab file size/],
      ['fs:///mnt/kv?capacity=1GiB&direct=sometimes', /option 'direct'/],
      ['fs:///mnt/kv?capacity=1GiB&verify=maybe', /option 'verify'/],
      ['fs:///mnt/kv?capacity=1GiB&preallocate=yes', /option 'preallocate'/],
      ['fs:///mnt/kv?capacity=1GiB&colour=red', /unknown option\(s\) colour/],
      ['fs://mnt/kv?capacity=1GiB', /absolute folder after three slashes.*got host 'mnt'/],
      ['fs:///?capacity=1GiB', /needs a folder/],
      ['host://?capacity=1GiB', /scheme must be fs:\/\//],
    ];
    for (const [url, why] of cases) {
      let error: unknown;
      try {
        parseFsUrl(url);
      } catch (e) {
        error = e;
      }
      expect(error, url).toBeInstanceOf(TierSyncError);
      expect((error as TierSyncError).code, url).toBe('ERR_CONFIG');
      expect((error as TierSyncError).tier, url).toBe('fs');
      expect((error as Error).message, url).toMatch(why);
    }
  });

  it('refuses at open a slab too small for one slot, or too many slab files', async () => {
    const engine = new TransferEngine({ threads: 1 });
    const context = { engine, pageBytes: PAGE, fingerprint: '' };
    const small = new FsTier(`fs://${newFolder()}?capacity=1GiB&slab=1000`, context);
    await expect(small.open()).rejects.toThrow(/option 'slab' \(1000 bytes\) cannot hold one 65536-byte page slot/);
    const many = new FsTier(`fs://${newFolder()}?capacity=1TiB&slab=${SLAB}`, context);
    await expect(many.open()).rejects.toThrow(/slab files, more than 1024; use a larger 'slab'/);
    await engine.close();
  });

  it('computes geometry: data of adjacent slots is adjacent, headers padded to 4 KiB', () => {
    const g = geometryFor(PAGE, SLAB)!;
    expect(g).toEqual({ pageBytes: PAGE, slotStride: PAGE, slotsPerSlab: 4, dataOffset: 4096 });
    expect(slotsFor(3 * SLAB, g)).toBe(12);
    expect(slotsFor(3 * SLAB + 4096 + 2 * PAGE + 100, g)).toBe(14);
    expect(geometryFor(5000, 1 << 20)!.slotStride).toBe(8192);
    expect(geometryFor(PAGE, PAGE)).toBeUndefined();
  });
});
