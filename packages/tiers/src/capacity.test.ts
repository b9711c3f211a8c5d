import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path, { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { TransferEngine } from '@tiersync/native';
import { capacityPagesOf } from './capacity.js';
import { createTier } from './registry.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const folder = mkdtempSync(join(tmpdir(), 'tiersync-capacity-'));
afterAll(() => rmSync(folder, { recursive: true, force: true }));

describe('capacityPagesOf', () => {
  it('gives the page count an opened driver reports, for fs geometries, host and hbm', async () => {
    const engine = new TransferEngine({ threads: 1 });
    const cases: Array<[string, number]> = [
      [`fs://${folder}/a?capacity=64MiB`, 65536],
      [`fs://${folder}/b?capacity=10MiB&slab=3MiB`, 16384],
      [`fs://${folder}/c?capacity=1GiB`, 2 ** 21],
      [`fs://${folder}/d?capacity=5000000`, 12345],
      [`host://?capacity=10MiB`, 65536],
      [`host://?capacity=1000000`, 12345],
      [`hbm://?capacity=64MiB`, 65536],
    ];
    try {
      for (const [url, pageBytes] of cases) {
        const t = createTier(url, { engine, pageBytes, fingerprint: 'capacity-test' });
        await t.open();
        expect(capacityPagesOf(url, pageBytes), url).toBe(Math.floor(t.stats().capacityBytes / pageBytes));
        await t.close();
      }
    } finally {
      await engine.close();
    }
  });

  it('follows fault:// to its inner tier; unbounded peers are undefined; names bad input', () => {
    expect(capacityPagesOf(`fault://?inner=${encodeURIComponent('host://?capacity=1MiB')}`, 4096)).toBe(256);
    expect(capacityPagesOf('peer://10.0.0.2:7070?secret=x', 4096)).toBeUndefined();
    expect(capacityPagesOf('peer://10.0.0.2:7070?secret=x&capacity=1GiB', 2 ** 20)).toBe(1024);
    expect(() => capacityPagesOf('host://?capacity=lots', 4096)).toThrow(/capacity/);
    expect(() => capacityPagesOf('fs:///x?capacity=1GiB', 0)).toThrow(/pageBytes/);
  });

  it('loads without the native addon', () => {
    execFileSync('npx', ['tsc', '-b', 'packages/tiers'], { cwd: path.resolve(here, '../../..'), stdio: 'inherit' });
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', `import { capacityPagesOf } from ${JSON.stringify(join(here, '../dist/capacity.js'))}; console.log(capacityPagesOf('host://?capacity=1MiB', 4096));`], {
      env: { ...process.env, TIERSYNC_NATIVE_ADDON: '/nonexistent/addon.node' },
    });
    expect(out.toString().trim()).toBe('256');
  }, 120_000);
});
