import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { HostArena } from './arena.js';
import { crc32c } from './crc32c.js';
import { TierSyncError } from './errors.js';
import { RespDoorNative, RespMirrorOps, respPageKeys, type RespNativeEvent } from './resp.js';

/** The derivation written out with node:crypto (core/server/resp/page-keys.ts is the JavaScript one in use). */
function reference(salt: Uint8Array, tag: string, tenant: string, key: Uint8Array, generation: number, count: number): string[] {
  const t = Buffer.from(tenant, 'utf8');
  const head = Buffer.alloc(16);
  head.writeUInt32BE(t.length, 0);
  head.writeUInt32BE(key.length, 4);
  head.writeBigUInt64BE(BigInt(generation), 8);
  return Array.from({ length: count }, (_, i) => {
    const index = Buffer.alloc(4);
    index.writeUInt32BE(i, 0);
    return tag + createHash('sha256').update(Buffer.concat([salt, head, t, key, index])).digest('hex');
  });
}

describe('respPageKeys', () => {
  it('derives each value page key as SHA-256 of salt, lengths, generation, tenant, key and page index', () => {
    for (let round = 0; round < 10; round++) {
      const salt = randomBytes(1 + Math.floor(Math.random() * 64));
      const values = Array.from({ length: Math.floor(Math.random() * 10) }, (_, i) => ({
        tenant: i % 3 === 0 ? 'tenant-✓' : 'default',
        key: randomBytes(Math.floor(Math.random() * 200)),
        generation: i % 2 ? Number.MAX_SAFE_INTEGER - i : i,
        count: Math.floor(Math.random() * 5),
      }));
      expect(respPageKeys(salt, '72737076', values)).toEqual(values.flatMap((v) => reference(salt, '72737076', v.tenant, v.key, v.generation, v.count)));
    }
    // Many pages of one value (one absorbed prefix, one copied state per page).
    const salt = randomBytes(32);
    expect(respPageKeys(salt, '', [{ tenant: 'x', key: Buffer.alloc(0), generation: 3, count: 300 }])).toEqual(reference(salt, '', 'x', Buffer.alloc(0), 3, 300));
  });

  it('refuses malformed input with TierSyncError', () => {
    const ok = { tenant: 'default', key: Buffer.from('k'), generation: 1, count: 1 };
    expect(() => respPageKeys('salt' as unknown as Uint8Array, 't', [ok])).toThrow(TierSyncError);
    expect(() => respPageKeys(Buffer.alloc(4), 't', [{ ...ok, generation: 2 ** 53 }])).toThrow(/generation/);
    expect(() => respPageKeys(Buffer.alloc(4), 't', [{ ...ok, count: 1.5 }])).toThrow(/count/);
    expect(() => respPageKeys(Buffer.alloc(4), 't', [{ ...ok, key: 'k' as unknown as Uint8Array }])).toThrow(/keys\[0\]/);
    expect(() => respPageKeys(Buffer.alloc(4), 't', [{ ...ok, tenant: 5 as unknown as string }])).toThrow(/tenants\[0\]/);
  });
});

