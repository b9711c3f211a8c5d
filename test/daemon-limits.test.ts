// Limits of a `tiersync serve` daemon (child process) against clients that hold connections, send oversized
// frames or come without the secret: refused and counted, memory not grown, the daemon keeps serving.
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena, PeerClient } from '@tiersync/native';
import { TierSyncClient } from '@tiersync/core/client';
import { startDaemon, type Daemon } from './daemon-helpers.js';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;

/** Opens `n` raw TCP connections; resolves with them once each is connected or was refused. */
async function open(port: number, n: number): Promise<Array<{ socket: net.Socket; closed: Promise<void> }>> {
  const out: Array<{ socket: net.Socket; closed: Promise<void> }> = [];
  for (let i = 0; i < n; i++) {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    socket.on('data', () => undefined);
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    await new Promise<void>((resolve) => {
      socket.once('connect', () => resolve());
      socket.once('close', () => resolve());
    });
    out.push({ socket, closed });
  }
  return out;
}

/** How many of the sockets the server closed within `ms`. */
async function closedWithin(sockets: Array<{ closed: Promise<void> }>, ms: number): Promise<number> {
  let n = 0;
  await Promise.all(sockets.map((s) => Promise.race([s.closed.then(() => n++), new Promise((r) => setTimeout(r, ms))])));
  return n;
}

describe('daemon limits (child process)', () => {
  let dir: string;
  let daemon: Daemon;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-daemon-limits-'));
    daemon = await startDaemon(
      {
        model: 'daemon-limits@1',
        layout,
        tiers: [{ url: `host://?capacity=${64 * PAGE}&prefault=false`, name: 'host' }],
        index: { path: path.join(dir, 'index.sqlite') },
        http: { port: 0, token: 'sekret', maxConnections: 8 },
        peer: { port: 0, maxConnections: 4, maxPayloadBytes: 64 * 1024 },
        log: { level: 'info' },
      },
      dir,
    );
  });

  afterAll(async () => {
    if (daemon) expect(await daemon.stop()).toBe(0);
    rmSync(dir, { recursive: true, force: true });
  });

  it('closes peer connections beyond peer.maxConnections at once, and serves again when they go', async () => {
    const sockets = await open(daemon.peerPort, 10);
    // Connections that never complete the handshake hold a slot (until the socket deadline), never more than 4.
    expect(await closedWithin(sockets, 2000)).toBeGreaterThanOrEqual(6);
    const stats = (await (await fetch(`${daemon.url}/v1/stats`)).json()) as { peer: { refused: number; active: number } };
    expect(stats.peer.refused).toBeGreaterThanOrEqual(6);
    expect(stats.peer.active).toBeLessThanOrEqual(4);
    for (const s of sockets) s.socket.destroy();
    await expect.poll(async () => ((await (await fetch(`${daemon.url}/v1/stats`)).json()) as typeof stats).peer.active, { timeout: 5000 }).toBe(0);
    const peer = await PeerClient.connect({ host: '127.0.0.1', port: daemon.peerPort, streams: 1, timeoutMs: 5000 });
    peer.close();
  });

  it('refuses a peer frame larger than peer.maxPayloadBytes without storing anything', async () => {
    const arena = HostArena.create({ capacity: 16 * PAGE });
    const peer = await PeerClient.connect({ host: '127.0.0.1', port: daemon.peerPort, streams: 1, timeoutMs: 5000 });
    try {
      const keys = Array.from({ length: 16 }, (_, i) => `ab${i.toString(16).padStart(14, '0')}`);
      await expect(peer.put(arena, keys, Float64Array.from(keys, (_, i) => i * PAGE), new Uint32Array(16).fill(PAGE))).rejects.toMatchObject({ code: expect.stringMatching(/ERR_PROTOCOL|ERR_IO/) });
      const stats = (await (await fetch(`${daemon.url}/v1/stats`)).json()) as { tiers: Array<{ usedPages: number }> };
      expect(stats.tiers[0]!.usedPages).toBe(0);
    } finally {
      peer.close();
      arena.close();
    }
  });

  it('closes HTTP connections beyond http.maxConnections and keeps answering', async () => {
    const sockets = await open(daemon.httpPort, 20);
    expect(await closedWithin(sockets, 2000)).toBeGreaterThanOrEqual(12);
    for (const s of sockets) s.socket.destroy();
    await expect.poll(async () => (await fetch(`${daemon.url}/healthz`)).status, { timeout: 5000 }).toBe(200);
  });

  it('with http.token set, the client API requires it', async () => {
    await expect(TierSyncClient.connect({ url: daemon.url })).rejects.toMatchObject({ code: 'ERR_AUTH' });
    await expect(TierSyncClient.connect({ url: daemon.url, token: 'wrong' })).rejects.toMatchObject({ code: 'ERR_AUTH' });
    const c = await TierSyncClient.connect({ url: daemon.url, token: 'sekret' });
    try {
      // No shared-memory host tier here: the client falls back to the peer protocol.
      expect(c.transport).toBe('peer');
      expect((await c.lookup(['00000000000000aa'])).present).toEqual([false]);
    } finally {
      await c.close();
    }
    const r = await fetch(`${daemon.url}/v1/client/reserve`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ keys: ['00000000000000aa'], lengths: [1] }) });
    expect(r.status).toBe(401);
  });
});
