// Three `tiersync serve` daemons and a real redis-server on loopback: rendezvous placement pushes each page a
// client stores to its owner's RAM, and a client of another daemon loads pages that daemon never held: they are
// found through the cluster registry and pulled from the holder's host tier over the peer protocol, bytes exact.
import { randomFillSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
import { TierSyncClient } from '@tiersync/core/client';
import { rendezvousOwner } from '../packages/core/src/server/rendezvous.js';
import { Tenants } from '../packages/core/src/server/tenants.js';
import { freePort, kill, startDaemon, startRedis, type Daemon } from './daemon-helpers.js';
import { requireTools } from '../scripts/system-packages.mjs';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;
const NODES = ['node-a', 'node-b', 'node-c'];
const N = 30;

async function post(url: string, route: string, body: unknown): Promise<any> {
  const r = await fetch(`${url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return r.json();
}

describe('daemons in a cluster (redis-server, rendezvous placement)', () => {
  beforeAll(() => requireTools(['redis-server']));
  let dir: string;
  let redis: ChildProcess;
  let redisPort: number;
  const daemons: Daemon[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-daemon-cluster-'));
    const port = await freePort();
    redisPort = port;
    redis = await startRedis(port);
    for (const id of NODES) {
      daemons.push(
        await startDaemon(
          {
            model: 'daemon-cluster@1',
            layout,
            tiers: [{ url: `host://?capacity=${256 * PAGE}&shm=/dev/shm/tiersync-cluster-${process.pid}-${id}&prefault=false`, name: 'host' }],
            index: { path: path.join(dir, `${id}.sqlite`) },
            http: { port: 0 },
            peer: { port: 0 },
            cluster: { redis: `redis://127.0.0.1:${port}`, name: `t${process.pid}`, nodeId: id, heartbeatMs: 200, publishIntervalMs: 50, placement: 'rendezvous' },
            log: { level: 'info' },
          },
          dir,
          id,
        ),
      );
    }
  });

  afterAll(async () => {
    for (const d of daemons) expect(await d.stop()).toBe(0);
    if (redis) await kill(redis);
    rmSync(dir, { recursive: true, force: true });
    for (const id of NODES) rmSync(`/dev/shm/tiersync-cluster-${process.pid}-${id}`, { force: true });
  });

  it("pushes pages to their rendezvous owner's RAM and pulls them from there for another daemon's client", async () => {
    const [a, , c] = daemons as [Daemon, Daemon, Daemon];
    // Every daemon sees all three.
    for (const d of daemons) {
      await expect.poll(async () => ((await (await fetch(`${d.url}/v1/cluster/nodes`)).json()) as { nodes: unknown[] }).nodes.length, { timeout: 10_000 }).toBe(3);
    }
    const keys = Array.from({ length: N }, (_, i) => `feed${i.toString(16).padStart(12, '0')}`);
    // The daemon stores tenant `default`'s pages under derived keys; placement hashes those.
    const tenant = new Tenants(undefined, {}).identify({ headers: {} } as never)!;
    const owners = keys.map((k) => rendezvousOwner(Tenants.storedKey(tenant, k), NODES)!);
    expect(new Set(owners).size).toBe(3);

    const src = HostArena.create({ capacity: N * PAGE });
    const dst = HostArena.create({ capacity: N * PAGE });
    const writer = await TierSyncClient.connect({ url: a.url });
    const reader = await TierSyncClient.connect({ url: c.url });
    try {
      randomFillSync(src.view(0, N * PAGE));
      const pages = keys.map((_, i) => ({ arena: src, offset: i * PAGE, length: PAGE }));
      expect((await writer.store(keys, pages)).stored).toBe(N);

      // Each owner's host tier (and block index) now holds exactly the pages it owns among those not stored on it.
      for (const [n, id] of NODES.entries()) {
        if (id === 'node-a') continue;
        const mine = keys.filter((_, i) => owners[i] === id);
        await expect.poll(async () => ((await post(daemons[n]!.url, '/v1/client/lookup', { keys: mine })) as { present: boolean[] }).present.every(Boolean), { timeout: 10_000 }).toBe(true);
        const others = keys.filter((_, i) => owners[i] !== id && owners[i] !== 'node-a');
        if (others.length) expect(((await post(daemons[n]!.url, '/v1/client/lookup', { keys: others })) as { present: boolean[] }).present.some(Boolean)).toBe(false);
      }

      // node-c's client asks for all of them: its own come from its RAM, node-a's and node-b's are pulled over the peer tier.
      const look = await reader.lookup(keys, { cluster: true });
      const before = look.present.filter(Boolean).length;
      expect(before).toBeLessThan(N);
      // "Host X holds this page": for every page node-c lacks, the registry names its owner first.
      const holders = (look.cluster as { holders: Array<string[] | null> }).holders;
      keys.forEach((_, i) => {
        if (look.present[i]) expect(holders[i]).toBeNull();
        else expect(holders[i]![0]).toBe(owners[i]);
      });
      const r = await reader.load(keys, pages.map((p) => ({ arena: dst, offset: p.offset, length: PAGE })));
      expect(r).toMatchObject({ loaded: N, missing: [] });
      expect(Buffer.compare(Buffer.from(dst.view(0, N * PAGE)), Buffer.from(src.view(0, N * PAGE)))).toBe(0);
      const metrics = await (await fetch(`${c.url}/metrics`)).text();
      const pulled = Number(/tiersync_client_pages_total\{tenant="default",op="pulled"\} (\d+)/.exec(metrics)?.[1] ?? 0);
      expect(pulled).toBe(N - before);
      // The pulled pages are in node-c's index now.
      expect(((await post(c.url, '/v1/client/lookup', { keys })) as { present: boolean[] }).present.every(Boolean)).toBe(true);
    } finally {
      src.close();
      dst.close();
      await writer.close();
      await reader.close();
    }
  });

  it('keeps serving clients while Redis is down, and re-registers when it returns', async () => {
    const [a, b] = daemons as [Daemon, Daemon, Daemon];
    const src = HostArena.create({ capacity: 4 * PAGE });
    const dst = HostArena.create({ capacity: 4 * PAGE });
    const client = await TierSyncClient.connect({ url: b.url });
    try {
      randomFillSync(src.view(0, 4 * PAGE));
      const keys = Array.from({ length: 4 }, (_, i) => `dead${i.toString(16).padStart(12, '0')}`);
      await kill(redis);
      await expect.poll(async () => ((await (await fetch(`${b.url}/v1/stats`)).json()) as { cluster: { up: boolean } }).cluster.up, { timeout: 10_000 }).toBe(false);
      // Stores and loads on local tiers go on; a cluster lookup says the registry is unreachable.
      expect((await client.store(keys, keys.map((_, i) => ({ arena: src, offset: i * PAGE, length: PAGE })))).stored).toBe(4);
      expect(await client.load(keys, keys.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })))).toMatchObject({ loaded: 4, missing: [] });
      expect(Buffer.compare(Buffer.from(dst.view(0, 4 * PAGE)), Buffer.from(src.view(0, 4 * PAGE)))).toBe(0);
      expect((await client.lookup([`beef${'0'.repeat(12)}`], { cluster: true })).cluster).toMatchObject({ error: expect.stringMatching(/unreachable/) });
      const failures = ((await (await fetch(`${b.url}/v1/stats`)).json()) as { cluster: { failures: number } }).cluster.failures;
      expect(failures).toBeGreaterThan(0);
      // Redis comes back empty: every daemon registers again and republishes its pages.
      redis = await startRedis(redisPort);
      for (const d of daemons) {
        await expect.poll(async () => ((await (await fetch(`${d.url}/v1/cluster/nodes`)).json()) as { nodes?: unknown[] }).nodes?.length ?? 0, { timeout: 15_000 }).toBe(3);
      }
      // node-b's pages written while Redis was down are findable from node-a again.
      const fromA = await TierSyncClient.connect({ url: a.url });
      try {
        await expect.poll(async () => ((await fromA.lookup(keys, { cluster: true })).cluster as { holders: Array<string[] | null> }).holders.every((h) => h === null || h.includes('node-b')), { timeout: 10_000 }).toBe(true);
      } finally {
        await fromA.close();
      }
    } finally {
      src.close();
      dst.close();
      await client.close();
    }
  });
});

