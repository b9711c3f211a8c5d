import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
import { PeerTier } from '@tiersync/tiers';
import { stringify } from 'yaml';
import { loadServerConfig, parseServerConfig, type ServerConfig } from './config.js';
import { TierSyncServer } from './server.js';
import { requireTools } from '../../../../scripts/system-packages.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
// 1 layer x 2 KV heads x 64 dims, bf16, 16 tokens per page = 8 KiB pages.
const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;
const CHROMIUM = '/usr/bin/chromium';

function config(dir: string, extra: Partial<ServerConfig> = {}): ServerConfig {
  return {
    model: 'serve-test@1',
    layout,
    tiers: [
      { url: `host://?capacity=${64 * PAGE}`, name: 'host' },
      { url: `fs://${dir}/fs?capacity=${1024 * PAGE}`, name: 'fs', writeThrough: true },
    ],
    index: { path: path.join(dir, 'index.sqlite') },
    http: { port: 0 },
    peer: { port: 0 },
    log: { level: 'silent' },
    ...extra,
  };
}

function tokens(seed: number, pages: number): number[] {
  return Array.from({ length: pages * 16 }, (_, i) => (seed * 1_000_003 + i * 7) % 50_000);
}

async function store(server: TierSyncServer, toks: number[]): Promise<void> {
  const n = Math.floor(toks.length / 16);
  const arena = HostArena.create({ capacity: n * PAGE });
  try {
    for (let i = 0; i < n; i++) arena.view(i * PAGE, PAGE).fill(i + 1);
    await server.ts.store(Uint32Array.from(toks), Array.from({ length: n }, (_, i) => ({ arena, offset: i * PAGE, length: PAGE })));
  } finally {
    arena.close();
  }
}

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

