import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseServerConfig, type ServerConfig } from '../config.js';
import { TierSyncServer } from '../server.js';
import { encodeCommand } from './encoder.js';
import type { FaultTier } from '@tiersync/tiers';
import type { TierSyncPageStore } from './page-store.js';
import { RESP_WAIT, RespParser, type RespValue } from './parser.js';
import { requireTools } from '../../../../../scripts/system-packages.mjs';

const run = promisify(execFile);
// 1 layer x 2 KV heads x 64 dims, bf16, 16 tokens per page = 8 KiB pages: values above 8 KiB span pages.
const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;

function config(dir: string, resp: Record<string, unknown> = {}, tiers?: ServerConfig['tiers']): ServerConfig {
  return {
    model: 'resp-test@1',
    layout,
    tiers: tiers ?? [
      { url: `host://?capacity=${4096 * PAGE}`, name: 'host' },
      { url: `fs://${dir}/fs?capacity=${16384 * PAGE}`, name: 'fs' },
    ],
    index: { path: path.join(dir, 'index.sqlite') },
    http: { port: 0 },
    peer: { enabled: false },
    log: { level: 'silent' },
    resp: { port: 0, stagingBytes: 8 << 20, valueWindowBytes: 64 << 10, maxBulkBytes: 1 << 20, requestTimeoutMs: 2000, ...resp },
  } as ServerConfig;
}

/** A minimal RESP client on the door's own parser: send commands, read replies in order. */
class Client {
  readonly socket: net.Socket;
  readonly #parser = new RespParser({ mode: 'any', limits: { maxPendingBytes: 256 << 20 } });
  readonly #replies: RespValue[] = [];
  #waiters: Array<() => void> = [];
  closed = false;
  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.on('data', (chunk) => {
      this.#parser.push(chunk);
      for (let v = this.#parser.next(); v !== undefined && v !== RESP_WAIT; v = this.#parser.next()) this.#replies.push(v);
      this.#wake();
    });
    socket.on('close', () => {
      this.closed = true;
      this.#wake();
    });
    socket.on('error', () => undefined);
  }
  #wake(): void {
    const w = this.#waiters;
    this.#waiters = [];
    for (const f of w) f();
  }
  static connect(port: number): Promise<Client> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(new Client(s)));
      s.once('error', reject);
    });
  }
  async reply(timeoutMs = 5000): Promise<RespValue> {
    const until = Date.now() + timeoutMs;
    while (!this.#replies.length) {
      if (this.closed) throw new Error('connection closed');
      if (Date.now() > until) throw new Error('no reply within the deadline');
      await new Promise<void>((r) => {
        this.#waiters.push(r);
        setTimeout(r, 50);
      });
    }
    return this.#replies.shift()!;
  }
  async call(...args: Array<string | Uint8Array>): Promise<RespValue> {
    this.socket.write(encodeCommand(args));
    return this.reply();
  }
  /** Waits until the server closes the connection (or the deadline passes). */
  async closedWithin(ms: number): Promise<boolean> {
    const until = Date.now() + ms;
    while (!this.closed && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    return this.closed;
  }
  close(): void {
    this.socket.destroy();
  }
}

const bulk = (v: RespValue) => (v.kind === 'bulk' && v.value ? Buffer.from(v.value) : v.kind === 'bulk' ? null : v);
const str = (v: RespValue) => (v.kind === 'bulk' ? (v.value ? Buffer.from(v.value).toString('latin1') : null) : v.kind === 'array' ? v.value?.map(str) : v.value);

function pattern(n: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed * 7 + (i >> 8)) & 0xff;
  return b;
}

/** Polls `probe` every 10 ms until it gives `want` or `ms` pass (background work on a busy machine); its last value. */
async function settle<T>(probe: () => T, want: T, ms = 5000): Promise<T> {
  const until = Date.now() + ms;
  let v = probe();
  while (v !== want && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 10));
    v = probe();
  }
  return v;
}

/** Until the index lists what the door stored: pages committed into slots are recorded after RECORD_DELAY_MS. */
async function settled(server: TierSyncServer): Promise<void> {
  await (server.resp!.store as TierSyncPageStore).slots?.recorded();
  await server.ts.flush();
}

