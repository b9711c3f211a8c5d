import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena, PeerClient, PeerStatus, TierSyncError, TransferEngine, crc32c, peerFrameCrypto, type PeerServer } from '@tiersync/native';
import { testKey, tierConformance } from '../testing.js';
import { HostTier } from '../host/index.js';
import { PeerTier, parsePeerUrl } from './index.js';
import { servePeer, type PeerServeOptions } from './server.js';
import { requireTools } from '../../../../scripts/system-packages.mjs';

const PAGE = 64 * 1024;
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../../../..');

/** Flips bits of one byte (`at` into the page) of a page held by a serving host tier, in its memory. */
function damageHostPage(host: HostTier, key: string, at: number, mask: number, pageBytes = PAGE): void {
  const internals = host as unknown as { table: Map<string, { slot: number }>; store: { arena: HostArena; dataOffset: number } };
  internals.store.arena.view(internals.store.dataOffset + internals.table.get(key)!.slot * pageBytes + at, 1)[0]! ^= mask;
}

/**
 * `page` with one byte flipped at `changeAt` and the 4 bytes at `patchAt` set so that the CRC32C of the whole is
 * unchanged. CRC32C is affine over GF(2): for messages of one length, crc(m ^ d) = crc(m) ^ crc(d) ^ crc(zeros), so
 * the patch solves a 32 x 32 linear system (any 32 consecutive bits can be solved for, as for every CRC-32).
 */
function sameCrc32c(page: Uint8Array, changeAt: number, patchAt: number): Uint8Array {
  const zero = crc32c(new Uint8Array(page.length));
  const effect = (bits: Array<[number, number]>): number => {
    const d = new Uint8Array(page.length);
    for (const [at, mask] of bits) d[at]! ^= mask;
    return (crc32c(d) ^ zero) >>> 0;
  };
  // Gaussian elimination: a basis of the patch bits' effects, each with the set of bits that makes it.
  const basis: Array<{ value: number; bits: number }> = [];
  const reduce = (v: { value: number; bits: number }) => {
    for (const b of basis) if ((v.value ^ b.value) >>> 0 < v.value) v = { value: (v.value ^ b.value) >>> 0, bits: (v.bits ^ b.bits) >>> 0 };
    return v;
  };
  for (let j = 0; j < 32; j++) {
    const v = reduce({ value: effect([[patchAt + (j >> 3), 1 << (j & 7)]]), bits: (1 << j) >>> 0 });
    if (v.value) {
      basis.push(v);
      basis.sort((x, y) => y.value - x.value);
    }
  }
  const left = reduce({ value: effect([[changeAt, 0xff]]), bits: 0 });
  if (left.value !== 0) throw new Error('sameCrc32c: no patch at that place');
  const out = Uint8Array.from(page);
  out[changeAt]! ^= 0xff;
  for (let j = 0; j < 32; j++) if ((left.bits >>> j) & 1) out[patchAt + (j >> 3)]! ^= 1 << (j & 7);
  return out;
}

/** A host tier served over loopback, a peer tier reaching it with a secret, and a source arena. */
interface LoopbackPeer {
  host: HostTier;
  server: PeerServer;
  tier: PeerTier;
  arena: HostArena;
}

/** Runs `body` against a LoopbackPeer of `hostPages` pages of `pageBytes`, then closes everything in order. */
async function withLoopbackPeer(
  o: { pageBytes: number; fingerprint: string; hostPages: number; arenaBytes: number; serve?: PeerServeOptions; secret?: string; encrypt?: boolean },
  body: (rig: LoopbackPeer) => Promise<void>,
): Promise<void> {
  const engine = new TransferEngine({ threads: 2 });
  const context = { engine, pageBytes: o.pageBytes, fingerprint: o.fingerprint };
  const host = new HostTier(`host://?capacity=${o.hostPages * o.pageBytes}`, context);
  await host.open();
  // secret '': neither end has one (loopback only; frames not authenticated).
  const secret = o.secret ?? 'rig-secret';
  const server = servePeer(host, { ...(secret ? { secret } : {}), ...o.serve });
  const tier = new PeerTier(`peer://127.0.0.1:${server.port}?${secret ? `secret=${secret}&` : ''}${o.encrypt ? 'encrypt=true&' : ''}streams=2`, context);
  const arena = HostArena.create({ capacity: o.arenaBytes });
  try {
    await tier.open();
    await body({ host, server, tier, arena });
  } finally {
    await tier.close();
    server.close();
    await host.close();
    arena.close();
    await engine.close();
  }
}

tierConformance('peer:// (loopback, with secret)', () => {
  const servers: Array<{ server: PeerServer; host: HostTier }> = [];
  return {
    pageBytes: PAGE,
    capacityPages: 16,
    async create(context) {
      const host = new HostTier(`host://?capacity=${16 * PAGE}`, context);
      await host.open();
      const server = servePeer(host, { secret: 'conformance-secret' });
      servers.push({ server, host });
      const t = new PeerTier(`peer://127.0.0.1:${server.port}?secret=conformance-secret&streams=2`, context);
      await t.open();
      return t;
    },
    async corrupt(_driver, key) {
      // Damage the remote copy in the serving host's memory.
      damageHostPage(servers[servers.length - 1]!.host, key, 3, 0x5a);
    },
    async cleanup() {
      for (const { server, host } of servers) {
        server.close();
        await host.close();
      }
    },
  };
});

describe('peer reconnects', () => {
  it('after the serving side restarts, a failed call is typed and the next one reconnects', async () => {
    const engine = new TransferEngine({ threads: 2 });
    const context = { engine, pageBytes: PAGE, fingerprint: 'reconnect' };
    const serve = async (port = 0) => {
      const host = new HostTier(`host://?capacity=${8 * PAGE}`, context);
      await host.open();
      return { host, server: servePeer(host, { secret: 's', port }) };
    };
    let remote = await serve();
    const port = remote.server.port;
    const tier = new PeerTier(`peer://127.0.0.1:${port}?secret=s&streams=2&timeoutMs=2000`, context);
    await tier.open();
    const arena = HostArena.create({ capacity: 2 * PAGE });
    arena.view(0, PAGE).fill(7);
    const key = testKey(1);
    try {
      await tier.write([{ key, source: { arena, offset: 0, length: PAGE } }]);
      remote.server.close();
      await remote.host.close();
      // The old connection is gone: the call fails with a typed error, never hangs or succeeds wrongly.
      const failed = await tier.read([{ key, into: { arena, offset: PAGE, length: PAGE } }]).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect((failed as { code?: string } | undefined)?.code).toMatch(/^ERR_(IO|TIMEOUT|PROTOCOL)$/);
      remote = await serve(port);
      await tier.write([{ key, source: { arena, offset: 0, length: PAGE } }]);
      const [o] = await tier.read([{ key, into: { arena, offset: PAGE, length: PAGE } }]);
      expect(o).toMatchObject({ status: 'hit', length: PAGE });
      expect(arena.view(PAGE, PAGE).every((b) => b === 7)).toBe(true);
    } finally {
      await tier.close();
      remote.server.close();
      await remote.host.close();
      arena.close();
      await engine.close();
    }
  });
});

