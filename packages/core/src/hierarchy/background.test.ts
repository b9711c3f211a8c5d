/**
 * Background copies against a lower tier that stalls (the real fault:// tier: a stalled call settles only at its
 * deadline, on abort, or when the tier closes). Deadlines of background moves are set far beyond each test's own
 * timeout, so a test passes only if nothing it awaits waits for the stalled copy.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { type HostArena, crc32c } from '@tiersync/native';
import { faultUrl, type FaultTier, type PageKey } from '@tiersync/tiers';
import { TierSync } from './tier-sync.js';
import { PAGE, context, hierarchyFixture, layout } from './test-fixtures.js';

const fx = hierarchyFixture({ model: 'background-test@1', dirPrefix: 'tiersync-background-', watermarks: { high: 0.9, low: 0.6 }, fsPages: 256 });
afterEach(fx.cleanup);

/** Deadline of background moves: a stalled copy holds whatever waits for it this long. */
const MOVE_MS = 60_000;
/** Timeout of each test: far below MOVE_MS. */
const PROMPT_MS = 15_000;

/** The bytes of a page are a function of its key, so any mix-up of staging memory shows. */
function pageBytes(key: PageKey, view: Uint8Array): void {
  for (let b = 0; b < view.length; b++) view[b] = key.charCodeAt(b % 64) ^ (b * 31) ^ (b >> 8);
}

/** Source pages of `tokens` in `arena` from page `slot` on, filled by pageBytes. */
function pagesFor(ts: TierSync, tokens: Uint32Array, arena: HostArena, slot: number) {
  return ts.keysOf(tokens).map((k, i) => {
    pageBytes(k, arena.view((slot + i) * PAGE, PAGE));
    return { arena, offset: (slot + i) * PAGE, length: PAGE };
  });
}

/** Polls `ok` every 5 ms until it holds (the test's timeout ends a wait that never does). */
async function until(ok: () => boolean): Promise<void> {
  while (!ok()) await new Promise((r) => setTimeout(r, 5));
}

/** Error codes of the hierarchy's failed transfers, in order. */
function failures(ts: TierSync): string[] {
  const codes: string[] = [];
  ts.on('transfer:failed', (e) => codes.push(e.error.code));
  return codes;
}

/** Two fs tiers, a and b (b write-through, optionally behind a fault tier), with an index file: reopenable. */
function twoFsTiers(dir: string, b: { stalls?: number; delayMs?: number } | false, first = 'fs') {
  const plain = `fs://${dir}/b?capacity=${64 * PAGE}`;
  return {
    model: 'background-test@1',
    layout,
    index: { path: `${dir}/index.sqlite` },
    deadlines: { moveMs: MOVE_MS },
    tiers: [
      first === 'fs' ? { url: `fs://${dir}/a?capacity=${64 * PAGE}`, name: 'a' } : { url: `host://?capacity=${64 * PAGE}`, name: 'a' },
      { url: b ? faultUrl(plain, b) : plain, name: 'b', writeThrough: true },
    ],
  };
}

/** Stores `contexts` (4 pages each) in turn; each store must keep all 4. */
async function storeAll(ts: TierSync, contexts: readonly Uint32Array[]): Promise<void> {
  const src = fx.arena(4 * contexts.length);
  for (const [c, tokens] of contexts.entries()) expect(await ts.store(tokens, pagesFor(ts, tokens, src, c * 4))).toMatchObject({ stored: 4, dropped: 0 });
}

/** Every page of `contexts` is found on tier `tier` (first) and loads byte-exact. */
async function expectAll(ts: TierSync, contexts: readonly Uint32Array[], tier: string): Promise<void> {
  const dst = fx.arena(4);
  const ref = fx.arena(4);
  for (const tokens of contexts) {
    const hit = ts.lookup(tokens);
    expect(hit.pages.map((p) => p.tier)).toEqual([tier, tier, tier, tier]);
    const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
    expect(r.missing).toEqual([]);
    pagesFor(ts, tokens, ref, 0);
    expect(crc32c(dst.view(0, 4 * PAGE))).toBe(crc32c(ref.view(0, 4 * PAGE)));
  }
}

