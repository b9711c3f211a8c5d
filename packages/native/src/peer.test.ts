import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { HostArena, PageAllocator, PeerClient, PeerServer, PeerStatus, TierSyncError, crc32c, formatPeerFrames, peerFrameCrypto, peerFrames, probeMachine, type PeerFrameCrypto, type PeerServerRequest, type Slot } from './index.js';
import { pattern } from './test-helpers.js';

const PAGE = 64 * 1024;
const key = (i: number) => i.toString(16).padStart(32, '0');

/** A minimal page table over an arena: what a host tier does, reduced to what the data plane needs. */
function serve(arena: HostArena, options: { secret?: string; slots?: number; encrypt?: boolean } = {}) {
  const alloc = new PageAllocator({ capacity: (options.slots ?? 32) * PAGE, pageBytes: PAGE });
  const table = new Map<string, { slot: Slot; length: number; crc: number }>();
  const reserved = new Map<string, Slot>();
  const log: PeerServerRequest[] = [];
  const server = new PeerServer(
    arena,
    (r) => {
      log.push(r);
      const n = r.keys.length;
      if (r.op === 'put' && r.phase === 'plan') {
        const offsets = new Float64Array(n).fill(-1);
        const statuses = new Uint8Array(n);
        r.keys.forEach((k, i) => {
          if (table.has(k)) return void (statuses[i] = PeerStatus.existing);
          const s = alloc.allocate(1);
          if (!s) return void (statuses[i] = PeerStatus.full);
          reserved.set(k, s[0]!);
          offsets[i] = s[0]! * PAGE;
        });
        return { offsets, statuses };
      }
      if (r.op === 'put' && r.phase === 'finish') {
        r.keys.forEach((k, i) => {
          const s = reserved.get(k);
          if (s === undefined) return;
          reserved.delete(k);
          if (!r.failed && r.outcome![i] === PeerStatus.ok) table.set(k, { slot: s, length: r.lengths[i]!, crc: r.crcs[i]! });
          else alloc.free([s]);
        });
        return;
      }
      if (r.op === 'get' && r.phase === 'plan') {
        const offsets = new Float64Array(n).fill(-1);
        const statuses = new Uint8Array(n).fill(PeerStatus.miss);
        const lengths = new Uint32Array(n);
        const crcs = new Uint32Array(n);
        r.keys.forEach((k, i) => {
          const p = table.get(k);
          if (!p) return;
          offsets[i] = p.slot * PAGE;
          statuses[i] = PeerStatus.ok;
          lengths[i] = p.length;
          crcs[i] = p.crc;
        });
        return { offsets, statuses, lengths, crcs };
      }
      if (r.op === 'has' && r.phase === 'plan') {
        return { offsets: new Float64Array(n).fill(-1), statuses: Uint8Array.from(r.keys, (k) => (table.has(k) ? PeerStatus.ok : PeerStatus.miss)) };
      }
      return r.phase === 'plan' ? { offsets: new Float64Array(n).fill(-1), statuses: new Uint8Array(n) } : undefined;
    },
    options.secret ? { secret: options.secret, timeoutMs: 5000, ...(options.encrypt ? { encrypt: true } : {}) } : { timeoutMs: 5000 },
  );
  return { server, table, log };
}

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