// Nodes that fail must not take the healthy ones down with them: node-c holds the wrong peer secret (every
// connection to or from it fails its handshake), node-b restarts on the same peer port while node-a keeps its
// connection to it.
describe('daemons in a cluster with failing peers (a restarted node, a node with the wrong peer secret)', () => {
  beforeAll(() => requireTools(['redis-server']));
  const IDS = ['node-a', 'node-b', 'node-c'];
  let dir: string;
  let redis: ChildProcess;
  const nodes = new Map<string, Daemon>();
  const configs = new Map<string, unknown>();
  const tenant = new Tenants(undefined, {}).identify({ headers: {} } as never)!;
  const owner = (k: string) => rendezvousOwner(Tenants.storedKey(tenant, k), IDS)!;
  /** `n` client keys owned by `id`, from a family of keys named by `prefix` (4 hex characters). */
  const ownedBy = (id: string, n: number, prefix: string): string[] => {
    const out: string[] = [];
    for (let i = 0; out.length < n; i++) {
      const k = `${prefix}${i.toString(16).padStart(12, '0')}`;
      if (owner(k) === id) out.push(k);
    }
    return out;
  };
  /** A page's bytes, the same wherever and whenever it is stored. */
  const bytesOf = (k: string): Uint8Array => {
    const out = new Uint8Array(PAGE);
    for (let i = 0; i < PAGE; i++) out[i] = (Number.parseInt(k.slice(-6), 16) * 31 + i * 7 + (i >> 9)) & 0xff;
    return out;
  };
  const node = (id: string) => nodes.get(id)!;
  const start = async (id: string) => nodes.set(id, await startDaemon(configs.get(id), dir, id));

  async function store(id: string, keys: string[]): Promise<number> {
    const src = HostArena.create({ capacity: keys.length * PAGE });
    const client = await TierSyncClient.connect({ url: node(id).url });
    try {
      keys.forEach((k, i) => src.view(i * PAGE, PAGE).set(bytesOf(k)));
      return (await client.store(keys, keys.map((_, i) => ({ arena: src, offset: i * PAGE, length: PAGE })))).stored;
    } finally {
      src.close();
      await client.close();
    }
  }

  /** Loads `keys` through a client of `id`; the keys it loaded are checked byte-exact. */
  async function load(id: string, keys: string[]): Promise<{ loaded: number; missing: string[] }> {
    const dst = HostArena.create({ capacity: keys.length * PAGE });
    const client = await TierSyncClient.connect({ url: node(id).url });
    try {
      const r = await client.load(keys, keys.map((_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
      const missing = r.missing.map((i) => keys[i]!);
      keys.forEach((k, i) => {
        if (!missing.includes(k)) expect(Buffer.compare(Buffer.from(dst.view(i * PAGE, PAGE)), Buffer.from(bytesOf(k))), k).toBe(0);
      });
      return { loaded: r.loaded, missing };
    } finally {
      dst.close();
      await client.close();
    }
  }

  /** Whether `id` holds each key in a local tier. */
  const present = async (id: string, keys: string[]) => ((await post(node(id).url, '/v1/client/lookup', { keys })) as { present: boolean[] }).present;
  /** The nodes the registry names, for `id`, as holding each key (null: `id` holds it). */
  const holders = async (id: string, keys: string[]) => ((await post(node(id).url, '/v1/client/lookup', { keys, cluster: true })) as { cluster: { holders: Array<string[] | null> } }).cluster.holders;
  /** Every node sees all three. */
  async function cluster(): Promise<void> {
    for (const id of IDS) {
      await expect.poll(async () => ((await (await fetch(`${node(id).url}/v1/cluster/nodes`)).json()) as { nodes?: unknown[] }).nodes?.length ?? 0, { timeout: 10_000 }).toBe(3);
    }
  }
  const pushedBy = async (id: string) => Number(/tiersync_client_pages_total\{tenant="default",op="pushed"\} (\d+)/.exec(await (await fetch(`${node(id).url}/metrics`)).text())?.[1] ?? 0);

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-daemon-cluster-faults-'));
    const port = await freePort();
    redis = await startRedis(port);
    // node-b's peer port is fixed: it comes back where node-a's connection to it pointed.
    const peerPorts: Record<string, number> = { 'node-a': 0, 'node-b': await freePort(), 'node-c': 0 };
    for (const id of IDS) {
      configs.set(id, {
        model: 'daemon-cluster-faults@1',
        layout,
        tiers: [{ url: `host://?capacity=${256 * PAGE}&shm=/dev/shm/tiersync-cluster-faults-${process.pid}-${id}&prefault=false`, name: 'host' }],
        index: { path: path.join(dir, `${id}.sqlite`) },
        http: { port: 0 },
        peer: { port: peerPorts[id], secret: id === 'node-c' ? 'not-the-cluster-secret' : 'cluster-secret' },
        cluster: { redis: `redis://127.0.0.1:${port}`, name: `f${process.pid}`, nodeId: id, heartbeatMs: 200, publishIntervalMs: 50, placement: 'rendezvous' },
        log: { level: 'info' },
      });
      await start(id);
    }
  });

  afterAll(async () => {
    for (const d of nodes.values()) expect(await d.stop()).toBe(0);
    if (redis) await kill(redis);
    rmSync(dir, { recursive: true, force: true });
    for (const id of IDS) rmSync(`/dev/shm/tiersync-cluster-faults-${process.pid}-${id}`, { force: true });
  });

  it('pulls from the healthy holders when one holder refuses the secret, and pushes to the healthy owners', async () => {
    await cluster();
    // Held by node-b only; by node-c only; by both (owned by node-c: node-b's push to it fails, node-c stores its own).
    const onB = ownedBy('node-b', 4, 'b0b0');
    const onC = ownedBy('node-c', 2, 'c0c0');
    const onBoth = ownedBy('node-c', 4, 'bc00');
    expect(await store('node-b', [...onB, ...onBoth])).toBe(8);
    expect(await store('node-c', [...onC, ...onBoth])).toBe(6);
    const want = [...onBoth, ...onB, ...onC];
    await expect
      .poll(async () => (await holders('node-a', want)).map((h) => [...(h ?? [])].sort().join()), { timeout: 10_000 })
      .toEqual([...onBoth.map(() => 'node-b,node-c'), ...onB.map(() => 'node-b'), ...onC.map(() => 'node-c')]);
    // node-c is the owner of the first keys asked for, and every connection to it fails: the pages node-b holds
    // still arrive, those owned by node-c from node-b.
    expect(await load('node-a', want)).toEqual({ loaded: 8, missing: onC });
    expect(await present('node-a', want)).toEqual([...onBoth, ...onB].map(() => true).concat(onC.map(() => false)));

    // node-a's client stores pages owned by node-c first, then by node-b: node-b gets its own.
    const toC = ownedBy('node-c', 2, 'ac00');
    const toB = ownedBy('node-b', 3, 'ab00');
    const pushed = await pushedBy('node-a');
    expect(await store('node-a', [...toC, ...toB])).toBe(5);
    await expect.poll(() => present('node-b', toB), { timeout: 10_000 }).toEqual(toB.map(() => true));
    // Counted for the tenant whose store caused the push, only what the owner took.
    await expect.poll(() => pushedBy('node-a'), { timeout: 10_000 }).toBe(pushed + toB.length);
    expect(await present('node-c', toC)).toEqual(toC.map(() => false));
  });

  it('pushes to and pulls from a node that restarted while this one kept its connection', async () => {
    await cluster();
    const before = ownedBy('node-b', 2, 'b1b1');
    expect(await store('node-b', before)).toBe(2);
    await expect.poll(async () => (await holders('node-a', before)).map((h) => h?.join()), { timeout: 10_000 }).toEqual(before.map(() => 'node-b'));
    // node-a connects to node-b (a pull), then node-b restarts on the same peer port.
    expect(await load('node-a', before)).toEqual({ loaded: 2, missing: [] });
    expect(await node('node-b').stop()).toBe(0);
    await start('node-b');
    await expect.poll(async () => ((await (await fetch(`${node('node-b').url}/v1/stats`)).json()) as { cluster: { up: boolean } }).cluster.up, { timeout: 10_000 }).toBe(true);

    // A push from node-a reaches node-b again.
    const toB = ownedBy('node-b', 3, 'ab11');
    expect(await store('node-a', toB)).toBe(3);
    await expect.poll(() => present('node-b', toB), { timeout: 10_000 }).toEqual(toB.map(() => true));
    // And a pull: pages only node-b holds, stored after its restart.
    const after = ownedBy('node-b', 3, 'b2b2');
    expect(await store('node-b', after)).toBe(3);
    await expect.poll(async () => (await holders('node-a', after)).map((h) => h?.join()), { timeout: 10_000 }).toEqual(after.map(() => 'node-b'));
    expect(await load('node-a', after)).toEqual({ loaded: 3, missing: [] });
  });
});
