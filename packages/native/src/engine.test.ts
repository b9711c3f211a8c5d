import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeviceArena, FileHandle, HostArena, TierSyncError, TransferBatch, TransferEngine, crc32c } from './index.js';
import { pattern, tempDir } from './test-helpers.js';

const MiB = 1 << 20;
let engine: TransferEngine;
let tmp: ReturnType<typeof tempDir>;

beforeAll(() => {
  engine = new TransferEngine({ threads: 2 });
  tmp = tempDir('engine');
});
afterAll(async () => {
  await engine.close();
  tmp.cleanup();
});

function code(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(TierSyncError);
    return (e as TierSyncError).code;
  }
  return undefined;
}

async function rejection(p: Promise<unknown>): Promise<TierSyncError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(TierSyncError);
    return e as TierSyncError;
  }
  throw new Error('expected a rejection');
}

describe('memory paths', () => {
  it('round-trips host -> device -> host byte-exact, for many sizes and offsets', async () => {
    const src = HostArena.create({ capacity: 8 * MiB });
    const dev = DeviceArena.create({ backend: 'sim', capacity: 8 * MiB });
    const dst = HostArena.create({ capacity: 8 * MiB });
    pattern(src.view(0, 8 * MiB), 1);
    const sizes = [1, 7, 4096, 4097, 65536, 262144, 3 * MiB + 5];
    let off = 0;
    const toDev = new TransferBatch();
    const back = new TransferBatch();
    for (const n of sizes) {
      toDev.add(src, off, dev, off + 3, n);
      back.add(dev, off + 3, dst, off, n);
      off += n + 11;
    }
    await engine.submit(toDev);
    await engine.submit(back);
    off = 0;
    for (const n of sizes) {
      expect(Buffer.compare(dst.view(off, n), src.view(off, n))).toBe(0);
      off += n + 11;
    }
  });

  it('computes CRC32C per descriptor while copying and reports mismatches on verify', async () => {
    const a = HostArena.create({ capacity: MiB });
    const b = HostArena.create({ capacity: MiB });
    pattern(a.view(0, MiB), 2);
    const batch = new TransferBatch().add(a, 0, b, 0, 1000).add(a, 4096, b, 4096, 300_000);
    const r = await engine.submit(batch, { checksums: true });
    expect([...r.checksums!]).toEqual([crc32c(a.view(0, 1000)), crc32c(a.view(4096, 300_000))]);
    const expected = Uint32Array.from(r.checksums!);
    expected[1]! ^= 1;
    const v = await engine.submit(batch, { expected });
    expect(v.mismatches).toEqual([1]);
  });

  it('splits one large copy across workers and still lands every byte', async () => {
    const a = HostArena.create({ capacity: 64 * MiB });
    const b = HostArena.create({ capacity: 64 * MiB });
    pattern(a.view(0, 64 * MiB), 3);
    await engine.submit(new TransferBatch().add(a, 0, b, 0, 64 * MiB - 1));
    expect(Buffer.compare(a.view(0, 64 * MiB - 1), b.view(0, 64 * MiB - 1))).toBe(0);
  });

  it('keeps 1,000 batches in flight at once and completes every one', async () => {
    const a = HostArena.create({ capacity: 4 * MiB });
    const b = HostArena.create({ capacity: 4 * MiB });
    pattern(a.view(0, 4 * MiB), 4);
    const all = [];
    for (let i = 0; i < 1000; i++) {
      all.push(engine.submit(new TransferBatch().add(a, i * 4096, b, i * 4096, 4096), { priority: i % 3 ? 'prefetch' : 'demand' }));
    }
    const results = await Promise.all(all);
    expect(new Set(results.map((r) => r.id)).size).toBe(1000);
    expect(Buffer.compare(a.view(0, 1000 * 4096), b.view(0, 1000 * 4096))).toBe(0);
  });

  it('runs background batches on at most backgroundThreads workers, leaving the rest to demand work', async () => {
    const capped = new TransferEngine({ threads: 3, backgroundThreads: 1 });
    const uncapped = new TransferEngine({ threads: 3 });
    expect(uncapped.stats().backgroundThreads).toBe(2);
    await uncapped.close();
    try {
      expect(capped.stats().backgroundThreads).toBe(1);
      const host = HostArena.create({ capacity: 4 * MiB });
      // 2 ms of emulated latency per copy, and gaps between copies so each is its own group.
      const dev = DeviceArena.create({ backend: 'sim', capacity: 8 * MiB, latencyNs: 2e6 });
      const background = new TransferBatch();
      for (let i = 0; i < 40; i++) background.add(host, i * 8192, dev, i * 16384, 4096);
      let maxBackground = 0;
      let sawRunning = false;
      const storm = capped.submit(background, { priority: 'writeBack' });
      let done = false;
      void storm.finally(() => (done = true));
      const demand = capped.submit(new TransferBatch().add(host, 0, dev, 4 * MiB, 4096).add(host, 16384, dev, 5 * MiB, 4096));
      while (!done) {
        const s = capped.stats();
        maxBackground = Math.max(maxBackground, s.runningBackground);
        if (s.running > 0) sawRunning = true;
        await new Promise((r) => setTimeout(r, 1));
      }
      await demand;
      expect(sawRunning).toBe(true);
      expect(maxBackground).toBeLessThanOrEqual(1);
      expect(capped.stats().runningBackground).toBe(0);
      expect(code(() => new TransferEngine({ backgroundThreads: 0 }))).toBe('ERR_INVALID_ARGUMENT');
    } finally {
      await capped.close();
    }
  });

  it('an empty batch resolves with nothing moved', async () => {
    const r = await engine.submit(new TransferBatch());
    expect(r.bytes).toBe(0);
  });
});