describe('peer data plane', () => {
  it('puts and gets pages byte-exact over several streams, with a secret', async () => {
    const remote = HostArena.create({ capacity: 32 * PAGE });
    const { server, table } = serve(remote, { secret: 's3cret' });
    const client = await PeerClient.connect({ host: '127.0.0.1', port: server.port, secret: 's3cret', streams: 3 });
    cleanups.push(() => client.close(), () => server.close());
    expect(client.streams).toBe(3);
    const local = HostArena.create({ capacity: 16 * PAGE });
    pattern(local.view(0, 16 * PAGE), 11);
    const keys = Array.from({ length: 8 }, (_, i) => key(i));
    const offsets = Float64Array.from(keys, (_, i) => i * PAGE);
    const lengths = Uint32Array.from(keys, (_, i) => PAGE - i * 100);
    const crcs = Uint32Array.from(keys, (_, i) => crc32c(local.view(i * PAGE, lengths[i]!)));
    // Split over two requests so two streams work at once.
    const [a, b] = await Promise.all([
      client.put(local, keys.slice(0, 4), offsets.slice(0, 4), lengths.slice(0, 4), crcs.slice(0, 4)),
      client.put(local, keys.slice(4), offsets.slice(4), lengths.slice(4), crcs.slice(4)),
    ]);
    expect([...a.statuses, ...b.statuses]).toEqual(keys.map(() => PeerStatus.ok));
    expect(table.size).toBe(8);
    const again = await client.put(local, [keys[0]!], offsets.slice(0, 1), lengths.slice(0, 1), crcs.slice(0, 1));
    expect(again.statuses[0]).toBe(PeerStatus.existing);

    const got = await client.get(local, [...keys, key(99)], Float64Array.from({ length: 9 }, (_, i) => (8 + (i % 8)) * PAGE), new Uint32Array(9).fill(PAGE));
    expect([...got.statuses]).toEqual([...keys.map(() => PeerStatus.ok), PeerStatus.miss]);
    for (let i = 0; i < 8; i++) {
      expect(got.lengths[i]).toBe(lengths[i]);
      expect(Buffer.compare(local.view((8 + i) * PAGE, lengths[i]!), local.view(i * PAGE, lengths[i]!))).toBe(0);
    }
    expect([...(await client.has([key(1), key(50)])).statuses]).toEqual([PeerStatus.ok, PeerStatus.miss]);
  });

  it('encrypts frames when asked, computes unknown CRC32Cs on the server once, and enforces a server that requires encryption', async () => {
    const remote = HostArena.create({ capacity: 32 * PAGE });
    const { server, table } = serve(remote, { secret: 'k', encrypt: true });
    cleanups.push(() => server.close());
    // The server requires encryption: a client that asks for it and one that does not both end up encrypting
    // (the client adopts the server's requirement), so both work.
    for (const encrypt of [true, false]) {
      const client = await PeerClient.connect({ host: '127.0.0.1', port: server.port, secret: 'k', streams: 2, encrypt });
      cleanups.push(() => client.close());
      const local = HostArena.create({ capacity: 8 * PAGE });
      pattern(local.view(0, 8 * PAGE), encrypt ? 5 : 6);
      const keys = Array.from({ length: 4 }, (_, i) => key(encrypt ? 40 + i : 50 + i));
      const put = await client.put(local, keys, Float64Array.from(keys, (_, i) => i * PAGE), new Uint32Array(4).fill(PAGE - 7));
      expect([...put.statuses]).toEqual(keys.map(() => PeerStatus.ok));
      expect([...put.crcs]).toEqual(keys.map((_, i) => crc32c(local.view(i * PAGE, PAGE - 7))));
      expect(keys.map((k) => table.get(k)!.crc)).toEqual([...put.crcs]);
      const got = await client.get(local, keys, Float64Array.from(keys, (_, i) => (4 + i) * PAGE), new Uint32Array(4).fill(PAGE));
      expect([...got.statuses]).toEqual(keys.map(() => PeerStatus.ok));
      for (let i = 0; i < 4; i++) expect(Buffer.compare(local.view((4 + i) * PAGE, PAGE - 7), local.view(i * PAGE, PAGE - 7))).toBe(0);
    }
    expect(server.stats().authFailures).toBe(0);
  });

  it('refuses a page whose bytes do not match the declared CRC32C, and reports a full tier', async () => {
    const remote = HostArena.create({ capacity: 2 * PAGE });
    const { server, table } = serve(remote, { slots: 2 });
    const client = await PeerClient.connect({ host: '127.0.0.1', port: server.port, streams: 1 });
    cleanups.push(() => client.close(), () => server.close());
    const local = HostArena.create({ capacity: 4 * PAGE });
    pattern(local.view(0, 4 * PAGE), 3);
    const crc = crc32c(local.view(0, PAGE));
    const r = await client.put(local, [key(1), key(2), key(3)], Float64Array.of(0, PAGE, 2 * PAGE), new Uint32Array(3).fill(PAGE), Uint32Array.of(crc ^ 1, crc32c(local.view(PAGE, PAGE)), crc32c(local.view(2 * PAGE, PAGE))));
    expect([...r.statuses]).toEqual([PeerStatus.badChecksum, PeerStatus.ok, PeerStatus.full]);
    expect([...table.keys()]).toEqual([key(2)]);
    // The stream stayed in sync after draining the refused pages.
    expect((await client.has([key(2)])).statuses[0]).toBe(PeerStatus.ok);
  });

  it("refuses a PUT page longer than the pool's slots even where the plan grants a slot, leaving the next slot's page intact", async () => {
    // Slots of 8 KiB; a client with 16 KiB pages. The plan below is wrong on purpose (it grants slot 0 to any
    // length): the data plane must not write past the slot into slot 1.
    const SLOT = 8 * 1024;
    const remote = HostArena.create({ capacity: 4 * SLOT });
    remote.view(SLOT, SLOT).fill(0xab);
    const finished: PeerServerRequest[] = [];
    const server = new PeerServer(
      remote,
      (r) => {
        if (r.phase === 'finish') return void finished.push(r);
        return { offsets: new Float64Array(r.keys.length).fill(0), statuses: new Uint8Array(r.keys.length).fill(PeerStatus.ok) };
      },
      { timeoutMs: 5000 },
      { commit: () => ({}), release: () => undefined },
    );
    // One granted slot (the pool knows the slot size); a page longer than it goes to the plan.
    server.grant(Float64Array.of(3 * SLOT), SLOT);
    const client = await PeerClient.connect({ host: '127.0.0.1', port: server.port, streams: 1 });
    cleanups.push(() => client.close(), () => server.close());
    const local = HostArena.create({ capacity: 2 * SLOT });
    pattern(local.view(0, 2 * SLOT), 9);
    const r = await client.put(local, [key(1)], Float64Array.of(0), Uint32Array.of(2 * SLOT), Uint32Array.of(crc32c(local.view(0, 2 * SLOT))));
    expect(r.statuses[0]).toBe(PeerStatus.outOfRange);
    expect(finished[0]!.outcome![0]).toBe(PeerStatus.outOfRange);
    expect(remote.view(SLOT, SLOT).every((b) => b === 0xab)).toBe(true);
    // The refused page was drained: the stream is still in sync.
    expect((await client.has([key(1)])).statuses).toHaveLength(1);
  });

  it('fails the handshake with a wrong or missing secret, never serving data', async () => {
    const remote = HostArena.create({ capacity: PAGE });
    const { server, log } = serve(remote, { secret: 'right' });
    cleanups.push(() => server.close());
    const wrong = await PeerClient.connect({ host: '127.0.0.1', port: server.port, secret: 'wrong', streams: 1 }).catch((e: TierSyncError) => e);
    expect(wrong).toBeInstanceOf(TierSyncError);
    expect((wrong as TierSyncError).code).toBe('ERR_AUTH');
    const none = await PeerClient.connect({ host: '127.0.0.1', port: server.port, streams: 1 }).catch((e: TierSyncError) => e);
    expect((none as TierSyncError).code).toBe('ERR_AUTH');
    expect(log).toEqual([]);
    expect(server.stats().authFailures).toBeGreaterThanOrEqual(1);
  });

  it('refuses to listen beyond loopback without a secret', () => {
    const arena = HostArena.create({ capacity: PAGE });
    expect(() => new PeerServer(arena, () => undefined, { host: '0.0.0.0' })).toThrow(/only listen on loopback/);
  });

  it('times out connecting to a peer that does not answer, and names a refused connection', async () => {
    const refused = await PeerClient.connect({ host: '127.0.0.1', port: 1, streams: 1, timeoutMs: 2000 }).catch((e: TierSyncError) => e);
    expect((refused as TierSyncError).code).toBe('ERR_IO');
    expect((refused as Error).message).toMatch(/refused/i);
  });

  it('fails queued requests with ERR_CLOSED when the client closes', async () => {
    const remote = HostArena.create({ capacity: PAGE });
    const { server } = serve(remote);
    cleanups.push(() => server.close());
    const client = await PeerClient.connect({ host: '127.0.0.1', port: server.port, streams: 1 });
    client.close();
    expect(() => client.has([key(1)])).toThrow(/closed/);
  });
});

