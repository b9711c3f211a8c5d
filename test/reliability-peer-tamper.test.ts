/**
 * Reliability: a tampering TCP proxy on the peer path. It parses the peer protocol's frames (header, entry table,
 * payload, the 16-byte tag of authenticated sessions), flips one payload byte of each page-carrying frame and
 * repairs what a CRC-only receiver checks: the page's CRC32C in the entry table, the table's CRC32C and the
 * header's CRC32C. With a secret (authenticated frames) every tampered frame must be refused, its connection
 * dropped, and nothing tampered stored or served; a replayed frame likewise. Without a secret (loopback only) the
 * same proxy gets a damaged page stored: the control that shows the proxy's repair is real.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { HostArena, TierSyncError, TransferEngine, crc32c } from '@tiersync/native';
import { HostTier, PeerTier, servePeer, type PageKey } from '@tiersync/tiers';

const PAGE = 64 * 1024;
const HEADER = 40;
const TAG = 16;
const OP_PUT = 10;
const OP_GET_DATA = 13;

type Mode = 'pass' | 'flip' | 'replay';

/** One direction of a proxied connection: reassembles frames and forwards them, tampered or not. */
class FramePump {
  #buffer: Buffer = Buffer.alloc(0);
  #frames = 0;
  #lastTagged: Buffer | undefined;

  constructor(
    private readonly proxy: TamperProxy,
    private readonly direction: 'c2s' | 's2c',
    private readonly out: net.Socket,
  ) {}

