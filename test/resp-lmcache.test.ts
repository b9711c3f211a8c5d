// redis-py (Debian's python3-redis) against the RESP door of a `tiersync serve` daemon in a child process, making
// the calls LMCache's Redis connector makes (test/resp_lmcache_test.py): 256 KiB .. 80 MiB chunks as
// `<key>kv_bytes` + `<key>metadata` pairs through 150-connection asyncio pools, a 512 MiB value through bounded
// staging, SCAN MATCH COUNT / KEYS / DEL, pipelines, and RESP3 after HELLO 3. The door runs with its defaults.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEBIAN_PYTHON, requirePythonModules } from '../scripts/system-packages.mjs';
import { freePort, startDaemon, type Daemon } from './daemon-helpers.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const MiB = 1024 * 1024;

describe('redis-py against the RESP door, as LMCache uses it', () => {
  let dir: string;
  let shm: string;
  let daemon: Daemon;
  let respPort: number;

  beforeAll(async () => {
    requirePythonModules(['redis', 'pytest']);
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-lmcache-'));
    shm = `/dev/shm/tiersync-resp-lmcache-${process.pid}`;
    respPort = await freePort();
    daemon = await startDaemon(
      {
        model: 'resp-lmcache@1',
        // 4 layers x 8 KV heads x 128 dims, bf16, 16 tokens per page: 256 KiB pages (an 80 MiB value is 320 pages).
        layout: { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 4, attention: { type: 'mha', kvHeads: 8, headDim: 128 } }] },
        tiers: [
          { url: `host://?capacity=${1024 * MiB}&shm=${shm}&prefault=false`, name: 'host' },
          { url: `fs://${dir}/fs?capacity=${3072 * MiB}`, name: 'fs' },
        ],
        index: { path: path.join(dir, 'index.sqlite') },
        http: { port: 0 },
        peer: { enabled: false },
        log: { level: 'info' },
        // The door's defaults: 512 MiB values, 256 MiB staging, 16 MiB windows.
        resp: { port: respPort },
      },
      dir,
      'resp-lmcache',
    );
  });

  afterAll(async () => {
    if (daemon) expect(await daemon.stop()).toBe(0);
    if (dir) rmSync(dir, { recursive: true, force: true });
    if (shm) rmSync(shm, { force: true });
  });

  it('passes the LMCache-style redis-py suite (80 MiB chunks, 512 MiB value, RESP3) on Debian Python', { timeout: 300_000 }, async () => {
    const r = await new Promise<{ code: number | null; out: string }>((resolve, reject) => {
      const child = spawn(DEBIAN_PYTHON, ['-m', 'pytest', 'test/resp_lmcache_test.py', '-q', '-rs', '-p', 'no:cacheprovider'], {
        cwd: root,
        env: { ...process.env, TIERSYNC_RESP_PORT: String(respPort), TIERSYNC_RESP_WINDOW: String(16 * MiB), PYTHONDONTWRITEBYTECODE: '1' },
      });
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (out += d));
      const timer = setTimeout(() => child.kill('SIGKILL'), 290_000);
      child.on('error', reject);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, out });
      });
    });
    if (r.code !== 0) throw new Error(`pytest test/resp_lmcache_test.py exited ${r.code}:\n${r.out.slice(-10_000)}\n--- daemon stderr ---\n${daemon.stderr().slice(-4000)}`);
    expect(r.out).toMatch(/\b10 passed\b/);
    expect(r.out).not.toMatch(/skipped|failed|error/i);
  });
});