describe('file paths', () => {
  it('writes through the engine, durable, and plain fs reads the same bytes', async () => {
    const a = HostArena.create({ capacity: 8 * MiB });
    pattern(a.view(0, 8 * MiB), 5);
    const file = path.join(tmp.dir, 'write.bin');
    const fh = FileHandle.open(file, { writable: true, create: true, truncate: true });
    // Aligned pages go O_DIRECT, odd ones through the page cache; adjacent ones coalesce.
    const batch = new TransferBatch();
    for (let i = 0; i < 16; i++) batch.add(a, i * 262144, fh, i * 262144, 262144);
    batch.add(a, 4 * MiB + 1, fh, 4 * MiB, 1234);
    await engine.submit(batch, { durable: true });
    const onDisk = readFileSync(file);
    expect(onDisk.length).toBe(4 * MiB + 1234);
    expect(Buffer.compare(onDisk.subarray(0, 4 * MiB), a.view(0, 4 * MiB))).toBe(0);
    expect(Buffer.compare(onDisk.subarray(4 * MiB), a.view(4 * MiB + 1, 1234))).toBe(0);
    expect(engine.stats().directOps).toBeGreaterThan(0);
    fh.close();
  });

  it('reads a file written by plain fs into arenas, verifying checksums', async () => {
    const data = pattern(new Uint8Array(3 * MiB + 77), 6);
    const file = path.join(tmp.dir, 'read.bin');
    writeFileSync(file, data);
    const fh = FileHandle.open(file);
    const dev = DeviceArena.create({ capacity: 4 * MiB });
    const host = HostArena.create({ capacity: 4 * MiB });
    const expected = Uint32Array.of(crc32c(data.subarray(0, MiB)), crc32c(data.subarray(MiB)));
    const r = await engine.submit(new TransferBatch().add(fh, 0, dev, 0, MiB).add(fh, MiB, host, 0, 2 * MiB + 77), { expected });
    expect(r.mismatches).toEqual([]);
    await engine.submit(new TransferBatch().add(dev, 0, host, 2 * MiB + 77, MiB));
    expect(Buffer.compare(host.view(0, 2 * MiB + 77), data.subarray(MiB))).toBe(0);
    expect(Buffer.compare(host.view(2 * MiB + 77, MiB), data.subarray(0, MiB))).toBe(0);
  });

  it('reports a torn or corrupted file page as a checksum mismatch', async () => {
    const data = pattern(new Uint8Array(8192), 7);
    const file = path.join(tmp.dir, 'corrupt.bin');
    writeFileSync(file, data);
    const good = Uint32Array.of(crc32c(data.subarray(0, 4096)), crc32c(data.subarray(4096)));
    data[5000]! ^= 0xff;
    writeFileSync(file, data);
    const host = HostArena.create({ capacity: 8192 });
    const fh = FileHandle.open(file);
    const r = await engine.submit(new TransferBatch().add(fh, 0, host, 0, 4096).add(fh, 4096, host, 4096, 4096), { expected: good });
    expect(r.mismatches).toEqual([1]);
  });

  // Small file groups of one batch (a layer of every page) are taken several per worker turn and submitted to
  // io_uring together: every range must still land where it belongs, with its own checksum and mismatch.
  it.each([{ ioDepth: 1 }, { ioDepth: 4 }, {}, { io: 'sync' as const }])('reads and writes hundreds of small scattered ranges of one batch in place (%o)', async (options) => {
    const ioDepth = JSON.stringify(options).replace(/\W/g, '');
    const e = new TransferEngine({ threads: 2, ...options });
    try {
      const size = 4 * MiB;
      const files = [0, 1].map((f) => {
        const data = pattern(new Uint8Array(size), 20 + f);
        const file = path.join(tmp.dir, `scattered-${f}-${ioDepth}.bin`);
        writeFileSync(file, data);
        return { data, fh: FileHandle.open(file) };
      });
      const host = HostArena.create({ capacity: 8 * MiB });
      // 300 ranges alternating between the two files, with gaps between them (so none coalesce): aligned ones
      // (O_DIRECT), odd lengths and offsets (page cache), up to 64 KiB; destinations packed in reverse order.
      const ranges: Array<{ f: number; at: number; length: number; to: number }> = [];
      let to = 8 * MiB;
      for (let i = 0, at = 0; i < 300; i++) {
        const length = i % 3 === 0 ? 4096 * (1 + (i % 16)) : 1 + ((i * 7919) % 65_536);
        if (at + length > size) break;
        to -= length + (i % 5);
        ranges.push({ f: i % 2, at, length, to });
        if (i % 2 === 1) at += length + 4096 + (i % 3 === 0 ? 0 : 13);
      }
      const batch = new TransferBatch();
      for (const r of ranges) batch.add(files[r.f]!.fh, r.at, host, r.to, r.length);
      const expected = Uint32Array.from(ranges, (r) => crc32c(files[r.f]!.data.subarray(r.at, r.at + r.length)));
      expected[17] = expected[17]! ^ 1;
      const res = await e.submit(batch, { expected });
      expect(res.mismatches).toEqual([17]);
      for (const r of ranges) expect(Buffer.compare(host.view(r.to, r.length), files[r.f]!.data.subarray(r.at, r.at + r.length))).toBe(0);

      // And back: the same ranges written to a fresh file at scattered offsets, checksummed on the way.
      const out = path.join(tmp.dir, `scattered-out-${ioDepth}.bin`);
      const wh = FileHandle.open(out, { writable: true, create: true, truncate: true });
      const back = new TransferBatch();
      ranges.forEach((r, i) => back.add(host, r.to, wh, i * 70_000, r.length));
      const w = await e.submit(back, { checksums: true, durable: true });
      const written = readFileSync(out);
      ranges.forEach((r, i) => {
        const want = files[r.f]!.data.subarray(r.at, r.at + r.length);
        expect(Buffer.compare(written.subarray(i * 70_000, i * 70_000 + r.length), want)).toBe(0);
        expect(w.checksums?.[i]).toBe(crc32c(want));
      });
      wh.close();
      for (const f of files) f.fh.close();
      host.close();
    } finally {
      await e.close();
    }
  });

  it('uses O_DIRECT strictly in always mode and refuses misaligned requests', () => {
    const file = path.join(tmp.dir, 'direct.bin');
    const fh = FileHandle.open(file, { writable: true, create: true, direct: 'always' });
    const a = HostArena.create({ capacity: MiB });
    expect(code(() => new TransferBatch().add(a, 0, fh, 100, 4096))).toBe('ERR_MISALIGNED');
    expect(code(() => new TransferBatch().add(a, 0, fh, 0, 4000))).toBe('ERR_MISALIGNED');
    expect(code(() => new TransferBatch().add(a, 8, fh, 0, 4096))).toBe('ERR_MISALIGNED');
    expect(code(() => new TransferBatch().add(a, 4096, fh, 8192, 8192))).toBeUndefined();
  });

  it('fails a read past the end of the file with ERR_OUT_OF_RANGE', () => {
    const file = path.join(tmp.dir, 'short.bin');
    writeFileSync(file, new Uint8Array(100));
    const fh = FileHandle.open(file);
    const a = HostArena.create({ capacity: 4096 });
    expect(code(() => engine.submit(new TransferBatch().add(fh, 50, a, 0, 100)))).toBe('ERR_OUT_OF_RANGE');
  });
});

