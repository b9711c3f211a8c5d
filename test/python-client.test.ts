// The Python client (packages/python) against a `tiersync serve` daemon in a child process: its pytest suite on
// Debian's Python, then Node and Python in one run: identical page keys for the same tokens and namespace, a Node
// client loading what Python stored (same keys, same bytes), and Python loading what Node stored.
import { spawn } from 'node:child_process';
import { createHash, randomFillSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena, crc32c } from '@tiersync/native';
import { KV_PRESETS, createNamespace, kvLayout, pageKeys, type KvLayoutInput } from '@tiersync/core';
import { TierSyncClient } from '@tiersync/core/client';
import { DEBIAN_PYTHON, requirePythonModules } from '../scripts/system-packages.mjs';
import { startDaemon, type Daemon } from './daemon-helpers.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const pyDir = path.join(root, 'packages/python');
const interop = path.join(pyDir, 'tests/interop.py');

/** Runs Debian's Python with the package's sources on its path; resolves with its exit code and output. */
function python(args: string[], options: { input?: string; env?: Record<string, string>; timeoutMs?: number } = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(DEBIAN_PYTHON, args, { cwd: root, env: { ...process.env, PYTHONPATH: path.join(pyDir, 'src'), PYTHONDONTWRITEBYTECODE: '1', ...options.env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(options.input ?? '');
  });
}

async function pyJson<T>(args: string[], input: unknown): Promise<T> {
  const r = await python([interop, ...args], { input: JSON.stringify(input) });
  if (r.code !== 0) throw new Error(`python ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

describe('Python client (packages/python) against a daemon', () => {
  let dir: string;
  let shm: string;
  let daemon: Daemon;
  let config: { model: string; layout: KvLayoutInput };

  beforeAll(async () => {
    requirePythonModules(['pytest', 'numpy', 'torch', 'crcmod']);
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-python-client-'));
    shm = `/dev/shm/tiersync-python-client-${process.pid}`;
    const text = readFileSync(path.join(pyDir, 'tests/daemon.json'), 'utf8').replaceAll('$DIR', dir).replaceAll('$SHM', shm);
    config = JSON.parse(text);
    daemon = await startDaemon(config, dir);
  });

  afterAll(async () => {
    if (daemon) expect(await daemon.stop()).toBe(0);
    rmSync(dir, { recursive: true, force: true });
    rmSync(shm, { force: true });
  });

  it('passes its pytest suite (client, keys, paged-KV adapter) on Debian Python', { timeout: 240_000 }, async () => {
    const r = await python(['-m', 'pytest', 'packages/python/tests', '-q', '-rs'], { env: { TIERSYNC_TEST_URL: daemon.url }, timeoutMs: 230_000 });
    if (r.code !== 0) throw new Error(`pytest exited ${r.code}:\n${r.stdout.slice(-8000)}\n${r.stderr.slice(-4000)}`);
    expect(r.stdout).toMatch(/\d+ passed/);
  });

  it('passes its pytest suite with the CRC32C library turned off (the daemon checksums and checks)', { timeout: 240_000 }, async () => {
    // Its own daemon (conftest starts one): the adapter tests store fixed token sequences, already held by this one.
    const r = await python(['-m', 'pytest', 'packages/python/tests', '-q', '-rs'], { env: { TIERSYNC_TEST_URL: '', TIERSYNC_NATIVE_CRC32C: '0' }, timeoutMs: 230_000 });
    if (r.code !== 0) throw new Error(`pytest exited ${r.code}:\n${r.stdout.slice(-8000)}\n${r.stderr.slice(-4000)}`);
    expect(r.stdout).toMatch(/\d+ passed/);
  });

  it("computes with the daemon's CRC32C library what Node's crc32c computes", async () => {
    const sizes = [0, 1, 7, 4096, 65_537, 1 << 20];
    const bufs = sizes.map((n) => randomFillSync(new Uint8Array(n)));
    const script = [
      'import json, sys, ctypes, tiersync',
      'from tiersync._native import NativeCrc32c',
      `c = tiersync.Client.connect(${JSON.stringify(daemon.url)}, token="token-alice")`,
      'lib = NativeCrc32c(c.hello.crc32c_library)',
      'out = []',
      'for h in json.load(sys.stdin):',
      '    b = bytes.fromhex(h); src = ctypes.create_string_buffer(b, len(b) or 1); dst = ctypes.create_string_buffer(len(b) or 1)',
      '    out.append([lib.crc32c(ctypes.addressof(src), len(b)), lib.copy_crc32c(ctypes.addressof(dst), ctypes.addressof(src), len(b)), dst.raw[: len(b)] == b])',
      'c.close()',
      'print(json.dumps({"crcs": out, "impl": lib.impl}))',
    ].join('\n');
    const r = await python(['-c', script], { input: JSON.stringify(bufs.map((b) => Buffer.from(b).toString('hex'))) });
    if (r.code !== 0) throw new Error(`python exited ${r.code}: ${r.stderr}`);
    const got = JSON.parse(r.stdout) as { crcs: Array<[number, number, boolean]>; impl: string };
    expect(got.crcs).toEqual(bufs.map((b) => [crc32c(b), crc32c(b), true]));
  });

  it('computes the same namespaces and page keys as @tiersync/core', async () => {
    const tokens = (n: number, f: (i: number) => number) => Array.from({ length: n }, (_, i) => f(i) >>> 0);
    const cases: Array<{ model: string; layout: KvLayoutInput; salt?: string; tokens: number[]; parent?: string; position?: number }> = [];
    // Every published preset, pages across anchor boundaries (64 pages share a key prefix).
    for (const [name, preset] of Object.entries(KV_PRESETS)) {
      cases.push({ model: `${name}@main`, layout: { tokensPerPage: 16, dtype: 'bf16', groups: preset.groups as KvLayoutInput['groups'] }, tokens: tokens(16 * 130 + 5, (i) => i * 2654435761) });
    }
    cases.push(
      // Explicit layer lists, per-group dtype, sliding window, value head size, a salt, token ids up to 2^32 - 1.
      {
        model: 'hybrid@rev',
        layout: { tokensPerPage: 32, dtype: 'fp16', groups: [{ name: 'local', layers: [0, 2], attention: { type: 'mha', kvHeads: 4, headDim: 64, valueHeadDim: 32 }, slidingWindow: 512, dtype: 'fp8_e4m3' }, { layers: [1, 3], attention: { type: 'mla', latentDim: 512, ropeDim: 64 } }] },
        salt: 'tenant-a',
        tokens: tokens(32 * 3, (i) => 0xffffffff - i),
      },
      { model: 'ünïcode model ✓', layout: { tokensPerPage: 1, dtype: 'fp32', groups: [{ layers: 1, attention: { type: 'mha', kvHeads: 1, headDim: 1 } }] }, tokens: [0, 1, 2] },
    );
    // A chain continued from a parent key at position 70.
    const base = cases[0]!;
    const full = pageKeys(createNamespace({ model: base.model, layout: kvLayout(base.layout) }), Uint32Array.from(base.tokens));
    cases.push({ ...base, tokens: base.tokens.slice(16 * 70), parent: full[69]!, position: 70 });

    const py = await pyJson<Array<{ ns: string; fingerprint: string; keys: string[] }>>(['keys'], cases);
    expect(py).toHaveLength(cases.length);
    cases.forEach((c, i) => {
      const ns = createNamespace({ model: c.model, layout: kvLayout(c.layout), ...(c.salt ? { tenantSalt: c.salt } : {}) });
      const keys = pageKeys(ns, Uint32Array.from(c.tokens), c.parent ? { parent: c.parent, position: c.position! } : {});
      expect(py[i]!.fingerprint, `case ${i}`).toBe(ns.layoutFingerprint);
      expect(py[i]!.ns, `case ${i}`).toBe(ns.id);
      expect(py[i]!.keys, `case ${i}`).toEqual(keys);
    });
    expect(py.at(-1)!.keys).toEqual(full.slice(70));
  });

  it('a Node client loads what Python stored, under the keys Node computes for the same tokens', async () => {
    const ns = createNamespace({ model: config.model, layout: kvLayout(config.layout) });
    const sequences = [Array.from({ length: 16 * 12 + 3 }, (_, i) => 1000 + i), Array.from({ length: 16 * 5 }, (_, i) => 90_000 + 7 * i)];
    const stored = await pyJson<{ keys: string[][]; sha256: string[][] }>(['store', daemon.url, 'token-alice'], { model: config.model, layout: config.layout, sequences, seed: 7 });
    const c = await TierSyncClient.connect({ url: daemon.url, token: 'token-alice' });
    try {
      for (const [s, tokens] of sequences.entries()) {
        const keys = pageKeys(ns, Uint32Array.from(tokens));
        expect(stored.keys[s]).toEqual(keys);
        const arena = HostArena.create({ capacity: keys.length * c.pageBytes });
        try {
          const r = await c.load(keys, keys.map((_, i) => ({ arena, offset: i * c.pageBytes, length: c.pageBytes })));
          expect(r.missing).toEqual([]);
          expect(keys.map((_, i) => sha256(arena.view(i * c.pageBytes, c.pageBytes)))).toEqual(stored.sha256[s]);
        } finally {
          arena.close();
        }
      }
    } finally {
      await c.close();
    }
  });

  it('Python loads what a Node client stored', async () => {
    const ns = createNamespace({ model: config.model, layout: kvLayout(config.layout) });
    const c = await TierSyncClient.connect({ url: daemon.url, token: 'token-alice' });
    const keys = pageKeys(ns, Uint32Array.from({ length: 16 * 9 }, (_, i) => 555_000 + i));
    const arena = HostArena.create({ capacity: keys.length * c.pageBytes });
    try {
      randomFillSync(arena.view(0, keys.length * c.pageBytes));
      expect((await c.store(keys, keys.map((_, i) => ({ arena, offset: i * c.pageBytes, length: c.pageBytes })))).stored).toBe(keys.length);
      const py = await pyJson<{ missing: string[]; sha256: string[] }>(['load', daemon.url, 'token-alice'], { keys });
      expect(py.missing).toEqual([]);
      expect(py.sha256).toEqual(keys.map((_, i) => sha256(arena.view(i * c.pageBytes, c.pageBytes))));
    } finally {
      arena.close();
      await c.close();
    }
  });
});
