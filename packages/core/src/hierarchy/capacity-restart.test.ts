import { afterEach, describe, expect, it } from 'vitest';
import { TierSyncError, crc32c } from '@tiersync/native';
import { TierSync } from './tier-sync.js';
import type { TierSyncConfig } from './config.js';
import { PAGE, context, hierarchyFixture, layout } from './test-fixtures.js';

const fx = hierarchyFixture({ model: 'capacity-restart@1', dirPrefix: 'tiersync-capacity-', watermarks: { high: 1, low: 0.75 }, fsPages: 64 });
afterEach(fx.cleanup);

describe('restarting with a smaller fs tier capacity', () => {
  it('is refused while pages sit past the new capacity, and loses none of them', async () => {
    const dir = fx.tempDir();
    const config = (pages: number) =>
      ({ model: 'capacity-restart@1', layout, tiers: [{ url: `fs://${dir}/fs?capacity=${pages * PAGE}` }], index: { path: `${dir}/index.sqlite` } }) as TierSyncConfig;
    const src = fx.arena(40);
    const dst = fx.arena(40);
    const tokens = context(7, 40);
    const first = await fx.opened(new TierSync(config(64)));
    const v = src.view(0, 40 * PAGE);
    for (let i = 0; i < v.length; i += 97) v[i] = (i * 2654435761) >>> 24;
    expect(await first.store(tokens, Array.from({ length: 40 }, (_, i) => ({ arena: src, offset: i * PAGE, length: PAGE })))).toMatchObject({ stored: 40 });
    await first.close();

    // 8 pages of room, 40 pages held: the fs tier refuses to open rather than drop 32 of them (and the index rows).
    const cut = new TierSync(config(8));
    const e = await cut.open().then(
      () => undefined,
      (err: unknown) => err,
    );
    await cut.close();
    expect(e).toBeInstanceOf(TierSyncError);
    expect((e as TierSyncError).code).toBe('ERR_CONFIG');
    expect((e as TierSyncError).tier).toBe('fs');
    const m = /capacity (\d+) bytes holds (\d+) page slot\(s\), but (\d+) page\(s\) .* at least (\d+) bytes/.exec((e as TierSyncError).message);
    expect(m, (e as TierSyncError).message).not.toBeNull();
    const [, asked, slots, past, least] = m!.map(Number);
    expect(asked).toBe(8 * PAGE);
    expect(slots! + past!).toBe(40); // slot headers take some of the 8 pages' room
    expect(least).toBeGreaterThan(40 * PAGE);
    expect(least).toBeLessThan(64 * PAGE);

    // At the least capacity named (or the old one), every page is found and loads byte-exact.
    const ts = await fx.opened(new TierSync({ ...config(64), tiers: [{ url: `fs://${dir}/fs?capacity=${least}` }] }));
    const hit = ts.lookup(tokens);
    expect(hit.pages.length).toBe(40);
    const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
    expect(r).toMatchObject({ loaded: 40, missing: [] });
    expect(crc32c(dst.view(0, 40 * PAGE))).toBe(crc32c(src.view(0, 40 * PAGE)));
  });
});