describe('server config', () => {
  it('validates the library fields and the daemon sections, naming the field', () => {
    const dir = '/tmp/x';
    const c = parseServerConfig(config(dir));
    expect(c.http).toMatchObject({ host: '127.0.0.1', port: 0 });
    expect(c.hierarchy.tiers).toHaveLength(2);
    expect(parseServerConfig({ model: 'm', layout: 'llama-3-8b', tiers: [{ url: 'host://?capacity=1MiB' }] }).http.port).toBe(7071);
    expect(() => parseServerConfig({ ...config(dir), http: { port: 70000 } })).toThrow(/config http.port/);
    expect(() => parseServerConfig({ ...config(dir), bogus: 1 })).toThrow(/config/);
    expect(() => parseServerConfig({ ...config(dir), http: { host: '0.0.0.0' } })).toThrow(/http.token/);
    expect(() => parseServerConfig({ ...config(dir), peer: { host: '0.0.0.0' } })).toThrow(/peer.secret/);
    expect(() => parseServerConfig({ ...config(dir), tiers: [{ url: 'host://', policy: 'nope' }] })).toThrow(/tiers.0.policy/);
    expect(() => parseServerConfig({ ...config(dir), http: { token: 'env:TIERSYNC_SURELY_UNSET' } })).toThrow(/TIERSYNC_SURELY_UNSET/);
  });

  it('reads YAML and JSON files', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-serve-cfg-'));
    try {
      writeFileSync(path.join(dir, 'a.yaml'), stringify(config(dir)));
      writeFileSync(path.join(dir, 'b.json'), JSON.stringify(config(dir)));
      writeFileSync(path.join(dir, 'c.yaml'), 'model: [unclosed');
      expect(loadServerConfig(path.join(dir, 'a.yaml')).hierarchy.model).toBe('serve-test@1');
      expect(loadServerConfig(path.join(dir, 'b.json')).hierarchy.model).toBe('serve-test@1');
      expect(() => loadServerConfig(path.join(dir, 'c.yaml'))).toThrow(/not valid YAML/);
      expect(() => loadServerConfig(path.join(dir, 'missing.yaml'))).toThrow(/cannot read config file/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('TierSyncServer listeners', () => {
  it('a port in use fails the start naming the config keys of the listener that clashed, and frees the folder', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-serve-ports-'));
    const busy = http.createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const port = (busy.address() as { port: number }).port;
    try {
      await expect(TierSyncServer.start(parseServerConfig(config(dir, { resp: { port } } as Partial<ServerConfig>)))).rejects.toThrow(new RegExp(`^resp.host/resp.port \\(the RESP door\\): cannot listen on 127.0.0.1:${port}`));
      await expect(TierSyncServer.start(parseServerConfig(config(dir, { peer: { port } })))).rejects.toThrow(new RegExp(`^peer.host/peer.port \\(the peer server\\): cannot listen on 127.0.0.1:${port}`));
      // Nothing of the failed starts holds the folder: a start on free ports works.
      const ok = await TierSyncServer.start(parseServerConfig(config(dir)));
      await ok.close();
    } finally {
      busy.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('TierSyncServer', () => {
  let dir: string;
  let server: TierSyncServer;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-serve-'));
    server = await TierSyncServer.start(parseServerConfig(config(dir, { http: { port: 0, token: 'test-token' } })));
    await store(server, tokens(1, 8));
  });
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers /healthz', async () => {
    const r = await fetch(`${server.url}/healthz`);
    expect(r.status).toBe(200);
    expect(await r.json()).toMatchObject({ status: 'ok', node: server.nodeId });
  });

  it('looks up cached prefixes', async () => {
    const full = await post(`${server.url}/v1/lookup`, { tokens: tokens(1, 8) });
    expect(full.status).toBe(200);
    expect(full.json).toMatchObject({ pagesRequested: 8, tokens: 128 });
    expect(full.json.pages).toHaveLength(8);
    expect(full.json.pages[0]).toMatchObject({ tier: 'host' });
    expect(full.json.pages[0].key).toMatch(/^[0-9a-f]{64}$/);
    // The first 4 pages are shared, then the context diverges.
    const part = await post(`${server.url}/v1/lookup`, { tokens: [...tokens(1, 4), ...tokens(2, 4)] });
    expect(part.json).toMatchObject({ pagesRequested: 8, tokens: 64 });
    const none = await post(`${server.url}/v1/lookup`, { tokens: tokens(3, 2) });
    expect(none.json).toMatchObject({ pagesRequested: 2, tokens: 0, pages: [] });
  });

  it('refuses bad lookups with clear errors', async () => {
    expect((await post(`${server.url}/v1/lookup`, { tokens: [1, -2] })).json.error).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'tokens[1]' });
    expect((await post(`${server.url}/v1/lookup`, { nope: 1 })).status).toBe(400);
    const bad = await fetch(`${server.url}/v1/lookup`, { method: 'POST', body: '{not json' });
    expect(bad.status).toBe(400);
    const big = await fetch(`${server.url}/v1/lookup`, { method: 'POST', body: 'x'.repeat(9 << 20) }).catch(() => undefined);
    if (big) expect(big.status).toBe(413);
    expect((await fetch(`${server.url}/v1/lookup`)).status).toBe(405);
    expect((await fetch(`${server.url}/nope`)).status).toBe(404);
  });

  it('requires the bearer token on mutating endpoints', async () => {
    expect((await post(`${server.url}/v1/prefetch`, { tokens: tokens(1, 2) })).status).toBe(401);
    expect((await post(`${server.url}/v1/prefetch`, { tokens: tokens(1, 2) }, { authorization: 'Bearer wrong' })).status).toBe(401);
    const ok = await post(`${server.url}/v1/prefetch`, { tokens: tokens(1, 2) }, { authorization: 'Bearer test-token' });
    expect(ok.status).toBe(202);
    expect(ok.json).toMatchObject({ pagesRequested: 2 });
  });

  it('reports /v1/stats', async () => {
    const s = (await (await fetch(`${server.url}/v1/stats`)).json()) as any;
    expect(s.tiers.map((t: { name: string }) => t.name)).toEqual(['host', 'fs']);
    expect(s.tiers[0]).toMatchObject({ kind: 'host', capacityBytes: 64 * PAGE, usedPages: 8 });
    expect(s.lookups.requests).toBeGreaterThanOrEqual(3);
    expect(s.lookups.pagesHit).toBeGreaterThanOrEqual(12);
    expect(s.peer).toMatchObject({ tier: 'host', port: server.peerPort });
    expect(s.counters.pagesStored).toBe(8);
    expect(s.cluster).toBeNull();
  });

  it('exposes Prometheus metrics with the expected names', async () => {
    const r = await fetch(`${server.url}/metrics`);
    expect(r.headers.get('content-type')).toMatch(/text\/plain/);
    const text = await r.text();
    for (const name of [
      'tiersync_tier_capacity_bytes',
      'tiersync_tier_used_bytes',
      'tiersync_tier_pages',
      'tiersync_tier_hits_total',
      'tiersync_tier_misses_total',
      'tiersync_tier_read_bytes_total',
      'tiersync_tier_written_bytes_total',
      'tiersync_transfer_bytes_total',
      'tiersync_transfer_duration_seconds_bucket',
      'tiersync_integrity_failures_total',
      'tiersync_lookup_pages_total',
      'tiersync_http_requests_total',
      'tiersync_peer_connections',
      'tiersync_peer_ranges_total',
      'tiersync_peer_requests_total',
      'tiersync_build_info',
      // Node's default metrics under their standard names, as stock dashboards expect them.
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_seconds',
      'nodejs_heap_size_used_bytes',
    ]) {
      expect(text, name).toMatch(new RegExp(`^${name}(\\{| )`, 'm'));
    }
    expect(text).toMatch(/^tiersync_tier_capacity_bytes\{tier="host",kind="host"\} 524288$/m);
    expect(text).toMatch(/^tiersync_transfer_bytes_total\{op="store",tier="host"\} 65536$/m);
    expect(text).toMatch(/^tiersync_integrity_failures_total\{tier="fs"\} 0$/m);
    expect(text).toMatch(/^tiersync_transfer_duration_seconds_count\{op="store",tier="host"\} 1$/m);
    expect(text).toMatch(/^tiersync_build_info\{version="\d+\.\d+\.\d+[^"]*",native="[^"]+",node="[^"]+"\} 1$/m);
    expect(text).not.toMatch(/^tiersync_(process|nodejs)_/m);
  });

  it('counts deletes apart from evictions', async () => {
    const metric = async (re: RegExp) => Number(re.exec(await (await fetch(`${server.url}/metrics`)).text())?.[1] ?? 0);
    const evicted = /^tiersync_evicted_pages_total\{tier="host"\} (\d+)$/m;
    const deleted = /^tiersync_removed_pages_total\{tier="host",why="deleted"\} (\d+)$/m;
    const [e0, d0] = [await metric(evicted), await metric(deleted)];
    const arena = HostArena.create({ capacity: 2 * PAGE });
    try {
      const keys = ['de1e7e00000000000000000000000001', 'de1e7e00000000000000000000000002'];
      await server.ts.storeKeys(keys, keys.map((_, i) => ({ arena, offset: i * PAGE, length: PAGE })));
      expect((await server.ts.deleteKeys(keys)).deleted).toEqual(keys);
    } finally {
      arena.close();
    }
    expect(await metric(evicted)).toBe(e0);
    expect(await metric(deleted)).toBe(d0 + 2);
  });

  // Prometheus naming rules (prometheus.io/docs/practices/naming, and the exposition format): a valid name; counters
  // end in _total; a unit suffix in base units (seconds, bytes), never ms/kb; _info gauges; one TYPE per family.
  it('names every metric by the Prometheus naming rules', async () => {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    const types = new Map<string, string>();
    for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
      expect(types.has(m[1]!), `${m[1]} typed twice`).toBe(false);
      types.set(m[1]!, m[2]!);
    }
    expect(types.size).toBeGreaterThan(30);
    expect([...types.keys()].filter((n) => !/^(tiersync_|process_|nodejs_)/.test(n))).toEqual([]);
    for (const [name, type] of types) {
      expect(name, name).toMatch(/^[a-zA-Z_:][a-zA-Z0-9_:]*$/);
      // Node's standard families keep prom-client's names as they are (nodejs_active_resources_total is a gauge).
      if (!name.startsWith('tiersync_')) continue;
      expect(name, name).not.toMatch(/__|_(ms|milliseconds|us|kb|mb|kib|mib|percent)(_|$)/);
      if (type === 'counter') expect(name, `${name} is a counter`).toMatch(/_total$/);
      else expect(name, `${name} is a ${type}`).not.toMatch(/_total$/);
      if (/_info$/.test(name)) expect(type, name).toBe('gauge');
      if (type === 'histogram') expect(name, name).toMatch(/_(seconds|bytes)$/);
    }
    // Every sample belongs to a typed family.
    for (const m of text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )/gm)) {
      const family = m[1]!.replace(/_(bucket|sum|count|created)$/, '');
      expect(types.has(m[1]!) || types.has(family), m[1]).toBe(true);
    }
  });

  it('serves the host tier to peers over the native peer protocol', async () => {
    const hit = server.ts.lookup(Uint32Array.from(tokens(1, 8)));
    const ctx = { engine: server.ts.engine, pageBytes: PAGE, fingerprint: 'x' };
    const peer = new PeerTier(`peer://127.0.0.1:${server.peerPort}?streams=1`, ctx);
    await peer.open();
    const arena = HostArena.create({ capacity: PAGE });
    try {
      const [o] = await peer.read([{ key: hit.keys[2]!, into: { arena, offset: 0, length: PAGE } }]);
      expect(o!.status).toBe('hit');
      expect(arena.view(0, PAGE).every((b) => b === 3)).toBe(true);
      // Ranges, and /metrics saying how each was verified: the first checks the page whole (no chunk table yet:
      // the page was stored here, not by a peer's PUT), a half page is checked against the table, a chunk-aligned
      // range (the whole 64 KiB page: one chunk) is announced.
      const ranged = async (length: number) => (await peer.read([{ key: hit.keys[3]!, into: { arena, offset: 0, length }, range: { offset: 0, length } }]))[0]!.status;
      expect([await ranged(PAGE / 2), await ranged(PAGE / 2), await ranged(PAGE)]).toEqual(['hit', 'hit', 'hit']);
      expect(arena.view(0, PAGE).every((b) => b === 4)).toBe(true);
      const text = await (await fetch(`${server.url}/metrics`)).text();
      for (const check of ['announced', 'chunks', 'whole']) expect(text).toMatch(new RegExp(`^tiersync_peer_ranges_total\\{check="${check}"\\} 1$`, 'm'));
      // Four GETs (one whole, three ranged), each counted once, by where it was planned.
      const gets = (plane: string) => Number(new RegExp(`^tiersync_peer_requests_total\\{op="get",plane="${plane}"\\} (\\d+)$`, 'm').exec(text)?.[1]);
      expect(gets('data') + gets('control')).toBe(4);
      expect(gets('data')).toBe(4);
      expect(text).toMatch(/^tiersync_peer_requests_total\{op="delete",plane="control"\} 0$/m);
    } finally {
      await peer.close();
      arena.close();
    }
  });

  it('draws the dashboard charts in headless Chromium', async (ctx) => {
    requireTools(['chromium']);
    expect((await (await fetch(`${server.url}/`)).text())).toContain('<svg id="occupancy"');
    // Keep traffic flowing so the hit-rate chart has deltas to draw.
    const traffic = setInterval(() => void post(`${server.url}/v1/lookup`, { tokens: tokens(1, 8) }).catch(() => undefined), 100);
    const profile = mkdtempSync(path.join(os.tmpdir(), 'tiersync-chromium-'));
    try {
      const out = await new Promise<string>((resolve, reject) => {
        const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run', `--user-data-dir=${profile}`, '--virtual-time-budget=4000', '--dump-dom', `${server.url}/?interval=500`];
        const child = spawn(CHROMIUM, args, { stdio: ['ignore', 'pipe', 'pipe'] });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d) => (stdout += d));
        child.stderr.on('data', (d) => (stderr += d));
        const timer = setTimeout(() => child.kill('SIGKILL'), 45_000);
        child.on('error', reject);
        child.on('exit', (code) => {
          clearTimeout(timer);
          if (code === 0 && stdout) resolve(stdout);
          else reject(new Error(`chromium exited with ${code}: ${stderr.slice(-2000)}`));
        });
      });
      for (const id of ['occupancy', 'hitrate', 'throughput']) {
        const svg = new RegExp(`<svg id="${id}"[^>]*data-samples="(\\d+)"[^>]*>([\\s\\S]*?)</svg>`).exec(out);
        expect(svg, `chart ${id}`).not.toBeNull();
        expect(Number(svg![1]), `samples of ${id}`).toBeGreaterThanOrEqual(2);
        const lines = [...svg![2]!.matchAll(/<polyline class="series" data-series="([^"]+)" points="([^"]*)"/g)];
        expect(lines.length, `series of ${id}`).toBeGreaterThanOrEqual(1);
        for (const l of lines) expect(l[2]!.split(' ').length, `points of ${id}/${l[1]}`).toBeGreaterThanOrEqual(2);
      }
      expect(out).toMatch(/data-series="host"/);
      expect(out).toMatch(/data-series="fs"/);
      expect(out).toMatch(/node .* · model serve-test@1/);
    } finally {
      clearInterval(traffic);
      rmSync(profile, { recursive: true, force: true });
    }
  });
});