describe('background copies to a stalled tier', () => {
  it('hold back no store into free room: stores complete while a write-through copy is stalled', { timeout: PROMPT_MS }, async () => {
    const ts = await fx.opened(new TierSync(twoFsTiers(fx.tempDir(), { stalls: 1 })));
    const b = ts.tierDriver('b') as FaultTier;
    const failed = failures(ts);
    const contexts = [1, 2, 3, 4].map((c) => context(c, 4));
    await storeAll(ts, contexts.slice(0, 1));
    // The first store's write-through copy now hangs in tier b (until MOVE_MS, an abort, or close).
    await until(() => b.injected.stalls === 1);
    await storeAll(ts, contexts.slice(1));
    // Stored while that copy was still stalled: it has neither timed out nor been aborted, and is the only one.
    expect(failed).toEqual([]);
    expect(b.injected.stalls).toBe(1);
    await expectAll(ts, contexts, 'a');
    expect(ts.stats().index.tiers.b?.ready ?? 0).toBe(0);
  });

  it('close() aborts a stalled copy of pages that are durable already, and a reopen finds every page where it was', { timeout: PROMPT_MS }, async () => {
    const dir = fx.tempDir();
    const ts = new TierSync(twoFsTiers(dir, { stalls: 1 }));
    await ts.open();
    const b = ts.tierDriver('b') as FaultTier;
    const failed = failures(ts);
    const contexts = [1, 2, 3].map((c) => context(c, 4));
    await storeAll(ts, contexts);
    // One write-through copy hangs in tier b; the others wait in the queue behind it.
    await until(() => b.injected.stalls === 1);
    await ts.close();
    // Aborted, not timed out; the queued copies never started.
    expect(failed).toEqual(['ERR_ABORTED']);
    expect(b.injected.stalls).toBe(1);

    const again = await fx.opened(new TierSync(twoFsTiers(dir, false)));
    await expectAll(again, contexts, 'a');
    // The aborted copy left nothing behind in tier b: no page, no pending copy.
    const s = again.stats();
    expect(s.tiers.find((t) => t.name === 'b')!.pages).toBe(0);
    expect(s.index.tiers.b?.ready ?? 0).toBe(0);
    expect(s.index.tiers.b?.pending ?? 0).toBe(0);
  });

  it('close() waits for stalled copies that would make volatile pages durable one move deadline in all, not one per copy', { timeout: PROMPT_MS }, async () => {
    const dir = fx.tempDir();
    const moveMs = 2_000;
    // Four write-through copies from a volatile host tier into a tier that stalls: one in flight, three queued.
    const ts = new TierSync({ ...twoFsTiers(dir, { stalls: 1 }, 'host'), deadlines: { moveMs } });
    await ts.open();
    const b = ts.tierDriver('b') as FaultTier;
    await storeAll(ts, [1, 2, 3, 4].map((c) => context(c, 4)));
    await until(() => b.injected.stalls === 1);
    const closing = ts.close();
    // Still waiting for the copy in flight, which may yet land.
    await new Promise((r) => setTimeout(r, moveMs / 4));
    expect(ts.stats().index.tiers.b?.pending).toBe(4);
    await closing;
    // Waiting moveMs for each queued copy would have taken 4 x 2 s, past this test's timeout; at most the copy in
    // flight and one started just before close()'s deadline stalled.
    expect(b.injected.stalls).toBeLessThanOrEqual(2);
  });

  it('close() lets healthy write-through from a volatile tier finish: a reopen finds the pages on the durable tier', { timeout: PROMPT_MS }, async () => {
    const dir = fx.tempDir();
    const ts = new TierSync(twoFsTiers(dir, { delayMs: 20 }, 'host'));
    await ts.open();
    const contexts = [1, 2, 3].map((c) => context(c, 4));
    await storeAll(ts, contexts);
    await ts.close();
    await expectAll(await fx.opened(new TierSync(twoFsTiers(dir, false, 'host'))), contexts, 'b');
  });

  it("a store's demotion into a stalled tier waits its store deadline, not the move deadline", { timeout: PROMPT_MS }, async () => {
    const dir = fx.tempDir();
    // hbm 8 pages (high watermark 7), write-back into an fs tier whose every call stalls.
    const ts = await fx.opened(
      new TierSync({
        model: 'background-test@1',
        layout,
        deadlines: { storeMs: 300, moveMs: MOVE_MS },
        tiers: [
          { url: `hbm://sim?capacity=${8 * PAGE}`, highWatermark: 0.9, lowWatermark: 0.6 },
          { url: faultUrl(`fs://${dir}/fs?capacity=${64 * PAGE}`, { stalls: 1 }), name: 'fs' },
        ],
      }),
    );
    const failed = failures(ts);
    await storeAll(ts, [1, 2].map((c) => context(c, 4)));
    expect(failed).toEqual([]);
    // The third store needs room: its victims' demotion hangs in fs until the store's own deadline.
    const tokens = context(3, 4);
    await storeAll(ts, [tokens]);
    expect(failed).toEqual(['ERR_TIMEOUT']);
    expect(ts.lookup(tokens).pages.length).toBe(4);
  });
});

