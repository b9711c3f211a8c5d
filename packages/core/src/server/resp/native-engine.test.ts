// The native RESP engine's own behaviour (resp.engine: native): what it lands itself, its ordering with commands it
// forwards, and what it gives back when a value does not complete. The whole door suite (door.test.ts and the
// test/ scenarios) also runs against it with TIERSYNC_RESP_ENGINE=native.
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseServerConfig, type ServerConfig } from '../config.js';
import { TierSyncServer } from '../server.js';
import { encodeCommand } from './encoder.js';
import type { TierSyncPageStore } from './page-store.js';
import { RESP_WAIT, RespParser, type RespValue } from './parser.js';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;

function config(resp: Record<string, unknown> = {}): ServerConfig {
  return {
    model: 'resp-native-test@1',
    layout,
    tiers: [{ url: `host://?capacity=${1024 * PAGE}`, name: 'host' }],
    http: { port: 0 },
    peer: { enabled: false },
    log: { level: 'silent' },
    resp: { port: 0, engine: 'native', catalog: 'memory', stagingBytes: 8 << 20, valueWindowBytes: 64 << 10, maxBulkBytes: 1 << 20, requestTimeoutMs: 1000, ...resp },
  } as ServerConfig;
}

/** A raw client: writes bytes, collects parsed replies, notes when the server closes. */
class Raw {
  readonly replies: RespValue[] = [];
  closed = false;
  readonly #parser = new RespParser({ mode: 'any', limits: { maxPendingBytes: 64 << 20 } });
  private constructor(readonly socket: net.Socket) {
    socket.on('data', (d) => {
      this.#parser.push(d);
      for (let v = this.#parser.next(); v !== undefined && v !== RESP_WAIT; v = this.#parser.next()) this.replies.push(v);
    });
    socket.on('close', () => (this.closed = true));
    socket.on('error', () => undefined);
  }
  static connect(port: number): Promise<Raw> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(new Raw(s)));
      s.once('error', reject);
    });
  }
  async until(pred: () => boolean, ms = 5000): Promise<void> {
    const end = Date.now() + ms;
    while (!pred()) {
      if (Date.now() > end) throw new Error(`timed out; replies so far: ${JSON.stringify(this.replies)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  async replies_(n: number): Promise<RespValue[]> {
    await this.until(() => this.replies.length >= n);
    return this.replies.splice(0, n);
  }
}

const text = (v: RespValue): unknown => (v.kind === 'bulk' ? (v.value ? Buffer.from(v.value).toString('latin1') : null) : v.value);

function pattern(n: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (i * 13 + seed) & 0xff;
  return b;
}

describe('RESP door, native engine', () => {
  let server: TierSyncServer;
  beforeAll(async () => {
    server = await TierSyncServer.start(parseServerConfig(config()));
  });
  afterAll(async () => {
    await server?.close();
  });

  it('lands plain SETs and keeps pipelined commands in order with the ones it forwards', async () => {
    expect(server.resp!.engine).toBe('native');
    const before = server.resp!.nativeStats()!.landedSets;
    const c = await Raw.connect(server.respPort);
    const big = pattern(3 * PAGE + 5, 7);
    const cmds = [
      ['SET', 'k', 'one'],
      ['GET', 'k'],
      ['SET', 'k', big],
      ['STRLEN', 'k'],
      ['set', 'k', 'two'],
      ['GET', 'k'],
      ['SET', 'k', 'three', 'XX'],
      ['GET', 'k'],
      ['DEL', 'k'],
      ['GET', 'k'],
      ['SET', 'k', 'four'],
      ['GET', 'k'],
    ];
    const bytes = Buffer.concat(cmds.map((a) => encodeCommand(a)));
    // Split at odd places: every landed value crosses reads.
    for (let at = 0; at < bytes.length; at += 777) c.socket.write(bytes.subarray(at, at + 777));
    const r = (await c.replies_(cmds.length)).map(text);
    expect(r).toEqual(['OK', 'one', 'OK', big.length, 'OK', 'two', 'OK', 'three', 1, null, 'OK', 'four']);
    // Plain three-argument SETs landed natively (SET ... XX went through JavaScript).
    expect(server.resp!.nativeStats()!.landedSets - before).toBe(4);
    c.socket.destroy();
  });

  it('answers a value not followed by CRLF with a protocol error, closes, and gives its slots back', async () => {
    const pool = server.resp!.nativeStats()!.pooledSlots;
    const c = await Raw.connect(server.respPort);
    c.socket.write('*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nabcXY');
    const [e] = await c.replies_(1);
    expect(e).toEqual({ kind: 'error', value: "ERR Protocol error: expected CRLF after a bulk string of 3 bytes, got 'X'" });
    await c.until(() => c.closed);
    expect(server.resp!.nativeStats()!.pooledSlots).toBe(pool);
  });

  it('keeps nothing of a value whose client leaves or stalls mid-upload', async () => {
    const pool = server.resp!.nativeStats()!.pooledSlots;
    const gone = await Raw.connect(server.respPort);
    gone.socket.write(`*3\r\n$3\r\nSET\r\n$4\r\ngone\r\n$${2 * PAGE}\r\n`);
    gone.socket.write(pattern(PAGE, 1));
    await new Promise((r) => setTimeout(r, 50));
    gone.socket.destroy();
    const stall = await Raw.connect(server.respPort);
    stall.socket.write(`*3\r\n$3\r\nSET\r\n$5\r\nstall\r\n$${2 * PAGE}\r\nabc`);
    const [e] = await stall.replies_(1);
    expect(e).toEqual({ kind: 'error', value: 'ERR a command took longer than 1000 ms to arrive' });
    await stall.until(() => stall.closed);
    const c = await Raw.connect(server.respPort);
    c.socket.write(Buffer.concat([encodeCommand(['EXISTS', 'gone', 'stall'])]));
    expect((await c.replies_(1)).map(text)).toEqual([0]);
    await c.until(() => server.resp!.nativeStats()!.pooledSlots === pool);
    c.socket.destroy();
  });

  it('answers many clients whose SETs land in the same batch of events, each its own replies, and QUIT after them', async () => {
    const before = server.resp!.nativeStats()!.landedSets;
    const clients = await Promise.all(Array.from({ length: 12 }, () => Raw.connect(server.respPort)));
    // Written together: the door thread lands several clients' SETs before the event loop takes the batch.
    clients.forEach((c, i) => c.socket.write(Buffer.concat([encodeCommand(['SET', `b${i}`, pattern(2 * PAGE + i, i)]), encodeCommand(['SET', `b${i}`, `v${i}`]), encodeCommand(['GET', `b${i}`]), encodeCommand(['QUIT'])])));
    for (const [i, c] of clients.entries()) {
      await c.until(() => c.closed);
      expect(c.replies.map(text)).toEqual(['OK', 'OK', `v${i}`, 'OK']);
    }
    expect(server.resp!.nativeStats()!.landedSets - before).toBe(24);
    // Every key holds its last value.
    const check = await Raw.connect(server.respPort);
    check.socket.write(encodeCommand(['EXISTS', ...clients.map((_, i) => `b${i}`)]));
    expect((await check.replies_(1)).map(text)).toEqual([12]);
    check.socket.destroy();
  });

  it('runs commands a client sent before closing its side, then closes', async () => {
    const c = await Raw.connect(server.respPort);
    c.socket.end(Buffer.concat([encodeCommand(['SET', 'h', 'half']), encodeCommand(['GET', 'h'])]));
    await c.until(() => c.closed);
    expect(c.replies.map(text)).toEqual(['OK', 'half']);
  });
});

describe('RESP door, native engine, with a password', () => {
  let server: TierSyncServer;
  beforeAll(async () => {
    server = await TierSyncServer.start(parseServerConfig(config({ password: 'pw' })));
  });
  afterAll(async () => {
    await server?.close();
  });

  it('lands nothing before AUTH; after AUTH SETs land', async () => {
    const c = await Raw.connect(server.respPort);
    // Pipelined behind AUTH: the door thread has not heard of the AUTH yet, so JavaScript runs that SET.
    c.socket.write(Buffer.concat([encodeCommand(['SET', 'a', 'x']), encodeCommand(['AUTH', 'pw']), encodeCommand(['SET', 'a', 'y'])]));
    const r = await c.replies_(3);
    expect(r[0]).toMatchObject({ kind: 'error', value: expect.stringMatching(/^NOAUTH/) });
    expect(r.slice(1).map(text)).toEqual(['OK', 'OK']);
    expect(server.resp!.nativeStats()!.landedSets).toBe(0);
    c.socket.write(Buffer.concat([encodeCommand(['SET', 'a', 'z']), encodeCommand(['GET', 'a'])]));
    expect((await c.replies_(2)).map(text)).toEqual(['OK', 'z']);
    expect(server.resp!.nativeStats()!.landedSets).toBe(1);
    c.socket.destroy();
  });
});

describe('RESP door, native and Node engines answer alike', () => {
  let native: TierSyncServer;
  let node: TierSyncServer;
  beforeAll(async () => {
    native = await TierSyncServer.start(parseServerConfig(config()));
    node = await TierSyncServer.start(parseServerConfig(config({ engine: 'node' })));
  });
  afterAll(async () => {
    await native?.close();
    await node?.close();
  });

  /** Sends `bytes` in random pieces, half-closes, and returns every byte the server answered until it closed. */
  async function exchange(port: number, bytes: Buffer, rand: () => number): Promise<Buffer> {
    const s = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    s.on('data', (d) => chunks.push(d));
    s.on('error', () => undefined);
    // Listened for from the start: a server that refuses a damaged command closes before the client's last write.
    const closed = new Promise<boolean>((r) => s.once('close', () => r(true)));
    await new Promise((r) => s.once('connect', r));
    for (let at = 0; at < bytes.length; ) {
      const n = 1 + Math.floor(rand() * Math.min(bytes.length - at, rand() < 0.5 ? 16 : 40000));
      s.write(bytes.subarray(at, at + n));
      at += n;
      if (rand() < 0.1) await new Promise((r) => setTimeout(r, 1));
    }
    s.end();
    let timer: NodeJS.Timeout | undefined;
    const done = await Promise.race([closed, new Promise<boolean>((r) => (timer = setTimeout(() => r(false), 10_000)))]);
    clearTimeout(timer);
    s.destroy();
    if (!done) throw new Error(`the server neither answered nor closed within 10 s; it answered ${JSON.stringify(Buffer.concat(chunks).toString('latin1'))}`);
    return Buffer.concat(chunks);
  }

  it('gives byte-identical replies to random pipelines split at random places, damaged tails included', async () => {
    let seed = 12345;
    const rand = (): number => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed / 0x80000000;
    };
    const keys = ['a', 'b', 'c', '', 'k'.repeat(40)];
    for (let round = 0; round < 12; round++) {
      const parts: Buffer[] = [];
      const n = 5 + Math.floor(rand() * 20);
      for (let i = 0; i < n; i++) {
        const k = keys[Math.floor(rand() * keys.length)]!;
        const v = pattern(Math.floor(rand() * (rand() < 0.3 ? 3 * PAGE : 300)), round * 100 + i);
        const r = rand();
        if (r < 0.35) parts.push(encodeCommand(['SET', k, v]));
        else if (r < 0.55) parts.push(encodeCommand(['GET', k]));
        else if (r < 0.62) parts.push(encodeCommand(['SET', k, v, 'NX']));
        else if (r < 0.7) parts.push(encodeCommand(['DEL', k]));
        else if (r < 0.78) parts.push(encodeCommand(['MSET', k, v, 'b', 'x']));
        else if (r < 0.85) parts.push(encodeCommand(['EXISTS', 'a', 'b', 'c']));
        else if (r < 0.88) parts.push(encodeCommand(['MGET', 'a', 'b', 'a']));
        else if (r < 0.92) parts.push(Buffer.from('PING\r\n'));
        else parts.push(encodeCommand(['STRLEN', k]));
      }
      // Some rounds end in damage: a value with a wrong terminator, a bad header, or a cut command.
      const tail = rand();
      if (tail < 0.2) parts.push(Buffer.from('*3\r\n$3\r\nSET\r\n$1\r\nz\r\n$4\r\nabcdXY'));
      else if (tail < 0.35) parts.push(Buffer.from('*2\r\n:5\r\n'));
      else if (tail < 0.5) parts.push(encodeCommand(['SET', 'cut', pattern(2 * PAGE, 9)]).subarray(0, PAGE));
      parts.push(encodeCommand(['FLUSHDB']));
      const bytes = Buffer.concat(parts);
      const split = seed;
      const a = await exchange(native.respPort, bytes, rand);
      seed = split;
      const b = await exchange(node.respPort, bytes, rand);
      expect(a.toString('latin1'), `round ${round}`).toBe(b.toString('latin1'));
    }
    expect(native.resp!.nativeStats()!.landedSets).toBeGreaterThan(0);
  });
});

/** A client's one-command-at-a-time view: the reply as text (bulk strings latin1), or the error. */
function caller(c: Raw): (...args: Array<string | Buffer>) => Promise<unknown> {
  return async (...args) => {
    c.socket.write(encodeCommand(args));
    return text((await c.replies_(1))[0]!);
  };
}

describe('RESP door, native engine, GETs answered on the door thread', () => {
  let server: TierSyncServer;
  beforeAll(async () => {
    server = await TierSyncServer.start(parseServerConfig(config()));
  });
  afterAll(async () => {
    await server?.close();
  });
  const stats = () => server.resp!.nativeStats()!;

  it('answers GETs of landed values natively; a SET pipelined with a GET of its key gets the new value', async () => {
    const c = await Raw.connect(server.respPort);
    const other = await Raw.connect(server.respPort);
    const before = stats().nativeGets;
    c.socket.write(encodeCommand(['SET', 'g', 'first']));
    expect((await c.replies_(1)).map(text)).toEqual(['OK']);
    c.socket.write(encodeCommand(['GET', 'g']));
    expect((await c.replies_(1)).map(text)).toEqual(['first']);
    expect(stats().nativeGets - before).toBe(1);
    for (let i = 0; i < 20; i++) {
      const v = pattern(i % 3 === 0 ? 2 * PAGE + i : 100 + i, i);
      c.socket.write(Buffer.concat([encodeCommand(['SET', 'g', v]), encodeCommand(['GET', 'g'])]));
      expect((await c.replies_(2)).map(text)).toEqual(['OK', v.toString('latin1')]);
      // Another client, after the +OK: the new value (from the mirror, installed before the +OK left).
      other.socket.write(encodeCommand(['GET', 'g']));
      expect((await other.replies_(1)).map(text)).toEqual([v.toString('latin1')]);
    }
    expect(stats().nativeGets - before).toBeGreaterThanOrEqual(21);
    c.socket.destroy();
    other.socket.destroy();
  });

  it("answers a new client's first GET on the door thread, before JavaScript has seen the client (no AUTH needed)", async () => {
    const c = await Raw.connect(server.respPort);
    const v = pattern(PAGE + 17, 91);
    c.socket.write(encodeCommand(['SET', 'first', v]));
    expect((await c.replies_(1)).map(text)).toEqual(['OK']);
    c.socket.destroy();
    const reply = Buffer.concat([Buffer.from(`$${v.length}\r\n`), v, Buffer.from('\r\n')]);
    const shared = new Int32Array(new SharedArrayBuffer(4));
    const got = new Uint8Array(new SharedArrayBuffer(reply.length));
    // Another thread is the new client, so this one can block: no turn of its event loop sees the client's accept.
    const worker = new Worker(
      `const { workerData: w } = await import('node:worker_threads');
      const net = await import('node:net');
      const s = net.connect(w.port, '127.0.0.1', () => s.write('*2\\r\\n$3\\r\\nGET\\r\\n$5\\r\\nfirst\\r\\n'));
      let n = 0;
      s.on('data', (d) => {
        w.got.set(d.subarray(0, w.got.length - n), n);
        n += d.length;
        if (n < w.got.length) return;
        Atomics.store(w.shared, 0, n === w.got.length ? 1 : 2);
        Atomics.notify(w.shared, 0);
        s.destroy();
      });`,
      { eval: true, workerData: { port: server.respPort, shared, got } },
    );
    try {
      const before = stats().nativeGets;
      expect(['ok', 'not-equal']).toContain(Atomics.wait(shared, 0, 0, 20_000));
      expect(Atomics.load(shared, 0)).toBe(1);
      expect(Buffer.compare(Buffer.from(got), reply)).toBe(0);
      expect(stats().nativeGets - before).toBe(1);
    } finally {
      await worker.terminate();
    }
  });

  it('counts the GETs the door thread answered in tiersync_resp_commands_total, with those run in JavaScript', async () => {
    const gets = async (): Promise<{ calls: number; errors: number }> => {
      const text = await server.metrics.registry.metrics();
      const value = (name: string) => Number(new RegExp(`^${name}\\{command="get"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
      return { calls: value('tiersync_resp_commands_total'), errors: value('tiersync_resp_command_errors_total') };
    };
    const c = await Raw.connect(server.respPort);
    c.socket.write(encodeCommand(['SET', 'counted', 'v']));
    expect((await c.replies_(1)).map(text)).toEqual(['OK']);
    const before = await gets();
    const native = stats().nativeGets;
    // Five GETs of a mirrored value (the door thread), one of a missing key and one with a wrong arity (JavaScript).
    for (let i = 0; i < 5; i++) c.socket.write(encodeCommand(['GET', 'counted']));
    c.socket.write(encodeCommand(['GET', 'absent']));
    c.socket.write(encodeCommand(['GET']));
    const replies = await c.replies_(7);
    expect(replies.slice(0, 6).map(text)).toEqual(['v', 'v', 'v', 'v', 'v', null]);
    expect(replies[6]!.kind).toBe('error');
    expect(stats().nativeGets - native).toBe(5);
    const after = await gets();
    expect({ calls: after.calls - before.calls, errors: after.errors - before.errors }).toEqual({ calls: 7, errors: 1 });
    c.socket.destroy();
  });

  it("counts each served entry's pages once per drain of the door thread's record; entries replaced since are skipped", async () => {
    const door = server.resp!;
    const slots = (door.store as TierSyncPageStore).slots!;
    const c = await Raw.connect(server.respPort);
    const call = async (...args: Array<string | Buffer>): Promise<unknown> => {
      c.socket.write(encodeCommand(args));
      return text((await c.replies_(1))[0]!);
    };
    const hits = (pages: readonly string[]) => server.ts.pageRecords(pages).map((r) => r?.hits);
    expect(await call('SET', 'h', pattern(2 * PAGE + 7, 3))).toBe('OK');
    await slots.recorded();
    const first = door.entry('default', 'h')!.pages;
    expect(hits(first)).toEqual([0, 0, 0]);
    const before = stats().nativeGets;
    for (let i = 0; i < 3; i++) expect(await call('GET', 'h')).toBe(pattern(2 * PAGE + 7, 3).toString('latin1'));
    expect(stats().nativeGets - before).toBe(3);
    await door.recordAccesses();
    expect(hits(first)).toEqual([1, 1, 1]);
    // Served, then replaced: the new value's pages owe nothing to GETs of the old one (skipped at the drain, or
    // recorded on the old pages if the periodic drain came first).
    expect(await call('GET', 'h')).toBe(pattern(2 * PAGE + 7, 3).toString('latin1'));
    expect(await call('SET', 'h', pattern(PAGE, 4))).toBe('OK');
    await slots.recorded();
    await door.recordAccesses();
    const second = door.entry('default', 'h')!.pages;
    expect(hits(second)).toEqual([0]);
    expect(stats().nativeGets - before).toBe(4);
    c.socket.destroy();
  });

  it('answers EXISTS of mirrored values in place natively; other keys (missing, deleted, with a TTL) go to JavaScript', async () => {
    const c = await Raw.connect(server.respPort);
    const call = async (...args: Array<string | Buffer>): Promise<unknown> => {
      c.socket.write(encodeCommand(args));
      return text((await c.replies_(1))[0]!);
    };
    for (const k of ['e1', 'e2']) expect(await call('SET', k, pattern(2 * PAGE + 3, k.length))).toBe('OK');
    const before = stats().nativeExists;
    expect(await call('EXISTS', 'e1', 'e2', 'e1')).toBe(3);
    expect(stats().nativeExists - before).toBe(1);
    // One key JavaScript must look up (it may live on a lower tier): the whole command goes there.
    expect(await call('EXISTS', 'e1', 'missing')).toBe(1);
    expect(await call('DEL', 'e2')).toBe(1);
    expect(await call('EXISTS', 'e2')).toBe(0);
    expect(await call('SET', 'e3', 'ttl', 'PX', '60000')).toBe('OK');
    expect(await call('EXISTS', 'e3')).toBe(1);
    expect(stats().nativeExists - before).toBe(1);
    // Pipelined behind a SET of its key: the +OK, then the key exists.
    c.socket.write(Buffer.concat([encodeCommand(['SET', 'e4', 'v4']), encodeCommand(['EXISTS', 'e4']), encodeCommand(['DEL', 'e4']), encodeCommand(['EXISTS', 'e4'])]));
    expect((await c.replies_(4)).map(text)).toEqual(['OK', 1, 1, 0]);
    expect(await call('EXISTS', 'e1')).toBe(1);
    expect(stats().nativeExists - before).toBeGreaterThanOrEqual(2);
    expect(String(await call('INFO', 'stats'))).toMatch(/tiersync_native_exists:\d+/);
    c.socket.destroy();
  });

  it('answers MGET of mirrored values (up to 1 MiB in all) natively, byte-exact; any other key (missing, deleted, with a TTL) sends the whole command to JavaScript', async () => {
    const c = await Raw.connect(server.respPort);
    const call = async (...args: Array<string | Buffer>): Promise<unknown> => {
      c.socket.write(encodeCommand(args));
      const [r] = await c.replies_(1);
      return r!.kind === 'array' ? (r!.value as RespValue[]).map(text) : text(r!);
    };
    const values = new Map(['m1', 'm2', 'm3'].map((k, i) => [k, pattern(i === 1 ? 300 : 2 * PAGE + 5 + i, 40 + i)]));
    for (const [k, v] of values) expect(await call('SET', k, v)).toBe('OK');
    const want = (...keys: string[]) => keys.map((k) => values.get(k)?.toString('latin1') ?? null);
    const before = stats();
    expect(await call('MGET', 'm1', 'm2', 'm3', 'm1')).toEqual(want('m1', 'm2', 'm3', 'm1'));
    expect(stats().nativeMgets - before.nativeMgets).toBe(1);
    // The second time its replies are the kept ones (no copy): the same bytes.
    expect(await call('mget', 'm3', 'm2')).toEqual(want('m3', 'm2'));
    expect(stats().nativeMgets - before.nativeMgets).toBe(2);
    expect(stats().hotGets - before.hotGets).toBeGreaterThanOrEqual(2);
    // One key JavaScript must look up: the whole command goes there, and answers the same way Redis does.
    expect(await call('MGET', 'm1', 'missing')).toEqual([...want('m1'), null]);
    expect(await call('DEL', 'm2')).toBe(1);
    expect(await call('MGET', 'm2', 'm3')).toEqual([null, ...want('m3')]);
    expect(await call('SET', 'm4', 'ttl', 'PX', '60000')).toBe('OK');
    expect(await call('MGET', 'm4', 'm1')).toEqual(['ttl', ...want('m1')]);
    expect(stats().nativeMgets - before.nativeMgets).toBe(2);
    // Pipelined behind a SET of one of its keys: the +OK, then the new value.
    const fresh = pattern(PAGE + 9, 77);
    c.socket.write(Buffer.concat([encodeCommand(['SET', 'm1', fresh]), encodeCommand(['MGET', 'm1', 'm3'])]));
    const [ok, got] = await c.replies_(2);
    expect(text(ok!)).toBe('OK');
    expect((got!.value as RespValue[]).map(text)).toEqual([fresh.toString('latin1'), ...want('m3')]);
    // Values adding up to over 1 MiB: JavaScript's thread writes the array (the door thread keeps reading).
    const big = [pattern(600 << 10, 1), pattern(600 << 10, 2)];
    expect(await call('SET', 'big1', big[0]!)).toBe('OK');
    expect(await call('SET', 'big2', big[1]!)).toBe('OK');
    const natively = stats().nativeMgets;
    expect(await call('MGET', 'big1', 'big2')).toEqual(big.map((b) => b.toString('latin1')));
    expect(await call('MGET', 'big1', 'm3')).toEqual([big[0]!.toString('latin1'), ...want('m3')]);
    expect(stats().nativeMgets - natively).toBe(1);
    expect(String(await call('INFO', 'stats'))).toMatch(/tiersync_native_mgets:\d+/);
    c.socket.destroy();
  });

  it('drops mirror entries on DEL, SET over them (with a TTL, or through JavaScript) and FLUSHDB', async () => {
    const c = await Raw.connect(server.respPort);
    const call = async (...args: Array<string | Buffer>): Promise<unknown> => {
      c.socket.write(encodeCommand(args));
      return text((await c.replies_(1))[0]!);
    };
    await call('FLUSHDB');
    expect(stats().mirroredKeys).toBe(0);
    for (const k of ['a', 'b', 'c', 'd']) expect(await call('SET', k, `v-${k}`)).toBe('OK');
    expect(stats().mirroredKeys).toBe(4);
    const gets = stats().nativeGets;
    for (const k of ['a', 'b', 'c', 'd']) expect(await call('GET', k)).toBe(`v-${k}`);
    expect(stats().nativeGets - gets).toBe(4);
    expect(await call('DEL', 'a')).toBe(1);
    expect(stats().mirroredKeys).toBe(3);
    expect(await call('GET', 'a')).toBe(null);
    // A TTL: out of the mirror; answered by JavaScript until it expires.
    expect(await call('SET', 'b', 'short', 'PX', '50')).toBe('OK');
    expect(stats().mirroredKeys).toBe(2);
    expect(await call('GET', 'b')).toBe('short');
    await new Promise((r) => setTimeout(r, 80));
    expect(await call('GET', 'b')).toBe(null);
    // SET ... XX goes through JavaScript: the landed value it replaces leaves the mirror, its own value enters it.
    expect(await call('SET', 'c', 'via-js', 'XX')).toBe('OK');
    expect(stats().mirroredKeys).toBe(2);
    const viaJs = stats().nativeGets;
    expect(await call('GET', 'c')).toBe('via-js');
    expect(stats().nativeGets - viaJs).toBe(1);
    expect(await call('DEL', 'c')).toBe(1);
    expect(stats().mirroredKeys).toBe(1);
    expect(await call('FLUSHDB')).toBe('OK');
    expect(stats().mirroredKeys).toBe(0);
    expect(await call('GET', 'd')).toBe(null);
    expect(stats().getMismatches).toBe(0);
    c.socket.destroy();
  });

  it('answers the same replies as the Node engine for a random sequence of commands from two clients', async () => {
    const node = await TierSyncServer.start(parseServerConfig(config({ engine: 'node' })));
    try {
      let seed = 777;
      const rand = (): number => {
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        return seed / 0x80000000;
      };
      const steps: Array<{ who: number; args: Array<string | Buffer>; sleep?: number }> = [];
      const keys = ['x', 'y', 'z'];
      for (let i = 0; i < 200; i++) {
        const k = keys[Math.floor(rand() * keys.length)]!;
        const who = rand() < 0.5 ? 0 : 1;
        const v = pattern(Math.floor(rand() * (rand() < 0.2 ? 3 * PAGE : 200)) + 1, i);
        const r = rand();
        if (r < 0.3) steps.push({ who, args: ['SET', k, v] });
        else if (r < 0.7) steps.push({ who, args: ['GET', k] });
        else if (r < 0.76) steps.push({ who, args: ['DEL', k] });
        else if (r < 0.8) steps.push({ who, args: ['SET', k, v, 'PX', '1'], sleep: 5 });
        else if (r < 0.84) steps.push({ who, args: ['SET', k, v, 'EX', '1000'] });
        else if (r < 0.88) steps.push({ who, args: ['SET', k, v, 'NX'] });
        else if (r < 0.92) steps.push({ who, args: ['MSET', k, v, 'y', 'm'] });
        else if (r < 0.95) steps.push({ who, args: ['FLUSHDB'] });
        else steps.push({ who, args: ['MGET', 'x', 'y', 'z'] });
      }
      const transcript = async (port: number): Promise<unknown[]> => {
        const cs = [await Raw.connect(port), await Raw.connect(port)];
        const out: unknown[] = [];
        for (const s of steps) {
          cs[s.who]!.socket.write(encodeCommand(s.args));
          out.push((await cs[s.who]!.replies_(1))[0]);
          if (s.sleep) await new Promise((r) => setTimeout(r, s.sleep));
        }
        for (const c of cs) c.socket.destroy();
        return out;
      };
      const before = stats().nativeGets;
      const a = await transcript(server.respPort);
      const b = await transcript(node.respPort);
      expect(a).toEqual(b);
      expect(stats().nativeGets - before).toBeGreaterThan(20);
    } finally {
      await node.close();
    }
  });

  it('answers natively GETs of values set with NX, XX, KEEPTTL, GET, MSET and an inline SET; not of values with a TTL; DEL, SET over and FLUSHDB answer as Redis', async () => {
    const c = await Raw.connect(server.respPort);
    const call = caller(c);
    expect(await call('FLUSHDB')).toBe('OK');
    const values: Record<string, Buffer> = {
      nx: pattern(2 * PAGE + 11, 1),
      xx: pattern(PAGE + 1, 2),
      m1: pattern(3 * PAGE, 3),
      m2: Buffer.from('small'),
      kt: pattern(40, 4),
      g: Buffer.from('new'),
      inline: Buffer.from('hello'),
    };
    expect(await call('SET', 'nx', values.nx!, 'NX')).toBe('OK');
    expect(await call('SET', 'nx', 'other', 'NX')).toBe(null);
    expect(await call('SET', 'xx', 'x0')).toBe('OK');
    expect(await call('SET', 'xx', values.xx!, 'XX')).toBe('OK');
    expect(await call('MSET', 'm1', values.m1!, 'm2', values.m2!)).toBe('OK');
    expect(await call('SET', 'kt', values.kt!, 'KEEPTTL')).toBe('OK');
    expect(await call('SET', 'g', 'old')).toBe('OK');
    expect(await call('SET', 'g', values.g!, 'GET')).toBe('old');
    // An inline command: parsed by JavaScript (that client stays there), stored through staging and the hierarchy.
    const inline = await Raw.connect(server.respPort);
    inline.socket.write('SET inline hello\r\n');
    expect((await inline.replies_(1)).map(text)).toEqual(['OK']);
    expect(stats().mirroredKeys).toBe(Object.keys(values).length);
    let before = stats().nativeGets;
    for (const [k, v] of Object.entries(values)) expect(await call('GET', k)).toBe(v.toString('latin1'));
    expect(stats().nativeGets - before).toBe(Object.keys(values).length);

    // A TTL (EX, or kept by KEEPTTL): not mirrored, answered by JavaScript; a SET without one clears it, as in Redis.
    const mirrored = stats().mirroredKeys;
    expect(await call('SET', 't', 'v1', 'EX', '100')).toBe('OK');
    expect(await call('SET', 't', 'v2', 'XX', 'KEEPTTL')).toBe('OK');
    expect(await call('SET', 'kt', 'ttl now', 'XX', 'PX', '100000')).toBe('OK');
    expect(stats().mirroredKeys).toBe(mirrored - 1);
    before = stats().nativeGets;
    expect(await call('GET', 't')).toBe('v2');
    expect(await call('GET', 'kt')).toBe('ttl now');
    expect(stats().nativeGets - before).toBe(0);
    expect(await call('SET', 't', 'v3', 'XX')).toBe('OK');
    expect(await call('TTL', 't')).toBe(-1);
    expect(await call('GET', 't')).toBe('v3');
    expect(stats().nativeGets - before).toBe(1);

    // DEL, a SET over a key (refused or done), MSET over one, FLUSHDB.
    expect(await call('DEL', 'nx')).toBe(1);
    expect(await call('GET', 'nx')).toBe(null);
    expect(await call('SET', 'xx', 'refused', 'NX')).toBe(null);
    expect(await call('GET', 'xx')).toBe(values.xx!.toString('latin1'));
    expect(await call('MSET', 'm1', 'replaced', 'm3', pattern(PAGE + 3, 5))).toBe('OK');
    before = stats().nativeGets;
    expect(await call('GET', 'm1')).toBe('replaced');
    expect(await call('GET', 'm3')).toBe(pattern(PAGE + 3, 5).toString('latin1'));
    expect(stats().nativeGets - before).toBe(2);
    expect(await call('FLUSHDB')).toBe('OK');
    expect(stats().mirroredKeys).toBe(0);
    for (const k of [...Object.keys(values), 't', 'm3']) expect(await call('GET', k)).toBe(null);
    expect(stats().getMismatches).toBe(0);
    c.socket.destroy();
    inline.socket.destroy();
  });
});