describe('bad input', () => {
  const a = () => HostArena.create({ capacity: 4096 });

  it('names the argument that is wrong', () => {
    const x = a();
    const y = a();
    expect(code(() => new TransferBatch().add(x, 0, y, 4000, 100))).toBe('ERR_OUT_OF_RANGE');
    expect(code(() => new TransferBatch().add(x, 4096, y, 0, 1))).toBe('ERR_OUT_OF_RANGE');
    expect(code(() => new TransferBatch().add(x, 0, y, 0, 0))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => new TransferBatch().add(x, -1, y, 0, 1))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => new TransferBatch().add(x, 0.5, y, 0, 1))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => new TransferBatch().add(x, Number.NaN, y, 0, 1))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => new TransferBatch().add(x, 0, x, 100, 200))).toBe('ERR_OVERLAP');
    expect(code(() => new TransferBatch().add(x, 0, x, 200, 200))).toBeUndefined();
    expect(code(() => new TransferBatch().add({} as HostArena, 0, y, 0, 1))).toBe('ERR_INVALID_ARGUMENT');
    expect(() => new TransferBatch().add(x, 0, y, 0, 1e20)).toThrow(/length/);
    expect(code(() => HostArena.create({ capacity: 0 }))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => DeviceArena.create({ backend: 'tpu' as 'sim', capacity: 10 }))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => FileHandle.open(''))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => FileHandle.open(path.join(tmp.dir, 'absent')))).toBe('ERR_IO');
    expect(code(() => FileHandle.open(path.join(tmp.dir, 'x'), { create: true }))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => engine.submit(new TransferBatch(), { priority: 'urgent' as 'demand' }))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => engine.submit(new TransferBatch().add(x, 0, y, 0, 1), { expected: new Uint32Array(3) }))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => new TransferEngine({ threads: 0 }))).toBe('ERR_INVALID_ARGUMENT');
  });

  it('refuses a read-only file as destination and file->file copies', () => {
    const file = path.join(tmp.dir, 'ro.bin');
    writeFileSync(file, new Uint8Array(4096));
    const ro = FileHandle.open(file);
    expect(code(() => new TransferBatch().add(a(), 0, ro, 0, 10))).toBe('ERR_READ_ONLY');
    expect(code(() => new TransferBatch().add(ro, 0, ro, 100, 10))).toBe('ERR_UNSUPPORTED');
  });

  it('refuses closed arenas and files, in JS and again in native code', async () => {
    const x = a();
    const y = a();
    const batch = new TransferBatch().add(x, 0, y, 0, 16);
    y.close();
    expect(code(() => engine.submit(batch))).toBe('ERR_CLOSED');
    expect(code(() => new TransferBatch().add(x, 0, y, 0, 16))).toBe('ERR_CLOSED');
    expect(code(() => y.view(0, 1))).toBe('ERR_CLOSED');
    // Past the TypeScript checks: the native layer refuses on its own.
    const { native } = await import('./addon.js');
    const raw = new native.TransferEngine({ threads: 1 });
    expect(code(() => raw.submit([x.native, y.native], new Float64Array([0, 0, 1, 0, 16]), {}))).toBe('ERR_CLOSED');
    await raw.close();
  });

  it('the native layer refuses malformed descriptors without crashing', async () => {
    const { native } = await import('./addon.js');
    const raw = new native.TransferEngine({ threads: 1 });
    const x = a();
    const y = a();
    const bad: Array<[unknown[], Float64Array, string]> = [
      [[x.native, y.native], new Float64Array([0, 0, 1, 0]), 'ERR_INVALID_ARGUMENT'],
      [[x.native, y.native], new Float64Array([0, 0, 5, 0, 1]), 'ERR_INVALID_ARGUMENT'],
      [[x.native, y.native], new Float64Array([0, -1, 1, 0, 1]), 'ERR_INVALID_ARGUMENT'],
      [[x.native, y.native], new Float64Array([0, 0, 1, 4095, 2]), 'ERR_OUT_OF_RANGE'],
      [[x.native, y.native], new Float64Array([0, 2 ** 60, 1, 0, 1]), 'ERR_INVALID_ARGUMENT'],
      [[x.native, x.native], new Float64Array([0, 0, 1, 10, 20]), 'ERR_OVERLAP'],
      [[{}, y.native], new Float64Array([0, 0, 1, 0, 1]), 'ERR_INVALID_ARGUMENT'],
    ];
    for (const [eps, desc, want] of bad) {
      expect(code(() => raw.submit(eps as never, desc, {}))).toBe(want);
    }
    expect(code(() => raw.submit([] as never, new Uint32Array(5) as never, {}))).toBe('ERR_INVALID_ARGUMENT');
    await raw.close();
  });
});

