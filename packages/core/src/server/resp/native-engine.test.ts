// The native RESP engine's own behaviour (resp.engine: native): what it lands itself, its ordering with commands it
// forwards, and what it gives back when a value does not complete. The whole door suite (door.test.ts and the
// test/ scenarios) also runs against it with TIERSYNC_RESP_ENGINE=native.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseServerConfig, type ServerConfig } from '../config.js';
import { TierSyncServer } from '../server.js';
import { encodeCommand } from './encoder.js';
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
        else if (r < 0.9) parts.push(Buffer.from('PING\r\n'));
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
