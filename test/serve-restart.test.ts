/**
 * `tiersync serve` restarted right after `kill -9`, with the default in-memory index: the restart succeeds at once
 * (the fs folder's lock is the kernel's, gone with the killed daemon), and the pages on the fs tier are still
 * found (reconcile adopts them; it used to delete every page an empty index did not know).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
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
