// The client protocol at the daemon's edge: every op's answer matches the response schema the client is typed
// from (protocol/client.ts), malformed requests get a typed 400 naming the field, and the same API answers on the
// Unix socket that same-host clients use.
import { randomFillSync } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena, crc32c } from '@tiersync/native';
import type { HostTier } from '@tiersync/tiers';
import { TierSyncClient } from '../client/index.js';
import { FRAME_MAGIC, FrameReader, clientOps, clientProtocolJsonSchema, encodeFrame, errorBodySchema, type ClientOp } from '../protocol/index.js';
import { parseServerConfig } from './config.js';
import { TierSyncServer } from './server.js';
import { PAGE, layout, startTestDaemon, type TestDaemon } from './test-daemon.js';

const TOKEN = 'token-proto';
const key = (i: number) => `c0ffee00${i.toString(16).padStart(8, '0')}`;

/** One request over TCP or the Unix socket; answers the status and the parsed body. */
function send(target: { url: string } | { socketPath: string }, op: string, body?: unknown, init: { method?: string; raw?: string; token?: string | null } = {}): Promise<{ status: number; json: any }> {
  const payload = init.raw ?? (body === undefined ? undefined : JSON.stringify(body));
  const where = 'url' in target ? { host: new URL(target.url).hostname, port: Number(new URL(target.url).port) } : { socketPath: target.socketPath };
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        ...where,
        method: init.method ?? (payload === undefined ? 'GET' : 'POST'),
        path: `/v1/client/${op}`,
        headers: { ...(init.token === null ? {} : { authorization: `Bearer ${init.token ?? TOKEN}` }), ...(payload === undefined ? {} : { 'content-type': 'application/json' }) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, json: JSON.parse(Buffer.concat(chunks).toString('utf8')) }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

describe('client protocol at the daemon', () => {
  let daemon: TestDaemon;
  let dir: string;
  let server: TestDaemon['server'];

  beforeAll(async () => {
    daemon = await startTestDaemon('client-api', {
      // A quarter of it is client.maxBatchPages (32): the configured bound is the one in force.
      hostPages: 128,
      fsPages: 256,
      config: (at) => ({ peer: { port: 0 }, tenants: [{ name: 'proto', token: TOKEN }], client: { maxBatchPages: 32, socket: path.join(at, 'client.sock') } }),
    });
    ({ dir, server } = daemon);
  });

  afterAll(async () => {
    await daemon?.close();
  });

  it('answers every op with a body its response schema accepts, over TCP and the Unix socket', async () => {
    const socketPath = path.join(dir, 'client.sock');
    for (const target of [{ url: server.url }, { socketPath }]) {
      const seen = new Set<ClientOp>();
      const check = async (op: ClientOp, body?: unknown) => {
        const r = await send(target, op, body);
        expect(r.status, `${op}: ${JSON.stringify(r.json)}`).toBe(200);
        const parsed = clientOps[op].response.safeParse(r.json);
        expect(parsed.success, `${op} answer ${JSON.stringify(r.json)} against its schema: ${parsed.error?.message}`).toBe(true);
        seen.add(op);
        return r.json;
      };
      const hello = await check('hello');
      expect(hello).toMatchObject({ protocol: 1, tenant: 'proto', pageBytes: PAGE, maxBatchPages: 32, socket: socketPath });
      const tag = 'url' in target ? 0 : 100;
      const keys = [key(tag), key(tag + 1)];
      const mapped = HostArena.create({ shmPath: hello.shm.path, capacity: hello.shm.capacity, pageSize: hello.shm.pageSize, fingerprint: hello.shm.fingerprint, create: false });
      try {
        const reserved = await check('reserve', { keys, lengths: [PAGE, PAGE - 10] });
        const crcs = reserved.offsets.map((o: number, i: number) => {
          const view = mapped.view(o, i ? PAGE - 10 : PAGE);
          randomFillSync(view);
          return crc32c(view);
        });
        expect(await check('commit', { lease: reserved.lease, crcs })).toEqual({ stored: 2, existing: 0, badChecksum: [] });
        // Visible at once, before or after the block index records it.
        expect(await check('lookup', { keys: [...keys, key(tag + 2)] })).toMatchObject({ present: [true, true, false], lengths: [PAGE, PAGE - 10, 0], tiers: ['host', 'host', null] });
        const pinned = await check('pin', { keys: [...keys, key(tag + 2)] });
        expect(pinned.offsets[2]).toBe(-1);
        expect(pinned.crcs.slice(0, 2)).toEqual(crcs);
        expect(await check('release', { lease: pinned.lease })).toEqual({ released: 3 });
        const again = await check('reserve', { keys: [key(tag + 3)], lengths: [PAGE] });
        expect(await check('abort', { lease: again.lease })).toEqual({ released: 1 });
        expect((await check('resolve', { keys })).keys).toHaveLength(2);
        expect(await check('delete', { keys })).toEqual({ deleted: 2, pinned: 0, missing: 0 });
        expect((await check('lookup', { keys })).present).toEqual([false, false]);
      } finally {
        mapped.close();
      }
      expect([...seen].sort()).toEqual((Object.keys(clientOps) as ClientOp[]).sort());
    }
  });

  it('refuses a malformed request with a typed 400 that names the field', async () => {
    const cases: Array<[ClientOp, unknown, string]> = [
      ['reserve', { keys: ['XYZ'], lengths: [PAGE] }, 'keys[0]'],
      ['reserve', { keys: [key(1)], lengths: [PAGE + 1] }, 'lengths[0]'],
      ['reserve', { keys: [key(1)], lengths: [0] }, 'lengths[0]'],
      ['reserve', { keys: [key(1), key(1)], lengths: [1, 1] }, 'keys[1]'],
      ['reserve', { keys: [key(1)] }, 'lengths'],
      ['lookup', { keys: [] }, 'keys'],
      ['lookup', { keys: [key(1)], cluster: 'yes' }, 'cluster'],
      ['lookup', { keys: [key(1)], extra: 1 }, 'extra'],
      ['commit', { lease: 'one', crcs: [] }, 'lease'],
      ['commit', { lease: 1, crcs: [-1] }, 'crcs[0]'],
      ['release', {}, 'lease'],
      ['pin', null, 'body'],
    ];
    for (const [op, body, field] of cases) {
      const r = await send({ url: server.url }, op, body);
      expect(r.status, `${op} ${JSON.stringify(body)}`).toBe(400);
      expect(errorBodySchema.safeParse(r.json).success).toBe(true);
      expect(r.json.error).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field });
      expect(r.json.error.message).toContain(field === 'body' ? op : field);
    }
    const notJson = await send({ url: server.url }, 'lookup', undefined, { raw: '{"keys": [' });
    expect(notJson.status).toBe(400);
    expect(notJson.json.error.code).toBe('ERR_INVALID_ARGUMENT');
    const tooMany = await send({ url: server.url }, 'lookup', { keys: Array.from({ length: 33 }, (_, i) => key(i)) });
    expect(tooMany).toMatchObject({ status: 413, json: { error: { code: 'ERR_OUT_OF_RANGE', field: 'keys' } } });
    expect(await send({ url: server.url }, 'lookup', { keys: [key(1)] }, { token: null })).toMatchObject({ status: 401, json: { error: { code: 'ERR_AUTH' } } });
    expect(await send({ url: server.url }, 'lookup', undefined, { method: 'GET' })).toMatchObject({ status: 405, json: { error: { code: 'ERR_INVALID_ARGUMENT', field: 'method' } } });
    expect(await send({ url: server.url }, 'nope', {})).toMatchObject({ status: 404, json: { error: { code: 'ERR_NOT_FOUND' } } });
    expect(await send({ url: server.url }, 'commit', { lease: 424242, crcs: [] })).toMatchObject({ status: 404, json: { error: { code: 'ERR_NOT_FOUND', field: 'lease' } } });
  });

  it('the client speaks the same schemas: typed errors come back as the daemon threw them', async () => {
    const client = await TierSyncClient.connect({ url: server.url, token: TOKEN, transport: 'shm' });
    try {
      expect(client.hello.socket).toBe(path.join(dir, 'client.sock'));
      expect(client.controlEndpoint).toBe(`unix:${path.join(dir, 'client.sock')}`);
      await expect(client.lookup(['not-a-key'])).rejects.toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'keys[0]' });
      await expect(client.lookup(Array.from({ length: 33 }, (_, i) => key(i)))).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
      const arena = HostArena.create({ capacity: 2 * PAGE });
      try {
        randomFillSync(arena.view(0, 2 * PAGE));
        const pages = [0, 1].map((i) => ({ arena, offset: i * PAGE, length: PAGE }));
        expect(await client.store([key(200), key(201)], pages)).toEqual({ stored: 2, existing: 0, badChecksum: [] });
        const into = HostArena.create({ capacity: 2 * PAGE });
        try {
          expect(await client.load([key(200), key(201)], [0, 1].map((i) => ({ arena: into, offset: i * PAGE, length: PAGE })))).toEqual({ loaded: 2, missing: [], bytes: 2 * PAGE });
          expect(Buffer.compare(Buffer.from(into.view(0, 2 * PAGE)), Buffer.from(arena.view(0, 2 * PAGE)))).toBe(0);
        } finally {
          into.close();
        }
      } finally {
        arena.close();
      }
    } finally {
      await client.close();
    }
  });

  it('pipelines batches over the daemon limit: stores in maxBatchPages reservations, loads in windows, bytes exact', async () => {
    // maxBatchPages is 32 here; loads in windows of 16 pages (the first one half as large).
    const client = await TierSyncClient.connect({ url: server.url, token: TOKEN, transport: 'shm', windowBytes: 16 * PAGE });
    const n = 40;
    const arena = HostArena.create({ capacity: n * PAGE });
    const into = HostArena.create({ capacity: (n + 1) * PAGE });
    try {
      randomFillSync(arena.view(0, n * PAGE));
      const keys = Array.from({ length: n }, (_, i) => key(0x500 + i));
      const pages = keys.map((_, i) => ({ arena, offset: i * PAGE, length: i === n - 1 ? PAGE - 9 : PAGE }));
      let before = client.controlRequests;
      expect(await client.store(keys, pages)).toEqual({ stored: n, existing: 0, badChecksum: [] });
      expect(client.controlRequests - before).toBe(4); // reserve + commit for 32, then for 8
      // An absent key in the middle: its index comes back in the whole batch's numbering.
      const wanted = [...keys.slice(0, 20), key(0x5ff), ...keys.slice(20)];
      before = client.controlRequests;
      const r = await client.load(wanted, wanted.map((_, i) => ({ arena: into, offset: i * PAGE, length: PAGE })));
      expect(r).toEqual({ loaded: n, missing: [20], bytes: n * PAGE - 9 });
      expect(client.controlRequests - before).toBe(2 * 4); // pin + release for windows of 8, 16, 16, 1
      for (let i = 0; i < n; i++) {
        const at = i < 20 ? i : i + 1;
        expect(Buffer.compare(Buffer.from(into.view(at * PAGE, pages[i]!.length)), Buffer.from(arena.view(i * PAGE, pages[i]!.length)))).toBe(0);
      }
      expect(server.stats().clients).toMatchObject({ leases: 0, leasedPages: 0 });
    } finally {
      arena.close();
      into.close();
      await client.close();
    }
  });

  it('pins with verify: a slot changed after commit is refused (damaged, no offset), dropped and reported; the rest stay pinned', async () => {
    const hello = (await send({ url: server.url }, 'hello')).json;
    expect(hello.features).toContain('pin-verify');
    const mapped = HostArena.create({ shmPath: hello.shm.path, capacity: hello.shm.capacity, pageSize: hello.shm.pageSize, fingerprint: hello.shm.fingerprint, create: false });
    const failures = server.ts.counters.integrityFailures;
    try {
      const keys = [key(310), key(311), key(312)];
      const r = (await send({ url: server.url }, 'reserve', { keys, lengths: [PAGE, PAGE, PAGE] })).json;
      for (const o of r.offsets) randomFillSync(mapped.view(o, PAGE));
      expect((await send({ url: server.url }, 'commit', { lease: r.lease })).json.stored).toBe(3);
      // The write-through copy to fs reads the host slots once the index records them: let it finish first, so
      // the damage below is found by the pin's check alone (else the copy may count it too).
      await expect.poll(() => server.stats().clients!.unrecordedPages, { timeout: 10_000 }).toBe(0);
      await server.ts.flush();
      // Behind the daemon's back: one byte of the second page changes in the shared file.
      mapped.view(r.offsets[1] + 5, 1)[0]! ^= 0x80;
      const plain = (await send({ url: server.url }, 'pin', { keys })).json;
      expect(plain.damaged).toBeUndefined(); // without verify the daemon answers where the pages are, unchecked
      expect((await send({ url: server.url }, 'release', { lease: plain.lease })).status).toBe(200);
      const pin = (await send({ url: server.url }, 'pin', { keys, verify: true })).json;
      expect(pin.damaged).toEqual([1]);
      expect(pin.offsets[1]).toBe(-1);
      expect([pin.offsets[0], pin.offsets[2]]).toEqual([r.offsets[0], r.offsets[2]]);
      expect(pin.crcs[0]).toBe(crc32c(mapped.view(r.offsets[0], PAGE)));
      expect(server.ts.counters.integrityFailures).toBe(failures + 1);
      // The intact pages stay pinned (a delete keeps them); the damaged one left the host tier.
      expect((await send({ url: server.url }, 'delete', { keys: [keys[0]] })).json.pinned).toBe(1);
      expect((await send({ url: server.url }, 'release', { lease: pin.lease })).json.released).toBe(3);
      const again = (await send({ url: server.url }, 'pin', { keys, verify: true })).json;
      expect(again.damaged ?? []).toEqual([]);
      expect(again.offsets[1] === -1 || crc32c(mapped.view(again.offsets[1], PAGE)) === again.crcs[1]).toBe(true);
      await send({ url: server.url }, 'release', { lease: again.lease });
      expect((await send({ url: server.url }, 'pin', { keys, verify: 'yes' })).json.error).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'verify' });
      await send({ url: server.url }, 'delete', { keys });
    } finally {
      mapped.close();
    }
  });

  it('commits without declared checksums (the daemon records its own) and pins with a lease of their own length', async () => {
    const hello = (await send({ url: server.url }, 'hello')).json;
    expect(hello.features).toEqual(expect.arrayContaining(['commit-crc-optional', 'pin-ttl']));
    const mapped = HostArena.create({ shmPath: hello.shm.path, capacity: hello.shm.capacity, pageSize: hello.shm.pageSize, fingerprint: hello.shm.fingerprint, create: false });
    try {
      const r = (await send({ url: server.url }, 'reserve', { keys: [key(300)], lengths: [PAGE - 1] })).json;
      const view = mapped.view(r.offsets[0], PAGE - 1);
      randomFillSync(view);
      expect((await send({ url: server.url }, 'commit', { lease: r.lease })).json).toEqual({ stored: 1, existing: 0, badChecksum: [] });
      const pin = await send({ url: server.url }, 'pin', { keys: [key(300)], ttlMs: 150 });
      expect(pin.json).toMatchObject({ deadlineMs: 150, lengths: [PAGE - 1], crcs: [crc32c(view)] });
      // The short lease lapses on its own: releasing it later finds nothing.
      await expect.poll(async () => (await send({ url: server.url }, 'release', { lease: pin.json.lease })).status, { timeout: 5000, interval: 100 }).toBe(404);
      expect((await send({ url: server.url }, 'pin', { keys: [key(300)], ttlMs: 0 })).json.error).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'ttlMs' });
      expect((await send({ url: server.url }, 'delete', { keys: [key(300)] })).json.deleted).toBe(1);
    } finally {
      mapped.close();
    }
  });

  it('holds no key a pin found nowhere: a page stored under it while the lease lasts deletes at once', async () => {
    const hello = (await send({ url: server.url }, 'hello')).json;
    const mapped = HostArena.create({ shmPath: hello.shm.path, capacity: hello.shm.capacity, pageSize: hello.shm.pageSize, fingerprint: hello.shm.fingerprint, create: false });
    try {
      const pin = (await send({ url: server.url }, 'pin', { keys: [key(310)], ttlMs: 60_000 })).json;
      expect(pin.offsets).toEqual([-1]);
      const r = (await send({ url: server.url }, 'reserve', { keys: [key(310)], lengths: [PAGE] })).json;
      randomFillSync(mapped.view(r.offsets[0], PAGE));
      expect((await send({ url: server.url }, 'commit', { lease: r.lease })).json).toMatchObject({ stored: 1 });
      expect((await send({ url: server.url }, 'delete', { keys: [key(310)] })).json).toEqual({ deleted: 1, pinned: 0, missing: 0 });
      expect((await send({ url: server.url }, 'release', { lease: pin.lease })).status).toBe(200);
    } finally {
      mapped.close();
    }
  });

  it('serves framed sessions on the Unix socket: same ops, statuses and typed errors as over HTTP', async () => {
    const socketPath = path.join(dir, 'client.sock');
    const session = (token: string | undefined) => {
      const socket = net.createConnection({ path: socketPath });
      const replies: any[] = [];
      const waiters: Array<() => void> = [];
      const reader = new FrameReader(1 << 20, (v) => {
        replies.push(v);
        waiters.splice(0).forEach((w) => w());
      }, () => undefined);
      socket.on('data', (c: Buffer) => reader.push(c));
      const next = async (n: number) => {
        while (replies.length < n) await new Promise<void>((r) => waiters.push(r));
        return replies[n - 1];
      };
      socket.write(Buffer.concat([FRAME_MAGIC, encodeFrame(token === undefined ? {} : { token })]));
      return { socket, next, send: (v: unknown) => socket.write(encodeFrame(v)) };
    };
    const s = session(TOKEN);
    try {
      const hello = await s.next(1);
      expect(hello).toMatchObject({ id: 0, status: 200, body: { tenant: 'proto' } });
      expect(clientOps.hello.response.safeParse(hello.body).success).toBe(true);
      // Pipelined: both answered, each with its id.
      s.send({ id: 1, op: 'lookup', body: { keys: [key(900)] } });
      s.send({ id: 2, op: 'reserve', body: { keys: ['XYZ'], lengths: [1] } });
      const [a, b] = [await s.next(2), await s.next(3)].sort((x, y) => x.id - y.id);
      expect(a).toMatchObject({ id: 1, status: 200, body: { present: [false] } });
      expect(b).toMatchObject({ id: 2, status: 400, body: { error: { code: 'ERR_INVALID_ARGUMENT', field: 'keys[0]' } } });
    } finally {
      s.socket.destroy();
    }
    // A delete pipelined right behind its commit (one read, so before the index recorder's turn): freed in the host
    // tier at once, never recorded in the index.
    const d = session(TOKEN);
    try {
      await d.next(1);
      d.send({ id: 1, op: 'reserve', body: { keys: [key(0x700)], lengths: [PAGE] } });
      const r = await d.next(2);
      expect(r).toMatchObject({ id: 1, status: 200 });
      const before = server.stats().index.pages;
      d.socket.write(Buffer.concat([encodeFrame({ id: 2, op: 'commit', body: { lease: r.body.lease, crcs: [0] } }), encodeFrame({ id: 3, op: 'delete', body: { keys: [key(0x700)] } })]));
      const [c, del] = [await d.next(3), await d.next(4)].sort((x, y) => x.id - y.id);
      expect(c).toMatchObject({ status: 200, body: { stored: 1 } });
      expect(del).toMatchObject({ status: 200, body: { deleted: 1, pinned: 0, missing: 0 } });
      d.send({ id: 4, op: 'lookup', body: { keys: [key(0x700)] } });
      expect(await d.next(5)).toMatchObject({ body: { present: [false] } });
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(server.stats().index.pages).toBe(before);
    } finally {
      d.socket.destroy();
    }
    const wrong = session('nope');
    try {
      expect(await wrong.next(1)).toMatchObject({ id: 0, status: 401, body: { error: { code: 'ERR_AUTH' } } });
    } finally {
      wrong.socket.destroy();
    }
  });

  it('exports the protocol as JSON Schema for clients in other languages', () => {
    const s = clientProtocolJsonSchema();
    expect(Object.keys(s.ops).sort()).toEqual(Object.keys(clientOps).sort());
    expect(s.ops.reserve).toMatchObject({ method: 'POST', route: '/v1/client/reserve', request: { type: 'object', required: ['keys', 'lengths'] } });
    expect(s.ops.hello.request).toBeNull();
    expect(JSON.stringify(s.error)).toContain('ERR_INVALID_ARGUMENT');
  });
});