describe('RESP door (no AUTH, loopback)', () => {
  let dir: string;
  let server: TierSyncServer;
  let c: Client;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-'));
    server = await TierSyncServer.start(parseServerConfig(config(dir)));
    c = await Client.connect(server.respPort);
  });
  afterAll(async () => {
    c?.close();
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('stores values through the hierarchy, across pages, binary-safe', async () => {
    expect(await c.call('PING')).toEqual({ kind: 'simple', value: 'PONG' });
    const big = pattern(5 * PAGE + 123, 1);
    const key = Buffer.from([0, 1, 2, 0xff, 0x0d, 0x0a]);
    expect(await c.call('SET', key, big)).toEqual({ kind: 'simple', value: 'OK' });
    expect(bulk(await c.call('GET', key))).toEqual(big);
    expect(await c.call('STRLEN', key)).toEqual({ kind: 'integer', value: big.length });
    // Pages are in the hierarchy: 6 pages (5 full + 123 bytes) on the host tier, keyed by hash, not by name.
    const stats = server.ts.stats();
    expect(stats.index.pages).toBeGreaterThanOrEqual(6);
    // Overwrite: a new generation; the old pages go.
    const small = pattern(100, 2);
    expect(await c.call('SET', key, small)).toEqual({ kind: 'simple', value: 'OK' });
    expect(bulk(await c.call('GET', key))).toEqual(small);
    await new Promise((r) => setTimeout(r, 100));
    await settled(server);
    // The value's page and its catalog manifest (an fs tier makes the catalog durable).
    expect(server.ts.stats().index.pages).toBe(2);
    expect(await c.call('SET', 'empty', '')).toEqual({ kind: 'simple', value: 'OK' });
    expect(await c.call('GET', 'empty')).toEqual({ kind: 'bulk', value: new Uint8Array(0) });
    expect(await c.call('GET', 'nope')).toEqual({ kind: 'bulk', value: null });
    // The native engine (the default; TIERSYNC_RESP_ENGINE=node runs this suite on the Node engine) landed the plain SETs itself.
    expect(server.resp!.engine).toBe(process.env.TIERSYNC_RESP_ENGINE === 'node' ? 'node' : 'native');
    if (server.resp!.engine === 'native') expect(server.resp!.nativeStats()!.landedSets).toBeGreaterThanOrEqual(2);
  });

  it('answers MGET, MSET, EXISTS, DEL, SET NX/XX/EX, TTL', async () => {
    expect(await c.call('MSET', 'a', 'alpha', 'b', pattern(3 * PAGE, 3), 'c', 'gamma')).toEqual({ kind: 'simple', value: 'OK' });
    const m = await c.call('MGET', 'a', 'missing', 'b', 'c');
    expect(m.kind === 'array' && m.value!.map(bulk)).toEqual([Buffer.from('alpha'), null, pattern(3 * PAGE, 3), Buffer.from('gamma')]);
    expect(await c.call('EXISTS', 'a', 'b', 'missing', 'a')).toEqual({ kind: 'integer', value: 3 });
    expect(await c.call('SET', 'a', 'x', 'NX')).toEqual({ kind: 'bulk', value: null });
    expect(await c.call('SET', 'zz', 'x', 'XX')).toEqual({ kind: 'bulk', value: null });
    expect(await c.call('SET', 'a', 'new', 'XX', 'EX', '100')).toEqual({ kind: 'simple', value: 'OK' });
    expect(await c.call('TTL', 'a')).toEqual({ kind: 'integer', value: 100 });
    expect(await c.call('SET', 'short', 'v', 'PX', '30')).toEqual({ kind: 'simple', value: 'OK' });
    await new Promise((r) => setTimeout(r, 60));
    expect(await c.call('GET', 'short')).toEqual({ kind: 'bulk', value: null });
    expect(await c.call('DEL', 'a', 'b', 'missing')).toEqual({ kind: 'integer', value: 2 });
    expect(await c.call('EXISTS', 'a', 'b')).toEqual({ kind: 'integer', value: 0 });
    expect(await c.call('SET', 'a', 'v', 'EX', 'soon')).toEqual({ kind: 'error', value: 'ERR value is not an integer or out of range' });
    expect(await c.call('SET', 'a', 'v', 'BOGUS')).toEqual({ kind: 'error', value: 'ERR syntax error' });
  });

  it('SCAN walks every key once, with MATCH and COUNT', async () => {
    await c.call('FLUSHDB');
    for (let i = 0; i < 45; i++) await c.call('SET', `scan:${i}`, String(i));
    await c.call('SET', 'other', '1');
    const seen: string[] = [];
    let cursor = '0';
    let rounds = 0;
    do {
      const r = await c.call('SCAN', cursor, 'MATCH', 'scan:*', 'COUNT', '7');
      const [next, keys] = str(r) as [string, string[]];
      cursor = next;
      seen.push(...keys);
      rounds++;
    } while (cursor !== '0' && rounds < 100);
    expect(seen.sort()).toEqual(Array.from({ length: 45 }, (_, i) => `scan:${i}`).sort());
    expect(await c.call('DBSIZE')).toEqual({ kind: 'integer', value: 46 });
  });

  it('answers what redis-cli and redis-benchmark send on connect, and refuses the rest like Redis', async () => {
    const hello = await c.call('HELLO', '2');
    expect(hello.kind).toBe('array');
    expect(str(hello)).toContain('proto');
    expect(await c.call('HELLO', '4')).toEqual({ kind: 'error', value: 'NOPROTO unsupported protocol version' });
    expect(str(await c.call('CONFIG', 'GET', 'save'))).toEqual(['save', '']);
    expect(str(await c.call('CONFIG', 'GET', 'appendonly'))).toEqual(['appendonly', 'no']);
    expect((await c.call('COMMAND', 'COUNT')).kind).toBe('integer');
    expect((await c.call('COMMAND', 'DOCS')).kind).toBe('array');
    expect(String(str(await c.call('INFO', 'server')))).toMatch(/redis_version:/);
    expect(await c.call('SELECT', '0')).toEqual({ kind: 'simple', value: 'OK' });
    expect(await c.call('FOO', 'x')).toEqual({ kind: 'error', value: "ERR unknown command 'FOO', with args beginning with: 'x' " });
    expect(await c.call('GET')).toEqual({ kind: 'error', value: "ERR wrong number of arguments for 'get' command" });
    expect(await c.call('AUTH', 'pw')).toMatchObject({ kind: 'error', value: expect.stringMatching(/without any password configured/) });
  });

  it('speaks RESP3 after HELLO 3 as Redis 7 does, and RESP2 again after HELLO 2', async () => {
    const r3 = await Client.connect(server.respPort);
    const h = await r3.call('HELLO', '3', 'SETNAME', 'engine-1');
    // redis-server 7.0 answers HELLO 3 with a map of these 7 entries, in this order.
    expect(h.kind).toBe('map');
    const entries = h.kind === 'map' ? h.value : [];
    expect(entries.map(([k]) => str(k))).toEqual(['server', 'version', 'proto', 'id', 'mode', 'role', 'modules']);
    const field = (name: string) => entries.find(([k]) => str(k) === name)![1];
    expect(field('proto')).toEqual({ kind: 'integer', value: 3 });
    expect(str(field('server'))).toBe('redis');
    expect(str(field('version'))).toMatch(/^7\./);
    expect(field('modules')).toEqual({ kind: 'array', value: [] });
    expect(await r3.call('GET', 'r3:none')).toEqual({ kind: 'null', value: null });
    expect(await r3.call('SET', 'r3:k', 'v1')).toEqual({ kind: 'simple', value: 'OK' });
    expect(await r3.call('SET', 'r3:k', 'v2', 'NX')).toEqual({ kind: 'null', value: null });
    expect(await r3.call('MGET', 'r3:k', 'r3:none')).toEqual({ kind: 'array', value: [{ kind: 'bulk', value: Buffer.from('v1') }, { kind: 'null', value: null }] });
    expect(await r3.call('SET', 'r3:k', 'v3', 'GET')).toEqual({ kind: 'bulk', value: Buffer.from('v1') });
    expect(await r3.call('EXISTS', 'r3:k', 'r3:none')).toEqual({ kind: 'integer', value: 1 });
    expect(await r3.call('CONFIG', 'GET', 'proto-max-bulk-len')).toEqual({ kind: 'map', value: [[{ kind: 'bulk', value: Buffer.from('proto-max-bulk-len') }, { kind: 'bulk', value: Buffer.from(String(1 << 20)) }]] });
    const info = await r3.call('INFO', 'server');
    expect(info).toMatchObject({ kind: 'verbatim', format: 'txt', value: expect.stringMatching(/redis_version:7/) });
    expect(str(await r3.call('CLIENT', 'GETNAME'))).toBe('engine-1');
    expect(await r3.call('CLIENT', 'INFO')).toMatchObject({ kind: 'verbatim', format: 'txt', value: expect.stringMatching(/name=engine-1 .*resp=3/) });
    const cmd = await r3.call('COMMAND', 'INFO', 'get', 'nosuch');
    expect(cmd.kind === 'array' && cmd.value![0]!.kind === 'array' && cmd.value![0]!.value![2]).toEqual({ kind: 'set', value: [{ kind: 'simple', value: 'readonly' }, { kind: 'simple', value: 'fast' }] });
    expect(cmd.kind === 'array' && cmd.value![1]).toEqual({ kind: 'null', value: null });
    expect(await r3.call('COMMAND', 'DOCS')).toEqual({ kind: 'map', value: [] });
    expect((await r3.call('SCAN', '0', 'MATCH', 'r3:*')).kind).toBe('array');
    // Refusals, with Redis 7's words; a refused HELLO leaves the protocol as it was.
    expect(await r3.call('HELLO', '3', 'SETNAME', 'a b')).toEqual({ kind: 'error', value: 'ERR Client names cannot contain spaces, newlines or special characters.' });
    expect(await r3.call('HELLO', '3', 'AUTH', 'default')).toEqual({ kind: 'error', value: "ERR Syntax error in HELLO option 'AUTH'" });
    expect(await r3.call('HELLO', 'x')).toEqual({ kind: 'error', value: 'ERR Protocol version is not an integer or out of range' });
    expect(await r3.call('HELLO', '1')).toEqual({ kind: 'error', value: 'NOPROTO unsupported protocol version' });
    // Without AUTH configured, the default user takes any password (Redis's nopass default user).
    expect((await r3.call('HELLO', '3', 'AUTH', 'default', 'anything')).kind).toBe('map');
    // HELLO without a version keeps the protocol; HELLO 2 goes back to RESP2.
    expect((await r3.call('HELLO')).kind).toBe('map');
    const h2 = await r3.call('HELLO', '2');
    expect(h2.kind === 'array' && h2.value!.length).toBe(14);
    expect(await r3.call('GET', 'r3:none')).toEqual({ kind: 'bulk', value: null });
    expect(await r3.call('CONFIG', 'GET', 'maxclients')).toEqual({ kind: 'array', value: [{ kind: 'bulk', value: Buffer.from('maxclients') }, { kind: 'bulk', value: Buffer.from('1024') }] });
    r3.close();
  });

  it('works with redis-cli in RESP3 mode (-3)', async () => {
    requireTools(['redis-cli']);
    const cli = (...args: string[]) => run('redis-cli', ['-3', '-p', String(server.respPort), ...args], { timeout: 10_000 }).then((r) => r.stdout.trim());
    expect(await cli('SET', 'cli3:k', 'resp three')).toBe('OK');
    expect(await cli('GET', 'cli3:k')).toBe('resp three');
    expect(await cli('KEYS', 'cli3:*')).toBe('cli3:k');
    // redis-cli prints a map's entries as 'key value' lines.
    expect(await cli('CONFIG', 'GET', 'appendonly')).toBe('appendonly no');
    expect(await cli('INFO', 'keyspace')).toMatch(/db0:keys=/);
    expect(await cli('DEL', 'cli3:k')).toBe('1');
  });

  it('runs pipelined commands in order, whatever the split of the bytes', async () => {
    const cmds: Buffer[] = [];
    for (let i = 0; i < 60; i++) cmds.push(encodeCommand(['SET', `p${i}`, pattern(i * 500, i)]), encodeCommand(['GET', `p${i}`]));
    cmds.push(Buffer.from('PING\r\n'));
    const all = Buffer.concat(cmds);
    for (let at = 0; at < all.length; ) {
      const n = 1 + Math.floor(Math.random() * 3000);
      c.socket.write(all.subarray(at, at + n));
      at += n;
    }
    for (let i = 0; i < 60; i++) {
      expect(await c.reply()).toEqual({ kind: 'simple', value: 'OK' });
      expect(bulk(await c.reply())).toEqual(pattern(i * 500, i));
    }
    expect(await c.reply()).toEqual({ kind: 'simple', value: 'PONG' });
  });

  it('answers everything a client sent before ending its side, then closes', async () => {
    const s = net.connect(server.respPort, '127.0.0.1');
    const chunks: Buffer[] = [];
    s.on('data', (d) => chunks.push(d));
    s.end('SET piped "a b"\r\nGET piped\r\nPING\r\n');
    await new Promise((r) => s.once('close', r));
    expect(Buffer.concat(chunks).toString()).toBe('+OK\r\n$3\r\na b\r\n+PONG\r\n');
  });

  it('closes a client on a protocol error or an exceeded bound, and keeps serving others', async () => {
    const bad = await Client.connect(server.respPort);
    bad.socket.write('*1\r\n:5\r\n');
    expect(await bad.reply()).toEqual({ kind: 'error', value: "ERR Protocol error: expected '$', got ':'" });
    expect(await bad.closedWithin(2000)).toBe(true);
    const big = await Client.connect(server.respPort);
    big.socket.write(`*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$${(1 << 20) + 1}\r\n`);
    expect(await big.reply()).toMatchObject({ kind: 'error', value: expect.stringMatching(/bulk length 1048577 over the limit/) });
    expect(await big.closedWithin(2000)).toBe(true);
    // A client that starts a command and stalls is closed at the request deadline (2 s here); staging is freed.
    const slow = await Client.connect(server.respPort);
    slow.socket.write(`*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000\r\nabc`);
    expect(await slow.closedWithin(6000)).toBe(true);
    expect(server.resp!.staging.usedBytes).toBe(0);
    expect(await c.call('PING')).toEqual({ kind: 'simple', value: 'PONG' });
    expect(server.resp!.stats().protocolErrors).toBeGreaterThanOrEqual(2);
  });

  it('works with the real redis-cli', async () => {
    requireTools(['redis-cli']);
    const cli = (...args: string[]) => run('redis-cli', ['-p', String(server.respPort), ...args], { timeout: 10_000 }).then((r) => r.stdout.trim());
    expect(await cli('SET', 'cli:one', 'hello world')).toBe('OK');
    expect(await cli('SET', 'cli:two', 'second')).toBe('OK');
    expect(await cli('GET', 'cli:one')).toBe('hello world');
    expect((await cli('MGET', 'cli:one', 'cli:none', 'cli:two')).split('\n')).toEqual(['hello world', '', 'second']);
    expect((await cli('--scan', '--pattern', 'cli:*')).split('\n').sort()).toEqual(['cli:one', 'cli:two']);
    expect(await cli('DEL', 'cli:one', 'cli:two')).toBe('2');
    expect(await cli('EXISTS', 'cli:one')).toBe('0');
    // A value larger than a page, from a file through -x (stdin as the last argument).
    const value = pattern(3 * PAGE + 5, 9).toString('base64');
    const put = spawn('redis-cli', ['-p', String(server.respPort), '-x', 'SET', 'cli:big']);
    put.stdin.end(value);
    await new Promise((r) => put.once('exit', r));
    expect(await cli('GET', 'cli:big')).toBe(value);
    expect(await cli('INFO', 'keyspace')).toMatch(/db0:keys=/);
  });

  it('serves a short redis-benchmark run with no errors', async () => {
    requireTools(['redis-benchmark']);
    const r = await run('redis-benchmark', ['-p', String(server.respPort), '-t', 'set,get,mset', '-n', '600', '-c', '8', '-d', String(2 * PAGE + 100), '-r', '50', '--csv'], { timeout: 120_000 });
    const rows = r.stdout.trim().split('\n');
    expect(rows[0]).toMatch(/^"test","rps"/);
    expect(rows.slice(1).map((l) => l.split(',')[0])).toEqual(['"SET"', '"GET"', '"MSET (10 keys)"']);
    expect(r.stderr).not.toMatch(/error/i);
    expect(r.stdout).not.toMatch(/error/i);
    // Every GET found a whole value of the size SET wrote.
    const check = await Client.connect(server.respPort);
    const keys = str(await check.call('SCAN', '0', 'MATCH', 'key:*', 'COUNT', '1000')) as [string, string[]];
    expect(keys[1].length).toBeGreaterThan(0);
    for (const k of keys[1].slice(0, 5)) expect((await check.call('STRLEN', k)).value).toBe(2 * PAGE + 100);
    check.close();
  });
});