describe("peer PUTs of pages longer than the serving tier's slots", () => {
  // A host with 16 KiB pages writing to one whose host tier has 8 KiB slots (a page size mismatch between daemons).
  // slotPool 0: only the page table's plan stands between the page and the next slot; default: the data plane knows
  // the slot size too.
  for (const slotPool of [0, undefined]) {
    it(`refuses them with ERR_OUT_OF_RANGE, takes back what landed and leaves the neighbouring pages intact (slotPool ${slotPool ?? 'default'})`, async () => {
      const SMALL = 8 * 1024;
      const LARGE = 16 * 1024;
      const SLOTS = 16;
      const engine = new TransferEngine({ threads: 2 });
      const host = new HostTier(`host://?capacity=${SLOTS * SMALL}`, { engine, pageBytes: SMALL, fingerprint: 'small-pages' });
      await host.open();
      const server = servePeer(host, { secret: 's', ...(slotPool !== undefined ? { slotPool } : {}) });
      const tier = new PeerTier(`peer://127.0.0.1:${server.port}?secret=s&streams=1`, { engine, pageBytes: LARGE, fingerprint: 'large-pages' });
      const arena = HostArena.create({ capacity: 4 * LARGE + SLOTS * SMALL });
      const back = HostArena.create({ capacity: SLOTS * SMALL });
      const held = (i: number) => ({ key: testKey(100 + i), at: 4 * LARGE + i * SMALL });
      try {
        await tier.open();
        const view = arena.view(0, 4 * LARGE + SLOTS * SMALL);
        for (let i = 0; i < view.length; i++) view[i] = (i * 13 + (i >>> 11)) & 0xff;
        // Every slot holds a page; slot 0's is then deleted, so the only free slot has a page right after it.
        await host.write(Array.from({ length: SLOTS }, (_, i) => ({ key: held(i).key, source: { arena, offset: held(i).at, length: SMALL } })));
        const slots = (host as unknown as { table: Map<string, { slot: number }> }).table;
        const first = Array.from({ length: SLOTS }, (_, i) => held(i)).find((h) => slots.get(h.key)!.slot === 0)!;
        expect((await host.delete([first.key])).deleted).toEqual([first.key]);

        const long = await tier.write([{ key: testKey(1), source: { arena, offset: 0, length: LARGE } }]).catch((e: unknown) => e);
        expect(long).toBeInstanceOf(TierSyncError);
        expect(long).toMatchObject({ code: 'ERR_OUT_OF_RANGE', message: expect.stringMatching(/slots are smaller than a 16384-byte page.*page sizes differ/) });
        // A batch with a page that fits: it landed, and was taken back before the error.
        const mixed = await tier.write([
          { key: testKey(2), source: { arena, offset: LARGE, length: SMALL / 2 } },
          { key: testKey(3), source: { arena, offset: 2 * LARGE, length: LARGE } },
        ]).catch((e: unknown) => e);
        expect(mixed).toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
        expect(await tier.has([testKey(1), testKey(2), testKey(3)])).toEqual([false, false, false]);
        expect(host.hasNow([testKey(1), testKey(2), testKey(3)])).toEqual([false, false, false]);
        // Every other page reads back byte-exact.
        const rest = Array.from({ length: SLOTS }, (_, i) => held(i)).filter((h) => h.key !== first.key);
        const out = await host.read(rest.map((h, j) => ({ key: h.key, into: { arena: back, offset: j * SMALL, length: SMALL } })));
        expect(out.map((o) => o.status)).toEqual(rest.map(() => 'hit'));
        rest.forEach((h, j) => expect(Buffer.compare(back.view(j * SMALL, SMALL), arena.view(h.at, SMALL)), h.key).toBe(0));
      } finally {
        await tier.close();
        server.close();
        await host.close();
        arena.close();
        back.close();
        await engine.close();
      }
    });
  }
});

describe('peer URLs', () => {
  it('parses and names what is wrong', () => {
    process.env.TIERSYNC_TEST_SECRET = 'abc';
    expect(parsePeerUrl('peer://10.0.0.7:7070?secret=env:TIERSYNC_TEST_SECRET&streams=8')).toMatchObject({ host: '10.0.0.7', port: 7070, secret: 'abc', streams: 8 });
    expect(parsePeerUrl('peer://10.0.0.7:7070?secret=hunter2').redacted).not.toContain('hunter2');
    expect(() => parsePeerUrl('peer://10.0.0.7')).toThrow(/needs a port/);
    expect(() => parsePeerUrl('peer://10.0.0.7:7070?streams=0')).toThrow(/option 'streams'/);
    expect(() => parsePeerUrl('peer://10.0.0.7:7070?secret=env:TIERSYNC_NOT_SET_ANYWHERE')).toThrow(/TIERSYNC_NOT_SET_ANYWHERE, which is not set/);
  });
});

/** Starts `node peer-host.mjs` (optionally inside a network namespace) serving a host tier; resolves its port. */
function startHost(args: { secret: string; listen: string; netns?: string; shm?: string; env?: NodeJS.ProcessEnv }): Promise<{ child: ChildProcess; port: number; sealedBy: string }> {
  const script = path.join(here, 'peer-host.fixture.mjs');
  const cmd = args.netns ? 'ip' : process.execPath;
  const argv = [...(args.netns ? ['netns', 'exec', args.netns, process.execPath] : []), script, args.listen, args.secret, String(PAGE), ...(args.shm ? [args.shm] : [])];
  const child = spawn(cmd, argv, { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, ...args.env } });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening (\d+) sealed-by (\S+)\n/.exec(out);
      if (m) resolve({ child, port: Number(m[1]), sealedBy: m[2]! });
    });
    child.on('exit', (code) => reject(new Error(`peer host exited with ${code}`)));
  });
}

