import { afterAll, describe, expect, it } from 'vitest';
import { HostArena, TierSyncError, TransferEngine } from '@tiersync/native';
import { createTier } from '../registry.js';
import { testKey, tierConformance } from '../testing.js';
import { FaultTier, faultUrl, parseFaultUrl } from './index.js';

const PAGE = 64 * 1024;
const inner = `host://?capacity=${16 * PAGE}`;

// With no faults planned, the wrapper is a driver like any other.
tierConformance('fault:// around host://', () => ({
  pageBytes: PAGE,
  capacityPages: 16,
  async create(context) {
    const t = createTier(faultUrl(inner), context);
    await t.open();
    return t;
  },
}));

describe('fault tier', () => {
  const engine = new TransferEngine({ threads: 1 });
  const arena = HostArena.create({ capacity: 4 * PAGE });
  const context = { engine, pageBytes: PAGE, fingerprint: '' };
  afterAll(async () => {
    arena.close();
    await engine.close();
  });
  const codeOf = async (p: Promise<unknown>) => {
    try {
      await p;
      return 'resolved';
    } catch (e) {
      return e instanceof TierSyncError ? e.code : String(e);
    }
  };

  it('parses its URL and refuses bad options with ERR_CONFIG', () => {
    expect(parseFaultUrl(faultUrl(inner, { seed: 3, readErrors: 0.5, delayMs: 2 }))).toMatchObject({ inner, seed: 3, readErrors: 0.5, delayMs: 2, writeErrors: 0 });
    for (const bad of ['fault://?readErrors=0.5', `fault://?inner=${encodeURIComponent(inner)}&readErrors=2`, `fault://?inner=${encodeURIComponent(inner)}&nope=1`, `fault://?inner=${encodeURIComponent(faultUrl(inner))}`, `fault://host?inner=${encodeURIComponent(inner)}`]) {
      expect(() => parseFaultUrl(bad), bad).toThrow(expect.objectContaining({ code: 'ERR_CONFIG' }));
    }
  });

  it('fails writes, reads and deletes as planned, with typed errors and no bytes delivered', async () => {
    const t = createTier(faultUrl(inner, { writeErrors: 1 }), context) as FaultTier;
    await t.open();
    try {
      const key = testKey(1);
      const page = { key, source: { arena, offset: 0, length: PAGE } };
      expect(await codeOf(t.write([page]))).toBe('ERR_IO');
      expect(await t.has([key])).toEqual([false]);
      t.inject({ writeErrors: 0, full: 1 });
      expect(await codeOf(t.write([page]))).toBe('ERR_TIER_FULL');
      t.inject({ full: 0, lostWriteAcks: 1 });
      expect(await codeOf(t.write([page]))).toBe('ERR_IO');
      expect(await t.has([key])).toEqual([true]); // it landed although the caller was told otherwise
      t.heal();
      arena.view(PAGE, PAGE).fill(7);
      t.inject({ readErrors: 1 });
      const [o] = await t.read([{ key, into: { arena, offset: PAGE, length: PAGE } }]);
      expect(o).toMatchObject({ status: 'error', error: { code: 'ERR_IO' } });
      expect(arena.view(PAGE, PAGE).every((b) => b === 7)).toBe(true);
      t.inject({ readErrors: 0, deleteErrors: 1 });
      expect(await codeOf(t.delete([key]))).toBe('ERR_IO');
      expect(t.injected).toEqual({ writeErrors: 1, lostWriteAcks: 1, full: 1, readErrors: 1, deleteErrors: 1, stalls: 0 });
      expect(() => t.inject({ readErrors: 1.5 })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    } finally {
      await t.close();
    }
  });

  it('a stalled call settles at its deadline, on abort, or when the tier closes', async () => {
    const t = createTier(faultUrl(inner, { stalls: 1 }), context) as FaultTier;
    await t.open();
    const key = testKey(2);
    expect(await codeOf(t.has([key]))).toBe('resolved'); // has() is never stalled
    expect(await codeOf(t.read([{ key, into: { arena, offset: 0, length: PAGE } }], { timeoutMs: 20 }))).toBe('ERR_TIMEOUT');
    const abort = new AbortController();
    const aborted = codeOf(t.read([{ key, into: { arena, offset: 0, length: PAGE } }], { signal: abort.signal }));
    abort.abort();
    expect(await aborted).toBe('ERR_ABORTED');
    const forever = codeOf(t.write([{ key, source: { arena, offset: 0, length: PAGE } }]));
    await t.close();
    expect(await forever).toBe('ERR_CLOSED');
  });
});
