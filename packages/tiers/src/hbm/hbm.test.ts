import { describe, expect, it } from 'vitest';
import { TransferEngine } from '@tiersync/native';
import { tierConformance } from '../testing.js';
import { HbmTier, parseHbmUrl } from './index.js';

const PAGE = 64 * 1024;

tierConformance('hbm://sim', () => ({
  pageBytes: PAGE,
  capacityPages: 16,
  async create(context) {
    const t = new HbmTier(`hbm://sim?capacity=${16 * PAGE}`, context);
    await t.open();
    return t;
  },
}));

tierConformance('hbm://sim with verify', () => {
  let last: HbmTier | undefined;
  return {
    pageBytes: PAGE,
    capacityPages: 8,
    async create(context) {
      last = new HbmTier(`hbm://sim?capacity=${8 * PAGE}&verify=true`, context);
      await last.open();
      return last;
    },
    // Device memory cannot be viewed from JS; corrupt by copying another page's bytes over it.
    async corrupt(driver, key) {
      const { HostArena, TransferBatch } = await import('@tiersync/native');
      const t = driver as HbmTier;
      const slot = (t as unknown as { table: Map<string, { slot: number }> }).table.get(key)!.slot;
      const junk = HostArena.create({ capacity: 16 });
      junk.view(0, 16).fill(0xee);
      const engine = (t as unknown as { context: { engine: TransferEngine } }).context.engine;
      const arena = (t as unknown as { store: { arena: never } }).store.arena;
      await engine.submit(new TransferBatch().add(junk, 0, arena, slot * PAGE + 100, 16));
    },
  };
});

describe('hbm URLs', () => {
  it('parses sim and cuda forms', () => {
    expect(parseHbmUrl('hbm://sim?capacity=8GiB')).toMatchObject({ backend: 'sim', capacity: 8 * 2 ** 30 });
    expect(parseHbmUrl('hbm://sim?capacity=1GiB&bandwidth=25GB&latencyUs=2')).toMatchObject({ bandwidthBytesPerSec: 25e9, latencyUs: 2 });
    expect(parseHbmUrl('hbm://cuda/1?capacity=40GiB')).toMatchObject({ backend: 'cuda', device: 1 });
  });

  it('names the part that is wrong', () => {
    expect(() => parseHbmUrl('hbm://sim')).toThrow(/capacity/);
    expect(() => parseHbmUrl('hbm://sim?capacity=lots')).toThrow(/option 'capacity' must be a capacity like 64GiB/);
    expect(() => parseHbmUrl('hbm://tpu?capacity=1GiB')).toThrow(/backend 'tpu'/);
    expect(() => parseHbmUrl('hbm://cuda/x?capacity=1GiB')).toThrow(/device 'x'/);
    expect(() => parseHbmUrl('hbm://sim?capacity=1GiB&colour=red')).toThrow(/unknown option\(s\) colour/);
    expect(() => parseHbmUrl('host://?capacity=1GiB')).toThrow(/scheme must be hbm:\/\//);
  });
});