describe('RESP door, native engine, GETs and tenants', () => {
  it('answers each tenant its own value of the same key', async () => {
    const server = await TierSyncServer.start(parseServerConfig(config({ tenants: { alice: 'pa', bob: 'pb' } })));
    try {
      const a = await Raw.connect(server.respPort);
      const b = await Raw.connect(server.respPort);
      const anon = await Raw.connect(server.respPort);
      a.socket.write(encodeCommand(['AUTH', 'alice', 'pa']));
      b.socket.write(encodeCommand(['AUTH', 'bob', 'pb']));
      expect((await a.replies_(1)).map(text)).toEqual(['OK']);
      expect((await b.replies_(1)).map(text)).toEqual(['OK']);
      a.socket.write(encodeCommand(['SET', 'same', 'alice-value']));
      expect((await a.replies_(1)).map(text)).toEqual(['OK']);
      b.socket.write(encodeCommand(['GET', 'same']));
      expect((await b.replies_(1)).map(text)).toEqual([null]);
      b.socket.write(encodeCommand(['SET', 'same', 'bob-value']));
      expect((await b.replies_(1)).map(text)).toEqual(['OK']);
      const before = server.resp!.nativeStats()!.nativeGets;
      a.socket.write(encodeCommand(['GET', 'same']));
      b.socket.write(encodeCommand(['GET', 'same']));
      expect((await a.replies_(1)).map(text)).toEqual(['alice-value']);
      expect((await b.replies_(1)).map(text)).toEqual(['bob-value']);
      expect(server.resp!.nativeStats()!.nativeGets - before).toBe(2);
      // Not authenticated: JavaScript says so.
      anon.socket.write(encodeCommand(['GET', 'same']));
      expect((await anon.replies_(1))[0]).toMatchObject({ kind: 'error', value: expect.stringMatching(/^NOAUTH/) });
      // Re-authenticated as the other tenant: that tenant's value.
      a.socket.write(encodeCommand(['AUTH', 'bob', 'pb']));
      expect((await a.replies_(1)).map(text)).toEqual(['OK']);
      a.socket.write(encodeCommand(['GET', 'same']));
      expect((await a.replies_(1)).map(text)).toEqual(['bob-value']);
      for (const c of [a, b, anon]) c.socket.destroy();
    } finally {
      await server.close();
    }
  });
});