describe('cancellation, deadlines and close', () => {
  // A sim device behind an emulated 20 MB/s link makes a 64 MiB copy take seconds.
  const slowDevice = () => DeviceArena.create({ backend: 'sim', capacity: 64 * MiB, bandwidthBytesPerSec: 20e6 });

  it('aborts a running batch through an AbortSignal', async () => {
    const host = HostArena.create({ capacity: 64 * MiB });
    const dev = slowDevice();
    const ac = new AbortController();
    const p = engine.submit(new TransferBatch().add(host, 0, dev, 0, 64 * MiB), { signal: ac.signal });
    setTimeout(() => ac.abort(), 20);
    expect((await rejection(p)).code).toBe('ERR_ABORTED');
    expect(engine.stats().cancelledBatches).toBeGreaterThan(0);
  });

  it('rejects an already aborted signal without queuing', async () => {
    const ac = new AbortController();
    ac.abort();
    const x = HostArena.create({ capacity: 64 });
    expect((await rejection(engine.submit(new TransferBatch().add(x, 0, x, 32, 32), { signal: ac.signal }))).code).toBe('ERR_ABORTED');
  });

  it('times out a batch that passes its deadline, queued or running', async () => {
    const host = HostArena.create({ capacity: 64 * MiB });
    const dev = slowDevice();
    const batches = [0, 1, 2].map(() => engine.submit(new TransferBatch().add(host, 0, dev, 0, 64 * MiB), { timeoutMs: 50 }));
    const settled = await Promise.allSettled(batches);
    for (const s of settled) expect(s.status === 'rejected' && (s.reason as TierSyncError).code).toBe('ERR_TIMEOUT');
    expect(engine.stats().timedOutBatches).toBeGreaterThanOrEqual(3);
  });

  it('close() waits for in-flight work, then refuses new batches', async () => {
    const own = new TransferEngine({ threads: 2 });
    const host = HostArena.create({ capacity: 8 * MiB });
    const dev = DeviceArena.create({ backend: 'sim', capacity: 8 * MiB, bandwidthBytesPerSec: 100e6 });
    pattern(host.view(0, 8 * MiB), 8);
    let done = 0;
    const work = [0, 1, 2, 3].map((i) => own.submit(new TransferBatch().add(host, i * 2 * MiB, dev, i * 2 * MiB, 2 * MiB)).then(() => done++));
    await own.close();
    expect(done).toBe(4);
    await Promise.all(work);
    expect(code(() => own.submit(new TransferBatch()))).toBe('ERR_CLOSED');
  });

  it('keeps arenas alive while a batch runs even if closed meanwhile', async () => {
    const host = HostArena.create({ capacity: 8 * MiB });
    const back = HostArena.create({ capacity: 8 * MiB });
    const dev = DeviceArena.create({ backend: 'sim', capacity: 8 * MiB, bandwidthBytesPerSec: 200e6 });
    pattern(host.view(0, 8 * MiB), 9);
    const p = engine.submit(new TransferBatch().add(host, 0, dev, 0, 8 * MiB));
    host.close();
    await p;
    await engine.submit(new TransferBatch().add(dev, 0, back, 0, 8 * MiB));
    expect(crc32c(back.view(0, 8 * MiB))).toBe(crc32c(pattern(new Uint8Array(8 * MiB), 9)));
  });
});

describe('resources', () => {
  // ASan's quarantine holds freed memory back on purpose, so RSS says nothing under the sanitizer build.
  it.skipIf(process.env.TIERSYNC_SANITIZED === '1')('keeps RSS stable across 10,000 batches', async () => {
    const a = HostArena.create({ capacity: MiB, prefault: true });
    const b = HostArena.create({ capacity: MiB, prefault: true });
    const round = async (n: number) => {
      for (let i = 0; i < n; i += 100) {
        const wave = [];
        for (let k = 0; k < 100; k++) {
          wave.push(engine.submit(new TransferBatch().add(a, k * 4096, b, k * 4096, 4096).add(a, 512 * 1024, b, 512 * 1024, 1024), { checksums: k % 2 === 0 }));
        }
        await Promise.all(wave);
      }
    };
    await round(2000); // warm-up: JIT, allocator pools
    globalThis.gc?.();
    const before = process.memoryUsage().rss;
    await round(10_000);
    globalThis.gc?.();
    const growth = process.memoryUsage().rss - before;
    expect(growth).toBeLessThan(24 * MiB);
  });
});