describe('peer across processes', () => {
  beforeAll(() => {
    // The fixture process imports the compiled packages.
    execFileSync('npx', ['tsc', '-b', 'packages/tiers'], { cwd: root, stdio: 'inherit' });
  }, 120_000);

  it('stores pages in another process and reads them back byte-exact', async () => {
    const { child, port } = await startHost({ secret: 'two-process', listen: '127.0.0.1' });
    const engine = new TransferEngine({ threads: 2 });
    const arena = HostArena.create({ capacity: 8 * PAGE });
    const view = arena.view(0, 4 * PAGE);
    for (let i = 0; i < view.length; i++) view[i] = (i * 13) & 0xff;
    const t = new PeerTier(`peer://127.0.0.1:${port}?secret=two-process`, { engine, pageBytes: PAGE, fingerprint: '' });
    await t.open();
    const keys = [0, 1, 2, 3].map((i) => testKey(i, 7));
    await t.write(keys.map((key, i) => ({ key, source: { arena, offset: i * PAGE, length: PAGE } })));
    const r = await t.read(keys.map((key, i) => ({ key, into: { arena, offset: (4 + i) * PAGE, length: PAGE } })));
    expect(r.map((o) => o.status)).toEqual(['hit', 'hit', 'hit', 'hit']);
    expect(crc32c(arena.view(4 * PAGE, 4 * PAGE))).toBe(crc32c(arena.view(0, 4 * PAGE)));
    await t.close();
    await engine.close();
    child.kill();
  });

  // Frames sealed by one GCM library are opened by another: this process uses the one it picked (IPsec-MB where its
  // vector GCM runs, as on this project's CI machine), the host Node's OpenSSL or, where that is this process's, the
  // system's.
  it.each([false, true])('exchanges frames with a host sealing them with another library (encrypted: %s)', async (encrypt) => {
    const local = peerFrameCrypto().source;
    const { child, port, sealedBy } = await startHost({ secret: 'libraries', listen: '127.0.0.1', env: { TIERSYNC_PEER_FRAME_CRYPTO: local === 'node' ? 'system' : 'node' } });
    expect(sealedBy).not.toBe(local);
    const engine = new TransferEngine({ threads: 2 });
    const arena = HostArena.create({ capacity: 8 * PAGE });
    const t = new PeerTier(`peer://127.0.0.1:${port}?secret=libraries&encrypt=${encrypt}`, { engine, pageBytes: PAGE, fingerprint: '' });
    try {
      const view = arena.view(0, 4 * PAGE);
      for (let i = 0; i < view.length; i++) view[i] = (i * 29 + 3) & 0xff;
      await t.open();
      // Pages of several lengths, so frames end in partial GCM blocks.
      const lengths = [PAGE, PAGE - 1, 4097, 17];
      const keys = lengths.map((_, i) => testKey(i, encrypt ? 12 : 11));
      await t.write(keys.map((key, i) => ({ key, source: { arena, offset: i * PAGE, length: lengths[i]! } })));
      const r = await t.read(keys.map((key, i) => ({ key, into: { arena, offset: (4 + i) * PAGE, length: lengths[i]! } })));
      expect(r.map((o) => o.status)).toEqual(['hit', 'hit', 'hit', 'hit']);
      lengths.forEach((n, i) => expect(Buffer.compare(arena.view((4 + i) * PAGE, n), arena.view(i * PAGE, n))).toBe(0));
    } finally {
      await t.close();
      await engine.close();
      child.kill();
    }
  });

  it('serves and keeps a PUT a persistent tier acknowledged, through a SIGKILL of its server before JavaScript recorded it', async () => {
    const shm = `/dev/shm/tiersync-peer-kill-${process.pid}`;
    const { child, port } = await startHost({ secret: 'kill', listen: '127.0.0.1', shm });
    const engine = new TransferEngine({ threads: 1 });
    const arena = HostArena.create({ capacity: 4 * PAGE });
    const client = await PeerClient.connect({ host: '127.0.0.1', port, secret: 'kill', streams: 1, timeoutMs: 10_000 });
    try {
      const view = arena.view(0, 2 * PAGE);
      for (let i = 0; i < view.length; i++) view[i] = (i * 31 + 5) & 0xff;
      const keys = [testKey(0, 9), testKey(1, 9)];
      const crcs = Uint32Array.of(crc32c(arena.view(0, PAGE)), crc32c(arena.view(PAGE, PAGE)));
      // The server's JavaScript thread blocks: the ack comes from the data plane alone, and nothing records the
      // pages on that thread before the kill.
      const blocked = new Promise<void>((resolve) => child.stdout!.on('data', (d: Buffer) => d.toString().includes('blocked') && resolve()));
      child.stdin!.write('block\n');
      await blocked;
      const put = await client.put(arena, keys, Float64Array.of(0, PAGE), Uint32Array.of(PAGE, PAGE), crcs);
      expect([...put.statuses]).toEqual([PeerStatus.ok, PeerStatus.ok]);
      // Still blocked: a GET of the landed pages is sent from where they landed (slots after the shm tier's records).
      const got = await client.get(arena, keys, Float64Array.of(2 * PAGE, 3 * PAGE), Uint32Array.of(PAGE, PAGE));
      expect([...got.statuses]).toEqual([PeerStatus.ok, PeerStatus.ok]);
      expect(Buffer.compare(arena.view(2 * PAGE, 2 * PAGE), arena.view(0, 2 * PAGE))).toBe(0);
      arena.view(2 * PAGE, 2 * PAGE).fill(0);
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
      // The tier reopened from its file has both pages, byte-exact (verified reads: the CRC32C is checked).
      const host = new HostTier(`host://?capacity=${64 * PAGE}&shm=${shm}`, { engine, pageBytes: PAGE, fingerprint: '' });
      await host.open();
      try {
        expect(host.hasNow(keys)).toEqual([true, true]);
        const out = await host.read(keys.map((key, i) => ({ key, into: { arena, offset: (2 + i) * PAGE, length: PAGE } })));
        expect(out.map((o) => o.status)).toEqual(['hit', 'hit']);
        expect(Buffer.compare(arena.view(2 * PAGE, 2 * PAGE), arena.view(0, 2 * PAGE))).toBe(0);
      } finally {
        await host.close();
      }
    } finally {
      client.close();
      child.kill('SIGKILL');
      arena.close();
      await engine.close();
      rmSync(shm, { force: true });
    }
  });
});

