import { randomFillSync } from 'node:crypto';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
import { LATEST_KEY, WeightPublisher, WeightReceiver, manifestKey, type TensorSource } from './index.js';

const CHUNK = 64 * 1024;

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** `count` random u8 tensors of one chunk each, back to back in one host arena. */
function tensors(count: number): { arena: HostArena; tensors: TensorSource[] } {
  const arena = HostArena.create({ capacity: count * CHUNK });
  randomFillSync(arena.view(0, count * CHUNK));
  cleanup.push(() => arena.close());
  return { arena, tensors: Array.from({ length: count }, (_, i) => ({ name: `t${i}`, dtype: 'u8', shape: [CHUNK], arena, offset: i * CHUNK, length: CHUNK })) };
}

function publisher(slots = 128, keepVersions = 2): WeightPublisher {
  const p = new WeightPublisher({ capacity: slots * CHUNK, chunkBytes: CHUNK, keepVersions });
  cleanup.push(() => p.close());
  return p;
}

function receiver(slots = 128): WeightReceiver {
  const r = new WeightReceiver({ capacity: slots * CHUNK, slotBytes: CHUNK, memory: { kind: 'host' } });
  cleanup.push(() => r.close());
  return r;
}

const at = (port: number) => ({ host: '127.0.0.1', port });

describe('weights: a full store never evicts what a node announces', () => {
  it('publisher: every version it lists stays pullable; without room a publish fails with ERR_TIER_FULL', async () => {
    const model = tensors(16);
    const pub = publisher(21);
    const port = pub.serve();
    let full = 0;
    for (let s = 0; s < 6; s++) {
      if (s) randomFillSync(model.arena.view(((2 * s) % 16) * CHUNK, 2 * CHUNK));
      await pub.publishWeights(`v${s}`, model.tensors).catch((e: { code?: string }) => {
        expect(e.code).toBe('ERR_TIER_FULL');
        full++;
      });
      for (const v of pub.versions()) expect(pub.store.has(manifestKey(v))).toBe(true);
      expect(pub.store.has(LATEST_KEY)).toBe(true);
    }
    expect(full).toBeGreaterThan(0); // 21 slots cannot hold two versions, their manifests and a step
    const r = receiver();
    for (const v of pub.versions()) await expect(r.pullWeights(v, { from: at(port), timeoutMs: 5000 })).resolves.toMatchObject({ version: v });
    expect(await r.latest(at(port))).toBe(pub.versions().at(-1));
  });

  it('receiver: holds the manifest it announces (a downstream node can pull it), drops the one it left', async () => {
    const model = tensors(16);
    const pub = publisher();
    const pport = pub.serve();
    const rx = receiver(20);
    const rport = rx.serve();
    let pulled = 0;
    for (let s = 0; s < 3; s++) {
      if (s) randomFillSync(model.arena.view(s * CHUNK, 3 * CHUNK));
      await pub.publishWeights(`v${s}`, model.tensors);
      try {
        await rx.pullWeights(`v${s}`, { from: at(pport), timeoutMs: 5000 });
        pulled++;
      } catch (e) {
        expect(e).toMatchObject({ code: 'ERR_TIER_FULL' });
        continue;
      }
      expect(rx.store.has(manifestKey(`v${s}`))).toBe(true);
      if (s) expect(rx.store.has(manifestKey(`v${s - 1}`))).toBe(false);
      const down = receiver();
      await expect(down.pullWeights(undefined, { from: at(rport), timeoutMs: 5000 })).resolves.toMatchObject({ version: rx.version });
    }
    expect(pulled).toBeGreaterThan(0);
  });

  it('push: a receiver without room for the pushed chunks makes pushWeights fail, not resolve', async () => {
    const model = tensors(16);
    const pub = publisher();
    const rx = receiver(20);
    const port = rx.serve();
    rx.acceptPushes();
    const failed: unknown[] = [];
    rx.on('push:failed', (e) => failed.push(e));
    await pub.publishWeights('v0', model.tensors);
    await pub.pushWeights('v0', at(port));
    await expect.poll(() => rx.version).toBe('v0');
    randomFillSync(model.arena.view(CHUNK, 3 * CHUNK));
    await pub.publishWeights('v1', model.tensors);
    await expect(pub.pushWeights('v1', at(port))).rejects.toMatchObject({ code: 'ERR_IO' });
    expect(rx.version).toBe('v0');
  });
});

describe('weights: a served version is servable', () => {
  it('after a rollback A -> B -> A, chunks found only in the slot go back into the store for downstream pulls', async () => {
    const model = tensors(8);
    const a = Buffer.from(model.arena.view(0, 8 * CHUNK));
    const pub = publisher();
    const pport = pub.serve();
    const r1 = receiver(20);
    const r1port = r1.serve();
    await pub.publishWeights('v1', model.tensors);
    await r1.pullWeights('v1', { from: at(pport) });
    randomFillSync(model.arena.view(0, 8 * CHUNK));
    await pub.publishWeights('v2', model.tensors);
    await r1.pullWeights('v2', { from: at(pport) });
    // Memory pressure (pushes, another pull) evicts A's chunks, no longer retained, from the store; the slot
    // that held v1 still holds them.
    r1.store.free(r1.store.allocate(r1.store.freeSlots + 8));
    expect(r1.store.chunks).toBe(8 + 2);
    model.arena.view(0, 8 * CHUNK).set(a);
    await pub.publishWeights('v3', model.tensors);
    const p3 = await r1.pullWeights('v3', { from: at(pport) });
    expect(p3.chunksFetched).toBe(0); // all in the slot A left
    expect(r1.manifest!.chunks.every((c) => r1.store.has(c.hash))).toBe(true);
    const r2 = receiver();
    await expect(r2.pullWeights(undefined, { from: at(r1port), timeoutMs: 2000 })).resolves.toMatchObject({ version: 'v3', chunksFetched: 8 });
  });
});

