/**
 * A second client of the peer wire format, written from its description in packages/native/cpp/peer_protocol.h with
 * node:crypto (HMAC-SHA256, HKDF-SHA256, AES-256-GCM) and net: it checks that the description is complete and
 * right, and it speaks as clients that predate a flag do (kFlagRangeCrcs), which the native client cannot.
 */
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { HostArena, TransferEngine, crc32c } from '@tiersync/native';
import { testKey } from '../testing.js';
import { HostTier } from '../host/index.js';
import { PeerTier } from './index.js';
import { servePeer } from './server.js';

const MAGIC = 0x4e595354;
const OP = { challenge: 1, hello: 2, welcome: 3, put: 10, putAck: 11, get: 12, getData: 13, has: 14, hasAck: 15, delete: 16, deleteAck: 17, error: 99 } as const;
const FLAG = { secret: 1, encrypt: 2, rangeCrcs: 4 } as const;
const ENTRY = { computeCrc: 1, range: 2, rangeAnnounced: 4 } as const;
const STATUS = { ok: 0, miss: 1 } as const;
const PAGE = 256 * 1024;
const CHUNK = 64 * 1024;
const SECRET = 'wire-spec-secret';
const DEADLINE_MS = 10_000;

interface Entry {
  key: string;
  status: number;
  flags: number;
  length: number;
  crc32c: number;
}
interface Frame {
  header: Buffer;
  op: number;
  requestId: bigint;
  entries: Entry[];
  meta: Buffer;
  payload: Buffer;
}

