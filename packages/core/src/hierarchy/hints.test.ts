/** Store hints reach the tiers' policies: page parents (prefix-aware) and soft retention (session-aware). */
import { afterEach, describe, expect, it } from 'vitest';
import type { HostArena } from '@tiersync/native';
import { PAGE, context, hierarchyFixture } from './test-fixtures.js';

const fx = hierarchyFixture({ model: 'hints-test@1', dirPrefix: 'tiersync-hints-', config: { promoteOnHit: false }, watermarks: { high: 1, low: 1 }, fsPages: 64 });
const { hierarchy, arena } = fx;
afterEach(fx.cleanup);

const pages = (a: HostArena, first: number, count: number) => Array.from({ length: count }, (_, i) => ({ arena: a, offset: (first + i) * PAGE, length: PAGE }));
const tiersOf = (ts: Awaited<ReturnType<typeof hierarchy>>, tokens: Uint32Array) => ts.lookup(tokens).pages.map((p) => p.tiers[0]);

describe('store hints', () => {
  it('a prefix-aware tier demotes the tail of the chain its policy chose, not its root', async () => {
    const run = async (policy: string) => {
      const ts = await hierarchy({ hbm: 4, host: 16 }, [{ policy }, { writeMode: 'write-back' }, {}]);
      const src = arena(8);
      const a = context(1, 3);
      await ts.store(a, pages(src, 0, 3));
      await ts.store(context(2, 2), pages(src, 3, 2));
      return tiersOf(ts, a);
    };
    expect(await run('lru')).toEqual(['host', 'hbm', 'hbm']);
    expect(await run('prefix-aware:lru')).toEqual(['hbm', 'hbm', 'host']);
  });

  it('a session-aware tier keeps a session expected back over unhinted pages, and lets a finished one go first', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 }, [{ policy: 'session-aware:lru' }, { writeMode: 'write-back' }, {}]);
    const src = arena(10);
    const waiting = context(3, 2);
    await ts.store(waiting, pages(src, 0, 2), { retention: { expectedReturnMs: 60_000 } });
    const plain = context(4, 2);
    await ts.store(plain, pages(src, 2, 2));
    await ts.store(context(5, 2), pages(src, 4, 2));
    expect(tiersOf(ts, waiting)).toEqual(['hbm', 'hbm']);
    expect(tiersOf(ts, plain)).toEqual(['host', 'host']);
    // The session ends: a store of its context (all pages existing) marks them finished, and they go first.
    const r = await ts.store(waiting, pages(src, 0, 2), { retention: { finished: true } });
    expect(r.existing).toBe(2);
    await ts.store(context(6, 2), pages(src, 6, 2));
    expect(tiersOf(ts, waiting)).toEqual(['host', 'host']);
  });

  it('refuses a malformed hint by name', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 });
    const src = arena(1);
    expect(() => ts.store(context(7, 1), pages(src, 0, 1), { retention: { expectedReturnMs: -5 } })).toThrow(/options.retention/);
  });
});