describe('weights: a version the source gave up', () => {
  it('fails a pull with ERR_NOT_FOUND soon after the source dropped the version, not at the deadline', async () => {
    const model = tensors(16);
    const pub = publisher(2 * 16 + 4, 1);
    const port = pub.serve();
    await pub.publishWeights('v1', model.tensors);
    const rx = receiver();
    let trainer: Promise<void> | undefined;
    rx.once('chunks:fetched', () => {
      trainer = (async () => {
        for (const v of ['v2', 'v3']) {
          randomFillSync(model.arena.view(0, 16 * CHUNK));
          await pub.publishWeights(v, model.tensors);
        }
      })();
    });
    const t0 = Date.now();
    await expect(rx.pullWeights('v1', { from: at(port), inflight: 1, timeoutMs: 4000 })).rejects.toMatchObject({ code: 'ERR_NOT_FOUND', message: expect.stringMatching(/no longer serves version 'v1'/) });
    expect(Date.now() - t0).toBeLessThan(3000);
    await trainer;
  });

  it('announces its active version again after a pull fails', async () => {
    const model = tensors(16);
    const pub = publisher();
    const pport = pub.serve();
    const r1 = receiver();
    const r1port = r1.serve();
    await pub.publishWeights('v1', model.tensors);
    await r1.pullWeights('v1', { from: at(pport) });
    randomFillSync(model.arena.view(0, 16 * CHUNK));
    await pub.publishWeights('v2', model.tensors);
    const ac = new AbortController();
    r1.on('chunks:fetched', (e) => e.chunksDone >= 4 && ac.abort());
    await expect(r1.pullWeights('v2', { from: at(pport), signal: ac.signal, inflight: 1 })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    expect(r1.version).toBe('v1');
    expect(await r1.latest(at(r1port))).toBe('v1');
    const r2 = receiver();
    await expect(r2.pullWeights(undefined, { from: at(r1port), timeoutMs: 2000 })).resolves.toMatchObject({ version: 'v1' });
  });
});

describe('weights: a pull honours its deadline and abort signal in every wait', () => {
  /** A TCP port that accepts connections and never answers (a hung process, a wrong service). */
  async function silentPort(): Promise<number> {
    const sockets: net.Socket[] = [];
    const server = net.createServer((s) => void sockets.push(s));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanup.push(() => {
      for (const s of sockets) s.destroy();
      server.close();
    });
    return (server.address() as net.AddressInfo).port;
  }

  it('settles at timeoutMs while a request to a silent source is on the wire', async () => {
    const port = await silentPort();
    const rx = receiver();
    const t0 = Date.now();
    await expect(rx.pullWeights(undefined, { from: at(port), timeoutMs: 400 })).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
    expect(Date.now() - t0).toBeLessThan(1500);
  });

  it('settles with ERR_ABORTED (not ERR_TIMEOUT) when aborted while a request is on the wire', async () => {
    const port = await silentPort();
    const rx = receiver();
    const t0 = Date.now();
    await expect(rx.pullWeights('v1', { from: at(port), signal: AbortSignal.timeout(300) })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    expect(Date.now() - t0).toBeLessThan(1500);
  });

  it('caps the wait for readers by the deadline, and ends it on abort', async () => {
    const model = tensors(4);
    const pub = publisher();
    const port = pub.serve();
    const rx = receiver();
    await pub.publishWeights('v0', model.tensors);
    await rx.pullWeights('v0', { from: at(port) });
    const lease0 = rx.acquire()!;
    for (const v of ['v1', 'v2']) {
      randomFillSync(model.arena.view(0, 4 * CHUNK));
      await pub.publishWeights(v, model.tensors);
    }
    await rx.pullWeights('v1', { from: at(port) });
    let t0 = Date.now();
    await expect(rx.pullWeights('v2', { from: at(port), leaseWaitMs: 10_000, timeoutMs: 300 })).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
    expect(Date.now() - t0).toBeLessThan(1500);
    t0 = Date.now();
    await expect(rx.pullWeights('v2', { from: at(port), leaseWaitMs: 10_000, signal: AbortSignal.timeout(200) })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    expect(Date.now() - t0).toBeLessThan(1500);
    lease0.release();
    await expect(rx.pullWeights('v2', { from: at(port) })).resolves.toMatchObject({ version: 'v2' });
  });
});

describe('weights: reserve during a pull', () => {
  it('is deferred until the pull ends instead of reallocating the slot being filled', async () => {
    const model = tensors(16);
    const pub = publisher();
    const port = pub.serve();
    const rx = receiver();
    await pub.publishWeights('v0', model.tensors);
    let reserved = false;
    rx.on('chunks:fetched', (e) => {
      if (reserved || e.chunksDone < 4) return;
      reserved = true;
      rx.reserve(64 * CHUNK);
    });
    await expect(rx.pullWeights('v0', { from: at(port), inflight: 1 })).resolves.toMatchObject({ version: 'v0', chunksFetched: 16 });
    expect(reserved).toBe(true);
    const lease = rx.acquire()!;
    try {
      const t = lease.tensors.get('t3')!;
      expect(Buffer.compare((lease.arena as HostArena).view(t.offset, t.length), model.arena.view(3 * CHUNK, CHUNK))).toBe(0);
    } finally {
      lease.release();
    }
    // Applied once the pull ended, to the slot the next version goes to: it is assembled there without trouble.
    randomFillSync(model.arena.view(0, CHUNK));
    await pub.publishWeights('v1', model.tensors);
    await expect(rx.pullWeights('v1', { from: at(port) })).resolves.toMatchObject({ version: 'v1', chunksFetched: 1 });
  });
});
