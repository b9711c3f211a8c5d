/**
 * `tiersync serve` restarted right after `kill -9`:
 * - with the default in-memory index: the restart succeeds at once (the fs folder's lock is the kernel's, gone
 *   with the killed daemon), and the pages on the fs tier are still found (reconcile adopts them; it used to
 *   delete every page an empty index did not know);
 * - with an index on disk and the host tier's shared memory lost meanwhile (as a reboot loses /dev/shm): the pages
 *   on the fs tier still load, and lookups stop naming the host tier (the index used to keep its host copies, and
 *   a client's load skipped those pages as resident when they were not).
 */
import { randomFillSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
import { TierSyncClient } from '@tiersync/core/client';
import { TierSync } from '../packages/core/src/hierarchy/tier-sync.js';
import { startDaemonProcess, type DaemonProcess } from '../packages/core/src/server/daemon-process.js';

const PAGE = 8 * 1024;
const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const tokens = (pages: number) => Array.from({ length: pages * 16 }, (_, i) => (i * 7 + 3) % 50_000);

async function lookupTokens(d: DaemonProcess, toks: number[]): Promise<number> {
  const r = await fetch(`${d.url}/v1/lookup`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tokens: toks }) });
  expect(r.status).toBe(200);
  return ((await r.json()) as { tokens: number }).tokens;
}

function killNow(d: DaemonProcess): Promise<void> {
  return new Promise((resolve) => {
    d.child.once('exit', () => resolve());
    d.child.kill('SIGKILL');
  });
}

describe('tiersync serve after kill -9 (index in memory)', () => {
  it('restarts at once, twice, and still finds the pages on its fs tier', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-serve-restart-'));
    const hierarchy = { model: 'serve-restart@1', layout, tiers: [{ url: `fs://${dir}/fs?capacity=${256 * PAGE}`, name: 'fs' }] };
    try {
      // Pages stored by an earlier process (its index, in memory, died with it).
      const ts = new TierSync(hierarchy);
      await ts.open();
      const arena = HostArena.create({ capacity: 6 * PAGE });
      arena.view(0, 6 * PAGE).fill(7);
      await ts.store(Uint32Array.from(tokens(6)), Array.from({ length: 6 }, (_, i) => ({ arena, offset: i * PAGE, length: PAGE })));
      await ts.close();
      arena.close();

      const file = path.join(dir, 'serve.yaml');
      // YAML is a superset of JSON.
      writeFileSync(file, JSON.stringify({ ...hierarchy, http: { port: 0 }, peer: { port: 0 }, log: { level: 'info' } }));
      for (let round = 0; round < 3; round++) {
        // No wait between the kill and the start: the daemon must not refuse its own folder.
        const d = await startDaemonProcess(file);
        expect(await lookupTokens(d, tokens(6))).toBe(96);
        if (round < 2) await killNow(d);
        else expect(await d.stop()).toBe(0);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe('tiersync serve after kill -9 and a lost host tier (index on disk)', () => {
  it('loads the pages its fs tier holds, exact, and no longer places them on the host tier', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-serve-reboot-'));
    const shm = `/dev/shm/tiersync-serve-reboot-${process.pid}`;
    const file = path.join(dir, 'serve.yaml');
    writeFileSync(
      file,
      JSON.stringify({
        model: 'serve-reboot@1',
        layout,
        tiers: [
          { url: `host://?capacity=${64 * PAGE}&shm=${shm}&prefault=false`, name: 'host' },
          { url: `fs://${dir}/fs?capacity=${256 * PAGE}`, name: 'fs', writeThrough: true },
        ],
        index: { path: path.join(dir, 'index.sqlite') },
        http: { port: 0 },
        peer: { port: 0 },
        tenants: [{ name: 'alice', token: 'token-alice' }],
        log: { level: 'info' },
      }),
    );
    const n = 20;
    const src = HostArena.create({ capacity: n * PAGE });
    const dst = HostArena.create({ capacity: n * PAGE });
    randomFillSync(src.view(0, n * PAGE));
    const keys = Array.from({ length: n }, (_, i) => `00c0ffee${i.toString(16).padStart(8, '0')}`);
    const where = async (c: TierSyncClient) => (await c.lookup(keys)).tiers;
    let d: DaemonProcess | undefined;
    try {
      d = await startDaemonProcess(file);
      let c = await TierSyncClient.connect({ url: d.url, token: 'token-alice' });
      expect(await c.store(keys, keys.map((_, i) => ({ arena: src, offset: i * PAGE, length: PAGE })))).toMatchObject({ stored: n });
      expect(await where(c)).toEqual(keys.map(() => 'host'));
      // Written through to fs in the background.
      const fsPages = async () => ((await (await fetch(`${d!.url}/v1/stats`)).json()) as { tiers: Array<{ name: string; usedPages: number }> }).tiers.find((t) => t.name === 'fs')!.usedPages;
      await expect.poll(fsPages, { timeout: 10_000 }).toBe(n);
      await c.close();
      await killNow(d);
      rmSync(shm, { force: true });

      d = await startDaemonProcess(file);
      c = await TierSyncClient.connect({ url: d.url, token: 'token-alice' });
      expect(await where(c)).toEqual(keys.map(() => 'fs'));
      expect(await c.load(keys, keys.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })))).toMatchObject({ missing: [] });
      expect(Buffer.compare(dst.view(0, n * PAGE), src.view(0, n * PAGE))).toBe(0);
      await c.close();
      expect(await d.stop()).toBe(0);
      d = undefined;
    } finally {
      if (d) await killNow(d);
      src.close();
      dst.close();
      rmSync(shm, { force: true });
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