// Network namespaces need root; a root machine without iproute2 fails naming it (the setup installs it).
describe.skipIf(process.getuid?.() !== 0)('peer across hosts in network namespaces (needs root: ip netns)', () => {
  const ns = [`tsA${process.pid % 10000}`, `tsB${process.pid % 10000}`];
  const sh = (...a: string[]) => execFileSync('ip', a, { stdio: 'pipe' });
  const children: ChildProcess[] = [];
  // Subnets of their own per run (the pid picks them), so two runs on one machine do not share addresses.
  const net = (i: number) => `10.${77 + i}.${process.pid % 250}`;

  beforeAll(() => {
    requireTools(['ip']);
    // Host A (server) and host B (a second server), each linked to this host (the client) by a veth pair.
    ns.forEach((n, i) => {
      sh('netns', 'add', n);
      sh('link', 'add', `vc${i}${process.pid % 1000}`, 'type', 'veth', 'peer', 'name', `vh${i}${process.pid % 1000}`);
      sh('link', 'set', `vh${i}${process.pid % 1000}`, 'netns', n);
      sh('addr', 'add', `${net(i)}.1/24`, 'dev', `vc${i}${process.pid % 1000}`);
      sh('link', 'set', `vc${i}${process.pid % 1000}`, 'up');
      sh('-n', n, 'addr', 'add', `${net(i)}.2/24`, 'dev', `vh${i}${process.pid % 1000}`);
      sh('-n', n, 'link', 'set', `vh${i}${process.pid % 1000}`, 'up');
      sh('-n', n, 'link', 'set', 'lo', 'up');
    });
  });
  afterAll(() => {
    for (const c of children) c.kill();
    ns.forEach((n, i) => {
      try {
        sh('link', 'del', `vc${i}${process.pid % 1000}`);
      } catch {}
      try {
        sh('netns', 'del', n);
      } catch {}
    });
  });

  it('moves pages to two other hosts and back, authenticated, and refuses a wrong secret', async () => {
    const engine = new TransferEngine({ threads: 2 });
    const arena = HostArena.create({ capacity: 16 * PAGE });
    const view = arena.view(0, 8 * PAGE);
    for (let i = 0; i < view.length; i++) view[i] = (i * 7 + 3) & 0xff;
    for (const [i, n] of ns.entries()) {
      const { child, port } = await startHost({ secret: 'netns-secret', listen: `${net(i)}.2`, netns: n });
      children.push(child);
      const bad = new PeerTier(`peer://${net(i)}.2:${port}?secret=wrong&streams=1`, { engine, pageBytes: PAGE, fingerprint: '' });
      await expect(bad.open()).rejects.toMatchObject({ code: 'ERR_AUTH' });
      const t = new PeerTier(`peer://${net(i)}.2:${port}?secret=netns-secret&streams=2`, { engine, pageBytes: PAGE, fingerprint: '' });
      await t.open();
      const keys = [0, 1, 2, 3].map((k) => testKey(k, i));
      await t.write(keys.map((key, k) => ({ key, source: { arena, offset: (i * 4 + k) * PAGE, length: PAGE } })));
      const r = await t.read(keys.map((key, k) => ({ key, into: { arena, offset: (8 + k) * PAGE, length: PAGE } })));
      expect(r.every((o) => o.status === 'hit')).toBe(true);
      expect(crc32c(arena.view(8 * PAGE, 4 * PAGE))).toBe(crc32c(arena.view(i * 4 * PAGE, 4 * PAGE)));
      await t.close();
    }
    await engine.close();
  });
});

describe('peer GETs reported to the tier owner', () => {
  it('reports the pages a GET sent (onServed), not the ones it missed', async () => {
    const served: string[][] = [];
    const serve = { onServed: (keys: string[]) => served.push(keys) };
    await withLoopbackPeer({ pageBytes: PAGE, fingerprint: 'served', hostPages: 8, arenaBytes: 8 * PAGE, serve }, async ({ tier, arena }) => {
      arena.view(0, 2 * PAGE).fill(3);
      await tier.write([0, 1].map((i) => ({ key: testKey(i), source: { arena, offset: i * PAGE, length: PAGE } })));
      expect(served).toEqual([]);
      const out = await tier.read([testKey(0), testKey(9), testKey(1)].map((key, i) => ({ key, into: { arena, offset: (4 + i) * PAGE, length: PAGE } })));
      expect(out.map((o) => o.status)).toEqual(['hit', 'miss', 'hit']);
      // The server's finish of the GET may run after the client has its bytes.
      await expect.poll(() => served.flat().sort(), { timeout: 5000 }).toEqual([testKey(0), testKey(1)]);
    });
  });
});