describe('graceful shutdown', () => {
  it('lets an in-flight request finish before closing', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-serve-'));
    const server = await TierSyncServer.start(parseServerConfig(config(dir)));
    try {
      const body = JSON.stringify({ tokens: tokens(1, 2) });
      // Headers now, body later: the request is in flight when close() starts.
      const reply = new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = http.request(`${server.url}/v1/lookup`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
          let text = '';
          res.on('data', (d) => (text += d));
          res.on('end', () => resolve({ status: res.statusCode!, text }));
        });
        req.on('error', reject);
        req.write(body.slice(0, 5));
        setTimeout(() => req.end(body.slice(5)), 300);
      });
      await new Promise((r) => setTimeout(r, 100));
      let closed = false;
      const closing = server.close().then(() => (closed = true));
      await new Promise((r) => setTimeout(r, 50));
      expect(closed).toBe(false);
      // New connections are refused while draining.
      await expect(fetch(`${server.url}/healthz`)).rejects.toThrow();
      const r = await reply;
      expect(r.status).toBe(200);
      expect(JSON.parse(r.text)).toMatchObject({ pagesRequested: 2 });
      await closing;
      expect(closed).toBe(true);
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('`tiersync serve` exits 0 on SIGTERM after flushing the index', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-serve-child-'));
    try {
      const file = path.join(dir, 'serve.yaml');
      writeFileSync(file, stringify({ ...config(dir), log: { level: 'info' } }));
      const child = spawn(process.execPath, ['--conditions=source', path.join(here, 'serve.fixture.mjs'), '--config', file, '--http', '0', '--peer', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      const listening = new Promise<{ httpPort: number }>((resolve, reject) => {
        child.stderr.on('data', (d) => {
          stderr += d;
          for (const line of stderr.split('\n')) {
            if (!line.includes('tiersync serve listening')) continue;
            resolve(JSON.parse(line) as { httpPort: number });
          }
        });
        child.on('exit', (code) => reject(new Error(`serve exited early with ${code}: ${stderr}`)));
      });
      const { httpPort } = await listening;
      const r = await post(`http://127.0.0.1:${httpPort}/v1/lookup`, { tokens: tokens(1, 2) });
      expect(r.status).toBe(200);
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      const lines = stderr.trim().split('\n').map((l) => JSON.parse(l) as { msg: string; level: number });
      expect(lines.map((l) => l.msg)).toEqual(expect.arrayContaining(['tiersync serve listening', 'signal received', 'shutting down', 'shut down cleanly']));
      // The start line says what runs: tiersync's version and how its native core was built and found this machine.
      const started = lines.find((l) => l.msg === 'tiersync serve listening') as unknown as { version: string; native: string };
      expect(started.version).toMatch(/^\d+\.\d+\.\d+/);
      expect(started.native).toMatch(/^io (io_uring|thread pool), cuda .*, crc32c \S+.*, peer frames (ipsec-mb|system|node)$/);
      expect(existsSync(path.join(dir, 'index.sqlite'))).toBe(true);
      // Nothing held the event loop open after close(): no forced exit.
      expect(lines.map((l) => l.msg)).not.toContain('a handle kept the process alive after shutdown; exiting');
      // The index was closed cleanly: SQLite checkpointed and removed its WAL.
      expect(existsSync(path.join(dir, 'index.sqlite-wal'))).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the shipped Grafana dashboard', () => {
  it('queries only metrics a daemon (with its RESP door on) exports', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-grafana-'));
    const server = await TierSyncServer.start(parseServerConfig(config(dir, { resp: { port: 0 } })));
    try {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      const families = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!));
      const dashboard = JSON.parse(readFileSync(path.join(here, '../../../../docs/grafana/tiersync-dashboard.json'), 'utf8'));
      const exprs: string[] = dashboard.panels.flatMap((p: { targets: Array<{ expr: string }> }) => p.targets.map((t) => t.expr));
      expect(exprs.length).toBeGreaterThan(10);
      const used = new Set(exprs.flatMap((e) => [...e.matchAll(/\b((?:tiersync|process|nodejs)_[a-z0-9_]+)/g)].map((m) => m[1]!)));
      for (const name of used) {
        const family = families.has(name) ? name : name.replace(/_(bucket|sum|count)$/, '');
        expect(families.has(family), `${name} is not exported`).toBe(true);
      }
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