describe('peer frame crypto', () => {
  const newer = (a: number[], b: number[]) => a[0]! - b[0]! || a[1]! - b[1]! || a[2]! - b[2]!;
  const number = (text: string) => /(\d+)\.(\d+)\.(\d+)/.exec(text)!.slice(1).map(Number);
  /** peerFrameCrypto() in a fresh process with TIERSYNC_PEER_FRAME_CRYPTO set to `wanted` (or unset). */
  const inProcess = (wanted?: string): PeerFrameCrypto => {
    const env = { ...process.env };
    delete env.TIERSYNC_PEER_FRAME_CRYPTO;
    if (wanted) env.TIERSYNC_PEER_FRAME_CRYPTO = wanted;
    // The addon itself, as addon.ts finds it (the sanitizer script's build through TIERSYNC_NATIVE_ADDON).
    const addon = process.env.TIERSYNC_NATIVE_ADDON ?? fileURLToPath(new URL('../build/Release/tiersync_native.node', import.meta.url));
    const script = `console.log(JSON.stringify(require(${JSON.stringify(addon)}).peerFrameCrypto()))`;
    return JSON.parse(execFileSync(process.execPath, ['-e', script], { env, encoding: 'utf8' })) as PeerFrameCrypto;
  };
  // IPsec-MB's VAES AVX-512 GCM runs where its library is installed and the CPU has those instructions.
  const cpu = readFileSync('/proc/cpuinfo', 'utf8');
  const vectorGcm = process.arch === 'x64' && ['avx512f', 'vaes', 'vpclmulqdq'].every((f) => new RegExp(`\\b${f}\\b`).test(cpu));
  const ipsecMb = ['/usr/lib/x86_64-linux-gnu/libIPSec_MB.so.1', '/usr/lib/libIPSec_MB.so.1'].some((p) => existsSync(p));

  it('names the library that seals frames, the same on every call: IPsec-MB where its vector GCM runs, else the newer OpenSSL', () => {
    const c = peerFrameCrypto();
    expect(peerFrameCrypto()).toEqual(c);
    expect(probeMachine().peerFrames).toEqual(c); // what doctor and version print
    expect(formatPeerFrames(c)).toBe(`${c.source} (${c.version})`);
    const found = inProcess();
    if (vectorGcm && ipsecMb && found.source === 'ipsec-mb') expect(found.version).toMatch(/^Intel IPsec-MB \d+\.\d+\.\d+ \(VAES AVX-512\)$/);
    else {
      // Without the library or the instructions (or an addon built without its header): Node's OpenSSL unless the
      // system's is at least as new.
      expect(found.source).not.toBe('ipsec-mb');
      expect(found.version).toMatch(/^OpenSSL \d+\.\d+\.\d+/);
      const node = number(process.versions.openssl);
      if (found.source === 'node') expect(newer(number(found.version), node)).toBe(0);
      else expect(newer(number(found.version), node)).toBeGreaterThanOrEqual(0);
    }
  });

  it('uses the library TIERSYNC_PEER_FRAME_CRYPTO names where it loads', () => {
    const node = inProcess('node');
    expect(node.source).toBe('node');
    expect(newer(number(node.version), number(process.versions.openssl))).toBe(0);
    expect(['system', 'node']).toContain(inProcess('system').source);
    // Where IPsec-MB cannot run, asking for it changes nothing.
    if (vectorGcm && ipsecMb) expect(inProcess('ipsec-mb').source).toBe('ipsec-mb');
    else expect(inProcess('ipsec-mb')).toEqual(inProcess());
  });

  it('refuses a name that is no library, from peerFrameCrypto() and before a server or client with a secret starts', () => {
    const env = { ...process.env, TIERSYNC_PEER_FRAME_CRYPTO: 'ipsecmb' };
    const index = fileURLToPath(new URL('../dist/index.js', import.meta.url));
    const script = `
      const n = await import(${JSON.stringify(index)});
      const outcome = (f) => { try { f(); return 'ok'; } catch (e) { return e instanceof n.TierSyncError ? e.code + ': ' + e.message : 'untyped ' + e; } };
      const arena = n.HostArena.create({ capacity: 1 << 20 });
      const plain = new n.PeerServer(arena, () => {}, {});
      const out = { crypto: outcome(() => n.peerFrameCrypto()), server: outcome(() => new n.PeerServer(arena, () => {}, { secret: 's' })), plain: 'ok', doctor: n.formatPeerFrames(n.probeMachine().peerFrames) };
      out.client = await n.PeerClient.connect({ host: '127.0.0.1', port: plain.port, secret: 's' }).then(() => 'ok', (e) => e.code + ': ' + e.message);
      plain.close();
      console.log(JSON.stringify(out));`;
    const out = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { env, encoding: 'utf8' })) as Record<string, string>;
    const refusal = "ERR_INVALID_ARGUMENT: TIERSYNC_PEER_FRAME_CRYPTO must be ipsec-mb, system or node, got 'ipsecmb'";
    expect(out).toEqual({ crypto: refusal, server: refusal, plain: 'ok', client: refusal, doctor: `none (${refusal.replace('ERR_INVALID_ARGUMENT: ', '')})` });
  });
});

