import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { HostArena } from '@tiersync/native';
import { freePort, startRedis } from '@tiersync/devtools/services';
import { parseServerConfig, type ServerConfig } from './config.js';
import { TierSyncServer } from './server.js';
import { requireTools } from '../../../../scripts/system-packages.mjs';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;

/** redis-server on a fixed loopback port (so a restart comes back where the daemons look for it). */
async function redisOn(port: number): Promise<ChildProcess> {
  return (await startRedis({ port })).child;
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

async function until(what: string, check: () => Promise<boolean> | boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

function tokens(seed: number, pages: number): number[] {
  return Array.from({ length: pages * 16 }, (_, i) => (seed * 1_000_003 + i * 7) % 50_000);
}

async function store(server: TierSyncServer, toks: number[]): Promise<void> {
  const n = Math.floor(toks.length / 16);
  const arena = HostArena.create({ capacity: n * PAGE });
  try {
    await server.ts.store(Uint32Array.from(toks), Array.from({ length: n }, (_, i) => ({ arena, offset: i * PAGE, length: PAGE })));
  } finally {
    arena.close();
  }
}

async function lookup(server: TierSyncServer, toks: number[]): Promise<any> {
  const r = await fetch(`${server.url}/v1/lookup`, { method: 'POST', body: JSON.stringify({ tokens: toks }) });
  expect(r.status).toBe(200);
  return r.json();
}

describe('cluster registry on Redis', () => {
  beforeAll(() => requireTools(['redis-server']));
  let redisPort: number;
  let redis: ChildProcess;
  let dir: string;
  const servers: TierSyncServer[] = [];
  let a: TierSyncServer;
  let b: TierSyncServer;

  function config(name: string, extra: Partial<ServerConfig> = {}): ServerConfig {
    return {
      model: 'registry-test@1',
      layout,
      tiers: [{ url: `host://?capacity=${16 * PAGE}`, name: 'host', highWatermark: 1, lowWatermark: 0.5 }],
      index: { path: path.join(dir, `${name}.sqlite`) },
      http: { port: 0 },
      peer: { port: 0 },
      cluster: { redis: `redis://127.0.0.1:${redisPort}`, name: 'test', nodeId: name, heartbeatMs: 100, ttlMs: 1000, publishIntervalMs: 20, commandTimeoutMs: 300 },
      log: { level: 'silent' },
      ...extra,
    };
  }

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-registry-'));
    redisPort = await freePort();
    redis = await redisOn(redisPort);
    a = await TierSyncServer.start(parseServerConfig(config('node-a')));
    b = await TierSyncServer.start(parseServerConfig(config('node-b')));
    servers.push(a, b);
  });
  afterAll(async () => {
    for (const s of servers) await s.close();
    if (redis) await stop(redis);
    rmSync(dir, { recursive: true, force: true });
  });

  it('registers each node with an expiring heartbeat', async () => {
    const r = (await (await fetch(`${b.url}/v1/cluster/nodes`)).json()) as any;
    const ids = r.nodes.map((n: { id: string }) => n.id).sort();
    expect(ids).toEqual(['node-a', 'node-b']);
    expect(r.nodes.find((n: { id: string }) => n.id === 'node-a').peer).toBe(`127.0.0.1:${a.peerPort}`);
    const client = new Redis(redisPort, '127.0.0.1');
    try {
      const ttl = await client.pttl('test:node:node-a');
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(1000);
    } finally {
      client.disconnect();
    }
  });

  it("publishes the host tier's pages compactly and answers which host holds a prefix", async () => {
    await store(a, tokens(1, 6));
    await a.registry!.flush();
    const client = new Redis(redisPort, '127.0.0.1');
    try {
      const members = await client.smembersBuffer('test:pages:node-a');
      expect(members).toHaveLength(6);
      expect(members.every((m) => m.length === 32)).toBe(true);
    } finally {
      client.disconnect();
    }
    // b has nothing locally: the registry says node-a holds the first 6 pages (and not the 2 after).
    const r = await lookup(b, tokens(1, 8));
    expect(r.tokens).toBe(0);
    expect(r.cluster.holders).toEqual([{ node: 'node-a', peer: `127.0.0.1:${a.peerPort}`, pages: 6, tokens: 96 }]);
    const m = await (await fetch(`${b.url}/metrics`)).text();
    expect(m).toMatch(/^tiersync_registry_up 1$/m);
    expect(m).toMatch(/^tiersync_registry_failures_total 0$/m);
    expect(await (await fetch(`${a.url}/metrics`)).text()).toMatch(/^tiersync_registry_published_pages 6$/m);
  });

  it('unpublishes evicted pages', async () => {
    // 16-page host tier, high watermark 1, low 0.5: 12 more pages evict the oldest.
    await store(a, tokens(2, 12));
    await a.registry!.flush();
    const evicted = a.ts.stats().counters;
    expect(evicted.pagesStored).toBe(18);
    const held = a.ts.stats().tiers[0]!.usedPages;
    const client = new Redis(redisPort, '127.0.0.1');
    try {
      expect(await client.scard('test:pages:node-a')).toBe(held);
    } finally {
      client.disconnect();
    }
  });

  it('keeps serving when Redis dies, counts failures, and re-registers when it returns', async () => {
    await stop(redis);
    await until('the registry to notice', () => !a.registry!.stats().up && !b.registry!.stats().up);
    const failuresBefore = b.registry!.stats().failures;
    // Local serving goes on: stores and lookups answer from the local tiers, the cluster part says why it is missing.
    await store(a, tokens(3, 4));
    const local = await lookup(a, tokens(3, 4));
    expect(local.tokens).toBe(64);
    const r = await lookup(b, tokens(3, 4));
    expect(r.tokens).toBe(0);
    expect(r.cluster.error).toMatch(/unreachable/);
    expect(b.registry!.stats().failures).toBeGreaterThan(failuresBefore);
    expect((await fetch(`${b.url}/healthz`)).status).toBe(200);
    expect(await (await fetch(`${b.url}/metrics`)).text()).toMatch(/^tiersync_registry_up 0$/m);
    expect((await fetch(`${b.url}/v1/cluster/nodes`)).status).toBe(503);

    // Redis comes back empty: both nodes re-register and a republishes everything it holds, the new pages included.
    const registrations = a.registry!.stats().registrations;
    redis = await redisOn(redisPort);
    await until('re-registration', () => a.registry!.stats().up && a.registry!.stats().registrations > registrations);
    await until('node-a to be found again', async () => {
      const again = await lookup(b, tokens(3, 4));
      return again.cluster?.holders?.[0]?.node === 'node-a' && again.cluster.holders[0].pages === 4;
    });
    const nodes = (await (await fetch(`${b.url}/v1/cluster/nodes`)).json()) as any;
    expect(nodes.nodes.map((n: { id: string }) => n.id).sort()).toEqual(['node-a', 'node-b']);
  });

  it('deregisters on close', async () => {
    await a.close();
    const r = await lookup(b, tokens(3, 4));
    expect(r.cluster.holders).toEqual([]);
    const nodes = (await (await fetch(`${b.url}/v1/cluster/nodes`)).json()) as any;
    expect(nodes.nodes.map((n: { id: string }) => n.id)).toEqual(['node-b']);
  });

  it('starts and serves while Redis is down', async () => {
    const deadPort = await freePort();
    const c = await TierSyncServer.start(parseServerConfig({ ...config('node-c'), cluster: { ...config('node-c').cluster!, redis: `redis://127.0.0.1:${deadPort}` } }));
    servers.push(c);
    expect(c.registry!.stats().up).toBe(false);
    expect((await fetch(`${c.url}/healthz`)).status).toBe(200);
    await store(c, tokens(5, 2));
    expect((await lookup(c, tokens(5, 2))).tokens).toBe(32);
  });
});