/** Reads exact byte counts from a socket, each within the deadline. */
class Reader {
  #buffered = Buffer.alloc(0);
  #wake: (() => void) | undefined;
  #ended = false;
  constructor(private readonly socket: Socket) {
    socket.on('data', (d: Buffer) => {
      this.#buffered = Buffer.concat([this.#buffered, d]);
      this.#wake?.();
    });
    socket.on('close', () => {
      this.#ended = true;
      this.#wake?.();
    });
  }
  async read(n: number): Promise<Buffer> {
    const deadline = Date.now() + DEADLINE_MS;
    while (this.#buffered.length < n) {
      if (this.#ended) throw new Error(`connection closed with ${this.#buffered.length} of ${n} bytes`);
      if (Date.now() > deadline) throw new Error(`no ${n} bytes within ${DEADLINE_MS} ms`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 50);
        this.#wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
    const out = this.#buffered.subarray(0, n);
    this.#buffered = this.#buffered.subarray(n);
    return out;
  }
  get closed(): boolean {
    return this.#ended;
  }
}

function encodeEntries(entries: Entry[]): Buffer {
  return Buffer.concat(
    entries.map((e) => {
      const b = Buffer.alloc(12 + e.key.length);
      b.writeUInt16LE(e.key.length, 0);
      b[2] = e.status;
      b[3] = e.flags;
      b.writeUInt32LE(e.length, 4);
      b.writeUInt32LE(e.crc32c, 8);
      b.write(e.key, 12, 'ascii');
      return b;
    }),
  );
}

function decodeEntries(meta: Buffer, count: number): Entry[] {
  const out: Entry[] = [];
  for (let i = 0, at = 0; i < count; i++) {
    const keyLength = meta.readUInt16LE(at);
    out.push({ key: meta.toString('ascii', at + 12, at + 12 + keyLength), status: meta[at + 2]!, flags: meta[at + 3]!, length: meta.readUInt32LE(at + 4), crc32c: meta.readUInt32LE(at + 8) });
    at += 12 + keyLength;
  }
  return out;
}

function encodeHeader(op: number, requestId: bigint, count: number, meta: Buffer, payloadBytes: number): Buffer {
  const h = Buffer.alloc(40);
  h.writeUInt32LE(MAGIC, 0);
  h.writeUInt16LE(1, 4);
  h.writeUInt16LE(op, 6);
  h.writeBigUInt64LE(requestId, 8);
  h.writeUInt32LE(count, 16);
  h.writeUInt32LE(meta.length, 20);
  h.writeBigUInt64LE(BigInt(payloadBytes), 24);
  h.writeUInt32LE(crc32c(meta), 32);
  h.writeUInt32LE(crc32c(h.subarray(0, 36)), 36);
  return h;
}

/**
 * One direction's AES-256-GCM: nonce = 4 zero bytes | frame counter (u64 LE). The header is associated data; the
 * entry table and payload are encrypted when the session encrypts, else associated data too (GMAC).
 */
class Direction {
  #counter = 0n;
  constructor(
    private readonly key: Buffer,
    private readonly encrypt: boolean,
  ) {}
  #nonce(): Buffer {
    const iv = Buffer.alloc(12);
    iv.writeBigUInt64LE(this.#counter++, 4);
    return iv;
  }
  /** The body as it goes on the wire, and the tag that follows it. */
  seal(header: Buffer, body: Buffer): { body: Buffer; tag: Buffer } {
    const c = createCipheriv('aes-256-gcm', this.key, this.#nonce());
    if (this.encrypt) {
      c.setAAD(header);
      const sealed = Buffer.concat([c.update(body), c.final()]);
      return { body: sealed, tag: c.getAuthTag() };
    }
    c.setAAD(Buffer.concat([header, body]));
    c.final();
    return { body, tag: c.getAuthTag() };
  }
  /** The body as sent; throws when the tag does not match. */
  open(header: Buffer, body: Buffer, tag: Buffer): Buffer {
    const d = createDecipheriv('aes-256-gcm', this.key, this.#nonce());
    d.setAuthTag(tag);
    if (this.encrypt) {
      d.setAAD(header);
      return Buffer.concat([d.update(body), d.final()]);
    }
    d.setAAD(Buffer.concat([header, body]));
    d.final();
    return body;
  }
}

/** A session: the handshake as described, then authenticated frames both ways. */
class SpecClient {
  readonly socket: Socket;
  readonly reader: Reader;
  tx: Direction | undefined;
  rx: Direction | undefined;
  welcomeMatched = false;
  lastFrame: Buffer | undefined;

  private constructor(socket: Socket) {
    this.socket = socket;
    this.reader = new Reader(socket);
  }

  static async connect(port: number, clientFlags: number): Promise<SpecClient> {
    const socket = connect({ host: '127.0.0.1', port });
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    const c = new SpecClient(socket);
    const challenge = await c.readFrame();
    expect(challenge.op).toBe(OP.challenge);
    expect(challenge.payload).toHaveLength(36);
    const sn = challenge.payload.subarray(0, 32);
    const serverFlags = challenge.payload.readUInt32LE(32);
    expect(serverFlags & FLAG.secret).toBe(FLAG.secret);
    const cn = randomBytes(32);
    const flags = (n: number) => {
      const b = Buffer.alloc(4);
      b.writeUInt32LE(n);
      return b;
    };
    const transcript = (role: string) => createHmac('sha256', SECRET).update(Buffer.concat([Buffer.from(`tiersync-peer-v1 ${role}`), sn, cn, flags(serverFlags), flags(clientFlags)])).digest();
    c.writeFrame(OP.hello, 0n, [], Buffer.concat([cn, flags(clientFlags), transcript('client')]));
    const welcome = await c.readFrame();
    expect(welcome.op).toBe(OP.welcome);
    c.welcomeMatched = welcome.payload.equals(transcript('server'));
    // HKDF-SHA256 (RFC 5869): salt sn | cn, info "tiersync-peer-v1 <direction>" | client flags (u32 LE).
    const key = (direction: string) => Buffer.from(hkdfSync('sha256', SECRET, Buffer.concat([sn, cn]), Buffer.concat([Buffer.from(`tiersync-peer-v1 ${direction}`), flags(clientFlags)]), 32));
    const encrypt = (clientFlags & FLAG.encrypt) !== 0;
    c.tx = new Direction(key('c2s'), encrypt);
    c.rx = new Direction(key('s2c'), encrypt);
    return c;
  }

  writeFrame(op: number, requestId: bigint, entries: Entry[], payload = Buffer.alloc(0)): void {
    const meta = encodeEntries(entries);
    // The header's metaCrc is the CRC32C of the entry table as encoded, before any encryption.
    const header = encodeHeader(op, requestId, entries.length, meta, payload.length);
    let frame: Buffer;
    if (this.tx) {
      const { body, tag } = this.tx.seal(header, Buffer.concat([meta, payload]));
      frame = Buffer.concat([header, body, tag]);
    } else {
      frame = Buffer.concat([header, meta, payload]);
    }
    this.lastFrame = frame;
    this.socket.write(frame);
  }

  async readFrame(): Promise<Frame> {
    const header = await this.reader.read(40);
    expect(header.readUInt32LE(0)).toBe(MAGIC);
    expect(header.readUInt32LE(36)).toBe(crc32c(header.subarray(0, 36)));
    const count = header.readUInt32LE(16);
    const metaBytes = header.readUInt32LE(20);
    let body = await this.reader.read(metaBytes + Number(header.readBigUInt64LE(24)));
    if (this.rx) body = this.rx.open(header, body, await this.reader.read(16));
    const meta = body.subarray(0, metaBytes);
    expect(crc32c(meta)).toBe(header.readUInt32LE(32));
    return { header, op: header.readUInt16LE(6), requestId: header.readBigUInt64LE(8), entries: decodeEntries(meta, count), meta, payload: body.subarray(metaBytes) };
  }

  /** GET of bytes [offset, offset + length) of a page: the request's crc32c field carries the offset. */
  async getRange(requestId: bigint, key: string, offset: number, length: number): Promise<{ entry: Entry; bytes: Buffer; trailer: Buffer }> {
    this.writeFrame(OP.get, requestId, [{ key, status: 0, flags: ENTRY.range, length, crc32c: offset }]);
    const r = await this.readFrame();
    expect(r.op).toBe(OP.getData);
    expect(r.requestId).toBe(requestId);
    const entry = r.entries[0]!;
    return { entry, bytes: r.payload.subarray(0, entry.length), trailer: r.payload.subarray(entry.length) };
  }

  close(): void {
    this.socket.destroy();
  }
}

describe('the peer wire format as peer_protocol.h describes it', () => {
  it('serves ranges to clients with and without kFlagRangeCrcs: announced (two CRC32Cs) only to those that asked', async () => {
    const engine = new TransferEngine({ threads: 1 });
    const context = { engine, pageBytes: PAGE, fingerprint: 'spec' };
    const host = new HostTier(`host://?capacity=${8 * PAGE}`, context);
    await host.open();
    const server = servePeer(host, { secret: SECRET });
    const writer = new PeerTier(`peer://127.0.0.1:${server.port}?secret=${SECRET}&streams=1`, context);
    const arena = HostArena.create({ capacity: PAGE });
    const clients: SpecClient[] = [];
    try {
      // Stored by a PUT: the server keeps the page's chunk CRC32Cs as it lands, so aligned ranges can be announced.
      const page = arena.view(0, PAGE);
      for (let i = 0; i < PAGE; i++) page[i] = (i * 13 + (i >>> 9)) & 0xff;
      await writer.open();
      await writer.write([{ key: testKey(1), source: { arena, offset: 0, length: PAGE } }]);
      const range = Buffer.from(page.subarray(CHUNK, 3 * CHUNK));

      const before = server.stats();
      const old = await SpecClient.connect(server.port, 0);
      clients.push(old);
      expect(old.welcomeMatched).toBe(true);
      const a = await old.getRange(1n, testKey(1), CHUNK, 2 * CHUNK);
      expect(a.entry).toMatchObject({ status: 0, length: 2 * CHUNK, crc32c: crc32c(page) });
      expect(a.entry.flags & ENTRY.rangeAnnounced).toBe(0);
      expect(a.bytes.equals(range)).toBe(true);
      // One CRC32C after the range: checked by the server before it left.
      expect(a.trailer).toHaveLength(4);
      expect(a.trailer.readUInt32LE(0)).toBe(crc32c(range));
      expect(server.stats().rangesAnnounced).toBe(before.rangesAnnounced);
      expect(server.stats().rangesByChunk).toBe(before.rangesByChunk + 1);

      const current = await SpecClient.connect(server.port, FLAG.rangeCrcs);
      clients.push(current);
      const b = await current.getRange(1n, testKey(1), CHUNK, 2 * CHUNK);
      expect(b.entry.flags & ENTRY.rangeAnnounced).toBe(ENTRY.rangeAnnounced);
      expect(b.bytes.equals(range)).toBe(true);
      // Two: the CRC32C the range must have (joined from the chunk table), then that of the bytes as sent.
      expect(b.trailer).toHaveLength(8);
      expect([b.trailer.readUInt32LE(0), b.trailer.readUInt32LE(4)]).toEqual([crc32c(range), crc32c(range)]);
      expect(server.stats().rangesAnnounced).toBe(before.rangesAnnounced + 1);
    } finally {
      for (const c of clients) c.close();
      await writer.close();
      server.close();
      await host.close();
      arena.close();
      await engine.close();
    }
  });

  it.each([
    ['authenticated', 0],
    ['encrypted', FLAG.encrypt],
  ])('PUT (CRC32C computed by the server), whole GET, HAS and DELETE, %s', async (_, flags) => {
    const engine = new TransferEngine({ threads: 1 });
    const host = new HostTier(`host://?capacity=${4 * PAGE}`, { engine, pageBytes: PAGE, fingerprint: 'spec' });
    await host.open();
    const server = servePeer(host, { secret: SECRET });
    const clients: SpecClient[] = [];
    try {
      const c = await SpecClient.connect(server.port, flags);
      clients.push(c);
      const page = Buffer.alloc(PAGE);
      for (let i = 0; i < PAGE; i++) page[i] = (i * 31 + 7) & 0xff;
      const key = testKey(3);
      const entry = (e: Partial<Entry>): Entry => ({ key, status: 0, flags: 0, length: 0, crc32c: 0, ...e });

      c.writeFrame(OP.put, 1n, [entry({ flags: ENTRY.computeCrc, length: PAGE })], page);
      const put = await c.readFrame();
      expect(put.op).toBe(OP.putAck);
      expect(put.entries).toEqual([entry({ status: STATUS.ok, length: PAGE, crc32c: crc32c(page) })]);
      expect(host.hasNow([key])).toEqual([true]);

      c.writeFrame(OP.get, 2n, [entry({})]);
      const get = await c.readFrame();
      expect(get.op).toBe(OP.getData);
      expect(get.entries).toEqual([entry({ status: STATUS.ok, length: PAGE, crc32c: crc32c(page) })]);
      expect(get.payload.equals(page)).toBe(true);

      const has = async (id: bigint) => {
        c.writeFrame(OP.has, id, [entry({}), entry({ key: testKey(4) })]);
        const r = await c.readFrame();
        expect(r.op).toBe(OP.hasAck);
        return r.entries.map((e) => e.status);
      };
      expect(await has(3n)).toEqual([STATUS.ok, STATUS.miss]);
      c.writeFrame(OP.delete, 4n, [entry({})]);
      const del = await c.readFrame();
      expect(del.op).toBe(OP.deleteAck);
      expect(del.entries[0]!.status).toBe(STATUS.ok);
      expect(await has(5n)).toEqual([STATUS.miss, STATUS.miss]);
      expect(server.stats()).toMatchObject({ putRequests: 1, getRequests: 1, hasRequests: 2, deleteRequests: 1, authFailures: 0 });
    } finally {
      for (const c of clients) c.close();
      server.close();
      await host.close();
      await engine.close();
    }
  });

  it('drops the connection on a replayed frame and on a flag stripped from the handshake', async () => {
    const engine = new TransferEngine({ threads: 1 });
    const host = new HostTier(`host://?capacity=${4 * PAGE}`, { engine, pageBytes: PAGE, fingerprint: 'spec' });
    await host.open();
    const server = servePeer(host, { secret: SECRET });
    const clients: SpecClient[] = [];
    try {
      const c = await SpecClient.connect(server.port, 0);
      clients.push(c);
      const miss = await c.getRange(7n, testKey(2), 0, CHUNK);
      expect(miss.entry.status).toBe(1); // kMiss
      // The same bytes again: the server's frame counter moved on, so the tag no longer matches.
      const failures = server.stats().authFailures;
      c.socket.write(c.lastFrame!);
      const refused = await c.readFrame();
      expect(refused.op).toBe(OP.error);
      expect(refused.payload.toString()).toMatch(/failed authentication/);
      await expect(c.reader.read(1)).rejects.toThrow(/closed/);
      expect(server.stats().authFailures).toBe(failures + 1);

      // A HELLO whose flags differ from those its MAC covers (a downgrade on the path) is refused.
      const socket = connect({ host: '127.0.0.1', port: server.port });
      await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
      const reader = new Reader(socket);
      const head = await reader.read(40);
      const challenge = await reader.read(Number(head.readBigUInt64LE(24)));
      const sn = challenge.subarray(0, 32);
      const cn = randomBytes(32);
      const le = (n: number) => {
        const b = Buffer.alloc(4);
        b.writeUInt32LE(n);
        return b;
      };
      const mac = createHmac('sha256', SECRET).update(Buffer.concat([Buffer.from('tiersync-peer-v1 client'), sn, cn, challenge.subarray(32, 36), le(FLAG.rangeCrcs)])).digest();
      const hello = Buffer.concat([cn, le(0), mac]); // the flag stripped, the MAC left as it was
      socket.write(Buffer.concat([encodeHeader(OP.hello, 0n, 0, Buffer.alloc(0), hello.length), hello]));
      const answer = await reader.read(40);
      expect(answer.readUInt16LE(6)).toBe(OP.error);
      expect((await reader.read(Number(answer.readBigUInt64LE(24)))).toString()).toMatch(/HMAC|secret/);
      socket.destroy();
    } finally {
      for (const c of clients) c.close();
      server.close();
      await host.close();
      await engine.close();
    }
  });
});