describe('peer frame decoder', () => {
  it('round-trips frames', () => {
    const f = peerFrames.encode(10, 7, [{ key: key(5), length: 100, crc32c: 9, status: 0 }], 100);
    expect(peerFrames.decode(f)).toMatchObject({ op: 10, requestId: 7, count: 1, payloadBytes: 100, entries: [{ key: key(5), length: 100, crc32c: 9 }] });
  });

  it('refuses any corruption of a valid frame with ERR_PROTOCOL, never crashing', () => {
    const valid = peerFrames.encode(12, 1, [{ key: key(1) }, { key: key(2) }], 0);
    fc.assert(
      fc.property(fc.nat(valid.length - 1), fc.integer({ min: 1, max: 255 }), (at, flip) => {
        const bad = Uint8Array.from(valid);
        bad[at]! ^= flip;
        try {
          peerFrames.decode(bad);
          return false; // every byte is covered by a checksum
        } catch (e) {
          return (e as TierSyncError).code === 'ERR_PROTOCOL';
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses arbitrary bytes with ERR_PROTOCOL', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        try {
          peerFrames.decode(bytes);
          return true;
        } catch (e) {
          return (e as TierSyncError).code === 'ERR_PROTOCOL';
        }
      }),
      { numRuns: 5000 },
    );
  });
});