describe('a load lease under eviction pressure', () => {
  it('keeps the page a client copies from while the hierarchy makes room, and leaves no slot behind when the lease closes', async () => {
    const daemon = await startTestDaemon('client-evict', {
      hostPages: 16,
      fsPages: 256,
      host: { highWatermark: 1, lowWatermark: 0.5 },
      config: () => ({ peer: { enabled: false }, client: { socket: false } }),
    });
    const { server } = daemon;
    const client = await TierSyncClient.connect({ url: server.url, transport: 'shm' });
    const arena = HostArena.create({ capacity: 16 * PAGE });
    try {
      randomFillSync(arena.view(0, 16 * PAGE));
      const pages = (n: number) => Array.from({ length: n }, (_, i) => ({ arena, offset: i * PAGE, length: PAGE }));
      const first = Array.from({ length: 12 }, (_, i) => key(400 + i));
      expect((await client.store(first, pages(12))).stored).toBe(12);
      await server.ts.flush();
      // A load lease holds the oldest page (the LRU's first victim) in the host tier.
      const pin = await send({ url: server.url }, 'pin', { keys: [first[0]] }, { token: null });
      const at = pin.json.offsets[0] as number;
      expect(at).toBeGreaterThanOrEqual(0);
      // Storing more needs room: the hierarchy evicts, but not the slot the lease reads.
      const second = Array.from({ length: 6 }, (_, i) => key(500 + i));
      expect((await client.store(second, pages(6))).stored).toBe(6);
      await server.ts.flush();
      const hello = (await send({ url: server.url }, 'hello', undefined, { token: null })).json;
      const mapped = HostArena.create({ shmPath: hello.shm.path, capacity: hello.shm.capacity, pageSize: hello.shm.pageSize, fingerprint: hello.shm.fingerprint, create: false });
      try {
        expect(crc32c(mapped.view(at, PAGE))).toBe(pin.json.crcs[0]);
      } finally {
        mapped.close();
      }
      const host = () => server.ts.stats().tiers.find((t) => t.name === 'host')!;
      expect((await send({ url: server.url }, 'release', { lease: pin.json.lease }, { token: null })).status).toBe(200);
      // Lease closed: every slot the host tier holds is one the hierarchy knows (none left behind).
      expect(host().pages).toBe(host().usedPages);
      expect((await client.lookup([first[0]!])).present).toEqual([true]);
      const into = HostArena.create({ capacity: PAGE });
      try {
        expect((await client.load([first[0]!], [{ arena: into, offset: 0, length: PAGE }])).loaded).toBe(1);
        expect(Buffer.compare(Buffer.from(into.view(0, PAGE)), Buffer.from(arena.view(0, PAGE)))).toBe(0);
      } finally {
        into.close();
      }
    } finally {
      arena.close();
      await client.close();
      await daemon.close();
    }
  });

  it('splits calls larger than the host tier into chunks it can take: a store and a load of 6x its slots, bytes exact', async () => {
    const daemon = await startTestDaemon('client-bigger', { hostPages: 16, fsPages: 256, config: () => ({ peer: { port: 0 }, client: { socket: false } }) });
    const { server } = daemon;
    const client = await TierSyncClient.connect({ url: server.url, transport: 'shm' });
    const n = 96;
    const src = HostArena.create({ capacity: n * PAGE });
    const dst = HostArena.create({ capacity: n * PAGE });
    try {
      // A quarter of the host tier's slots, below client.maxBatchPages (4096): the chunks a client has in flight
      // (one being committed, one being copied, the next reserved) still find room.
      expect(client.hello.maxBatchPages).toBe(4);
      const keys = Array.from({ length: n }, (_, i) => key(900 + i));
      const refused = await send({ url: server.url }, 'reserve', { keys: keys.slice(0, 5), lengths: keys.slice(0, 5).map(() => PAGE) }, { token: null });
      expect(refused).toMatchObject({ status: 413, json: { error: { code: 'ERR_OUT_OF_RANGE', field: 'keys' } } });
      expect(refused.json.error.message).toMatch(/at most 4 keys per request \(a quarter of the host tier's slots\), got 5/);
      randomFillSync(src.view(0, n * PAGE));
      expect(await client.store(keys, Array.from({ length: n }, (_, i) => ({ arena: src, offset: i * PAGE, length: PAGE })))).toMatchObject({ stored: n });
      expect(await client.load(keys, Array.from({ length: n }, (_, i) => ({ arena: dst, offset: i * PAGE, length: PAGE })))).toMatchObject({ loaded: n, missing: [] });
      expect(Buffer.compare(Buffer.from(dst.view(0, n * PAGE)), Buffer.from(src.view(0, n * PAGE)))).toBe(0);
    } finally {
      src.close();
      dst.close();
      await client.close();
      await daemon.close();
    }
  });

  it("asks room for the slots native GETs still hold after their page's delete, so a full tier still takes a reservation", async () => {
    const daemon = await startTestDaemon('client-held', {
      hostPages: 8,
      fsPages: 256,
      host: { highWatermark: 1, lowWatermark: 1 },
      config: () => ({ peer: { port: 0 }, client: { socket: false } }),
    });
    const { server } = daemon;
    const client = await TierSyncClient.connect({ url: server.url, transport: 'shm' });
    const arena = HostArena.create({ capacity: 8 * PAGE });
    try {
      randomFillSync(arena.view(0, 8 * PAGE));
      const pages = (n: number) => Array.from({ length: n }, (_, i) => ({ arena, offset: i * PAGE, length: PAGE }));
      const first = Array.from({ length: 8 }, (_, i) => key(600 + i));
      expect((await client.store(first, pages(8))).stored).toBe(8);
      await server.ts.flush();
      // A native GET (the peer data plane) holds one page's slot when the page is deleted: the page is gone, the
      // slot is not free, and the planner, which counts pages, cannot see it.
      const host = server.ts.tierDriver('host') as HostTier;
      const stored = (await send({ url: server.url }, 'resolve', { keys: [first[0]] }, { token: null })).json.keys as string[];
      const [where] = host.locate(stored);
      Atomics.add(host.slotPins!, where!.slot, 1);
      expect(await client.delete([first[0]!])).toMatchObject({ deleted: 1, pinned: 0 });
      expect(host.slotsHeldByReaders).toBe(1);
      // Six new pages: the hierarchy is asked to make room for seven (it counts seven pages, the tier eight slots).
      const second = Array.from({ length: 6 }, (_, i) => key(700 + i));
      expect((await client.store(second, pages(6))).stored).toBe(6);
      // Let go: the held slot returns at the next allocation, and no slot is left behind.
      Atomics.sub(host.slotPins!, where!.slot, 1);
      expect(host.slotsHeldByReaders).toBe(0);
      await server.ts.flush();
      const stats = server.ts.stats().tiers.find((t) => t.name === 'host')!;
      expect(stats.pages).toBe(stats.usedPages);
    } finally {
      arena.close();
      await client.close();
      await daemon.close();
    }
  });

  it('deletes a damaged page a reader still pinned once the reader lets go, so its slot is not lost and the key stores again', async () => {
    const daemon = await startTestDaemon('client-damaged-pinned', {
      hostPages: 8,
      fsPages: 64,
      writeThrough: false,
      config: () => ({ peer: { port: 0 }, client: { socket: false, leaseMs: 400 } }),
    });
    const { server } = daemon;
    const client = await TierSyncClient.connect({ url: server.url, transport: 'shm' });
    const arena = HostArena.create({ capacity: 2 * PAGE });
    try {
      randomFillSync(arena.view(0, 2 * PAGE));
      const k = key(800);
      expect((await client.store([k], [{ arena, offset: 0, length: PAGE }])).stored).toBe(1);
      await server.ts.flush();
      const host = server.ts.tierDriver('host') as HostTier;
      const [stored] = (await send({ url: server.url }, 'resolve', { keys: [k] }, { token: null })).json.keys as string[];
      const [where] = host.locate([stored!]);
      // A reader of the hierarchy holds the page (its copy in flight) when a client's copy-out finds it damaged.
      host.pin([stored!]);
      const hello = client.hello.shm!;
      const mapped = HostArena.create({ shmPath: hello.path, capacity: hello.capacity, pageSize: hello.pageSize, fingerprint: hello.fingerprint, create: false });
      try {
        mapped.view(where!.offset + 100, 1)[0]! ^= 0x5a;
      } finally {
        mapped.close();
      }
      expect(await client.load([k], [{ arena, offset: PAGE, length: PAGE }])).toMatchObject({ loaded: 0, missing: [0] });
      expect((await client.lookup([k])).present).toEqual([false]);
      // Still in the tier while pinned; gone at a sweep after the reader lets go.
      expect(host.locate([stored!])[0]).toBeDefined();
      host.unpin([stored!]);
      await expect.poll(() => host.locate([stored!])[0], { timeout: 5000 }).toBeUndefined();
      // The key is new again: stored (not 'existing' against the damaged copy) and loads intact.
      expect(await client.store([k], [{ arena, offset: 0, length: PAGE }])).toMatchObject({ stored: 1, existing: 0 });
      expect(await client.load([k], [{ arena, offset: PAGE, length: PAGE }])).toMatchObject({ loaded: 1 });
      expect(Buffer.compare(Buffer.from(arena.view(PAGE, PAGE)), Buffer.from(arena.view(0, PAGE)))).toBe(0);
    } finally {
      arena.close();
      await client.close();
      await daemon.close();
    }
  });
});

describe('the auto-named client socket', () => {
  it('is made for this daemon, removes those of daemons that died without closing, and goes at close', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-client-sock-'));
    // A pid that does not exist: a daemon killed with SIGKILL left this file behind.
    let dead = 4_000_000;
    for (;;) {
      try {
        process.kill(dead, 0);
        dead++;
      } catch {
        break;
      }
    }
    const stale = path.join(os.tmpdir(), `tiersync-${dead}-1.sock`);
    writeFileSync(stale, '');
    const server = await TierSyncServer.start(
      parseServerConfig({
        model: 'client-sock@1',
        layout,
        tiers: [{ url: `host://?capacity=${8 * PAGE}`, name: 'host' }],
        index: { path: path.join(dir, 'index.sqlite') },
        http: { port: 0 },
        peer: { enabled: false },
        log: { level: 'silent' },
      }),
    );
    const mine = path.join(os.tmpdir(), `tiersync-${process.pid}-${server.httpPort}.sock`);
    try {
      expect(existsSync(stale)).toBe(false);
      expect(existsSync(mine)).toBe(true);
      expect((await send({ socketPath: mine }, 'lookup', { keys: [key(1)] }, { token: null })).json.present).toEqual([false]);
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
      rmSync(stale, { force: true });
    }
    expect(existsSync(mine)).toBe(false);
  });
});

describe('the block index recorder under a steady stream of commits', () => {
  it('answers a delete of just-committed pages while other clients keep storing (the recorder never goes idle)', async () => {
    const daemon = await startTestDaemon('client-record', {
      hostPages: 2048,
      fsPages: 2048,
      writeThrough: false,
      config: () => ({ peer: { enabled: false }, client: { socket: false } }),
    });
    const { server } = daemon;
    // Each index batch takes a while, as under a busy hierarchy lock (the soak: a thousand sessions' reserves,
    // deletes and write-through copies queued on it), so commits keep landing while one is recorded.
    const adopt = server.ts.adoptPages.bind(server.ts);
    server.ts.adoptPages = async (...args) => {
      await new Promise((r) => setTimeout(r, 25));
      return adopt(...args);
    };
    const WRITERS = 8;
    const MAX_STORES = 1500;
    const clients = await Promise.all(Array.from({ length: 2 }, () => TierSyncClient.connect({ url: server.url, transport: 'shm' })));
    const arena = HostArena.create({ capacity: (WRITERS + 1) * PAGE });
    try {
      randomFillSync(arena.view(0, (WRITERS + 1) * PAGE));
      // Writers store fresh pages until the delete below has answered (or MAX_STORES, where the stream ends anyway).
      let stores = 0;
      let stop = false;
      const writers = Array.from({ length: WRITERS }, async (_, w) => {
        while (!stop && stores < MAX_STORES) {
          const n = stores++;
          await clients[w % clients.length]!.store([key(0x10000 + n)], [{ arena, offset: w * PAGE, length: PAGE }]);
        }
      });
      while (stores < 50) await new Promise((r) => setTimeout(r, 5));
      const mine = [key(0x1), key(0x2)];
      const page = { arena, offset: WRITERS * PAGE, length: PAGE };
      expect((await clients[0]!.store(mine, [page, page])).stored).toBe(2);
      // Committed, not yet recorded in the index: the delete waits for the batch that records them, not for the
      // stream of commits to stop.
      const deleted = await clients[1]!.delete(mine);
      const storingWhenAnswered = stores < MAX_STORES;
      stop = true;
      await Promise.all(writers);
      expect(deleted).toMatchObject({ deleted: 2, pinned: 0, missing: 0 });
      expect(storingWhenAnswered).toBe(true);
      expect((await clients[0]!.lookup(mine)).present).toEqual([false, false]);
    } finally {
      arena.close();
      for (const c of clients) await c.close();
      await daemon.close();
    }
  });
});

describe('host-tier reads that bypass the hierarchy count for eviction', () => {
  it("a same-host client's pin of a page in the host tier counts as a hit; a remote client's peer GET counts once", async () => {
    const daemon = await startTestDaemon('client-hits', {
      hostPages: 64,
      fsPages: 256,
      config: () => ({ peer: { port: 0 }, client: { socket: false }, tenants: [{ name: 'near', token: 'token-near' }, { name: 'far', token: 'token-far', sharedMemory: false }] }),
    });
    const { server } = daemon;
    // Stored keys in the order the host tier recorded them (a client names pages by its own keys).
    const stored: string[] = [];
    server.ts.on('block:stored', (e) => {
      if (e.tier === 'host') stored.push(...e.keys);
    });
    const hits = (keys: readonly string[]) => server.ts.pageRecords(keys).map((r) => r?.hits);
    const arena = HostArena.create({ capacity: 4 * PAGE });
    const near = await TierSyncClient.connect({ url: server.url, token: 'token-near', transport: 'shm' });
    const far = await TierSyncClient.connect({ url: server.url, token: 'token-far', transport: 'peer' });
    try {
      randomFillSync(arena.view(0, 4 * PAGE));
      const page = (i: number) => [{ arena, offset: i * PAGE, length: PAGE }];
      const take = async (): Promise<string> => {
        await expect.poll(() => stored.length, { timeout: 5000 }).toBe(1);
        return stored.shift()!;
      };
      expect((await near.store([key(700)], page(0))).stored).toBe(1);
      const read = await take();
      expect((await near.store([key(701)], page(1))).stored).toBe(1);
      const unread = await take();
      expect(far.transport).toBe('peer');
      expect((await far.store([key(702)], page(2))).stored).toBe(1);
      const remote = await take();
      expect(hits([read, unread, remote])).toEqual([0, 0, 0]);

      // A pin lease of a page already in the host tier: no load runs, the access batch reports it.
      const pin = await send({ url: server.url }, 'pin', { keys: [key(700)] }, { token: 'token-near' });
      expect(pin.json.offsets[0]).toBeGreaterThanOrEqual(0);
      expect((await send({ url: server.url }, 'release', { lease: pin.json.lease }, { token: 'token-near' })).status).toBe(200);
      await expect.poll(() => hits([read])[0], { timeout: 5000 }).toBe(1);

      // A remote client's load: its pin is not counted (no shared memory), the peer server's GET is.
      const into = HostArena.create({ capacity: PAGE });
      try {
        expect((await far.load([key(702)], [{ arena: into, offset: 0, length: PAGE }])).loaded).toBe(1);
        expect(Buffer.compare(Buffer.from(into.view(0, PAGE)), Buffer.from(arena.view(2 * PAGE, PAGE)))).toBe(0);
      } finally {
        into.close();
      }
      await expect.poll(() => hits([remote])[0], { timeout: 5000 }).toBe(1);
      // Counted once each; the page nobody read has none.
      expect(hits([read, unread, remote])).toEqual([1, 0, 1]);
    } finally {
      arena.close();
      await near.close();
      await far.close();
      await daemon.close();
    }
  });
});
