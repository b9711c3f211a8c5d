// The CUDA backend's copies. They need a CUDA device (and its driver): without one every test here is skipped
// and the reason CUDA gave is shown in the skip; arena.test.ts checks that the backend then refuses cleanly.
import { afterAll, describe, expect, it } from 'vitest';
import { DeviceArena, HostArena, TransferBatch, TransferEngine, crc32c, cudaStatus } from './index.js';

const status = cudaStatus();
const PAGE = 256 * 1024;
const PAGES = 64;
const BYTES = PAGE * PAGES;

describe.skipIf(!status.available)(`cuda backend (${status.available ? `${status.devices} device(s), runtime ${status.runtimeVersion}` : `skipped: ${status.reason}`})`, () => {
  const engine = new TransferEngine({ threads: 2 });
  const arenas: Array<HostArena | DeviceArena> = [];
  const host = (fill?: (i: number) => number) => {
    const a = HostArena.create({ capacity: BYTES });
    if (fill) {
      const v = a.view(0, BYTES);
      for (let i = 0; i < BYTES; i++) v[i] = fill(i);
    }
    arenas.push(a);
    return a;
  };
  const device = () => {
    const d = DeviceArena.create({ backend: 'cuda', capacity: BYTES });
    arenas.push(d);
    return d;
  };
  const pattern = (i: number) => (i * 131 + (i >> 11)) & 0xff;
  afterAll(async () => {
    await engine.close();
    for (const a of arenas) a.close();
  });

  it('moves many pages host -> device -> host with their checksums, in either order of pages', async () => {
    const src = host(pattern);
    const back = host();
    const dev = device();
    const sums = Uint32Array.from({ length: PAGES }, (_, p) => crc32c(src.view(p * PAGE, PAGE)));
    const up = new TransferBatch();
    // Pages land reversed on the device: each piece is its own copy with its own place.
    for (let p = 0; p < PAGES; p++) up.add(src, p * PAGE, dev, (PAGES - 1 - p) * PAGE, PAGE);
    const sent = await engine.submit(up, { checksums: true });
    expect(Array.from(sent.checksums!)).toEqual(Array.from(sums));
    const down = new TransferBatch();
    const expected = new Uint32Array(PAGES);
    for (let p = 0; p < PAGES; p++) {
      down.add(dev, (PAGES - 1 - p) * PAGE, back, p * PAGE, PAGE);
      expected[p] = sums[p]!;
    }
    expected[7] = (expected[7]! ^ 1) >>> 0; // one wrong expectation: reported, the rest verified
    const got = await engine.submit(down, { expected });
    expect(got.mismatches).toEqual([7]);
    expect(Buffer.compare(back.view(0, BYTES), src.view(0, BYTES))).toBe(0);
  });

  it('moves one large range split over workers, and device -> device', async () => {
    const src = host(pattern);
    const back = host();
    const a = device();
    const b = device();
    await engine.submit(new TransferBatch().add(src, 0, a, 0, BYTES));
    await engine.submit(new TransferBatch().add(a, 0, b, 0, BYTES));
    await engine.submit(new TransferBatch().add(b, 0, back, 0, BYTES));
    expect(Buffer.compare(back.view(0, BYTES), src.view(0, BYTES))).toBe(0);
  });

  it('completes a batch only after its last copy landed, batch after batch', async () => {
    const src = host(pattern);
    const dev = device();
    const back = host();
    for (let round = 0; round < 4; round++) {
      src.view(0, BYTES).fill(round + 1);
      await engine.submit(new TransferBatch().add(src, 0, dev, 0, BYTES));
      const down = new TransferBatch();
      for (let p = 0; p < PAGES; p++) down.add(dev, p * PAGE, back, p * PAGE, PAGE);
      await engine.submit(down);
      // Every byte of the round, none of the previous one's: no copy was still running when the batch completed.
      expect(back.view(0, BYTES).every((x) => x === round + 1)).toBe(true);
    }
  });
});