describe('RESP door with tenants', () => {
  let dir: string;
  let server: TierSyncServer;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-auth-'));
    process.env.TIERSYNC_TEST_BOB_PW = 'bob-secret';
    server = await TierSyncServer.start(parseServerConfig(config(dir, { password: 'main-secret', tenants: { alice: 'alice-secret', bob: 'env:TIERSYNC_TEST_BOB_PW' } })));
  });
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('requires AUTH and refuses wrong passwords', async () => {
    const c = await Client.connect(server.respPort);
    expect(await c.call('GET', 'k')).toEqual({ kind: 'error', value: 'NOAUTH Authentication required.' });
    expect(await c.call('AUTH', 'alice', 'wrong')).toEqual({ kind: 'error', value: 'WRONGPASS invalid username-password pair or user is disabled.' });
    expect(await c.call('AUTH', 'mallory', 'alice-secret')).toEqual({ kind: 'error', value: 'WRONGPASS invalid username-password pair or user is disabled.' });
    // Before AUTH, requests are small (Redis 7 bounds them the same way): a large bulk closes the client.
    c.socket.write(`*2\r\n$4\r\nAUTH\r\n$100000\r\n`);
    expect(await c.reply()).toMatchObject({ kind: 'error', value: expect.stringMatching(/over the limit of 16384/) });
    expect(await c.closedWithin(2000)).toBe(true);
    expect(server.resp!.stats().authFailures).toBe(2);
  });

  it("keeps tenants' key spaces apart: a tenant that knows another's key gets nothing", async () => {
    const alice = await Client.connect(server.respPort);
    const bob = await Client.connect(server.respPort);
    const main = await Client.connect(server.respPort);
    expect(await alice.call('AUTH', 'alice', 'alice-secret')).toEqual({ kind: 'simple', value: 'OK' });
    expect(str(await bob.call('HELLO', '2', 'AUTH', 'bob', 'bob-secret'))).toContain('proto');
    expect(await main.call('AUTH', 'main-secret')).toEqual({ kind: 'simple', value: 'OK' });
    expect(await alice.call('SET', 'session:42', 'alice-kv')).toEqual({ kind: 'simple', value: 'OK' });
    expect(await bob.call('GET', 'session:42')).toEqual({ kind: 'bulk', value: null });
    expect(await main.call('GET', 'session:42')).toEqual({ kind: 'bulk', value: null });
    expect(await bob.call('EXISTS', 'session:42')).toEqual({ kind: 'integer', value: 0 });
    expect(str(await bob.call('SCAN', '0'))).toEqual(['0', []]);
    expect(await bob.call('DEL', 'session:42')).toEqual({ kind: 'integer', value: 0 });
    expect(await bob.call('SET', 'session:42', 'bob-kv')).toEqual({ kind: 'simple', value: 'OK' });
    expect(await bob.call('FLUSHALL')).toEqual({ kind: 'simple', value: 'OK' });
    expect(bulk(await alice.call('GET', 'session:42'))).toEqual(Buffer.from('alice-kv'));
    for (const x of [alice, bob, main]) x.close();
  });

  it('works with redis-cli and redis-benchmark given the password', async () => {
    requireTools(['redis-cli', 'redis-benchmark']);
    const r = await run('redis-cli', ['-p', String(server.respPort), '--user', 'alice', '--pass', 'alice-secret', '--no-auth-warning', 'GET', 'session:42'], { timeout: 10_000 });
    expect(r.stdout.trim()).toBe('alice-kv');
    const b = await run('redis-benchmark', ['-p', String(server.respPort), '-a', 'main-secret', '-t', 'set,get', '-n', '500', '-c', '4', '-d', '300', '--csv'], { timeout: 60_000 });
    expect(b.stdout.trim().split('\n').slice(1).map((l) => l.split(',')[0])).toEqual(['"SET"', '"GET"']);
    expect(b.stdout + b.stderr).not.toMatch(/error/i);
  });

  it('refuses to listen off loopback without a password', () => {
    expect(() => parseServerConfig(config(dir, { host: '0.0.0.0' }))).toThrow(/resp.host: '0.0.0.0' is not loopback; set resp.password/);
    expect(() => parseServerConfig(config(dir, { valueWindowBytes: 8 << 20 }))).toThrow(/resp.valueWindowBytes: 8388608 is more than half of resp.stagingBytes/);
  });
});

