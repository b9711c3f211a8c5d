// @tiersync/core/client against a `tiersync serve` daemon running in a child process: shared-memory and peer
// transports, bytes and checksums exact, tenants isolated, leases bounded and undone when a client stalls.
import { randomFillSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeviceArena, HostArena, crc32c } from '@tiersync/native';
import { TierSyncClient } from '@tiersync/core/client';
import { startDaemon, type Daemon } from './daemon-helpers.js';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;

function key(tag: number, i: number): string {
  return `${tag.toString(16).padStart(8, '0')}${i.toString(16).padStart(8, '0')}`;
}

/** `n` pages of random bytes in a fresh arena (the last one short, to cover partial pages). */
function pagesOf(n: number): { arena: HostArena; pages: Array<{ arena: HostArena; offset: number; length: number }> } {
  const arena = HostArena.create({ capacity: n * PAGE });
  randomFillSync(arena.view(0, n * PAGE));
  return { arena, pages: Array.from({ length: n }, (_, i) => ({ arena, offset: i * PAGE, length: i === n - 1 ? PAGE - 100 : PAGE })) };
}

async function post(url: string, route: string, body: unknown, token: string): Promise<{ status: number; json: any }> {
  const r = await fetch(`${url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

describe('daemon client (two processes)', () => {
  let dir: string;
  let shm: string;
  let daemon: Daemon;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-daemon-client-'));
    shm = `/dev/shm/tiersync-daemon-client-${process.pid}`;
    daemon = await startDaemon(
      {
        model: 'daemon-client@1',
        layout,
        tiers: [
          { url: `host://?capacity=${128 * PAGE}&shm=${shm}&prefault=false`, name: 'host' },
          { url: `fs://${dir}/fs?capacity=${1024 * PAGE}`, name: 'fs', writeThrough: true },
        ],
        index: { path: path.join(dir, 'index.sqlite') },
        http: { port: 0, maxBodyBytes: 256 * 1024 },
        peer: { port: 0 },
        tenants: [
          { name: 'alice', token: 'token-alice' },
          { name: 'bob', token: 'token-bob' },
          { name: 'remote', token: 'token-remote', sharedMemory: false },
          { name: 'slow', token: 'token-slow', maxLeasedPages: 8 },
        ],
        client: { leaseMs: 1500, maxBatchPages: 256 },
        log: { level: 'info' },
      },
      dir,
    );
  });

  afterAll(async () => {
    if (daemon) expect(await daemon.stop()).toBe(0);
    rmSync(dir, { recursive: true, force: true });
    rmSync(shm, { force: true });
  });

  it('stores and loads through shared memory: bytes exact, pages enter the daemon index and its lower tier', async () => {
    const c = await TierSyncClient.connect({ url: daemon.url, token: 'token-alice' });
    const { arena, pages } = pagesOf(24);
    const dst = HostArena.create({ capacity: 24 * PAGE });
    try {
      expect(c.transport).toBe('shm');
      expect(c.pageBytes).toBe(PAGE);
      const keys = pages.map((_, i) => key(1, i));
      const before = c.controlRequests;
      expect(await c.store(keys, pages)).toEqual({ stored: 24, existing: 0, badChecksum: [] });
      // reserve + commit: two control messages, no page bytes over the socket.
      expect(c.controlRequests - before).toBe(2);
      expect(await c.store(keys, pages)).toMatchObject({ stored: 0, existing: 24 });
      const look = await c.lookup([...keys, key(1, 99)]);
      expect(look.present).toEqual([...keys.map(() => true), false]);
      expect(look.lengths[23]).toBe(PAGE - 100);
      const r = await c.load(keys, pages.map((p) => ({ arena: dst, offset: p.offset, length: PAGE })));
      expect(r).toMatchObject({ loaded: 24, missing: [] });
      pages.forEach((p) => expect(crc32c(dst.view(p.offset, p.length))).toBe(crc32c(arena.view(p.offset, p.length))));
      expect(Buffer.compare(Buffer.from(dst.view(0, 24 * PAGE - 100)), Buffer.from(arena.view(0, 24 * PAGE - 100)))).toBe(0);
      // The daemon's block index knows them (its stats count them) and wrote them through to the fs tier.
      const stats = (await (await fetch(`${daemon.url}/v1/stats`)).json()) as { index: { pages: number }; tiers: Array<{ name: string; usedPages: number }> };
      expect(stats.index.pages).toBeGreaterThanOrEqual(24);
      await expect.poll(async () => ((await (await fetch(`${daemon.url}/v1/stats`)).json()) as typeof stats).tiers.find((t) => t.name === 'fs')!.usedPages, { timeout: 10_000 }).toBeGreaterThanOrEqual(24);
    } finally {
      arena.close();
      dst.close();
      await c.close();
    }
  });

  it('loads into device memory (sim) and reports pages stored nowhere as missing', async () => {
    const c = await TierSyncClient.connect({ url: daemon.url, token: 'token-alice' });
    const { arena, pages } = pagesOf(4);
    const dev = DeviceArena.create({ backend: 'sim', capacity: 8 * PAGE });
    const back = HostArena.create({ capacity: 8 * PAGE });
    try {
      const keys = pages.map((_, i) => key(2, i));
      await c.store(keys.slice(0, 3), pages.slice(0, 3));
      const r = await c.load(keys, pages.map((p) => ({ arena: dev, offset: p.offset, length: PAGE })));
      expect(r).toMatchObject({ loaded: 3, missing: [3] });
      // Back out of the device arena through the daemon-independent engine path, to check the bytes.
      const again = await c.store([key(3, 0)], [{ arena: dev, offset: 0, length: PAGE }]);
      expect(again.stored).toBe(1);
      await c.load([key(3, 0)], [{ arena: back, offset: 0, length: PAGE }]);
      expect(Buffer.compare(Buffer.from(back.view(0, PAGE)), Buffer.from(arena.view(0, PAGE)))).toBe(0);
    } finally {
      arena.close();
      dev.close();
      back.close();
      await c.close();
    }
  });

  it("keeps tenants apart: one tenant cannot see or load another's page even with its key", async () => {
    const alice = await TierSyncClient.connect({ url: daemon.url, token: 'token-alice' });
    const bob = await TierSyncClient.connect({ url: daemon.url, token: 'token-bob' });
    const { arena, pages } = pagesOf(2);
    const dst = HostArena.create({ capacity: 2 * PAGE });
    try {
      const keys = [key(4, 0), key(4, 1)];
      await alice.store(keys, pages);
      expect((await bob.lookup(keys)).present).toEqual([false, false]);
      expect(await bob.load(keys, pages.map((p) => ({ arena: dst, offset: p.offset, length: PAGE })))).toMatchObject({ loaded: 0, missing: [0, 1] });
      expect(await bob.delete(keys)).toMatchObject({ deleted: 0, missing: 2 });
      expect((await alice.lookup(keys)).present).toEqual([true, true]);
      // Bob storing the same key stores his own page.
      randomFillSync(arena.view(0, PAGE));
      expect((await bob.store([keys[0]!], [pages[0]!])).stored).toBe(1);
      await expect(TierSyncClient.connect({ url: daemon.url, token: 'token-mallory' })).rejects.toMatchObject({ code: 'ERR_AUTH' });
      await expect(TierSyncClient.connect({ url: daemon.url })).rejects.toMatchObject({ code: 'ERR_AUTH' });
    } finally {
      arena.close();
      dst.close();
      await alice.close();
      await bob.close();
    }
  });

  it('over the peer protocol: pages a remote client puts enter the index and are read back by a shm client', async () => {
    const remote = await TierSyncClient.connect({ url: daemon.url, token: 'token-remote' });
    const { arena, pages } = pagesOf(16);
    const dst = HostArena.create({ capacity: 16 * PAGE });
    try {
      expect(remote.transport).toBe('peer');
      const keys = pages.map((_, i) => key(5, i));
      expect(await remote.store(keys, pages)).toMatchObject({ stored: 16, existing: 0 });
      // Recorded by the commit hook: a lookup (index) finds every page.
      await expect.poll(async () => (await remote.lookup(keys)).present.every(Boolean), { timeout: 5000 }).toBe(true);
      const r = await remote.load(keys, pages.map((p) => ({ arena: dst, offset: p.offset, length: PAGE })));
      expect(r).toMatchObject({ loaded: 16, missing: [] });
      expect(Buffer.compare(Buffer.from(dst.view(0, 16 * PAGE - 100)), Buffer.from(arena.view(0, 16 * PAGE - 100)))).toBe(0);
    } finally {
      arena.close();
      dst.close();
      await remote.close();
    }
  });

  it('never serves a page committed with a CRC32C its bytes do not match: the load reports it missing, the daemon drops it', async () => {
    const hello = (await (await fetch(`${daemon.url}/v1/client/hello`, { headers: { authorization: 'Bearer token-alice' } })).json()) as { shm: { path: string; capacity: number; pageSize: number; fingerprint: string } };
    const mapped = HostArena.create({ shmPath: hello.shm.path, capacity: hello.shm.capacity, pageSize: hello.shm.pageSize, fingerprint: hello.shm.fingerprint, create: false });
    try {
      const k = key(6, 0);
      const res = await post(daemon.url, '/v1/client/reserve', { keys: [k], lengths: [PAGE] }, 'token-alice');
      expect(res.status).toBe(200);
      const view = mapped.view(res.json.offsets[0], PAGE);
      randomFillSync(view);
      const good = crc32c(view);
      // The daemon's host tier checks every read (shm): the commit records the declared CRC32C without a second read.
      const commit = await post(daemon.url, '/v1/client/commit', { lease: res.json.lease, crcs: [(good + 1) >>> 0] }, 'token-alice');
      expect(commit.json).toMatchObject({ stored: 1, badChecksum: [] });
      // A lease closed once cannot be committed again.
      expect((await post(daemon.url, '/v1/client/commit', { lease: res.json.lease, crcs: [good] }, 'token-alice')).status).toBe(404);
      // Served nowhere: not to a load (nor down to the fs tier, written through from the host tier with a check).
      const c = await TierSyncClient.connect({ url: daemon.url, token: 'token-alice' });
      const dst = HostArena.create({ capacity: PAGE });
      try {
        const r = await c.load([k], [{ arena: dst, offset: 0, length: PAGE }]);
        expect(r).toMatchObject({ loaded: 0, missing: [0] });
        // Dropped from the host tier, and from the index: the key can be stored afresh.
        await expect.poll(async () => (await c.lookup([k])).present, { timeout: 5000 }).toEqual([false]);
        dst.view(0, PAGE).set(view);
        expect((await c.store([k], [{ arena: dst, offset: 0, length: PAGE }])).stored).toBe(1);
      } finally {
        dst.close();
        await c.close();
      }
    } finally {
      mapped.close();
    }
  });

  it('bounds what a client can hold: lease limits, batch and body sizes; a stalled reservation is undone', async () => {
    const keys = Array.from({ length: 8 }, (_, i) => key(7, i));
    const first = await post(daemon.url, '/v1/client/reserve', { keys, lengths: keys.map(() => PAGE) }, 'token-slow');
    expect(first.status).toBe(200);
    // The tenant's limit (8 leased pages) is reached: refused, not queued.
    const second = await post(daemon.url, '/v1/client/reserve', { keys: [key(7, 100)], lengths: [PAGE] }, 'token-slow');
    expect(second.status).toBe(429);
    expect(second.json.error.code).toBe('ERR_UNAVAILABLE');
    // Another tenant is not affected.
    expect((await post(daemon.url, '/v1/client/lookup', { keys: [key(7, 100)] }, 'token-bob')).status).toBe(200);
    // The client never commits: after leaseMs the reservation is undone and its slots are free again.
    let last: { status: number; json: any } = { status: 0, json: null };
    await expect
      .poll(async () => (last = await post(daemon.url, '/v1/client/reserve', { keys: [key(7, 101)], lengths: [PAGE] }, 'token-slow')).status, { timeout: 10_000, interval: 300 })
      .toBe(200);
    const held = (await (await fetch(`${daemon.url}/v1/stats`)).json()) as { clients: { leases: number; leasedPages: number } };
    expect(held.clients).toMatchObject({ leases: 1, leasedPages: 1 });
    expect((await post(daemon.url, '/v1/client/abort', { lease: last.json.lease }, 'token-slow')).status).toBe(200);
    expect(((await (await fetch(`${daemon.url}/v1/stats`)).json()) as typeof held).clients).toMatchObject({ leases: 0, leasedPages: 0 });
    expect((await post(daemon.url, '/v1/client/commit', { lease: first.json.lease, crcs: keys.map(() => 0) }, 'token-slow')).status).toBe(404);
    const tooMany = await post(daemon.url, '/v1/client/lookup', { keys: Array.from({ length: 257 }, (_, i) => key(8, i)) }, 'token-bob');
    expect(tooMany.status).toBe(413);
    const huge = await fetch(`${daemon.url}/v1/client/lookup`, { method: 'POST', headers: { authorization: 'Bearer token-bob', 'content-type': 'application/json' }, body: 'x'.repeat(300 * 1024) });
    expect(huge.status).toBe(413);
    const bad = await post(daemon.url, '/v1/client/reserve', { keys: ['XYZ'], lengths: [PAGE] }, 'token-bob');
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'keys[0]' });
    const tooLong = await post(daemon.url, '/v1/client/reserve', { keys: [key(9, 0)], lengths: [PAGE + 1] }, 'token-bob');
    expect(tooLong.status).toBe(400);
    expect(tooLong.json.error).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'lengths[0]' });
  });

});