  /** Frames of the handshake carry no tag: HELLO from the client, CHALLENGE and WELCOME from the server. */
  get #untagged(): number {
    return this.direction === 'c2s' ? 1 : 2;
  }

  push(chunk: Buffer): void {
    this.#buffer = this.#buffer.length ? Buffer.concat([this.#buffer, chunk]) : chunk;
    for (;;) {
      if (this.#buffer.length < HEADER) return;
      const metaBytes = this.#buffer.readUInt32LE(20);
      const payloadBytes = Number(this.#buffer.readBigUInt64LE(24));
      const tagged = this.proxy.authenticated && this.#frames >= this.#untagged;
      const total = HEADER + metaBytes + payloadBytes + (tagged ? TAG : 0);
      if (this.#buffer.length < total) return;
      const frame = Buffer.from(this.#buffer.subarray(0, total));
      this.#buffer = this.#buffer.subarray(total);
      this.#frames++;
      this.#forward(frame, metaBytes, payloadBytes, tagged);
    }
  }

  #forward(frame: Buffer, metaBytes: number, payloadBytes: number, tagged: boolean): void {
    const op = frame.readUInt16LE(6);
    const target = this.direction === 'c2s' ? OP_PUT : OP_GET_DATA;
    const mode = this.proxy.modes[this.direction];
    if (op === target && payloadBytes > 0 && mode === 'flip') {
      this.#flip(frame, metaBytes);
      this.proxy.tampered++;
    }
    this.out.write(frame);
    if (op === target && tagged && mode === 'replay') {
      if (this.#lastTagged) {
        this.out.write(this.#lastTagged); // a frame the receiver already accepted, sent again
        this.proxy.tampered++;
      }
      this.#lastTagged = frame;
    }
  }

  /** Flips a byte of the first page and repairs every CRC32C a receiver without frame tags would check. */
  #flip(frame: Buffer, metaBytes: number): void {
    const at = HEADER + metaBytes + 100;
    frame[at]! ^= 0x5a;
    if (this.proxy.encrypted) return; // the table is ciphertext: nothing to repair
    const first = HEADER;
    const length = frame.readUInt32LE(first + 4);
    const flags = frame[first + 3]!;
    // A declared CRC is repaired; an undeclared one (flags bit 0) the server computes over the tampered bytes.
    if ((flags & 1) === 0) frame.writeUInt32LE(crc32c(frame.subarray(HEADER + metaBytes, HEADER + metaBytes + length)), first + 8);
    frame.writeUInt32LE(crc32c(frame.subarray(HEADER, HEADER + metaBytes)), 32);
    frame.writeUInt32LE(crc32c(frame.subarray(0, 36)), 36);
  }
}

/** A TCP proxy in front of a peer server that tampers with frames as its modes say. */
class TamperProxy {
  readonly modes: Record<'c2s' | 's2c', Mode> = { c2s: 'pass', s2c: 'pass' };
  tampered = 0;
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();

  private constructor(
    readonly target: number,
    readonly authenticated: boolean,
    readonly encrypted: boolean,
  ) {
    this.#server = net.createServer((client) => {
      const server = net.connect(target, '127.0.0.1');
      for (const s of [client, server]) {
        this.#sockets.add(s);
        s.on('close', () => this.#sockets.delete(s));
        s.on('error', () => undefined);
      }
      const up = new FramePump(this, 'c2s', server);
      const down = new FramePump(this, 's2c', client);
      client.on('data', (d: Buffer) => up.push(d));
      server.on('data', (d: Buffer) => down.push(d));
      client.on('close', () => server.destroy());
      server.on('close', () => client.destroy());
    });
  }

  static async start(target: number, authenticated: boolean, encrypted = false): Promise<TamperProxy> {
    const p = new TamperProxy(target, authenticated, encrypted);
    await new Promise<void>((resolve) => p.#server.listen(0, '127.0.0.1', resolve));
    return p;
  }

  get port(): number {
    return (this.#server.address() as net.AddressInfo).port;
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

const key = (i: number): PageKey => `7a3e${i.toString(16).padStart(28, '0')}`;

interface Rig {
  host: HostTier;
  server: ReturnType<typeof servePeer>;
  proxy: TamperProxy;
  tier: PeerTier;
  arena: HostArena;
}

const rigs: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const r of rigs.splice(0)) await r();
});

async function rig(options: { secret?: string; encrypt?: boolean }): Promise<Rig> {
  const engine = new TransferEngine({ threads: 2 });
  const context = { engine, pageBytes: PAGE, fingerprint: 'tamper' };
  const host = new HostTier(`host://?capacity=${32 * PAGE}`, context);
  await host.open();
  const server = servePeer(host, { ...(options.secret ? { secret: options.secret } : {}), ...(options.encrypt ? { encrypt: true } : {}), timeoutMs: 5000 });
  const proxy = await TamperProxy.start(server.port, !!options.secret, !!options.encrypt);
  const query = [options.secret ? `secret=${options.secret}` : '', options.encrypt ? 'encrypt=true' : '', 'streams=2', 'timeoutMs=5000'].filter(Boolean).join('&');
  const tier = new PeerTier(`peer://127.0.0.1:${proxy.port}?${query}`, context);
  await tier.open();
  const arena = HostArena.create({ capacity: 16 * PAGE });
  const view = arena.view(0, 16 * PAGE);
  for (let i = 0; i < view.length; i++) view[i] = (i * 131 + (i >>> 16)) & 0xff;
  rigs.push(async () => {
    await tier.close();
    await proxy.close();
    server.close();
    await host.close();
    arena.close();
    await engine.close();
  });
  return { host, server, proxy, tier, arena };
}

/** Writes pages 0..n-1 (with their CRC32C declared, so a tamperer must repair it) from arena slots 0..n-1. */
function writes(r: Rig, keys: PageKey[]) {
  return keys.map((k, i) => ({ key: k, source: { arena: r.arena, offset: i * PAGE, length: PAGE }, crc32c: crc32c(r.arena.view(i * PAGE, PAGE)) }));
}

const refusal = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

describe('reliability: tampering proxy on the peer path', () => {
  it('with a secret, refuses every tampered PUT frame, drops the connection and stores nothing', async () => {
    const r = await rig({ secret: 'tamper-secret' });
    const keys = Array.from({ length: 4 }, (_, i) => key(i));
    r.proxy.modes.c2s = 'flip';
    for (let attempt = 0; attempt < 3; attempt++) {
      const e = await refusal(r.tier.write(writes(r, keys)));
      expect(e).toBeInstanceOf(TierSyncError);
      expect((e as TierSyncError).code).toMatch(/^ERR_(AUTH|IO|PROTOCOL)$/);
      expect(r.host.hasNow(keys)).toEqual(keys.map(() => false));
    }
    expect(r.proxy.tampered).toBeGreaterThanOrEqual(3);
    // Every tampered frame was refused by its tag: one authentication failure per tampered frame.
    expect(r.server.stats().authFailures).toBe(r.proxy.tampered);
    expect(r.host.stats().pages).toBe(0);

    // The path heals: the tier reconnects and the same pages go through intact.
    r.proxy.modes.c2s = 'pass';
    await r.tier.write(writes(r, keys));
    expect(r.host.hasNow(keys)).toEqual(keys.map(() => true));
    const out = await r.tier.read(keys.map((k, i) => ({ key: k, into: { arena: r.arena, offset: (8 + i) * PAGE, length: PAGE } })));
    expect(out.map((o) => o.status)).toEqual(keys.map(() => 'hit'));
    for (let i = 0; i < keys.length; i++) expect(Buffer.compare(r.arena.view((8 + i) * PAGE, PAGE), r.arena.view(i * PAGE, PAGE))).toBe(0);
  });

  it('with a secret, never serves a page tampered on its way back', async () => {
    const r = await rig({ secret: 'tamper-secret' });
    const keys = Array.from({ length: 4 }, (_, i) => key(10 + i));
    await r.tier.write(writes(r, keys));
    r.proxy.modes.s2c = 'flip';
    const reads = () => r.tier.read(keys.map((k, i) => ({ key: k, into: { arena: r.arena, offset: (8 + i) * PAGE, length: PAGE } })));
    for (let attempt = 0; attempt < 3; attempt++) {
      const e = await refusal(reads());
      expect(e).toBeInstanceOf(TierSyncError);
      expect((e as TierSyncError).code).toBe('ERR_AUTH');
    }
    expect(r.proxy.tampered).toBeGreaterThanOrEqual(3);
    r.proxy.modes.s2c = 'pass';
    const out = await reads();
    expect(out.map((o) => o.status)).toEqual(keys.map(() => 'hit'));
    for (let i = 0; i < keys.length; i++) expect(Buffer.compare(r.arena.view((8 + i) * PAGE, PAGE), r.arena.view(i * PAGE, PAGE))).toBe(0);
  });

  it('with a secret, refuses a replayed frame', async () => {
    const r = await rig({ secret: 'tamper-secret' });
    r.proxy.modes.c2s = 'replay';
    // From the second PUT frame on a connection, the proxy follows each with a replay of the one before it. The
    // server acts on the genuine frame, refuses the replay by its tag and drops the connection; the client sees
    // the drop on its next request there and reconnects.
    for (let b = 0; b < 6; b++) {
      const keys = [key(20 + b)];
      await refusal(r.tier.write(keys.map((k) => ({ key: k, source: { arena: r.arena, offset: b * PAGE, length: PAGE } }))));
    }
    for (let t = 0; t < 40 && r.server.stats().authFailures < r.proxy.tampered; t++) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(r.proxy.tampered).toBeGreaterThanOrEqual(1);
    // Every replay the server read was refused by its tag. A replay the proxy sends may also land on a connection
    // the server is already dropping for the replay before it (the client pipelines its next request there), so
    // the server refuses at least one and never more than the proxy sent (failed once in CI with 2 of 3).
    expect(r.server.stats().authFailures).toBeGreaterThanOrEqual(1);
    expect(r.server.stats().authFailures).toBeLessThanOrEqual(r.proxy.tampered);
    r.proxy.modes.c2s = 'pass';
    // The first call may meet a connection the server already dropped; it fails typed and the next reconnects.
    const last = () => r.tier.write([{ key: key(29), source: { arena: r.arena, offset: 0, length: PAGE } }]);
    if (await refusal(last())) await last();
    expect(r.host.hasNow([key(29)])).toEqual([true]);
  });

  it('with encryption on, refuses a flipped ciphertext byte and stores nothing', async () => {
    const r = await rig({ secret: 'tamper-secret', encrypt: true });
    const keys = Array.from({ length: 2 }, (_, i) => key(30 + i));
    r.proxy.modes.c2s = 'flip';
    const e = await refusal(r.tier.write(writes(r, keys)));
    expect((e as TierSyncError).code).toMatch(/^ERR_(AUTH|IO|PROTOCOL)$/);
    expect(r.host.hasNow(keys)).toEqual(keys.map(() => false));
    expect(r.server.stats().authFailures).toBe(r.proxy.tampered);
    r.proxy.modes.c2s = 'pass';
    await r.tier.write(writes(r, keys));
    const out = await r.tier.read(keys.map((k, i) => ({ key: k, into: { arena: r.arena, offset: (8 + i) * PAGE, length: PAGE } })));
    expect(out.map((o) => o.status)).toEqual(['hit', 'hit']);
    expect(Buffer.compare(r.arena.view(8 * PAGE, PAGE), r.arena.view(0, PAGE))).toBe(0);
  });

  it('control: without a secret (loopback only) the repaired CRC32C is accepted, which is why non-loopback peers need one', async () => {
    const r = await rig({});
    const keys = [key(40)];
    r.proxy.modes.c2s = 'flip';
    await r.tier.write(writes(r, keys));
    expect(r.proxy.tampered).toBe(1);
    r.proxy.modes.c2s = 'pass';
    const [o] = await r.tier.read([{ key: keys[0]!, into: { arena: r.arena, offset: 8 * PAGE, length: PAGE } }]);
    expect(o!.status).toBe('hit');
    expect(Buffer.compare(r.arena.view(8 * PAGE, PAGE), r.arena.view(0, PAGE))).not.toBe(0);
  });
});