describe('peer PUTs into granted slots', () => {
  it('stores PUTs without a plan, records them before the next request, and gives the pool back when full', async () => {
    const committed: string[] = [];
    const serve = { slotPool: 4, onCommitted: (pages: ReadonlyArray<{ key: string }>) => committed.push(...pages.map((p) => p.key)) };
    await withLoopbackPeer({ pageBytes: PAGE, fingerprint: 'pool', hostPages: 16, arenaBytes: 32 * PAGE, serve }, async ({ host, server, tier, arena }) => {
      const view = arena.view(0, 32 * PAGE);
      for (let i = 0; i < view.length; i++) view[i] = (i * 7 + (i >>> 16)) & 0xff;
      const page = (i: number) => ({ key: testKey(i), source: { arena, offset: i * PAGE, length: PAGE } });
      expect(server.stats().pooledSlots).toBe(4);
      const first = await tier.write([page(0), page(1)]);
      expect(first.written).toEqual([testKey(0), testKey(1)]);
      expect(first.crc32c).toEqual([crc32c(arena.view(0, PAGE)), crc32c(arena.view(PAGE, PAGE))]);
      expect(server.stats().pooledPuts).toBe(1);
      // The next request's plan records them first: the serving tier and its owner know the pages, with the right
      // CRC32C.
      expect(await tier.has([testKey(0), testKey(1)])).toEqual([true, true]);
      expect(host.hasNow([testKey(0), testKey(1)])).toEqual([true, true]);
      expect(committed).toEqual([testKey(0), testKey(1)]);
      expect(host.stats()).toMatchObject({ pages: 2, usedBytes: 2 * PAGE });
      // The pool was refilled as the pages committed.
      expect(server.stats().pooledSlots).toBe(4);
      const again = await tier.write([page(1)]);
      expect(again).toMatchObject({ written: [], existing: [testKey(1)] });
      expect(host.stats().pages).toBe(2);
      const out = await tier.read([{ key: testKey(1), into: { arena, offset: 20 * PAGE, length: PAGE } }]);
      expect(out[0]!.status).toBe('hit');
      expect(Buffer.compare(arena.view(20 * PAGE, PAGE), arena.view(PAGE, PAGE))).toBe(0);
      // 14 free slots in all, 4 of them granted: a 14-page batch takes the pool back and fits exactly.
      const big = await tier.write(Array.from({ length: 14 }, (_, i) => page(2 + i)));
      expect(big.written).toHaveLength(14);
      expect(host.stats().pages).toBe(16);
      // Every request counted once, by op; the pool took all PUTs but the last (planned by the control plane).
      expect(server.stats()).toMatchObject({ putRequests: 3, pooledPuts: 2, hasRequests: 1, getRequests: 1, deleteRequests: 0 });
    });
  });

  it('answers pooled PUTs and GETs while the serving thread is blocked: ok, existing for keys held or claimed, miss', async () => {
    const committed: string[] = [];
    const served: string[] = [];
    const serve = {
      slotPool: 8,
      onCommitted: (pages: ReadonlyArray<{ key: string }>) => committed.push(...pages.map((p) => p.key)),
      onServed: (keys: string[]) => served.push(...keys),
    };
    await withLoopbackPeer({ pageBytes: PAGE, fingerprint: 'acks', hostPages: 16, arenaBytes: 4 * PAGE, serve }, async ({ host, server, tier, arena }) => {
      const fill = (v: Uint8Array, salt: number) => v.forEach((_, i) => (v[i] = (i * 13 + salt) & 0xff));
      fill(arena.view(0, PAGE), 0);
      await host.write([{ key: testKey(0), source: { arena, offset: 0, length: PAGE } }]); // held before any PUT
      // [0]: step the worker may take (1: PUT, 2: GET), [1]: steps it finished; then statuses, bytes intact (1/0).
      const shared = new Int32Array(new SharedArrayBuffer(8));
      const out = new Uint8Array(new SharedArrayBuffer(14));
      // Another thread is the client, so this one can block while the requests are answered.
      const worker = new Worker(
        `const { workerData: w, parentPort } = await import('node:worker_threads');
        const { HostArena, PeerClient, crc32c } = await import(w.native);
        const client = await PeerClient.connect({ host: '127.0.0.1', port: w.port, secret: 'rig-secret', streams: 1, timeoutMs: 20000 });
        const src = HostArena.create({ capacity: 5 * w.page });
        const v = src.view(0, 2 * w.page);
        for (let i = 0; i < v.length; i++) v[i] = ((i % w.page) * 13 + 1 + Math.floor(i / w.page)) & 0xff;
        const crcs = Uint32Array.of(crc32c(src.view(0, w.page)), crc32c(src.view(w.page, w.page)));
        const at = Float64Array.of(0, w.page), lengths = Uint32Array.of(w.page, w.page);
        const step = (k) => {
          Atomics.store(w.shared, 1, k);
          Atomics.notify(w.shared, 1);
          Atomics.wait(w.shared, 0, k, 20000);
        };
        parentPort.postMessage('ready');
        Atomics.wait(w.shared, 0, 0, 20000);
        const a = await client.put(src, [w.keys[1], w.keys[2]], at, lengths, crcs);
        const b = await client.put(src, [w.keys[1], w.keys[0]], at, lengths, crcs);
        const h = await client.has([w.keys[2], w.keys[3], w.keys[0]]);
        const l = await client.get(src, [w.keys[2]], Float64Array.of(4 * w.page), Uint32Array.of(w.page));
        w.out.set([...a.statuses, ...b.statuses]);
        w.out.set(h.statuses, 9);
        w.out.set([l.statuses[0], crc32c(src.view(4 * w.page, w.page)) === crcs[1] ? 1 : 0], 12);
        step(1);
        const g = await client.get(src, [w.keys[1], w.keys[2], w.keys[3]], Float64Array.of(2 * w.page, 3 * w.page, 4 * w.page), Uint32Array.of(w.page, w.page, w.page));
        w.out.set([...g.statuses, crc32c(src.view(2 * w.page, w.page)) === crcs[0] ? 1 : 0, crc32c(src.view(3 * w.page, w.page)) === crcs[1] ? 1 : 0], 4);
        step(2);
        client.close();`,
        { eval: true, workerData: { native: pathToFileURL(path.join(root, 'packages/native/dist/index.js')).href, port: server.port, page: PAGE, keys: [0, 1, 2, 3].map((i) => testKey(i)), shared, out } },
      );
      const go = (k: number) => {
        Atomics.store(shared, 0, k);
        Atomics.notify(shared, 0);
        // This thread blocks (no turn of its event loop runs) until the worker's requests were answered: by the data
        // plane alone. 'not-equal': they were answered before this thread even began to wait.
        expect(['ok', 'not-equal']).toContain(Atomics.wait(shared, 1, k - 1, 20_000));
        expect(Atomics.load(shared, 1)).toBe(k);
      };
      try {
        await new Promise((resolve, reject) => worker.once('message', resolve).once('error', reject));
        const answered = server.stats().hasAnsweredHere;
        go(1);
        expect([...out.slice(0, 4)]).toEqual([PeerStatus.ok, PeerStatus.ok, PeerStatus.existing, PeerStatus.existing]);
        // HAS and GET, answered on the data plane too: a page landed but not recorded yet is there (read-your-writes),
        // and a GET sends it from where it landed, byte-exact.
        expect([...out.slice(9, 12)]).toEqual([PeerStatus.ok, PeerStatus.miss, PeerStatus.ok]);
        expect(server.stats().hasAnsweredHere - answered).toBe(1);
        expect([...out.slice(12, 14)]).toEqual([PeerStatus.ok, 1]);
        // No turn of this thread has run since: the tier records the pages only now, once each.
        expect(host.hasNow([testKey(1), testKey(2)])).toEqual([false, false]);
        server.drain();
        expect(host.hasNow([testKey(1), testKey(2)])).toEqual([true, true]);
        expect(committed).toEqual([testKey(1), testKey(2)]);
        expect(host.stats().pages).toBe(3);
        // The early GET's read reaches the eviction policy with the same drain, after the pages were recorded.
        expect(served.splice(0)).toEqual([testKey(2)]);
        // GETs, planned on the data plane from the mirrored table, while this thread blocks again.
        const hits = host.stats().hits;
        const planned = server.stats().getsPlannedHere;
        go(2);
        expect([...out.slice(4, 9)]).toEqual([PeerStatus.ok, PeerStatus.ok, PeerStatus.miss, 1, 1]);
        expect(server.stats().getsPlannedHere - planned).toBe(1);
        expect(served).toEqual([]);
        server.drain(); // their reads reach the tier's counters and its owner (eviction policy)
        expect(served).toEqual([testKey(1), testKey(2)]);
        expect(host.stats().hits - hits).toBe(2);
        // Byte-exact through the peer tier too.
        const read = await tier.read([1, 2].map((i) => ({ key: testKey(i), into: { arena, offset: i * PAGE, length: PAGE } })));
        expect(read.map((o) => o.status)).toEqual(['hit', 'hit']);
        for (const i of [1, 2]) {
          const want = new Uint8Array(PAGE);
          fill(want, i);
          expect(Buffer.compare(arena.view(i * PAGE, PAGE), want)).toBe(0);
        }
        // A key the tier lost is new again.
        await host.delete([testKey(0)]);
        expect((await tier.write([{ key: testKey(0), source: { arena, offset: 0, length: PAGE } }])).written).toEqual([testKey(0)]);
        expect(server.stats().heldKeys).toBe(3);
      } finally {
        await worker.terminate();
      }
    });
  });

  it('never frees a slot under a GET planned on the data plane: GETs racing deletes and rewrites get intact pages or misses', async () => {
    // Pages of 1 MiB: a GET's send lasts long enough for a delete and a rewrite of its slot to land meanwhile.
    const BIG = 2 ** 20;
    await withLoopbackPeer({ pageBytes: BIG, fingerprint: 'race', hostPages: 6, arenaBytes: 12 * BIG, serve: { slotPool: 1 } }, async ({ host, server, tier, arena }) => {
      const keys = [0, 1, 2, 3].map((i) => testKey(i, 5));
      // Two contents per key, so a page rewritten into a reused slot differs from the one a GET planned.
      const view = arena.view(0, 8 * BIG);
      for (let i = 0; i < view.length; i++) view[i] = (i * 7 + (i >>> 16) * 31) & 0xff;
      const source = (k: number, round: number) => ({ arena, offset: (k * 2 + (round % 2)) * BIG, length: BIG });
      await host.write(keys.map((key, k) => ({ key, source: source(k, 1) })));
      const before = server.stats().getsPlannedHere;
      let deleted = 0;
      const churn = (async () => {
        for (let round = 0; round < 150; round++) {
          const r = await host.delete(keys);
          deleted += r.deleted.length;
          // A deleted page's slot a GET still holds is reused only after its send: the write waits for it.
          await host.write(keys.map((key, k) => ({ key, source: source(k, round) })));
          await new Promise((resolve) => setTimeout(resolve, round % 3)); // stored a while, for GETs to find
        }
      })();
      const got: string[] = [];
      const reads = (async () => {
        for (let i = 0; i < 300; i++) {
          const r = await tier.read(keys.map((key, k) => ({ key, into: { arena, offset: (8 + k) * BIG, length: BIG } })));
          for (const o of r) got.push(o.status === 'error' ? `error ${o.error.code}` : o.status);
        }
      })();
      await Promise.all([churn, reads]);
      // Every GET gave a page that matched its CRC32C (checked on arrival) or a miss: never torn bytes.
      expect(got.filter((g) => g !== 'hit' && g !== 'miss')).toEqual([]);
      expect(got.filter((g) => g === 'hit').length).toBeGreaterThan(0);
      expect(server.stats().getsPlannedHere - before).toBeGreaterThan(0);
      expect(deleted).toBeGreaterThan(0);
      // Whatever the interleaving, the tier's slots add up afterwards: nothing leaked, nothing freed twice. (A GET's
      // pins go a moment after its reply: its connection thread lets go once the send returns.)
      await expect.poll(async () => (await host.delete(keys), host.stats().pages), { timeout: 5000 }).toBe(0);
      expect(host.stats().usedBytes).toBe(0);
      expect(host.slotPins!.every((p) => p === 0)).toBe(true);
      // Every slot a GET held at its page's delete came back: all six fit again (the pool's one is taken back).
      expect(host.reserveRemote(Array.from({ length: 6 }, (_, i) => testKey(i, 6)))).toBeDefined();
    });
  });

  it('takes back the pools of every server sharing a tier when a write is short of slots, and forgets a closed server', async () => {
    await withLoopbackPeer({ pageBytes: PAGE, fingerprint: 'pools', hostPages: 16, arenaBytes: 16 * PAGE, serve: { slotPool: 4 } }, async ({ host, server, arena }) => {
      const second = servePeer(host, { slotPool: 4 });
      const pages = (salt: number) => Array.from({ length: 16 }, (_, i) => ({ key: testKey(salt * 100 + i), source: { arena, offset: i * PAGE, length: PAGE } }));
      try {
        expect([server.stats().pooledSlots, second.stats().pooledSlots]).toEqual([4, 4]);
        // 8 slots free, 8 lent: the whole tier fits only if both pools give theirs back.
        expect((await host.write(pages(1))).written).toHaveLength(16);
        expect([server.stats().pooledSlots, second.stats().pooledSlots]).toEqual([0, 0]);
        await host.delete(pages(1).map((p) => p.key));
      } finally {
        second.close();
      }
      // The closed server is no longer asked (its pool went back when it closed); the other one still is.
      server.grant(host.lendSlots(4), PAGE);
      expect(server.stats().pooledSlots).toBe(4);
      expect((await host.write(pages(2))).written).toHaveLength(16);
    });
  });
});