describe.each(['native', 'node'] as const)('RESP door with maxClients (%s engine)', (engine) => {
  it('refuses a client past the bound before answering anything it sent, and takes one again once a client leaves', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-max-'));
    const server = await TierSyncServer.start(parseServerConfig(config(dir, { maxClients: 2, engine })));
    const clients: Client[] = [];
    try {
      const a = await Client.connect(server.respPort);
      const b = await Client.connect(server.respPort);
      clients.push(a, b);
      expect(str(await a.call('SET', 'k', 'value'))).toBe('OK');
      expect(str(await b.call('GET', 'k'))).toBe('value');
      // The third sends its GET with the connect: the refusal is the only answer it gets (the native engine
      // answers GETs of a new client on its own thread, so it must refuse before reading).
      const c = await Client.connect(server.respPort);
      clients.push(c);
      c.socket.write(encodeCommand(['GET', 'k']));
      const refused = await c.reply();
      expect(refused).toEqual({ kind: 'error', value: 'ERR max number of clients reached' });
      expect(await c.closedWithin(2000)).toBe(true);
      await expect(c.reply(100)).rejects.toThrow(/connection closed/);
      const stats = server.resp!.stats();
      expect(stats.rejectedConnections).toBe(1);
      expect(stats.connectionsTotal).toBe(3);
      expect(str(await a.call('INFO', 'stats'))).toMatch(/rejected_connections:1\r\n/);
      b.close();
      expect(await settle(() => server.resp!.stats().clients, 1)).toBe(1);
      const d = await Client.connect(server.respPort);
      clients.push(d);
      expect(str(await d.call('GET', 'k'))).toBe('value');
    } finally {
      for (const c of clients) c.close();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('RESP door under eviction', () => {
  it('never serves a value whose pages were evicted: the key is gone instead', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-evict-'));
    const server = await TierSyncServer.start(parseServerConfig(config(dir, {}, [{ url: `host://?capacity=${16 * PAGE}`, name: 'host' }])));
    try {
      const c = await Client.connect(server.respPort);
      for (let i = 0; i < 12; i++) expect(await c.call('SET', `v${i}`, pattern(3 * PAGE, i))).toEqual({ kind: 'simple', value: 'OK' });
      let present = 0;
      for (let i = 0; i < 12; i++) {
        const v = bulk(await c.call('GET', `v${i}`));
        if (v === null) continue;
        expect(v).toEqual(pattern(3 * PAGE, i));
        present++;
      }
      expect(present).toBeGreaterThan(0);
      expect(present).toBeLessThan(12);
      expect((await c.call('EXISTS', ...Array.from({ length: 12 }, (_, i) => `v${i}`))).value).toBe(present);
      c.close();
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('RESP door while a lower tier cannot be read', () => {
  it('answers an error and keeps the key when a tier holding its pages fails a read; the GET works once it is back', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-outage-'));
    const fs = encodeURIComponent(`fs://${dir}/fs?capacity=${4096 * PAGE}`);
    const server = await TierSyncServer.start(parseServerConfig(config(dir, {}, [
      { url: `host://?capacity=${16 * PAGE}`, name: 'host' },
      { url: `fault://?inner=${fs}`, name: 'fs' },
    ])));
    try {
      const c = await Client.connect(server.respPort);
      const n = 12;
      for (let i = 0; i < n; i++) expect(await c.call('SET', `v${i}`, pattern(3 * PAGE, i))).toEqual({ kind: 'simple', value: 'OK' });
      await settled(server);
      // Every lower-tier read fails now (a peer or bucket down): values only there cannot be read, but are not gone.
      (server.ts.tierDriver('fs') as FaultTier).inject({ readErrors: 1 });
      let failed = 0;
      for (let i = 0; i < n; i++) {
        const r = await c.call('GET', `v${i}`);
        if (r.kind === 'error') {
          expect(String(r.value)).toMatch(/could not be read now.*the key is kept/);
          failed++;
        } else expect(bulk(r)).toEqual(pattern(3 * PAGE, i));
      }
      expect(failed).toBeGreaterThan(0);
      expect((await c.call('EXISTS', ...Array.from({ length: n }, (_, i) => `v${i}`))).value).toBe(n);
      (server.ts.tierDriver('fs') as FaultTier).inject({ readErrors: 0 });
      for (let i = 0; i < n; i++) expect(bulk(await c.call('GET', `v${i}`))).toEqual(pattern(3 * PAGE, i));
      c.close();
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('RESP door GETs count for eviction', () => {
  // One host tier of 16 one-page slots, lru, evicting only what a store needs: the first victim is the page used least
  // recently. Values are half a page, so each is one page.
  const tiers = [{ url: `host://?capacity=${16 * PAGE}`, name: 'host', policy: 'lru', highWatermark: 1, lowWatermark: 1 }];
  for (const engine of ['node', 'native'] as const) {
    it(`${engine} engine: a key read only by GETs survives eviction; an unread key of the same age is evicted first`, async () => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-hits-'));
      const server = await TierSyncServer.start(parseServerConfig(config(dir, { engine }, tiers)));
      try {
        const door = server.resp!;
        expect(door.engine).toBe(engine);
        const slots = (door.store as TierSyncPageStore).slots!;
        const c = await Client.connect(server.respPort);
        const set = async (key: string, seed: number) => expect(await c.call('SET', key, pattern(PAGE / 2, seed))).toEqual({ kind: 'simple', value: 'OK' });
        const exists = async (key: string) => (await c.call('EXISTS', key)).value;
        // Same age: a and b, then younger values, all recorded by the index before any GET (a GET of a page the
        // index has yet to record is not counted).
        await set('a', 1);
        await set('b', 2);
        for (let i = 0; i < 8; i++) await set(`young${i}`, 10 + i);
        await slots.recorded();
        const native = door.nativeStats()?.nativeGets ?? 0;
        for (let i = 0; i < 3; i++) expect(bulk(await c.call('GET', 'a'))).toEqual(pattern(PAGE / 2, 1));
        if (engine === 'native') expect(door.nativeStats()!.nativeGets - native).toBe(3);
        await door.recordAccesses();
        // Pressure now: stores until the first eviction takes b (the least recently used) or a.
        for (let i = 0; i < 32 && (await exists('b')) === 1 && (await exists('a')) === 1; i++) {
          await set(`later${i}`, 100 + i);
          await slots.recorded();
        }
        expect(await exists('b')).toBe(0);
        expect(await exists('a')).toBe(1);
        expect(bulk(await c.call('GET', 'a'))).toEqual(pattern(PAGE / 2, 1));
        expect(door.stats().unrecordedReads).toBe(0);
        if (engine === 'native') expect(door.nativeStats()!.unrecordedGets).toBe(0);
        c.close();
      } finally {
        await server.close();
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});

describe('RESP door and a client that never reads', () => {
  it('stops reading its commands, bounds what it holds, and closes it at the deadline', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-slow-'));
    const server = await TierSyncServer.start(parseServerConfig(config(dir, { maxOutputBytes: 64 * 1024, requestTimeoutMs: 1500 })));
    try {
      const c = await Client.connect(server.respPort);
      const value = pattern(64 * 1024, 5);
      expect(await c.call('SET', 'v', value)).toEqual({ kind: 'simple', value: 'OK' });
      // 2,000 GETs of 64 KiB (128 MiB of replies) sent at once; the client reads none of them.
      c.socket.pause();
      c.socket.write(Buffer.concat(Array.from({ length: 2000 }, () => encodeCommand(['GET', 'v']))));
      let maxStaging = 0;
      const until = Date.now() + 8000;
      while (!c.closed && Date.now() < until) {
        maxStaging = Math.max(maxStaging, server.resp!.staging.usedBytes);
        // The client's socket is paused: the server sees it close only when the client reads; peek at the door.
        if (server.resp!.clients === 0) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(server.resp!.clients).toBe(0);
      // Replies waiting for the client hold at most maxOutputBytes plus one reply of staging memory.
      expect(maxStaging).toBeLessThanOrEqual(64 * 1024 + value.length + 4096);
      expect(await settle(() => server.resp!.staging.usedBytes, 0)).toBe(0);
      c.close();
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('RESP door with values larger than its staging area', () => {
  // 4 MiB of staging, 512 KiB windows: a 20 MiB value is 5x the staging area and must stream through it.
  const WINDOW = 512 * 1024;
  const BIG = 20 * 1024 * 1024 + 12345;
  let dir: string;
  let server: TierSyncServer;
  let maxStaging = 0;
  let sampler: NodeJS.Timeout;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-stream-'));
    const tiers = [
      { url: `host://?capacity=${8192 * PAGE}`, name: 'host' },
      { url: `fs://${dir}/fs?capacity=${32768 * PAGE}`, name: 'fs' },
    ];
    server = await TierSyncServer.start(parseServerConfig(config(dir, { stagingBytes: 4 << 20, valueWindowBytes: WINDOW, maxBulkBytes: 64 << 20, requestTimeoutMs: 3000 }, tiers)));
    sampler = setInterval(() => {
      maxStaging = Math.max(maxStaging, server.resp!.staging.usedBytes);
    }, 1);
  });
  afterAll(async () => {
    clearInterval(sampler);
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('SETs and GETs a value 5x the staging area byte-exact, holding at most two windows of staging', async () => {
    const c = await Client.connect(server.respPort);
    const big = pattern(BIG, 11);
    maxStaging = 0;
    expect(await c.call('SET', 'big', big)).toEqual({ kind: 'simple', value: 'OK' });
    expect(await c.call('STRLEN', 'big')).toEqual({ kind: 'integer', value: BIG });
    c.socket.write(encodeCommand(['GET', 'big']));
    const v = await c.reply(20_000);
    expect(bulk(v)!.equals(big)).toBe(true);
    // The first tier is a host tier: the value is received into its slots and sent from them, through no staging
    // at all (through staging, one window filling + one being written, or one being loaded + one being sent).
    expect(maxStaging).toBeLessThanOrEqual(2 * WINDOW);
    expect(await settle(() => server.resp!.staging.usedBytes, 0)).toBe(0);
    c.close();
  });

  it('mixes streamed and whole values in MGET and SET ... GET, in RESP2 and RESP3', async () => {
    const c = await Client.connect(server.respPort);
    const big = pattern(3 * WINDOW + 7, 12);
    const big2 = pattern(5 * WINDOW - 3, 13);
    // Large buffers are compared with Buffer.equals (a deep toEqual walks them byte by byte, slowly).
    const same = (v: RespValue | undefined, want: Buffer) => v?.kind === 'bulk' && v.value !== null && Buffer.from(v.value).equals(want);
    expect(await c.call('MSET', 'm:big', big, 'm:small', 'tiny')).toEqual({ kind: 'simple', value: 'OK' });
    const m = await c.call('MGET', 'm:small', 'm:big', 'm:none', 'm:big');
    const items = m.kind === 'array' ? m.value! : [];
    expect(items.length).toBe(4);
    expect(same(items[0], Buffer.from('tiny'))).toBe(true);
    expect(same(items[1], big)).toBe(true);
    expect(items[2]).toEqual({ kind: 'bulk', value: null });
    expect(same(items[3], big)).toBe(true);
    // SET ... GET answers the old value (streamed) after the new one is in place.
    expect(same(await c.call('SET', 'm:big', big2, 'GET'), big)).toBe(true);
    expect((await c.call('HELLO', '3')).kind).toBe('map');
    expect(same(await c.call('GET', 'm:big'), big2)).toBe(true);
    const m3 = await c.call('MGET', 'm:big', 'm:none');
    const items3 = m3.kind === 'array' ? m3.value! : [];
    expect(same(items3[0], big2)).toBe(true);
    expect(items3[1]).toEqual({ kind: 'null', value: null });
    c.close();
  });

  it('drops a value whose client leaves mid-upload: staging freed, its pages deleted', async () => {
    // The earlier tests' last pages reach the index after the recorder's delay: counted before, not during, this one.
    await settled(server);
    const before = server.ts.stats().index.pages;
    const c = await Client.connect(server.respPort);
    c.socket.write(`*3\r\n$3\r\nSET\r\n$4\r\ngone\r\n$${BIG}\r\n`);
    c.socket.write(pattern(6 * WINDOW + 100, 14));
    await new Promise((r) => setTimeout(r, 300));
    c.close();
    const until = Date.now() + 5000;
    while (Date.now() < until && (server.resp!.staging.usedBytes > 0 || server.ts.stats().index.pages !== before)) {
      await new Promise((r) => setTimeout(r, 50));
      await server.ts.flush();
    }
    expect(server.resp!.staging.usedBytes).toBe(0);
    expect(server.ts.stats().index.pages).toBe(before);
    const check = await Client.connect(server.respPort);
    expect(await check.call('EXISTS', 'gone')).toEqual({ kind: 'integer', value: 0 });
    check.close();
  });

  it('refuses a value over maxBulkBytes and closes the client, as Redis does', async () => {
    const c = await Client.connect(server.respPort);
    c.socket.write(`*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$${(64 << 20) + 1}\r\n`);
    expect(await c.reply()).toMatchObject({ kind: 'error', value: expect.stringMatching(/bulk length 67108865 over the limit of 67108864/) });
    expect(await c.closedWithin(2000)).toBe(true);
  });

  it('closes a client that does not read a streamed GET, and frees its staging', async () => {
    const c = await Client.connect(server.respPort);
    expect(await c.call('SET', 'slow', pattern(BIG, 15))).toEqual({ kind: 'simple', value: 'OK' });
    c.socket.pause();
    c.socket.write(encodeCommand(['GET', 'slow']));
    const until = Date.now() + 15_000;
    while (server.resp!.clients > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    expect(server.resp!.clients).toBe(0);
    expect(await settle(() => server.resp!.staging.usedBytes, 0)).toBe(0);
    c.close();
  });
});

describe('RESP door with a durable catalog', () => {
  it('rebuilds its keys from the manifests after a restart: latest values exact, deleted keys gone, TTLs kept', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-durable-'));
    const shm = `/dev/shm/tiersync-resp-durable-${process.pid}`;
    const tiers = [{ url: `host://?capacity=${256 * PAGE}&shm=${shm}`, name: 'host' }];
    const start = () => TierSyncServer.start(parseServerConfig(config(dir, { catalog: 'durable' }, tiers)));
    try {
      let server = await start();
      let c = await Client.connect(server.respPort);
      const big = pattern(5 * PAGE + 17, 21);
      expect(await c.call('SET', 'big', big)).toEqual({ kind: 'simple', value: 'OK' });
      expect(await c.call('SET', 'over', pattern(2 * PAGE, 1))).toEqual({ kind: 'simple', value: 'OK' });
      expect(await c.call('SET', 'over', pattern(PAGE + 5, 2))).toEqual({ kind: 'simple', value: 'OK' });
      expect(await c.call('SET', 'gone', 'x')).toEqual({ kind: 'simple', value: 'OK' });
      expect(await c.call('DEL', 'gone')).toEqual({ kind: 'integer', value: 1 });
      expect(await c.call('SET', 'ttl', 'y', 'EX', '1000')).toEqual({ kind: 'simple', value: 'OK' });
      expect(await c.call('SET', 'empty', '')).toEqual({ kind: 'simple', value: 'OK' });
      expect(await c.call('MSET', 'm1', pattern(100, 3), 'm2', pattern(3 * PAGE, 4))).toEqual({ kind: 'simple', value: 'OK' });
      c.close();
      await server.close();

      server = await start();
      try {
        expect(server.resp!.counters.recoveredKeys).toBe(6);
        c = await Client.connect(server.respPort);
        expect(bulk(await c.call('GET', 'big'))).toEqual(big);
        expect(bulk(await c.call('GET', 'over'))).toEqual(pattern(PAGE + 5, 2));
        expect(bulk(await c.call('GET', 'gone'))).toBeNull();
        expect(await c.call('GET', 'empty')).toEqual({ kind: 'bulk', value: new Uint8Array(0) });
        expect(bulk(await c.call('GET', 'm2'))).toEqual(pattern(3 * PAGE, 4));
        const ttl = (await c.call('TTL', 'ttl')).value as number;
        expect(ttl).toBeGreaterThan(990);
        expect(ttl).toBeLessThanOrEqual(1000);
        // New SETs after a restart take later generations: the restart after this one keeps them, not the old ones.
        expect(await c.call('SET', 'over', pattern(7, 9))).toEqual({ kind: 'simple', value: 'OK' });
        c.close();
      } finally {
        await server.close();
      }
      server = await start();
      try {
        c = await Client.connect(server.respPort);
        expect(bulk(await c.call('GET', 'over'))).toEqual(pattern(7, 9));
        expect(await c.call('DBSIZE')).toEqual({ kind: 'integer', value: 6 });
        c.close();
        // Old generations' manifests and pages were deleted: one manifest per key, pages only of live values.
        await new Promise((r) => setTimeout(r, 100));
        await settled(server);
        expect(server.ts.stats().index.pages).toBe(6 + 1 + 1 + 0 + 1 + 3 + 6);
      } finally {
        await server.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(shm, { force: true });
    }
  }, 60_000);

  it('a DEL whose manifest a lower tier cannot delete now fails instead of coming back after a restart; the retry deletes it', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-durable-del-'));
    const shm = `/dev/shm/tiersync-resp-durable-del-${process.pid}`;
    const fs = encodeURIComponent(`fs://${dir}/fs?capacity=${1024 * PAGE}`);
    const tiers = [
      { url: `host://?capacity=${256 * PAGE}&shm=${shm}`, name: 'host' },
      { url: `fault://?inner=${fs}`, name: 'fs', writeThrough: true },
    ];
    const start = () => TierSyncServer.start(parseServerConfig(config(dir, { catalog: 'durable' }, tiers as ServerConfig['tiers'])));
    try {
      let server = await start();
      let c = await Client.connect(server.respPort);
      for (const k of ['a', 'b']) expect(await c.call('SET', k, pattern(PAGE + 3, k.charCodeAt(0)))).toEqual({ kind: 'simple', value: 'OK' });
      await settled(server);
      const fault = server.ts.tierDriver('fs') as FaultTier;
      // Until the write-through copies of the manifests landed on fs (a key survives only once they have).
      const onFs = () => server.ts.stats().tiers.find((t) => t.name === 'fs')!.pages;
      expect(await settle(() => onFs() === 6, true, 10_000)).toBe(true);
      fault.inject({ deleteErrors: 1 });
      const del = await c.call('DEL', 'a');
      expect(del.kind).toBe('error');
      expect(String(del.value)).toMatch(/manifests could not be deleted now/);
      expect(bulk(await c.call('GET', 'a'))).toBeNull();
      // The tier is back: the background retry deletes the manifest, so the restart does not bring 'a' back.
      fault.inject({ deleteErrors: 0 });
      // Left on fs: 'b' (two value pages, its manifest) and the value pages of 'a', which no manifest names now
      // (the restart deletes them).
      expect(await settle(() => onFs(), 5, 15_000)).toBe(5);
      c.close();
      await server.close();
      server = await start();
      try {
        c = await Client.connect(server.respPort);
        expect(bulk(await c.call('GET', 'a'))).toBeNull();
        expect(bulk(await c.call('GET', 'b'))).toEqual(pattern(PAGE + 3, 'b'.charCodeAt(0)));
        c.close();
      } finally {
        await server.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(shm, { force: true });
    }
  }, 60_000);

  it('refuses catalog durable without a persistent tier', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-durable-'));
    try {
      await expect(TierSyncServer.start(parseServerConfig(config(dir, { catalog: 'durable' }, [{ url: `host://?capacity=${64 * PAGE}`, name: 'host' }])))).rejects.toThrow(/resp.catalog: durable needs a persistent tier/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
