import { rmSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { HostArena, TransferEngine } from '@tiersync/native';
import { testKey, tierConformance } from '../testing.js';
import { HostTier, parseHostUrl } from './index.js';

const PAGE = 64 * 1024;

tierConformance('host://', () => ({
  pageBytes: PAGE,
  capacityPages: 16,
  async create(context) {
    const t = new HostTier(`host://?capacity=${16 * PAGE}`, context);
    await t.open();
    return t;
  },
}));

tierConformance('host:// on /dev/shm', () => {
  const shm = `/dev/shm/tiersync-host-conformance-${process.pid}`;
  const url = `host://?capacity=${16 * PAGE}&shm=${shm}`;
  return {
    pageBytes: PAGE,
    capacityPages: 16,
    async create(context) {
      rmSync(shm, { force: true });
      const t = new HostTier(url, context);
      await t.open();
      return t;
    },
    async reopen(context) {
      const t = new HostTier(url, context);
      await t.open();
      return t;
    },
    async corrupt(driver, key) {
      const t = driver as HostTier;
      const { slot } = (t as unknown as { table: Map<string, { slot: number }> }).table.get(key)!;
      const { arena, dataOffset } = (t as unknown as { store: { arena: HostArena; dataOffset: number } }).store;
      arena.view(dataOffset + slot * PAGE + 10, 1)[0]! ^= 0xff;
    },
    async cleanup() {
      rmSync(shm, { force: true });
    },
  };
});

describe('host tier on /dev/shm', () => {
  const shm = `/dev/shm/tiersync-host-test-${process.pid}`;

  it('refuses to reattach pages written under another fingerprint, saying why', async () => {
    rmSync(shm, { force: true });
    const engine = new TransferEngine({ threads: 1 });
    const src = HostArena.create({ capacity: PAGE });
    const a = new HostTier(`host://?capacity=${4 * PAGE}&shm=${shm}`, { engine, pageBytes: PAGE, fingerprint: 'model-a' });
    await a.open();
    await a.write([{ key: testKey(1), source: { arena: src, offset: 0, length: PAGE } }]);
    await a.close();
    const b = new HostTier(`host://?capacity=${4 * PAGE}&shm=${shm}`, { engine, pageBytes: PAGE, fingerprint: 'model-b' });
    await expect(b.open()).rejects.toThrow(/fingerprint is 'model-a', expected 'model-b'/);
    const c = new HostTier(`host://?capacity=${4 * PAGE}&shm=${shm}`, { engine, pageBytes: PAGE, fingerprint: 'model-a' });
    await c.open();
    expect(c.attachNote).toMatch(/1 page\(s\) recovered/);
    await c.close();
    await engine.close();
    rmSync(shm, { force: true });
  });

  it('holds its shm file with a kernel lock: a second tier on it is refused until the first closes', async () => {
    rmSync(shm, { force: true });
    const engine = new TransferEngine({ threads: 1 });
    const src = HostArena.create({ capacity: PAGE });
    const url = `host://?capacity=${4 * PAGE}&shm=${shm}`;
    const a = new HostTier(url, { engine, pageBytes: PAGE, fingerprint: 'model-a' });
    await a.open();
    await a.write([{ key: testKey(2), source: { arena: src, offset: 0, length: PAGE } }]);
    const b = new HostTier(url, { engine, pageBytes: PAGE, fingerprint: 'model-a' });
    await expect(b.open()).rejects.toMatchObject({ code: 'ERR_UNAVAILABLE', message: expect.stringMatching(/in use by another host tier/) });
    await a.close();
    const c = new HostTier(url, { engine, pageBytes: PAGE, fingerprint: 'model-a' });
    await c.open();
    expect(await c.has([testKey(2)])).toEqual([true]);
    await c.close();
    await engine.close();
    src.close();
    rmSync(shm, { force: true });
  });

  it('locate(): where stored pages are now, without pinning or counting them; undefined for a page it does not hold; a later free bumps the slot version', async () => {
    const engine = new TransferEngine({ threads: 1 });
    const src = HostArena.create({ capacity: 2 * PAGE });
    src.view(0, 2 * PAGE).fill(7);
    const t = new HostTier(`host://?capacity=${4 * PAGE}`, { engine, pageBytes: PAGE, fingerprint: '' });
    await t.open();
    const w = await t.write([
      { key: testKey(1), source: { arena: src, offset: 0, length: PAGE } },
      { key: testKey(2), source: { arena: src, offset: PAGE, length: 100 } },
    ]);
    const hits = t.stats().hits;
    const [a, b, none] = t.locate([testKey(1), testKey(2), testKey(3)]);
    expect(none).toBeUndefined();
    expect(a).toMatchObject({ length: PAGE, crc32c: w.crc32c[0] });
    expect(b).toMatchObject({ length: 100, crc32c: w.crc32c[1] });
    expect(a!.slot).not.toBe(b!.slot);
    // The same place pinRemote() names (which pins: undone at once).
    const pinned = t.pinRemote([testKey(1), testKey(2)]);
    t.unpin([testKey(1), testKey(2)]);
    expect(pinned.map((p) => p!.offset)).toEqual([a!.offset, b!.offset]);
    expect(t.stats().hits - hits).toBe(2); // pinRemote's; locate() counted none
    // Not pinned: a delete frees the slot, bumping its version; the page is then not located.
    const version = t.slotVersions![a!.slot]!;
    expect(t.deleteNow([testKey(1)])).toEqual({ deleted: [testKey(1)], pinned: [] });
    expect(t.slotVersions![a!.slot]).toBe(version + 1);
    expect(t.locate([testKey(1)])).toEqual([undefined]);
    await t.close();
    await engine.close();
    src.close();
  });

  it('deletes a page a reader outside JavaScript holds (slotPins) at once, but reuses its slot only once the reader lets go', async () => {
    const engine = new TransferEngine({ threads: 1 });
    const src = HostArena.create({ capacity: PAGE });
    src.view(0, PAGE).fill(9);
    const t = new HostTier(`host://?capacity=${PAGE}`, { engine, pageBytes: PAGE, fingerprint: '' });
    await t.open();
    const changes: string[] = [];
    const unwatch = t.watchKeys({ added: (keys) => changes.push(`+${keys.join(',')}`), removed: (keys) => changes.push(`-${keys.join(',')}`) });
    await t.write([{ key: testKey(1), source: { arena: src, offset: 0, length: PAGE } }]);
    const [where] = t.locate([testKey(1)]);
    const version = t.slotVersions![where!.slot]!;
    // A reader outside JavaScript holds the only slot: the page is gone for everyone else, its version moved.
    Atomics.add(t.slotPins!, where!.slot, 1);
    expect(t.deleteNow([testKey(1)])).toEqual({ deleted: [testKey(1)], pinned: [] });
    expect(t.slotVersions![where!.slot]).toBe(version + 1);
    expect(t.locate([testKey(1)])).toEqual([undefined]);
    expect(changes).toEqual([`+${testKey(1)}`, `-${testKey(1)}`]);
    // Its slot is not handed out under the reader: the one-slot tier has no room yet. A write waits for the reader
    // up to its deadline.
    expect(t.reserveRemote([testKey(2)])).toBeUndefined();
    await expect(t.write([{ key: testKey(2), source: { arena: src, offset: 0, length: PAGE } }], { timeoutMs: 30 })).rejects.toMatchObject({ code: 'ERR_TIER_FULL' });
    const write = t.write([{ key: testKey(2), source: { arena: src, offset: 0, length: PAGE } }]);
    // Let go: the waiting write takes the slot.
    setTimeout(() => Atomics.sub(t.slotPins!, where!.slot, 1), 20);
    expect((await write).written).toEqual([testKey(2)]);
    expect(t.locate([testKey(2)])[0]?.offset).toBe(where!.offset);
    unwatch();
    await t.close();
    await engine.close();
    src.close();
  });

  it('says why an anonymous host tier starts empty', async () => {
    const engine = new TransferEngine({ threads: 1 });
    const t = new HostTier(`host://?capacity=${PAGE}`, { engine, pageBytes: PAGE, fingerprint: '' });
    await t.open();
    expect(t.attachNote).toMatch(/anonymous memory: starts empty/);
    expect(t.capabilities.persistent).toBe(false);
    await t.close();
    await engine.close();
  });

  it('parses URLs and names what is wrong', () => {
    expect(parseHostUrl('host://?capacity=64GiB&shm=/dev/shm/a')).toMatchObject({ capacity: 64 * 2 ** 30, shm: '/dev/shm/a', verify: true });
    expect(() => parseHostUrl('host://?capacity=1GiB&shm=relative')).toThrow(/option 'shm' must be an absolute path/);
    expect(() => parseHostUrl('host://box?capacity=1GiB')).toThrow(/takes only options/);
    expect(() => parseHostUrl('host://?capacity=0')).toThrow(/capacity/);
  });
});