describe('peer ranged reads', () => {
  it('reads ranges byte-exact with the page CRC32C, refuses a range of a page damaged at rest, and delivers nothing unverified', async () => {
    await withLoopbackPeer({ pageBytes: PAGE, fingerprint: 'range', hostPages: 8, arenaBytes: 8 * PAGE }, async ({ host, tier, arena }) => {
      const view = arena.view(0, 8 * PAGE);
      for (let i = 0; i < view.length; i++) view[i] = (i * 13 + (i >>> 12)) & 0xff;
      await tier.write([0, 1].map((i) => ({ key: testKey(i), source: { arena, offset: i * PAGE, length: PAGE } })));
      // Several layer-sized ranges of both pages in flight at once.
      const layer = PAGE / 8;
      const reads = await Promise.all(
        Array.from({ length: 8 }, (_, l) => tier.read([0, 1].map((p) => ({ key: testKey(p), into: { arena, offset: (4 + p) * PAGE + l * layer, length: layer }, range: { offset: l * layer, length: layer } })))),
      );
      for (const r of reads) expect(r.map((o) => o.status === 'hit' && o.length === layer && o.crc32c)).toEqual([crc32c(arena.view(0, PAGE)), crc32c(arena.view(PAGE, PAGE))]);
      for (const p of [0, 1]) expect(Buffer.compare(arena.view((4 + p) * PAGE, PAGE), arena.view(p * PAGE, PAGE))).toBe(0);
      // Damage page 1 in the serving host's memory, outside the range asked: the range is still refused.
      damageHostPage(host, testKey(1), PAGE - 1, 0x77);
      const [bad] = await tier.read([{ key: testKey(1), into: { arena, offset: 6 * PAGE, length: 100 }, range: { offset: 0, length: 100 } }]);
      expect(bad!.status).toBe('error');
      expect((bad as { error: TierSyncError }).error.code).toBe('ERR_CHECKSUM');
      // Refused before anything moves: past the page size here, past the stored length at the server.
      expect(() => tier.read([{ key: testKey(0), into: { arena, offset: 0, length: PAGE }, range: { offset: PAGE - 10, length: 20 } }])).toThrow(/past the page size/);
    });
  });

  it('checks ranges against chunk CRC32Cs, or announces them: damage after the table was filled is refused where it lies, intact chunks still served', async () => {
    const CHUNK = 64 * 1024; // the server's chunk (peer.h ChunkCrcCache::kChunkBytes)
    const BIG = 4 * CHUNK;
    await withLoopbackPeer({ pageBytes: BIG, fingerprint: 'range-chunks', hostPages: 8, arenaBytes: 4 * BIG }, async ({ host, server, tier, arena }) => {
      const view = arena.view(0, BIG);
      for (let i = 0; i < view.length; i++) view[i] = (i * 29 + (i >>> 11)) & 0xff;
      const [put, local] = [testKey(7), testKey(8)];
      const range = (key: string, offset: number, length: number, at: number) => ({ key, into: { arena, offset: at, length }, range: { offset, length } });
      const damage = (key: string, at: number) => damageHostPage(host, key, at, 0x41, BIG);
      const counts = () => {
        const st = server.stats();
        return [st.rangesWhole, st.rangesByChunk, st.rangesAnnounced];
      };
      // A page that arrived by PUT has its chunk table from the receive pass. A chunk-aligned range of it is sent
      // unchecked to this client (authenticated, kFlagRangeCrcs), its CRC32C announced and computed as it is sent.
      await tier.write([{ key: put, source: { arena, offset: 0, length: BIG } }]);
      const [a] = await tier.read([range(put, 2 * CHUNK, CHUNK, BIG)]);
      expect(a).toMatchObject({ status: 'hit', length: CHUNK, crc32c: crc32c(view) });
      expect(Buffer.compare(arena.view(BIG, CHUNK), view.subarray(2 * CHUNK, 3 * CHUNK))).toBe(0);
      expect(counts()).toEqual([0, 0, 1]);
      // A page stored in the serving host directly: its first range checks it whole and leaves the table.
      await host.write([{ key: local, source: { arena, offset: 0, length: BIG } }]);
      const [first] = await tier.read([range(local, 0, CHUNK, BIG)]);
      expect(first).toMatchObject({ status: 'hit', length: CHUNK, crc32c: crc32c(view) });
      expect(counts()).toEqual([1, 0, 1]);
      // A later range, not chunk-aligned, read from the chunks it overlaps only ...
      const [second] = await tier.read([range(local, CHUNK - 100, CHUNK + 200, 2 * BIG)]);
      expect(second!.status).toBe('hit');
      expect(Buffer.compare(arena.view(2 * BIG, CHUNK + 200), view.subarray(CHUNK - 100, 2 * CHUNK + 100))).toBe(0);
      expect(counts()).toEqual([1, 1, 1]);
      // ... and an aligned one, up to the page's end, announced from the table the first read left.
      const [third] = await tier.read([range(local, CHUNK, 3 * CHUNK, 2 * BIG)]);
      expect(third!.status).toBe('hit');
      expect(Buffer.compare(arena.view(2 * BIG, 3 * CHUNK), view.subarray(CHUNK, BIG))).toBe(0);
      expect(counts()).toEqual([1, 1, 2]);
      // Damaged at rest after the table was filled (chunk 3): ranges over intact chunks are still served, checked
      // or announced ...
      damage(local, 3 * CHUNK + 5);
      const [intact] = await tier.read([range(local, 2 * CHUNK + 10, 1000, 3 * BIG)]);
      expect(intact!.status).toBe('hit');
      expect(Buffer.compare(arena.view(3 * BIG, 1000), view.subarray(2 * CHUNK + 10, 2 * CHUNK + 1010))).toBe(0);
      const [intactAligned] = await tier.read([range(local, 0, 3 * CHUNK, 2 * BIG)]);
      expect(intactAligned!.status).toBe('hit');
      expect(Buffer.compare(arena.view(2 * BIG, 3 * CHUNK), view.subarray(0, 3 * CHUNK))).toBe(0);
      expect(counts()).toEqual([1, 2, 3]);
      // ... an announced range over the damaged chunk is refused by the client: the CRC32C of the bytes sent is not
      // the one announced ...
      const [badAnnounced] = await tier.read([range(local, 2 * CHUNK, 2 * CHUNK, 2 * BIG)]);
      expect((badAnnounced as { error: TierSyncError }).error.code).toBe('ERR_CHECKSUM');
      expect(counts()).toEqual([1, 2, 4]);
      // ... and a checked one is refused before it leaves: its chunk no longer matches, the page checked whole then
      // fails too. None of its bytes land.
      const before = Buffer.from(arena.view(3 * BIG, 3000));
      const [bad] = await tier.read([range(local, 3 * CHUNK, 3000, 3 * BIG)]);
      expect(bad!.status).toBe('error');
      expect((bad as { error: TierSyncError }).error.code).toBe('ERR_CHECKSUM');
      expect(Buffer.compare(arena.view(3 * BIG, 3000), before)).toBe(0);
      expect(counts()).toEqual([2, 2, 4]);
      // The whole page is refused as before; the page that came by PUT, damaged the same way, too, by either kind of
      // range.
      const [whole] = await tier.read([{ key: local, into: { arena, offset: BIG, length: BIG } }]);
      expect(whole!.status).toBe('error');
      damage(put, 3 * CHUNK + 5);
      const [badPut] = await tier.read([range(put, 3 * CHUNK - 1, 2, BIG)]);
      expect((badPut as { error: TierSyncError }).error.code).toBe('ERR_CHECKSUM');
      const [badPutAnnounced] = await tier.read([range(put, 3 * CHUNK, CHUNK, BIG)]);
      expect((badPutAnnounced as { error: TierSyncError }).error.code).toBe('ERR_CHECKSUM');
    });
  });

  it.each([
    ['without a secret (the client checksums what lands)', { secret: '' }],
    ['with encrypted frames (the CRC32C of the plaintext as sent)', { encrypt: true }],
  ])('%s: sends aligned ranges unchecked with the CRC32C they must have, and the client refuses damaged ones', async (_, link) => {
    const CHUNK = 64 * 1024;
    const BIG = 4 * CHUNK;
    await withLoopbackPeer({ pageBytes: BIG, fingerprint: 'range-plain', hostPages: 8, arenaBytes: 4 * BIG, ...link }, async ({ host, server, tier, arena }) => {
      const view = arena.view(0, BIG);
      for (let i = 0; i < view.length; i++) view[i] = (i * 11 + (i >>> 10)) & 0xff;
      const key = testKey(3);
      await tier.write([{ key, source: { arena, offset: 0, length: BIG } }]);
      const read = async (offset: number, length: number) => (await tier.read([{ key, into: { arena, offset: BIG, length }, range: { offset, length } }]))[0]!;
      expect(await read(CHUNK, 2 * CHUNK)).toMatchObject({ status: 'hit', length: 2 * CHUNK, crc32c: crc32c(view) });
      expect(Buffer.compare(arena.view(BIG, 2 * CHUNK), view.subarray(CHUNK, 3 * CHUNK))).toBe(0);
      expect(server.stats()).toMatchObject({ rangesWhole: 0, rangesByChunk: 0, rangesAnnounced: 1 });
      damageHostPage(host, key, 2 * CHUNK + 7, 0x10, BIG);
      expect(((await read(CHUNK, 2 * CHUNK)) as { error: TierSyncError }).error.code).toBe('ERR_CHECKSUM');
      expect((await read(0, CHUNK)).status).toBe('hit');
      expect(server.stats()).toMatchObject({ rangesWhole: 0, rangesByChunk: 0, rangesAnnounced: 3 });
    });
  });

  it("never announces a range from the chunk table of a slot's earlier page, even one of the same length and CRC32C", async () => {
    const CHUNK = 64 * 1024;
    const BIG = 4 * CHUNK;
    // 8 slots, one lent to the data plane's pool.
    await withLoopbackPeer({ pageBytes: BIG, fingerprint: 'range-reuse', hostPages: 8, arenaBytes: 4 * BIG }, async ({ host, server, tier, arena }) => {
      const first = arena.view(0, BIG);
      for (let i = 0; i < BIG; i++) first[i] = (i * 7 + (i >>> 9)) & 0xff;
      // The next page: chunk 1 differs, 4 bytes of chunk 3 make up for it, so the page's CRC32C is the same.
      const next = Buffer.from(sameCrc32c(first, CHUNK + 10, 3 * CHUNK + 100));
      expect(crc32c(next)).toBe(crc32c(first));
      expect(Buffer.compare(next.subarray(CHUNK, 2 * CHUNK), first.subarray(CHUNK, 2 * CHUNK))).not.toBe(0);
      arena.view(BIG, BIG).set(next);
      const fillers = Array.from({ length: 6 }, (_, i) => testKey(100 + i));
      await host.write(fillers.map((key, i) => ({ key, source: { arena, offset: (i % 2) * BIG, length: BIG } })));
      // The first page arrives by PUT (its chunk table kept) and a range of it is announced.
      const key = testKey(1);
      await tier.write([{ key, source: { arena, offset: 0, length: BIG } }]);
      server.drain(); // the tier records the pooled PUT now (and lends the pool its last free slot)
      const { offset: slot, slot: slotIndex } = host.locate([key])[0]!;
      expect((await tier.read([{ key, into: { arena, offset: 2 * BIG, length: CHUNK }, range: { offset: CHUNK, length: CHUNK } }]))[0]!.status).toBe('hit');
      expect(server.stats().rangesAnnounced).toBe(1);
      // The GET's pin on the slot is dropped by the server's connection thread after the reply went out, which can be
      // after the client has it; a pinned slot is freed only later (a write would take the pool's slot back instead).
      for (const deadline = Date.now() + 5000; Atomics.load(host.slotPins!, slotIndex) !== 0; ) {
        if (Date.now() > deadline) throw new Error('the GET never released its pin on the slot');
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
      // Deleted, and the next page (another key) written where it was: the only free slot.
      await host.delete([key]);
      const other = testKey(2);
      await host.write([{ key: other, source: { arena, offset: BIG, length: BIG } }]);
      expect(host.locate([other])[0]!.offset).toBe(slot);
      // Same slot, length and CRC32C: only the slot's version tells the old table from the page now there. The
      // range is checked against the page itself and served.
      const [got] = await tier.read([{ key: other, into: { arena, offset: 2 * BIG, length: CHUNK }, range: { offset: CHUNK, length: CHUNK } }]);
      expect(got!.status).toBe('hit');
      expect(Buffer.compare(arena.view(2 * BIG, CHUNK), next.subarray(CHUNK, 2 * CHUNK))).toBe(0);
      expect(server.stats()).toMatchObject({ rangesWhole: 1, rangesAnnounced: 1 });
    });
  });
});

describe('peer tier whose peer is not up yet', () => {
  it('opens anyway (noted), fails calls with ERR_IO until the peer is up, then works: a cluster starts in any order', async () => {
    const net = await import('node:net');
    const port = await new Promise<number>((resolve) => {
      const s = net.createServer().listen({ host: '127.0.0.1', port: 0 }, () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const engine = new TransferEngine({ threads: 1 });
    const context = { engine, pageBytes: PAGE, fingerprint: 'late-peer' };
    const tier = new PeerTier(`peer://127.0.0.1:${port}?secret=late&timeoutMs=2000`, context);
    const arena = HostArena.create({ capacity: 2 * PAGE });
    arena.view(0, PAGE).fill(9);
    const host = new HostTier(`host://?capacity=${8 * PAGE}`, context);
    let server: PeerServer | undefined;
    try {
      await tier.open();
      expect(tier.openNote).toMatch(new RegExp(`peer 127.0.0.1:${port} unreachable at open`));
      const page = [{ key: testKey(1, 31), source: { arena, offset: 0, length: PAGE } }];
      await expect(tier.write(page)).rejects.toMatchObject({ code: 'ERR_IO' });
      await host.open();
      server = servePeer(host, { secret: 'late', port });
      expect((await tier.write(page)).written).toEqual([testKey(1, 31)]);
      const [r] = await tier.read([{ key: testKey(1, 31), into: { arena, offset: PAGE, length: PAGE } }]);
      expect(r!.status).toBe('hit');
      expect(Buffer.compare(arena.view(PAGE, PAGE), arena.view(0, PAGE))).toBe(0);
      // A wrong secret still fails the open: that is a config error, not a peer that is late.
      const wrong = new PeerTier(`peer://127.0.0.1:${port}?secret=not-late`, context);
      await expect(wrong.open()).rejects.toMatchObject({ code: 'ERR_AUTH' });
      await wrong.close();
    } finally {
      await tier.close();
      server?.close();
      await host.close();
      arena.close();
      await engine.close();
    }
  });
});
