// Spans packages: a TierSync hierarchy (core) whose lower tier is another host's RAM reached through the peer
// driver (tiers) over the native data plane (native), with pages chosen by the policy package.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena, TransferEngine, crc32c, type PeerServer } from '@tiersync/native';
import { HostTier, servePeer } from '@tiersync/tiers';
import { TierSync } from '@tiersync/core';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 2, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 16 * 1024;

describe('hierarchy over a peer host', () => {
  let remoteEngine: TransferEngine;
  let remote: HostTier;
  let server: PeerServer;
  let ts: TierSync;

  beforeAll(async () => {
    // The "other host": its own engine and host tier, served with a secret.
    remoteEngine = new TransferEngine({ threads: 1 });
    remote = new HostTier(`host://?capacity=${256 * PAGE}`, { engine: remoteEngine, pageBytes: PAGE, fingerprint: 'remote' });
    await remote.open();
    server = servePeer(remote, { secret: 'cluster-secret' });
    ts = new TierSync({
      model: 'integration@1',
      layout,
      tiers: [
        { url: `host://?capacity=${8 * PAGE}`, name: 'local', highWatermark: 1, lowWatermark: 0.5 },
        { url: `peer://127.0.0.1:${server.port}?secret=cluster-secret&streams=2`, name: 'remote' },
      ],
    });
    await ts.open();
  });

  afterAll(async () => {
    await ts.close();
    server.close();
    await remote.close();
    await remoteEngine.close();
  });

  it('demotes to the other host under pressure and loads pages back byte-exact', async () => {
    const src = HostArena.create({ capacity: 32 * PAGE });
    const dst = HostArena.create({ capacity: 32 * PAGE });
    const contexts = [1, 2, 3].map((c) => Uint32Array.from({ length: 8 * 16 }, (_, i) => (c * 7919 + i * 31) % 30_000));
    const view = src.view(0, 32 * PAGE);
    for (let i = 0; i < view.length; i += 97) view[i] = (i * 13) & 0xff;
    for (const [c, tokens] of contexts.entries()) {
      await ts.store(tokens, Array.from({ length: 8 }, (_, i) => ({ arena: src, offset: (c * 8 + i) * PAGE, length: PAGE })));
    }
    const first = ts.lookup(contexts[0]!);
    expect(first.pages.length).toBe(8);
    expect(first.pages.some((p) => p.tier === 'remote')).toBe(true);
    expect(remote.stats().pages).toBeGreaterThan(0);
    const r = await ts.load(first, Array.from({ length: 8 }, (_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
    expect(r.missing).toEqual([]);
    expect(r.byTier.remote).toBeGreaterThan(0);
    expect(crc32c(dst.view(0, 8 * PAGE))).toBe(crc32c(src.view(0, 8 * PAGE)));
  });
});
