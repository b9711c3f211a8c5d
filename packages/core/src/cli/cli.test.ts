import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Command } from './command.js';
import { commandTable, main } from './main.js';
import { parseObjectUrl } from '@tiersync/tiers';
import { HostArena, PeerServer } from '@tiersync/native';
import { demoConfigPath } from './replay-config.js';

/** Runs the CLI in this process (with `extra` commands added); returns its exit code and what it printed. */
async function cliWith(extra: Record<string, Command>, ...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const log = vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
  const error = vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void err.push(a.join(' ')));
  try {
    const code = await main(argv, extra);
    return { code, out: out.join('\n'), err: err.join('\n') };
  } finally {
    log.mockRestore();
    error.mockRestore();
  }
}

const cli = (...argv: string[]) => cliWith({}, ...argv);

describe('tiersync CLI conventions', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-cli-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  afterEach(() => vi.restoreAllMocks());

  it('under --json an error is one JSON object on stdout and the exit code is non-zero', async () => {
    const r = await cli('doctor', '--config', path.join(dir, 'absent.yaml'), '--json');
    expect(r.code).toBe(1);
    expect(r.err).toBe('');
    expect(JSON.parse(r.out)).toEqual({ error: { code: 'ERR_CONFIG', message: expect.stringContaining('absent.yaml') } });
    const bad = await cli('doctor', '--no-such-flag', '--json');
    expect(bad.code).toBe(2);
    expect(JSON.parse(bad.out).error.code).toBe('ERR_INVALID_ARGUMENT');
    const unknown = await cli('frobnicate', '--json');
    expect(unknown.code).toBe(2);
    expect(JSON.parse(unknown.out).error.message).toContain("unknown command 'frobnicate'");
    // A subcommand nothing knows is a usage error too: exit code 2, the usage without --json, one object with it.
    for (const [argv, says] of [[['weights', 'frobnicate'], "unknown subcommand 'frobnicate'"], [['schema', 'frobnicate'], "got 'frobnicate'"]] as const) {
      const text = await cli(...argv);
      expect(text.code).toBe(2);
      expect(text.err).toContain(says);
      expect(text.err).toContain(`Usage: tiersync ${argv[0]}`);
      const json = await cli(...argv, '--json');
      expect(json.code).toBe(2);
      expect(JSON.parse(json.out).error).toEqual({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringContaining(says) });
    }
  });

  it('a config with several mistakes reports all of them at once', async () => {
    const file = path.join(dir, 'bad.json');
    writeFileSync(file, JSON.stringify({ model: 'm@1', layout: 'llama-3-8b', tiers: [{ url: 'host://?capacity=1GiB' }], http: { port: 'x' }, peer: { port: -1 } }));
    const r = await cli('doctor', '--config', file, '--json');
    expect(r.code).toBe(1);
    const { error } = JSON.parse(r.out);
    expect(error.code).toBe('ERR_CONFIG');
    expect(error.message).toContain('http.port');
    expect(error.message).toContain('peer.port');
  });

  it('doctor --config exits non-zero when the config asks for something missing, and says what', async () => {
    const file = path.join(dir, 'cuda.json');
    const fsDir = path.join(dir, 'fs');
    writeFileSync(file, JSON.stringify({ model: 'm@1', layout: 'llama-3-8b', tokensPerPage: 16, tiers: [{ url: 'hbm://cuda/0?capacity=1GiB' }, { url: `fs://${fsDir}?capacity=64MiB` }], index: { path: ':memory:' } }));
    const r = await cli('doctor', '--config', file, '--json');
    const report = JSON.parse(r.out);
    const cuda = report.checks.find((c: { check: string }) => c.check.includes('CUDA'));
    const folder = report.checks.find((c: { check: string }) => c.check.includes(fsDir));
    expect(folder.ok).toBe(true);
    // Either way the exit code follows the checks: 1 exactly when one failed.
    expect(r.code).toBe(cuda.ok ? 0 : 1);
    expect(report.ok).toBe(cuda.ok);
    const fine = path.join(dir, 'fine.json');
    // Ports 0 (picked at start): nothing listening here can make it fail.
    const ports = { http: { port: 0 }, peer: { port: 0 } };
    writeFileSync(fine, JSON.stringify({ model: 'm@1', layout: 'llama-3-8b', tokensPerPage: 16, tiers: [{ url: `fs://${fsDir}?capacity=64MiB` }], index: { path: ':memory:' }, ...ports }));
    expect((await cli('doctor', '--config', fine)).code).toBe(0);
    // A port another process listens on (a daemon already running) is reported, by name.
    const held = net.createServer();
    await new Promise<void>((resolve) => held.listen({ host: '127.0.0.1', port: 0 }, resolve));
    try {
      const port = (held.address() as net.AddressInfo).port;
      const busy = path.join(dir, 'busy.json');
      writeFileSync(busy, JSON.stringify({ model: 'm@1', layout: 'llama-3-8b', tokensPerPage: 16, tiers: [{ url: `fs://${fsDir}?capacity=64MiB` }], index: { path: ':memory:' }, ...ports, resp: { port } }));
      const r2 = await cli('doctor', '--config', busy, '--json');
      expect(r2.code).toBe(1);
      expect(JSON.parse(r2.out).checks).toContainEqual({ check: 'resp: listen', ok: false, detail: `127.0.0.1:${port} cannot be listened on: in use (another daemon?)` });
    } finally {
      await new Promise((resolve) => held.close(resolve));
    }
  });

  it('doctor --config checks object tiers: the URL as serve parses it, credentials variables, the endpoint on TCP', async () => {
    type Report = { checks: Array<{ check: string; ok: boolean; detail: string }>; ok: boolean };
    const doctor = async (url: string) => {
      const file = path.join(dir, 'object.json');
      writeFileSync(file, JSON.stringify({ model: 'm@1', layout: 'llama-3-8b', tokensPerPage: 16, tiers: [{ url, name: 'cold' }], index: { path: ':memory:' }, http: { port: 0 }, peer: { port: 0 } }));
      const r = await cli('doctor', '--config', file, '--json');
      return { code: r.code, report: JSON.parse(r.out) as Report };
    };
    // A port nothing listens on: taken, then released.
    const closed = await new Promise<number>((resolve) => {
      const s = net.createServer().listen({ host: '127.0.0.1', port: 0 }, () => {
        const port = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(port));
      });
    });
    // A listener that records whether anything was sent to it: doctor connects, never sends a request.
    const received: Buffer[] = [];
    const open = net.createServer((socket) => socket.on('data', (d) => received.push(d)));
    await new Promise<void>((resolve) => open.listen({ host: '127.0.0.1', port: 0 }, resolve));
    const openPort = (open.address() as net.AddressInfo).port;
    try {
      // An invalid bucket name: the object driver's own ERR_CONFIG message, as serve would give it.
      const badBucket = `s3://Not_A_Bucket!/kv?endpoint=http://127.0.0.1:${openPort}`;
      const serveSays = (() => {
        try {
          parseObjectUrl(badBucket);
        } catch (e) {
          return (e as Error).message;
        }
        return 'parsed';
      })();
      expect(serveSays).toMatch(/not a valid bucket name/);
      const bad = await doctor(badBucket);
      expect(bad.code).toBe(1);
      expect(bad.report.checks).toContainEqual({ check: 'tiers.0 (cold): URL', ok: false, detail: serveSays });

      // An endpoint on a closed port, and credentials from variables that are not set: both reported.
      const down = await doctor(`s3://kv-bucket/cache?endpoint=http://127.0.0.1:${closed}&credentials=env:TIERSYNC_DOCTOR_UNSET`);
      expect(down.code).toBe(1);
      expect(down.report.checks).toContainEqual({ check: 'tiers.0 (cold): URL', ok: true, detail: "bucket 'kv-bucket', prefix 'cache/', region us-east-1" });
      expect(down.report.checks).toContainEqual({
        check: 'tiers.0 (cold): credentials env:TIERSYNC_DOCTOR_UNSET',
        ok: false,
        detail: 'TIERSYNC_DOCTOR_UNSET_ACCESS_KEY_ID and TIERSYNC_DOCTOR_UNSET_SECRET_ACCESS_KEY are not set in this environment (the daemon reads them at start)',
      });
      expect(down.report.checks).toContainEqual({ check: `tiers.0 (cold): endpoint http://127.0.0.1:${closed}`, ok: false, detail: expect.stringContaining('ECONNREFUSED') });

      // A gs:// tier whose endpoint answers and whose variables are set: all fine, and nothing reached the endpoint.
      vi.stubEnv('TIERSYNC_DOCTOR_SET_ACCESS_KEY_ID', 'id');
      vi.stubEnv('TIERSYNC_DOCTOR_SET_SECRET_ACCESS_KEY', 'secret');
      const fine = await doctor(`gs://kv-bucket?endpoint=http://127.0.0.1:${openPort}&credentials=env:TIERSYNC_DOCTOR_SET`);
      expect(fine.report.checks.filter((c) => c.check.startsWith('tiers.0')).map((c) => [c.check, c.ok])).toEqual([
        ['tiers.0 (cold): URL', true],
        ['tiers.0 (cold): credentials env:TIERSYNC_DOCTOR_SET', true],
        [`tiers.0 (cold): endpoint http://127.0.0.1:${openPort}`, true],
      ]);
      expect(fine.code).toBe(0);
      expect(Buffer.concat(received).length).toBe(0);
    } finally {
      vi.unstubAllEnvs();
      await new Promise((resolve) => open.close(resolve));
    }
  });

  it('doctor --config checks a peer tier with the whole handshake: a wrong secret fails, as it would at serve', async () => {
    const arena = HostArena.create({ capacity: 1 << 20 });
    const server = new PeerServer(arena, () => undefined, { secret: 'the-right-secret' });
    try {
      const doctor = async (secret: string) => {
        const file = path.join(dir, 'peer.json');
        writeFileSync(file, JSON.stringify({ model: 'm@1', layout: 'llama-3-8b', tokensPerPage: 16, tiers: [{ url: 'host://?capacity=64MiB', name: 'host' }, { url: `peer://127.0.0.1:${server.port}?secret=${secret}`, name: 'remote' }], index: { path: ':memory:' }, http: { port: 0 }, peer: { port: 0 } }));
        const r = await cli('doctor', '--config', file, '--json');
        return { code: r.code, check: (JSON.parse(r.out) as { checks: Array<{ check: string; ok: boolean; detail: string }> }).checks.find((c) => c.check.startsWith('tiers.1'))! };
      };
      const wrong = await doctor('a-wrong-secret');
      expect(wrong.code).toBe(1);
      expect(wrong.check).toMatchObject({ ok: false, detail: expect.stringMatching(/refused the handshake: .*secret/) });
      const right = await doctor('the-right-secret');
      expect(right.check).toMatchObject({ ok: true, detail: `127.0.0.1:${server.port} accepts connections and this secret` });
    } finally {
      server.close();
      arena.close();
    }
  });

  it("doctor --config checks the shipped demo config, its {tmp} tiers in the OS temp folder as the demo makes them", async () => {
    const r = await cli('doctor', '--config', demoConfigPath(), '--json');
    const report = JSON.parse(r.out) as { checks: Array<{ check: string; ok: boolean }>; ok: boolean };
    const fsCheck = report.checks.find((c) => c.check.includes('(fs)'));
    expect(fsCheck?.check).toContain(`folder ${path.join(os.tmpdir(), 'tiersync-demo', 'fs')}`);
    expect(r.code).toBe(report.ok ? 0 : 1);
  });

  it('version --json is machine-readable', async () => {
    const r = await cli('version', '--json');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({ version: expect.stringMatching(/^\d+\.\d+\.\d+/), node: process.versions.node, native: expect.any(String) });
  });

  it('an unexpected error prints one line and a hint to rerun with --verbose; --verbose prints the stack', async () => {
    commandTable['boom'] = { summary: 'fails', usage: 'boom', run: async () => Promise.reject(new RangeError('index 7 out of range\nsecond line')) };
    try {
      const r = await cli('boom');
      expect(r.code).toBe(1);
      expect(r.err.split('\n')).toEqual(['tiersync boom: index 7 out of range', expect.stringContaining('--verbose')]);
      const v = await cli('boom', '--verbose');
      expect(v.err).toMatch(/RangeError: index 7 out of range[\s\S]*\n\s+at /);
      const j = await cli('boom', '--json');
      expect(JSON.parse(j.out)).toEqual({ error: { code: 'ERR_INTERNAL', message: 'index 7 out of range' } });
    } finally {
      delete commandTable['boom'];
    }
  });

  it('weights takes its secret from a file or TIERSYNC_SECRET, never from argv', async () => {
    const r = await cli('weights', 'status', '--secret', 'hunter2', '--json');
    expect(r.code).toBe(2);
    expect(JSON.parse(r.out).error.message).toContain("'--secret'");
    expect((await cli('weights', '--help')).out).toContain('--secret-file');
  });

  it('the published CLI has no bench: it says where the benchmarks live; extra commands (the checkout\'s bench) run', async () => {
    const r = await cli('bench', 'transfer');
    expect(r.code).toBe(2);
    expect(r.err).toContain('pnpm tiersync bench');
    expect(r.err).toContain('packages/devtools');
    const j = await cli('bench', '--json');
    expect(JSON.parse(j.out).error).toEqual({ code: 'ERR_UNSUPPORTED', message: expect.stringContaining('packages/devtools') });
    expect((await cli('--help')).out).not.toMatch(/^\s+bench\s/m);
    const seen: string[][] = [];
    const bench: Command = { summary: 'run a benchmark suite', usage: 'bench <suite>', run: async (args) => (seen.push(args), 0) };
    expect((await cliWith({ bench }, 'bench', 'index', '--pages', '10')).code).toBe(0);
    expect(seen).toEqual([['index', '--pages', '10']]);
    expect((await cliWith({ bench }, '--help')).out).toMatch(/^\s+bench\s+run a benchmark suite/m);
  });
});