describe('RESP door, native engine, GETs of changed slots', () => {
  it('forwards a GET whose pages were damaged (never sends them); the JavaScript path refuses them too; a reply made before the damage is reused', async () => {
    const server = await TierSyncServer.start(parseServerConfig({ ...config(), tiers: [{ url: `host://?capacity=${256 * PAGE}&verify=true`, name: 'host' }] } as ServerConfig));
    try {
      const c = await Raw.connect(server.respPort);
      const v = pattern(2 * PAGE + 3, 5);
      c.socket.write(encodeCommand(['SET', 'dmg', v]));
      expect((await c.replies_(1)).map(text)).toEqual(['OK']);
      c.socket.write(encodeCommand(['GET', 'dmg']));
      expect((await c.replies_(1)).map(text)).toEqual([v.toString('latin1')]);
      expect(server.resp!.nativeStats()).toMatchObject({ nativeGets: 1, getMismatches: 0 });
      // Flip a byte of the second page in the host tier's arena.
      const door = server.resp!;
      const damage = (key: string): void => {
        const e = door.entry('default', key)!;
        const slots = door.store.slots!;
        const where = slots.pin(e.pages);
        slots.unpin(e.pages);
        slots.arena.view(where[1]!.offset + 10, 1)[0]! ^= 0x5a;
      };
      damage('dmg');
      // The reply made by the GET before (checked then, kept by the door thread) is sent again: never the damage.
      c.socket.write(encodeCommand(['GET', 'dmg']));
      expect((await c.replies_(1)).map(text)).toEqual([v.toString('latin1')]);
      expect(server.resp!.nativeStats()).toMatchObject({ nativeGets: 2, hotGets: 1, getMismatches: 0 });
      // A value damaged before any GET of it: copied, its CRC32C mismatches, forwarded.
      c.socket.write(encodeCommand(['SET', 'dmg2', v]));
      expect((await c.replies_(1)).map(text)).toEqual(['OK']);
      damage('dmg2');
      // An MGET naming it: the whole command is forwarded; JavaScript sends the intact value, never the damage.
      const w = pattern(PAGE + 1, 6);
      c.socket.write(encodeCommand(['SET', 'intact', w]));
      expect((await c.replies_(1)).map(text)).toEqual(['OK']);
      c.socket.write(encodeCommand(['MGET', 'intact', 'dmg2']));
      const [m] = await c.replies_(1);
      expect(server.resp!.nativeStats()).toMatchObject({ nativeGets: 2, nativeMgets: 0, getMismatches: 1 });
      expect(m!.kind).toBe('array');
      expect(text((m!.value as RespValue[])[0]!)).toBe(w.toString('latin1'));
      expect((m!.value as RespValue[])[1]).toMatchObject({ kind: 'bulk', value: null });
      c.socket.write(encodeCommand(['GET', 'dmg2']));
      const [r] = await c.replies_(1);
      // What JavaScript answers for a damaged page (an error or nil): never the damaged bytes.
      expect(r!.kind === 'error' || (r!.kind === 'bulk' && r!.value === null)).toBe(true);
      c.socket.destroy();
    } finally {
      await server.close();
    }
  });

  it('never answers other bytes for a GET racing the eviction of its pages', async () => {
    const server = await TierSyncServer.start(parseServerConfig({ ...config(), tiers: [{ url: `host://?capacity=${32 * PAGE}`, name: 'host' }] } as ServerConfig));
    try {
      const reader = await Raw.connect(server.respPort);
      const writer = await Raw.connect(server.respPort);
      const v = pattern(2 * PAGE, 99);
      writer.socket.write(encodeCommand(['SET', 'hot', v]));
      expect((await writer.replies_(1)).map(text)).toEqual(['OK']);
      let writing = true;
      const fill = (async () => {
        // 60 values of two pages in a tier of 32 pages: the first ones are evicted.
        for (let i = 0; i < 60; i++) {
          writer.socket.write(encodeCommand(['SET', `fill${i}`, pattern(2 * PAGE, i)]));
          expect((await writer.replies_(1)).map(text)).toEqual(['OK']);
        }
        writing = false;
      })();
      const seen = { value: 0, nil: 0 };
      while (writing || seen.value + seen.nil < 5) {
        reader.socket.write(encodeCommand(['GET', 'hot']));
        const [r] = await reader.replies_(1);
        expect(r!.kind).toBe('bulk');
        if (r!.value === null) seen.nil++;
        else {
          expect(seen.nil).toBe(0); // once gone, gone
          expect(Buffer.from(r!.value as Uint8Array).equals(v)).toBe(true);
          seen.value++;
        }
      }
      await fill;
      reader.socket.write(encodeCommand(['GET', 'hot']));
      expect((await reader.replies_(1)).map(text)).toEqual([null]);
      // The door thread saw the slots change under its mirror entry and forwarded.
      expect(server.resp!.nativeStats()!.getMismatches).toBeGreaterThanOrEqual(1);
      reader.socket.destroy();
      writer.socket.destroy();
    } finally {
      await server.close();
    }
  });
});

