// A page whose bytes in the daemon's shared-memory host tier change after it was committed is never served: not to a
// same-host load, not to a peer, not to a RESP GET, not down to a lower tier. Each path reports it as an integrity
// failure (tiersync_integrity_failures_total{tier="host"}) and the daemon drops the damaged copy, so the key can be
// stored again. Commits record the client's CRC32C without a second read; these are the checks that make that safe.
import { randomFillSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
import { TierSyncClient } from '@tiersync/core/client';
import { freePort, startDaemon, type Daemon } from './daemon-helpers.js';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;
const HOST_PAGES = 24;

function key(tag: number, i: number): string {
  return `${tag.toString(16).padStart(8, '0')}${i.toString(16).padStart(8, '0')}`;
}

function randomPages(n: number): HostArena {
  const arena = HostArena.create({ capacity: n * PAGE });
  randomFillSync(arena.view(0, n * PAGE));
  return arena;
}

/** One RESP command over a fresh connection; resolves with the raw reply once it is complete. */
function resp(port: number, args: Array<string | Uint8Array>): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
    for (const a of args) {
      const b = typeof a === 'string' ? Buffer.from(a) : Buffer.from(a);
      parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
    }
    const socket = net.createConnection({ host: '127.0.0.1', port });
    let got = Buffer.alloc(0);
    socket.on('data', (c: Buffer) => {
      got = Buffer.concat([got, c]);
      const eol = got.indexOf('\r\n');
      if (eol < 0) return;
      const head = got.toString('latin1', 0, eol);
      const need = head[0] === '$' && Number(head.slice(1)) >= 0 ? eol + 2 + Number(head.slice(1)) + 2 : eol + 2;
      if (got.length < need) return;
      socket.end();
      resolve(got.subarray(0, need));
    });
    socket.on('error', reject);
    socket.write(Buffer.concat(parts));
  });
}

