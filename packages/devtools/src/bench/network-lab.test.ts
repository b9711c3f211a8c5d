import { describe, expect, it } from 'vitest';
import { HostArena, crc32c } from '@tiersync/native';
import { tcpBaseline } from '@tiersync/native/bench';
import { NetworkLab } from './network-lab.js';
import { runTiersBench } from './tiers.js';

const MiB = 1024 * 1024;

describe('raw TCP baseline arguments', () => {
  it('names a namespace that does not exist and an address that is not IPv4', () => {
    const a = HostArena.create({ capacity: MiB });
    const b = HostArena.create({ capacity: MiB });
    expect(() => tcpBaseline(a, b, MiB, MiB, { netns: 'tiersync-no-such-namespace', address: '10.0.0.1' })).toThrow(
      expect.objectContaining({ code: 'ERR_IO', message: expect.stringContaining("network namespace 'tiersync-no-such-namespace'") }),
    );
    expect(() => tcpBaseline(a, b, MiB, MiB, { netns: 'x', address: 'not-an-address' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    expect(() => tcpBaseline(a, b, MiB, MiB, { netns: '../x', address: '10.0.0.1' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    a.close();
    b.close();
  });
});

// Network namespaces need root (the setup installs iproute2).
describe.skipIf(process.getuid?.() !== 0)('network lab (needs root: ip netns, tc)', () => {
  it('carries the raw baseline across a shaped link into another namespace, byte-exact', async () => {
    const lab = await NetworkLab.create('netns', 1, 2, () => {});
    const src = HostArena.create({ capacity: 16 * MiB });
    const dst = HostArena.create({ capacity: 16 * MiB });
    try {
      const view = src.view(0, 16 * MiB);
      for (let i = 0; i < view.length; i += 4096) view[i] = (i >>> 12) & 0xff;
      expect(lab.rawTransfer).toBeDefined();
      const seconds = await lab.rawTransfer!(16 * MiB, src, dst);
      expect(seconds).toBeGreaterThan(0);
      expect(crc32c(dst.view(0, 16 * MiB))).toBe(crc32c(view));
    } finally {
      src.close();
      dst.close();
      await lab.close();
    }
  });

  it('bench tiers reports the peer tier across the link beside raw TCP over it', async () => {
    const r = await runTiersBench({ drivers: ['peer'], bytes: 16 * MiB, pageSizes: [256 * 1024], repetitions: 1, network: 'netns', linkGbit: 2 });
    const f = r.drivers[0]!;
    expect(f.link).toMatchObject({ gbit: 2 });
    for (const k of ['writeGiBps', 'readGiBps', 'rawGiBps', 'writeRatio', 'readRatio', 'cpuBusyFraction'] as const) expect(f.link![k]).toBeGreaterThan(0);
    for (const k of ['writeGiBps', 'readGiBps', 'writeRatio', 'readRatio'] as const) expect(f.link!.encrypted[k]).toBeGreaterThan(0);
  }, 120_000);
});
