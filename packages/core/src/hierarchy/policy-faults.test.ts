import { afterEach, describe, expect, it } from 'vitest';
import { LruPolicy, PolicyError, registerPolicy, type PageHint, type PolicyOptions } from '@tiersync/policy';
import { context, hierarchyFixture, PAGE } from './test-fixtures.js';

// A custom policy that throws once, on its 10th insert (an LRU otherwise).
class ThrowOnce extends LruPolicy<string> {
  inserts = 0;
  override insert(key: string, size: number, hint?: PageHint<string>): string[] {
    if (++this.inserts === 10) throw new Error(`insert #${this.inserts} exploded`);
    return super.insert(key, size, hint);
  }
}
registerPolicy('test-live-throw-once', (o) => new ThrowOnce(o as PolicyOptions) as never);

const fx = hierarchyFixture({ model: 'policy-faults-test@1', dirPrefix: 'tiersync-policy-faults-', watermarks: { high: 0.9, low: 0.7 }, fsPages: 256 });
afterEach(fx.cleanup);

describe('a custom policy that throws in a live hierarchy', () => {
  it('costs the page it threw on, once: later stores all succeed and every tier holds what the planner says', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const ts = await fx.hierarchy({ hbm: 16, host: 64 }, [{ policy: 'test-live-throw-once' }]);
      const failed: Array<{ tier: string; error: PolicyError }> = [];
      ts.on('policy:failed', (e) => failed.push(e));
      const src = fx.arena(4);
      const slots = Array.from({ length: 4 }, (_, i) => ({ arena: src, offset: i * PAGE, length: PAGE }));
      // Keep going after a failed store, as a server would.
      const results: Array<Awaited<ReturnType<typeof ts.store>> | Error> = [];
      for (let n = 0; n < 40; n++) {
        results.push(await ts.store(context(100 + n, 4), slots).catch((e: Error) => e));
        await ts.flush().catch(() => undefined);
      }
      // The third store's second page was the 10th insert: refused on hbm (dropped); every other page stored.
      expect(results.map((r) => (r instanceof Error ? `${(r as { code?: string }).code ?? r.name}: ${r.message}` : r.stored))).toEqual([4, 4, 3, ...Array(37).fill(4)]);
      expect((results[2] as { dropped: number }).dropped).toBe(1);
      for (const t of ts.stats().tiers) expect({ tier: t.name, driver: t.pages }).toEqual({ tier: t.name, driver: t.usedPages });
      expect(ts.stats().tiers[0]!.usedPages).toBeGreaterThanOrEqual(11);
      // Reported once, as a 'policy:failed' event (not a process warning): typed, naming the policy, the tier and the call.
      await new Promise((r) => setImmediate(r));
      expect(failed).toHaveLength(1);
      expect(failed[0]).toMatchObject({ tier: 'hbm', error: { code: 'ERR_POLICY', policy: 'test-live-throw-once', tier: 'hbm', call: 'insert' } });
      expect(warnings.filter((w) => w instanceof PolicyError)).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