describe('RespDoorNative GETs from the mirror', () => {
  const PAGE = 4096;

  /** A door over a 16-slot arena with slot versions; `events` collects what it hands to JavaScript. */
  function door(): { d: RespDoorNative; arena: HostArena; versions: Uint32Array; events: RespNativeEvent[] } {
    const arena = HostArena.create({ capacity: 16 * PAGE });
    const versions = new Uint32Array(new SharedArrayBuffer(16 * 4));
    const events: RespNativeEvent[] = [];
    const d = new RespDoorNative(arena, { pageBytes: PAGE, slotVersions: versions }, (es) => events.push(...es));
    return { d, arena, versions, events };
  }

  async function until(pred: () => boolean): Promise<void> {
    const end = Date.now() + 5000;
    while (!pred()) {
      if (Date.now() > end) throw new Error('timed out');
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  it('counts granted slots (pooledSlots, as in stats()) until they are taken back', () => {
    const { d, arena } = door();
    try {
      expect(d.pooledSlots).toBe(0);
      d.grant(Float64Array.of(0, PAGE, 2 * PAGE), PAGE);
      expect(d.pooledSlots).toBe(3);
      expect(d.stats().pooledSlots).toBe(3);
      expect([...d.takePool()].sort((a, b) => a - b)).toEqual([0, PAGE, 2 * PAGE]);
      expect(d.pooledSlots).toBe(0);
    } finally {
      d.close();
      arena.close();
    }
  });

  it('answers GET of a mirrored value itself, and forwards it once the slot version or the bytes change', async () => {
    const { d, arena, versions, events } = door();
    try {
      // A value of 1.5 pages in slots 3 and 7.
      const value = randomBytes(PAGE + PAGE / 2);
      const at = [3 * PAGE, 7 * PAGE];
      arena.view(at[0]!, PAGE).set(value.subarray(0, PAGE));
      arena.view(at[1]!, PAGE / 2).set(value.subarray(PAGE));
      const put = (): void => {
        const ops = new RespMirrorOps();
        ops.put(1, Buffer.from('k'), value.length, at, [PAGE, PAGE / 2], [crc32c(value.subarray(0, PAGE)), crc32c(value.subarray(PAGE))], [3, 7], [versions[3]!, versions[7]!]);
        d.mirror(ops);
      };
      put();
      expect(d.stats().mirroredKeys).toBe(1);
      const s = net.connect(d.port, '127.0.0.1');
      let got = Buffer.alloc(0);
      s.on('data', (b) => (got = Buffer.concat([got, b])));
      await until(() => events.some((e) => e.kind === 'accept'));
      const conn = events.find((e) => e.kind === 'accept')!.conn;
      const get = Buffer.from('*2\r\n$3\r\nGET\r\n$1\r\nk\r\n');
      const reply = Buffer.concat([Buffer.from(`$${value.length}\r\n`), value, Buffer.from('\r\n')]);
      // Not fast yet, then fast under another tenant: forwarded.
      s.write(get);
      await until(() => events.some((e) => e.kind === 'data'));
      d.done(conn);
      d.setFast(conn, true, 2);
      s.write(get);
      await until(() => events.filter((e) => e.kind === 'data').length === 2);
      d.done(conn);
      // Its own tenant: answered natively, pipelined GETs too.
      d.setFast(conn, true, 1);
      s.write(Buffer.concat([get, get]));
      await until(() => got.length === 2 * reply.length);
      expect(got).toEqual(Buffer.concat([reply, reply]));
      // The second one reused the first one's reply (same entry, versions unchanged).
      expect(d.stats()).toMatchObject({ nativeGets: 2, hotGets: 1 });
      // The slot was freed (its version bumped): forwarded, the entry dropped.
      Atomics.add(versions, 7, 1);
      s.write(get);
      await until(() => events.filter((e) => e.kind === 'data').length === 3);
      d.done(conn);
      expect(d.stats()).toMatchObject({ nativeGets: 2, getMismatches: 1, mirroredKeys: 0 });
      // Bytes changed under a current version (damage): forwarded, never sent.
      put();
      arena.view(at[0]!, 1)[0] ^= 0xff;
      s.write(get);
      await until(() => events.filter((e) => e.kind === 'data').length === 4);
      d.done(conn);
      expect(d.stats()).toMatchObject({ nativeGets: 2, getMismatches: 2, mirroredKeys: 0 });
      // Dropped: forwarded.
      arena.view(at[0]!, 1)[0] ^= 0xff;
      put();
      const drop = new RespMirrorOps();
      drop.drop(1, Buffer.from('k'));
      d.mirror(drop);
      s.write(get);
      await until(() => events.filter((e) => e.kind === 'data').length === 5);
      expect(got.length).toBe(2 * reply.length);
      s.destroy();
    } finally {
      d.close();
      arena.close();
    }
  });

  it('answers MGET and EXISTS of mirrored values itself; a missing or changed key sends the whole command on', async () => {
    const { d, arena, versions, events } = door();
    try {
      // 'a': 1.5 pages in slots 3 and 7; 'b': one page in slot 9.
      const a = randomBytes(PAGE + PAGE / 2);
      const b = randomBytes(PAGE);
      arena.view(3 * PAGE, PAGE).set(a.subarray(0, PAGE));
      arena.view(7 * PAGE, PAGE / 2).set(a.subarray(PAGE));
      arena.view(9 * PAGE, PAGE).set(b);
      const ops = new RespMirrorOps();
      ops.put(1, Buffer.from('a'), a.length, [3 * PAGE, 7 * PAGE], [PAGE, PAGE / 2], [crc32c(a.subarray(0, PAGE)), crc32c(a.subarray(PAGE))], [3, 7], [versions[3]!, versions[7]!]);
      ops.put(1, Buffer.from('b'), b.length, [9 * PAGE], [PAGE], [crc32c(b)], [9], [versions[9]!]);
      d.mirror(ops);
      const s = net.connect(d.port, '127.0.0.1');
      let got = Buffer.alloc(0);
      s.on('data', (x) => (got = Buffer.concat([got, x])));
      await until(() => events.some((e) => e.kind === 'accept'));
      const conn = events.find((e) => e.kind === 'accept')!.conn;
      d.setFast(conn, true, 1);
      const command = (...args: string[]) => Buffer.concat([Buffer.from(`*${args.length}\r\n`), ...args.map((x) => Buffer.from(`$${x.length}\r\n${x}\r\n`))]);
      const bulk = (v: Buffer) => Buffer.concat([Buffer.from(`$${v.length}\r\n`), v, Buffer.from('\r\n')]);
      const forwarded = () => events.filter((e) => e.kind === 'data').length;
      // Answered here: the array of both values (one twice), then EXISTS.
      const want = Buffer.concat([Buffer.from('*3\r\n'), bulk(a), bulk(b), bulk(a), Buffer.from(':2\r\n')]);
      s.write(Buffer.concat([command('MGET', 'a', 'b', 'a'), command('exists', 'b', 'a')]));
      await until(() => got.length >= want.length);
      expect(got).toEqual(want);
      expect(d.stats()).toMatchObject({ nativeMgets: 1, nativeExists: 1, getMismatches: 0 });
      expect(forwarded()).toBe(0);
      // A key not mirrored: the whole MGET goes on, nothing of it answered here.
      s.write(command('MGET', 'a', 'nope'));
      await until(() => forwarded() === 1);
      d.done(conn);
      // 'b''s slot freed (its version bumped; the reply kept for it no longer serves): forwarded, its entry dropped;
      // 'a' alone still answered here.
      Atomics.add(versions, 9, 1);
      s.write(command('MGET', 'b', 'a'));
      await until(() => forwarded() === 2);
      d.done(conn);
      expect(d.stats()).toMatchObject({ nativeMgets: 1, getMismatches: 1, mirroredKeys: 1 });
      const before = got.length;
      s.write(command('MGET', 'a'));
      await until(() => got.length === before + 4 + bulk(a).length);
      expect(got.subarray(before)).toEqual(Buffer.concat([Buffer.from('*1\r\n'), bulk(a)]));
      expect(d.stats()).toMatchObject({ nativeMgets: 2 });
      s.destroy();
    } finally {
      d.close();
      arena.close();
    }
  });

  it('refuses malformed mirror ops and applies none of a malformed batch', () => {
    const { d, arena, versions } = door();
    try {
      const ops = (f: (o: RespMirrorOps) => void): RespMirrorOps => {
        const o = new RespMirrorOps();
        f(o);
        return o;
      };
      const good = (o: RespMirrorOps): void => o.put(1, Buffer.from('a'), 10, [0], [10], [0], [0], [versions[0]!]);
      expect(() => d.mirror(ops((o) => o.put(1, Buffer.from('k'), 10, [0], [9], [0], [0], [0])))).toThrow(/add up/);
      expect(() => d.mirror(ops((o) => o.put(1, Buffer.from('k'), 10, [16 * PAGE], [10], [0], [0], [0])))).toThrow(/outside the arena/);
      expect(() => d.mirror(ops((o) => o.put(1, Buffer.from('k'), 10, [0], [10], [0], [16], [0])))).toThrow(/slot/);
      expect(() => d.mirror(ops((o) => o.put(0, Buffer.from('k'), 10, [0], [10], [0], [0], [0])))).toThrow(TierSyncError);
      expect(() => d.mirror(ops((o) => o.put(1, Buffer.from('k'), PAGE + 1, [0], [PAGE + 1], [0], [0], [0])))).toThrow(/length/);
      expect(() =>
        d.mirror(
          ops((o) => {
            good(o);
            o.ops.push(7);
          }),
        ),
      ).toThrow(TierSyncError);
      expect(d.stats().mirroredKeys).toBe(0);
      expect(() => d.setFast(1, true, -1)).toThrow(/tenant/);
      d.mirror(ops(good));
      expect(d.stats().mirroredKeys).toBe(1);
    } finally {
      d.close();
      arena.close();
    }
  });

  /** Puts `value` (one page, slot `slot`) as key `key` of tenant 1 with `id`. */
  function putPage(d: RespDoorNative, arena: HostArena, versions: Uint32Array, key: string, slot: number, value: Buffer, id: number): void {
    arena.view(slot * PAGE, value.length).set(value);
    const ops = new RespMirrorOps();
    ops.put(1, Buffer.from(key), value.length, [slot * PAGE], [value.length], [crc32c(value)], [slot], [versions[slot]!], id);
    d.mirror(ops);
    expect(ops.empty).toBe(true);
  }

  /** A client of `d` made fast for tenant 1; `got` collects the bytes it receives. */
  async function fastClient(d: RespDoorNative, events: RespNativeEvent[]): Promise<{ s: net.Socket; conn: number; got: () => Buffer }> {
    const s = net.connect(d.port, '127.0.0.1');
    const chunks: Buffer[] = [];
    s.on('data', (b) => chunks.push(b));
    s.on('error', () => undefined);
    await until(() => events.some((e) => e.kind === 'accept'));
    const conn = events.find((e) => e.kind === 'accept')!.conn;
    d.setFast(conn, true, 1);
    return { s, conn, got: () => Buffer.concat(chunks) };
  }

  const getOf = (key: string) => Buffer.from(`*2\r\n$3\r\nGET\r\n$${key.length}\r\n${key}\r\n`);

  it('records each entry it answered GETs of once per takeServed() window, by the id it was put with (0: never)', async () => {
    const { d, arena, versions, events } = door();
    try {
      const a = randomBytes(100);
      const b = randomBytes(200);
      putPage(d, arena, versions, 'a', 1, a, 41);
      putPage(d, arena, versions, 'b', 2, b, 42);
      const quiet = randomBytes(50);
      putPage(d, arena, versions, 'quiet', 3, quiet, 0);
      expect(Array.from(d.takeServed())).toEqual([]);
      const { s, got } = await fastClient(d, events);
      const reply = (v: Buffer) => Buffer.concat([Buffer.from(`$${v.length}\r\n`), v, Buffer.from('\r\n')]);
      const expected = Buffer.concat([reply(b), reply(a), reply(b), reply(quiet), reply(a)]);
      s.write(Buffer.concat([getOf('b'), getOf('a'), getOf('b'), getOf('quiet'), getOf('a')]));
      await until(() => got().length >= expected.length);
      expect(got()).toEqual(expected);
      expect(d.stats()).toMatchObject({ nativeGets: 5, unrecordedGets: 0 });
      // Each once, in the order first served; the id-0 entry is never reported.
      expect(Array.from(d.takeServed())).toEqual([42, 41]);
      expect(Array.from(d.takeServed())).toEqual([]);
      // A new window records them again.
      s.write(getOf('a'));
      await until(() => d.stats().nativeGets === 6);
      expect(Array.from(d.takeServed())).toEqual([41]);
      // A replaced entry is reported by its new id.
      putPage(d, arena, versions, 'a', 4, a, 43);
      s.write(getOf('a'));
      await until(() => d.stats().nativeGets === 7);
      expect(Array.from(d.takeServed())).toEqual([43]);
      s.destroy();
    } finally {
      d.close();
      arena.close();
    }
  });

  it('counts as native (and hot) only the GETs it answered, not those the output limit hands to JavaScript', async () => {
    const arena = HostArena.create({ capacity: 16 * PAGE });
    const versions = new Uint32Array(new SharedArrayBuffer(16 * 4));
    const events: RespNativeEvent[] = [];
    const d = new RespDoorNative(arena, { pageBytes: PAGE, slotVersions: versions, maxOutputBytes: 4 * PAGE }, (es) => events.push(...es));
    try {
      // A 16-page value; 400 GETs of it (26 MB of replies) to a client that reads none: past what the kernel
      // buffers, replies queue, and beyond maxOutputBytes the GETs go to JavaScript.
      const value = randomBytes(16 * PAGE);
      const ops = new RespMirrorOps();
      const at = Array.from({ length: 16 }, (_, i) => i);
      at.forEach((i) => arena.view(i * PAGE, PAGE).set(value.subarray(i * PAGE, (i + 1) * PAGE)));
      ops.put(1, Buffer.from('v'), value.length, at.map((i) => i * PAGE), at.map(() => PAGE), at.map((i) => crc32c(value.subarray(i * PAGE, (i + 1) * PAGE))), at, at.map((i) => versions[i]!), 7);
      d.mirror(ops);
      const { s } = await fastClient(d, events);
      s.pause();
      const gets = 400;
      const get = getOf('v');
      s.write(Buffer.concat(Array.from({ length: gets }, () => get)));
      const forwarded = (): number => events.reduce((n, e) => n + (e.kind === 'data' ? e.bytes.length : 0), 0) / get.length;
      await until(() => d.stats().nativeGets + forwarded() === gets);
      const st = d.stats();
      expect(forwarded()).toBeGreaterThan(0);
      // The first GET made the reply; every later native one reused it. A forwarded GET counts in neither.
      expect(st.hotGets).toBe(st.nativeGets - 1);
      expect(Array.from(d.takeServed())).toEqual([7]);
      s.destroy();
    } finally {
      d.close();
      arena.close();
    }
  });
});