describe('RESP door, native engine, GETs of values that left the first tier and came back', () => {
  it('answers them on the door thread again once a read has brought their pages back', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-native-remirror-'));
    const server = await TierSyncServer.start(
      parseServerConfig({
        ...config(),
        tiers: [
          { url: `host://?capacity=${16 * PAGE}`, name: 'host' },
          { url: `fs://${dir}/fs?capacity=${256 * PAGE}`, name: 'fs' },
        ],
      } as ServerConfig),
    );
    try {
      const door = server.resp!;
      const slots = (door.store as TierSyncPageStore).slots!;
      const inHost = () => slots.locate!(door.entry('default', 'back')!.pages).every(Boolean);
      const call = caller(await Raw.connect(server.respPort));
      const v = pattern(2 * PAGE + 5, 7);
      expect(await call('SET', 'back', v)).toBe('OK');
      let gets = server.resp!.nativeStats()!.nativeGets;
      expect(await call('GET', 'back')).toBe(v.toString('latin1'));
      expect(server.resp!.nativeStats()!.nativeGets).toBe(++gets);
      // Newer values push it down to fs: the door thread lets it go, and JavaScript reads it from fs.
      for (let i = 0; i < 12; i++) expect(await call('SET', `push${i}`, pattern(2 * PAGE, i))).toBe('OK');
      await slots.recorded();
      await expect.poll(() => inHost(), { timeout: 5000 }).toBe(false);
      expect(await call('GET', 'back')).toBe(v.toString('latin1'));
      gets = server.resp!.nativeStats()!.nativeGets;
      // That read promotes it back into the first tier (promoteOnHit); the next GET, read from its slots in
      // JavaScript, mirrors it again, and the ones after it are answered by the door thread.
      await expect.poll(() => inHost(), { timeout: 5000 }).toBe(true);
      expect(await call('GET', 'back')).toBe(v.toString('latin1'));
      for (let i = 0; i < 3; i++) expect(await call('GET', 'back')).toBe(v.toString('latin1'));
      expect(server.resp!.nativeStats()!.nativeGets - gets).toBe(3);
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('RESP door, native engine, GETs of long values', () => {
  it('mirrors values up to resp.maxOutputBytes; a longer one is sent by JavaScript', async () => {
    const server = await TierSyncServer.start(parseServerConfig(config({ maxOutputBytes: 64 << 10 })));
    try {
      const c = await Raw.connect(server.respPort);
      const call = caller(c);
      const fits = pattern(64 << 10, 1);
      const over = pattern((64 << 10) + 1, 2);
      expect(await call('SET', 'fits', fits)).toBe('OK');
      expect(await call('SET', 'over', over)).toBe('OK');
      const stats = () => server.resp!.nativeStats()!;
      expect(stats().mirroredKeys).toBe(1);
      const before = stats().nativeGets;
      expect(await call('GET', 'fits')).toBe(fits.toString('latin1'));
      expect(await call('GET', 'over')).toBe(over.toString('latin1'));
      expect(stats().nativeGets - before).toBe(1);
      c.socket.destroy();
    } finally {
      await server.close();
    }
  });
});

describe('RESP door, native engine, GETs with a durable catalog', () => {
  const dirs: string[] = [];
  const shms: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
    for (const f of shms) rmSync(f, { force: true });
  });
  /** A door with a /dev/shm first tier of `pages` pages and resp.catalog durable (as `bench resp --durable`). */
  const durable = (name: string, pages: number): { start: () => Promise<TierSyncServer> } => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-resp-native-durable-'));
    const shm = `/dev/shm/tiersync-resp-native-${name}-${process.pid}`;
    dirs.push(dir);
    shms.push(shm);
    rmSync(shm, { force: true });
    const c = { ...config({ catalog: 'durable' }), tiers: [{ url: `host://?capacity=${pages * PAGE}&shm=${shm}`, name: 'host' }], index: { path: path.join(dir, 'index.sqlite') } } as ServerConfig;
    return { start: () => TierSyncServer.start(parseServerConfig(c)) };
  };

  it('answers GETs of committed values natively (landed SET, NX, XX, MSET), and of recovered keys after a restart; TTLs, DEL, SET over and FLUSHDB as Redis', async () => {
    const d = durable('gets', 256);
    let server = await d.start();
    const values: Record<string, Buffer> = { a: pattern(3 * PAGE + 5, 1), nx: pattern(100, 2), xx: pattern(PAGE, 3), m1: pattern(2 * PAGE + 1, 4), m2: Buffer.from('m2') };
    try {
      expect(server.resp!.durable).toBe(true);
      const c = await Raw.connect(server.respPort);
      const call = caller(c);
      expect(await call('SET', 'a', values.a!)).toBe('OK');
      expect(await call('SET', 'nx', values.nx!, 'NX')).toBe('OK');
      expect(await call('SET', 'xx', 'x0')).toBe('OK');
      expect(await call('SET', 'xx', values.xx!, 'XX')).toBe('OK');
      expect(await call('MSET', 'm1', values.m1!, 'm2', values.m2!)).toBe('OK');
      expect(await call('SET', 't', 'with a ttl', 'EX', '1000')).toBe('OK');
      const stats = () => server.resp!.nativeStats()!;
      expect(stats().mirroredKeys).toBe(5);
      const before = stats().nativeGets;
      for (const [k, v] of Object.entries(values)) expect(await call('GET', k)).toBe(v.toString('latin1'));
      expect(stats().nativeGets - before).toBe(5);
      expect(await call('GET', 't')).toBe('with a ttl');
      expect(stats().nativeGets - before).toBe(5);
      expect(await call('DEL', 'a')).toBe(1);
      expect(await call('GET', 'a')).toBe(null);
      values.xx = pattern(PAGE + 9, 5);
      expect(await call('SET', 'xx', values.xx)).toBe('OK');
      expect(await call('GET', 'xx')).toBe(values.xx.toString('latin1'));
      expect(stats().nativeGets - before).toBe(6);
      expect(stats().getMismatches).toBe(0);
      c.socket.destroy();
    } finally {
      await server.close();
    }
    delete values.a;
    server = await d.start();
    try {
      // Recovered from the manifests, pages still in the shm tier: mirrored as the door starts.
      expect(server.resp!.counters.recoveredKeys).toBe(5);
      const stats = () => server.resp!.nativeStats()!;
      expect(stats().mirroredKeys).toBe(4);
      const c = await Raw.connect(server.respPort);
      const call = caller(c);
      // A new client's first command may reach the door thread before JavaScript made it a fast client.
      expect(await call('PING')).toBe('PONG');
      const before = stats().nativeGets;
      for (const [k, v] of Object.entries(values)) expect(await call('GET', k)).toBe(v.toString('latin1'));
      expect(stats().nativeGets - before).toBe(4);
      expect(await call('FLUSHDB')).toBe('OK');
      expect(stats().mirroredKeys).toBe(0);
      for (const k of [...Object.keys(values), 't']) expect(await call('GET', k)).toBe(null);
      expect(stats().getMismatches).toBe(0);
      c.socket.destroy();
    } finally {
      await server.close();
    }
  }, 60_000);

  it('does not mirror a value whose page left the first tier while its manifest was written (its slot went to the manifest)', async () => {
    // 8 slots: the value takes all of them, so its manifest's page needs one of them: a page of the value is evicted
    // between the value's commit and the catalog update, and its slot reused.
    const d = durable('evicted', 8);
    const server = await d.start();
    try {
      const door = server.resp!;
      const c = await Raw.connect(server.respPort);
      const call = caller(c);
      const v = pattern(8 * PAGE, 6);
      const stats = () => door.nativeStats()!;
      const before = stats().nativeGets;
      expect(await call('SET', 'big', v)).toBe('OK');
      const e = door.keyspace('default').entries().next().value![1];
      const where = door.store.slots!.locate!(e.pages);
      expect(where.some((w) => w === undefined)).toBe(true);
      expect(stats().mirroredKeys).toBe(0);
      // JavaScript answers: the value lost a page, so the key is gone (as an evicted key in Redis).
      expect(await call('GET', 'big')).toBe(null);
      expect(stats().nativeGets - before).toBe(0);
      // A value that fits with its manifest is mirrored as usual.
      expect(await call('SET', 'small', 'fits')).toBe('OK');
      expect(stats().mirroredKeys).toBe(1);
      expect(await call('GET', 'small')).toBe('fits');
      expect(stats().nativeGets - before).toBe(1);
      expect(stats().getMismatches).toBe(0);
      c.socket.destroy();
    } finally {
      await server.close();
    }
  }, 30_000);
});
