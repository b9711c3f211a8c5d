// recordHits(): reads made outside load() (a host tier's slots read directly, e.g. by the RESP door) count for the
// eviction policy as load()'s hits do.
import { afterEach, describe, expect, it } from 'vitest';
import { TierSyncError, type HostArena } from '@tiersync/native';
import type { TierSync } from './tier-sync.js';
import { PAGE, hierarchyFixture, key } from './test-fixtures.js';

const fx = hierarchyFixture({
  model: 'hits-test@1',
  dirPrefix: 'tiersync-hits-',
  config: { promoteOnHit: false },
  watermarks: { high: 1, low: 1 },
  fsPages: 64,
});
const { hierarchy, arena } = fx;
afterEach(fx.cleanup);

function source(a: HostArena, first: number, count: number) {
  return Array.from({ length: count }, (_, i) => ({ arena: a, offset: (first + i) * PAGE, length: PAGE }));
}

const A = [key(1), key(2)];
const B = [key(3), key(4)];
const C = [key(5), key(6)];

/** hbm (4 pages, lru) holds A then B; `between` runs before C's store must evict two pages. Each value's tiers after. */
async function evictOnce(between: (ts: TierSync) => Promise<void>): Promise<{ a: string[]; b: string[]; c: string[] }> {
  const ts = await hierarchy({ hbm: 4, host: 16 }, [{ policy: 'lru' }]);
  const src = arena(6);
  await ts.storeKeys(A, source(src, 0, 2));
  await ts.storeKeys(B, source(src, 2, 2));
  await between(ts);
  await ts.storeKeys(C, source(src, 4, 2));
  await ts.flush();
  const tiers = (keys: string[]) => ts.lookupKeys(keys).pages.map((p) => p.tier);
  return { a: tiers(A), b: tiers(B), c: tiers(C) };
}

describe('recordHits', () => {
  it('without hits, lru evicts the older value', async () => {
    expect(await evictOnce(async () => undefined)).toEqual({ a: ['host', 'host'], b: ['hbm', 'hbm'], c: ['hbm', 'hbm'] });
  });

  it('a value read outside load() is kept; the unread one of the same age is evicted instead', async () => {
    const r = await evictOnce(async (ts) => {
      expect(await ts.recordHits('hbm', A)).toBe(2);
    });
    expect(r).toEqual({ a: ['hbm', 'hbm'], b: ['host', 'host'], c: ['hbm', 'hbm'] });
  });

  it('records the access in the index as a load does', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 });
    await ts.storeKeys(A, source(arena(2), 0, 2));
    expect(ts.pageRecords(A).map((p) => p?.hits)).toEqual([0, 0]);
    await ts.recordHits('hbm', [A[0]!, A[0]!]);
    expect(ts.pageRecords(A).map((p) => p?.hits)).toEqual([2, 0]);
  });

  it('skips keys the tier does not hold, without error', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 });
    await ts.storeKeys(A, source(arena(2), 0, 2));
    expect(await ts.recordHits('hbm', [key(99), A[1]!, key(98)])).toBe(1);
    // Held on hbm only: nothing to count on host.
    expect(await ts.recordHits('host', A)).toBe(0);
    expect(await ts.recordHits('hbm', [])).toBe(0);
    expect(ts.pageRecords(A).map((p) => p?.hits)).toEqual([0, 1]);
  });

  it('refuses a malformed key or an unknown tier', async () => {
    const ts = await hierarchy({ hbm: 4, host: 16 });
    expect(() => ts.recordHits('hbm', ['nope'])).toThrow(/keys\[0\] must be a page key/);
    expect(() => ts.recordHits('ssd', A)).toThrow(TierSyncError);
    expect(() => ts.recordHits('ssd', A)).toThrow(/no tier named 'ssd'/);
  });
});