describe('background copies beside foreground moves', () => {
  const title = 'never share staging memory (%i staging pages): pages demoted while write-through copies are in flight arrive byte-exact';
  it.each([8, 1])(title, { timeout: PROMPT_MS * 2 }, async (stagingPages) => {
    const dir = fx.tempDir();
    // Every fs call waits 20 ms, so write-through copies are in flight (outside the lock) while stores demote hbm
    // victims whose write-through is still queued into host (under the lock).
    const fs = { url: faultUrl(`fs://${dir}/fs?capacity=${256 * PAGE}`, { delayMs: 20 }), writeThrough: true };
    const ts = await fx.hierarchy({ hbm: 8, host: 128 }, [{}, {}, fs], { stagingPages });
    let demoted = 0;
    ts.on('block:demoted', (e) => (demoted += e.keys.length));
    const src = fx.arena(4 * 24);
    const contexts = Array.from({ length: 24 }, (_, c) => context(100 + c, 4));
    for (const [c, tokens] of contexts.entries()) await ts.store(tokens, pagesFor(ts, tokens, src, c * 4));
    await ts.flush();
    expect(demoted).toBeGreaterThan(0);
    // Read every copy of every page straight from each tier's driver and compare it with its bytes.
    const keys = contexts.flatMap((t) => ts.keysOf(t));
    const got = fx.arena(1);
    const want = fx.arena(1);
    let checked = 0;
    for (const tier of ['hbm', 'host', 'fs']) {
      const driver = ts.tierDriver(tier);
      for (const key of keys) {
        const [o] = await driver.read([{ key, into: { arena: got, offset: 0, length: PAGE } }]);
        if (o!.status === 'miss') continue;
        expect(o!.status, `${key} on ${tier}`).toBe('hit');
        pageBytes(key, want.view(0, PAGE));
        expect(crc32c(got.view(0, PAGE)), `${key} on ${tier}`).toBe(crc32c(want.view(0, PAGE)));
        checked++;
      }
    }
    // Write-through put every page on fs.
    expect(checked).toBeGreaterThanOrEqual(keys.length);
    expect(ts.stats().index.tiers.fs!.ready).toBe(keys.length);
  });
});

describe('background copies and the pages they hold', () => {
  it('a store that needs the pages a copy in flight holds waits for the copy, then evicts them rather than drop its own', { timeout: PROMPT_MS }, async () => {
    const dir = fx.tempDir();
    // Tier a holds 8 pages; every call of tier b waits 300 ms, so the first store's write-through copy holds its 4
    // pages on a (its sources) while the second store, of 6 pages, needs 2 of their slots.
    const ts = await fx.opened(
      new TierSync({
        ...twoFsTiers(dir, { delayMs: 300 }),
        tiers: [
          { url: `fs://${dir}/a?capacity=${8 * PAGE}`, name: 'a' },
          { url: faultUrl(`fs://${dir}/b?capacity=${64 * PAGE}`, { delayMs: 300 }), name: 'b', writeThrough: true },
        ],
      }),
    );
    const src = fx.arena(10);
    const first = context(1, 4);
    await storeAll(ts, [first]);
    await until(() => (ts.stats().index.tiers.b?.pending ?? 0) > 0);
    const second = context(2, 6);
    expect(await ts.store(second, pagesFor(ts, second, src, 4))).toMatchObject({ stored: 6, dropped: 0 });
    await ts.flush();
    // The first store's pages went on to b before they left a.
    expect(ts.lookup(first).pages.length).toBe(4);
    expect(ts.lookup(second).pages.length).toBe(6);
  });


  const title = 'a delete of pages whose write-through copy is %s waits for that copy, then deletes them (not reported pinned)';
  it.each(['queued', 'in flight'])(title, { timeout: PROMPT_MS }, async (when) => {
    // Every call of tier b waits 200 ms: the write-through copy is still in flight when the delete comes.
    const ts = await fx.opened(new TierSync(twoFsTiers(fx.tempDir(), { delayMs: 200 })));
    const tokens = context(1, 4);
    await storeAll(ts, [tokens]);
    // Queued: the copy begins (holding its sources) between this call and the delete's turn. In flight: it has begun,
    // pending on tier b, its sources held until it is reported.
    if (when === 'in flight') await until(() => (ts.stats().index.tiers.b?.pending ?? 0) > 0);
    const keys = ts.keysOf(tokens);
    expect(await ts.deleteKeys(keys)).toEqual({ deleted: keys, pinned: [], missing: [] });
    await ts.flush();
    expect(ts.lookupKeys(keys).present).toEqual([false, false, false, false]);
    const s = ts.stats();
    for (const t of s.tiers) expect([t.name, t.pages, s.index.tiers[t.name]?.ready ?? 0, s.index.tiers[t.name]?.pending ?? 0]).toEqual([t.name, 0, 0, 0]);
  });
});