describe('daemon integrity: bytes changed after commit are never served', () => {
  let dir: string;
  let shm: string;
  let daemon: Daemon;
  let respPort: number;
  let mapped: HostArena;
  let shmClient: TierSyncClient;

  /** Changes one byte in the middle of the host-tier slot holding `bytes` (found by content: the bytes are random). */
  function damage(bytes: Uint8Array): void {
    const view = mapped.view(0, mapped.capacity);
    // A Buffer over the mapping itself (Buffer.from(view) would copy it).
    const all = Buffer.from(view.buffer, view.byteOffset, view.byteLength);
    const at = all.indexOf(Buffer.from(bytes.subarray(0, 64)));
    expect(at).toBeGreaterThanOrEqual(0);
    // Only one slot holds them (or the test would not know which copy it damaged).
    expect(all.indexOf(Buffer.from(bytes.subarray(0, 64)), at + 1)).toBe(-1);
    all[at + (bytes.length >> 1)] ^= 0x5a;
  }

  async function integrityFailures(): Promise<number> {
    const text = await (await fetch(`${daemon.url}/metrics`)).text();
    return Number(/tiersync_integrity_failures_total\{tier="host"\} (\d+)/.exec(text)?.[1] ?? NaN);
  }

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-daemon-integrity-'));
    shm = `/dev/shm/tiersync-daemon-integrity-${process.pid}`;
    respPort = await freePort();
    daemon = await startDaemon(
      {
        model: 'daemon-integrity@1',
        layout,
        // No write-through: pages reach fs only when pressure demotes them (the copy-down case decides when).
        tiers: [
          { url: `host://?capacity=${HOST_PAGES * PAGE}&shm=${shm}&prefault=false`, name: 'host' },
          { url: `fs://${dir}/fs?capacity=${1024 * PAGE}`, name: 'fs' },
        ],
        index: { path: path.join(dir, 'index.sqlite') },
        http: { port: 0 },
        peer: { port: 0 },
        resp: { port: respPort, stagingBytes: 4 << 20, valueWindowBytes: 1 << 20 },
        tenants: [
          { name: 'alice', token: 'token-alice' },
          { name: 'remote', token: 'token-remote', sharedMemory: false },
        ],
        client: { leaseMs: 5000, maxBatchPages: 256 },
        log: { level: 'info' },
      },
      dir,
    );
    shmClient = await TierSyncClient.connect({ url: daemon.url, token: 'token-alice', transport: 'shm' });
    expect(shmClient.hello.features).toEqual(expect.arrayContaining(['checked-on-serve', 'release-damaged']));
    const s = shmClient.hello.shm!;
    mapped = HostArena.create({ shmPath: s.path, capacity: s.capacity, pageSize: s.pageSize, fingerprint: s.fingerprint, create: false, attach: true });
  });

  afterAll(async () => {
    mapped?.close();
    await shmClient?.close();
    if (daemon) expect(await daemon.stop()).toBe(0);
    rmSync(dir, { recursive: true, force: true });
    rmSync(shm, { force: true });
  });

  it('same-host load: the copy-out check refuses it, the daemon confirms, drops and counts it; the key stores again', async () => {
    const src = randomPages(2);
    const dst = HostArena.create({ capacity: 2 * PAGE });
    try {
      const keys = [key(1, 0), key(1, 1)];
      expect(await shmClient.store(keys, [0, 1].map((i) => ({ arena: src, offset: i * PAGE, length: PAGE })))).toEqual({ stored: 2, existing: 0, badChecksum: [] });
      const before = await integrityFailures();
      damage(src.view(0, PAGE));
      const r = await shmClient.load(keys, [0, 1].map((i) => ({ arena: dst, offset: i * PAGE, length: PAGE })));
      expect(r).toMatchObject({ loaded: 1, missing: [0] });
      expect(Buffer.compare(Buffer.from(dst.view(PAGE, PAGE)), Buffer.from(src.view(PAGE, PAGE)))).toBe(0);
      expect(await integrityFailures()).toBe(before + 1);
      expect((await shmClient.lookup(keys)).present).toEqual([false, true]);
      // No ghost holds the key: it is stored (not 'existing') and loads intact.
      expect(await shmClient.store([keys[0]!], [{ arena: src, offset: 0, length: PAGE }])).toMatchObject({ stored: 1, existing: 0 });
      expect(await shmClient.load([keys[0]!], [{ arena: dst, offset: 0, length: PAGE }])).toMatchObject({ loaded: 1, missing: [] });
      expect(Buffer.compare(Buffer.from(dst.view(0, PAGE)), Buffer.from(src.view(0, PAGE)))).toBe(0);
    } finally {
      src.close();
      dst.close();
    }
  });

  it('peer read: the receiver refuses it, the daemon confirms, drops and counts it', async () => {
    const remote = await TierSyncClient.connect({ url: daemon.url, token: 'token-remote' });
    const src = randomPages(1);
    const dst = HostArena.create({ capacity: PAGE });
    try {
      expect(remote.transport).toBe('peer');
      const k = key(2, 0);
      expect(await remote.store([k], [{ arena: src, offset: 0, length: PAGE }])).toMatchObject({ stored: 1 });
      await expect.poll(async () => (await remote.lookup([k])).present, { timeout: 5000 }).toEqual([true]);
      const before = await integrityFailures();
      damage(src.view(0, PAGE));
      expect(await remote.load([k], [{ arena: dst, offset: 0, length: PAGE }])).toMatchObject({ loaded: 0, missing: [0] });
      expect(Buffer.compare(Buffer.from(dst.view(0, PAGE)), Buffer.from(src.view(0, PAGE)))).not.toBe(0);
      expect(await integrityFailures()).toBe(before + 1);
      expect((await remote.lookup([k])).present).toEqual([false]);
    } finally {
      src.close();
      dst.close();
      await remote.close();
    }
  });

  it('RESP GET: the host tier read check refuses it; GET answers nil and the failure is counted', async () => {
    const value = randomPages(3);
    try {
      const bytes = value.view(0, 3 * PAGE - 7);
      expect((await resp(respPort, ['SET', 'integrity:v', bytes])).toString()).toBe('+OK\r\n');
      // Not read before the damage: a GET the door thread answers keeps its reply (checked as it was made) and sends
      // it again while the slots are unchanged, so the damage would be found only by a later fresh read. An intact
      // value of the same kind reads back exact.
      const intact = randomFillSync(Buffer.alloc(PAGE));
      expect((await resp(respPort, ['SET', 'integrity:ok', intact])).toString()).toBe('+OK\r\n');
      const ok = await resp(respPort, ['GET', 'integrity:ok']);
      expect(Buffer.compare(ok.subarray(ok.indexOf('\r\n') + 2, ok.length - 2), intact)).toBe(0);
      const before = await integrityFailures();
      damage(value.view(PAGE, PAGE));
      const reply = (await resp(respPort, ['GET', 'integrity:v'])).toString('latin1');
      expect(['$-1\r\n', '_\r\n']).toContain(reply);
      await expect.poll(integrityFailures, { timeout: 5000 }).toBe(before + 1);
    } finally {
      value.close();
    }
  });

  it('copy down: a demotion reads the host copy with its check, so the damaged page never reaches fs', async () => {
    const src = randomPages(HOST_PAGES * 2);
    try {
      const victim = key(3, 0);
      expect(await shmClient.store([victim], [{ arena: src, offset: 0, length: PAGE }])).toMatchObject({ stored: 1 });
      const before = await integrityFailures();
      damage(src.view(0, PAGE));
      // Enough newer pages that the host tier's pressure demotes the oldest ones (the victim first) to fs.
      const more = Array.from({ length: HOST_PAGES * 2 - 1 }, (_, i) => key(3, i + 1));
      for (let i = 0; i < more.length; i += 8) {
        const part = more.slice(i, i + 8);
        await shmClient.store(part, part.map((_, j) => ({ arena: src, offset: (i + j + 1) * PAGE, length: PAGE })));
      }
      await expect.poll(integrityFailures, { timeout: 10_000 }).toBe(before + 1);
      const look = await shmClient.lookup([victim, ...more]);
      // Demotion did run (older intact pages are on fs now), and the damaged page is nowhere.
      expect(look.tiers.filter((t) => t === 'fs').length).toBeGreaterThan(0);
      expect(look.present[0]).toBe(false);
      const dst = HostArena.create({ capacity: PAGE });
      try {
        expect(await shmClient.load([victim], [{ arena: dst, offset: 0, length: PAGE }])).toMatchObject({ loaded: 0, missing: [0] });
        // An intact page that went down to fs comes back up through the host tier (with the CRC32C its index record
        // holds, checked again on the client's copy-out): byte-exact.
        const j = look.tiers.indexOf('fs');
        expect(j).toBeGreaterThan(0);
        expect(await shmClient.load([more[j - 1]!], [{ arena: dst, offset: 0, length: PAGE }])).toMatchObject({ loaded: 1, missing: [] });
        expect(Buffer.compare(Buffer.from(dst.view(0, PAGE)), Buffer.from(src.view(j * PAGE, PAGE)))).toBe(0);
      } finally {
        dst.close();
      }
    } finally {
      src.close();
    }
  });
});
