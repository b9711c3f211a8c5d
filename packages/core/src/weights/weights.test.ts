import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { HostArena, TierSyncError, TransferBatch, TransferEngine } from '@tiersync/native';
import { createTier } from '@tiersync/tiers';
import { loadSafetensors } from './tensor-sets.js';
import { LATEST_KEY, WeightPublisher, WeightReceiver, TierSource, encodeManifest, manifestKey, parseManifest, type TensorSource, type WeightLease } from './index.js';

// Small geometry: 64 KiB chunks, a model of 3 tensors (1 MiB, 512 KiB + 100 bytes, 256 KiB of f32) = 29 chunks.
const CHUNK = 64 * 1024;
const SHAPES = [
  { name: 'embed', bytes: 1024 * 1024 },
  { name: 'layer0', bytes: 512 * 1024 + 100 },
  { name: 'head', bytes: 256 * 1024 },
];
const MODEL_BYTES = SHAPES.reduce((s, t) => s + t.bytes, 0);

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** A host arena holding the model's tensors back to back, filled by `fill(byteIndex)`. */
function model(fill: (i: number) => number): { arena: HostArena; tensors: TensorSource[] } {
  const arena = HostArena.create({ capacity: MODEL_BYTES });
  const v = arena.view(0, MODEL_BYTES);
  for (let i = 0; i < MODEL_BYTES; i++) v[i] = fill(i);
  let at = 0;
  const tensors = SHAPES.map((s) => {
    const t: TensorSource = { name: s.name, dtype: 'u8', shape: [s.bytes], arena, offset: at, length: s.bytes };
    at += s.bytes;
    return t;
  });
  cleanup.push(() => arena.close());
  return { arena, tensors };
}

const base = (i: number) => (i * 31 + (i >> 13)) & 0xff;

function publisher(): WeightPublisher {
  const p = new WeightPublisher({ capacity: 128 * CHUNK, chunkBytes: CHUNK });
  cleanup.push(() => p.close());
  return p;
}

function receiver(capacity = 128 * CHUNK): WeightReceiver {
  const r = new WeightReceiver({ capacity, slotBytes: CHUNK });
  cleanup.push(() => r.close());
  return r;
}

const engine = new TransferEngine({ threads: 2 });

/** Copies every tensor of a leased version out of device memory, back to back in publish order. */
async function readLease(lease: WeightLease): Promise<Uint8Array> {
  const host = HostArena.create({ capacity: MODEL_BYTES });
  try {
    const batch = new TransferBatch();
    let at = 0;
    for (const s of SHAPES) {
      const t = lease.tensors.get(s.name)!;
      batch.add(lease.arena, t.offset, host, at, t.length);
      at += t.length;
    }
    await engine.submit(batch);
    return Uint8Array.from(host.view(0, MODEL_BYTES));
  } finally {
    host.close();
  }
}

async function expectVersionBytes(r: WeightReceiver, fill: (i: number) => number): Promise<void> {
  const lease = r.acquire()!;
  try {
    const got = await readLease(lease);
    let wrong = 0;
    for (let i = 0; i < MODEL_BYTES; i++) if (got[i] !== (fill(i) & 0xff)) wrong++;
    expect(wrong).toBe(0);
  } finally {
    lease.release();
  }
}

const at = (port: number) => ({ host: '127.0.0.1', port });

describe('weights: publish and pull', () => {
  it('assembles a version in device memory and moves only changed chunks on the next step', async () => {
    const pub = publisher();
    const v1 = model(base);
    const first = await pub.publishWeights('step-1', v1.tensors);
    expect(first.bytes).toBe(MODEL_BYTES);
    const port = pub.serve();
    const r = receiver();
    const pulled = await r.pullWeights('step-1', { from: at(port) });
    expect(r.version).toBe('step-1');
    expect(pulled.bytesFetched).toBe(MODEL_BYTES);
    await expectVersionBytes(r, base);

    // Step 2 changes 3 of the 29 chunks (two in 'embed', one in 'head').
    const changed = [5 * CHUNK + 7, 9 * CHUNK, MODEL_BYTES - 10];
    const fill2 = (i: number) => (changed.includes(i) ? base(i) ^ 0xff : base(i));
    const v2 = model(fill2);
    const second = await pub.publishWeights('step-2', v2.tensors);
    expect(second.newChunks).toBe(3);
    const delta = await r.pullWeights(undefined, { from: at(port) }); // latest
    expect(delta.version).toBe('step-2');
    expect(delta.chunksFetched).toBe(3);
    expect(delta.bytesFetched).toBe(3 * CHUNK); // 'head' ends on a full 64 KiB chunk
    expect(delta.bytesReused).toBe(MODEL_BYTES - 3 * CHUNK);
    expect(r.metrics().bytesFetched).toBe(MODEL_BYTES + 3 * CHUNK);
    await expectVersionBytes(r, fill2);
  });

  it('copies into a reused slot only what changed since the version it held; the publisher compares instead of hashing', async () => {
    const pub = publisher();
    const port = pub.serve();
    await pub.publishWeights('v1', model(base).tensors);
    const r = receiver();
    r.reserve(MODEL_BYTES + 3 * 4096, 2);
    await r.pullWeights('v1', { from: at(port) });
    // v2 changes chunk 2; v3 changes chunk 20 on top of v2.
    const fill2 = (i: number) => (i >= 2 * CHUNK && i < 3 * CHUNK ? base(i) ^ 0x5a : base(i));
    const fill3 = (i: number) => (i >= 20 * CHUNK && i < 21 * CHUNK ? fill2(i) ^ 0xa5 : fill2(i));
    const published2 = await pub.publishWeights('v2', model(fill2).tensors);
    expect(published2.newChunks).toBe(1);
    expect(pub.metrics().bytesUnchanged).toBe(MODEL_BYTES - CHUNK); // 28 chunks compared equal: not copied, not hashed
    const d2 = await r.pullWeights('v2', { from: at(port) });
    expect(d2.bytesInPlace).toBe(0); // the second slot was empty
    await pub.publishWeights('v3', model(fill3).tensors);
    const placedBefore = r.metrics().bytesPlaced;
    const d3 = await r.pullWeights('v3', { from: at(port) });
    // The slot holds v1: chunk 2 (changed in v2) and chunk 20 (changed in v3) are all it needs.
    expect(d3.bytesFetched).toBe(CHUNK);
    expect(d3.bytesInPlace).toBe(MODEL_BYTES - 2 * CHUNK);
    expect(r.metrics().bytesPlaced - placedBefore).toBe(2 * CHUNK);
    await expectVersionBytes(r, fill3);
    // Back to v1's bytes: the slot now holding v2 differs from it in chunk 2 only.
    await pub.publishWeights('v4', model(base).tensors);
    const d4 = await r.pullWeights('v4', { from: at(port) });
    expect(d4.bytesInPlace).toBe(MODEL_BYTES - CHUNK);
    await expectVersionBytes(r, base);
    // A fresh publisher cutting the same bytes (no previous version to compare with) writes the same chunks.
    const fresh = publisher();
    await fresh.publishWeights('v3', model(fill3).tensors);
    expect(fresh.manifest('v3')!.chunks).toEqual(pub.manifest('v3')!.chunks);
    expect(fresh.manifest('v3')!.tensors).toEqual(pub.manifest('v3')!.tensors);
  });

  it('compares a tensor that straddles its arena\'s 1 GiB view boundary in two parts', async () => {
    const GiB = 2 ** 30;
    const arena = HostArena.create({ capacity: GiB + 4 * CHUNK }); // not prefaulted: only the touched pages are real
    cleanup.push(() => arena.close());
    const offset = GiB - CHUNK / 2 - 4096;
    arena.view(offset, CHUNK / 2 + 4096).fill(7);
    arena.view(GiB, CHUNK).fill(9);
    const tensors: TensorSource[] = [{ name: 't', dtype: 'u8', shape: [2 * CHUNK], arena, offset, length: 2 * CHUNK }];
    const pub = publisher();
    await pub.publishWeights('a', tensors);
    await pub.publishWeights('b', tensors);
    expect(pub.metrics().bytesUnchanged).toBe(2 * CHUNK);
    arena.view(GiB + 5, 1)[0] = 1; // a byte past the boundary, inside the first chunk
    await pub.publishWeights('c', tensors);
    expect(pub.metrics().bytesUnchanged).toBe(3 * CHUNK);
    expect(pub.manifest('c')!.chunks[0]!.hash).not.toBe(pub.manifest('b')!.chunks[0]!.hash);
  });

  it('switches atomically: a lease keeps its version whole, and its slot is not reused until released', async () => {
    const pub = publisher();
    const port = pub.serve();
    const r = receiver();
    const fills = [1, 2, 3].map((n) => (i: number) => (base(i) + n * 17) & 0xff);
    await pub.publishWeights('v1', model(fills[0]!).tensors);
    await r.pullWeights('v1', { from: at(port) });
    const heldV1 = r.acquire()!;
    await pub.publishWeights('v2', model(fills[1]!).tensors);
    await r.pullWeights('v2', { from: at(port) });
    expect(r.version).toBe('v2');
    // v3 needs v1's slot, still leased: it must wait rather than overwrite what the reader sees.
    await pub.publishWeights('v3', model(fills[2]!).tensors);
    const waiting = r.pullWeights('v3', { from: at(port), leaseWaitMs: 200 });
    await expect(waiting).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
    expect(r.version).toBe('v2');
    const v1Bytes = await readLease(heldV1);
    expect(v1Bytes.every((b, i) => b === fills[0]!(i))).toBe(true);
    // Readers sampling during the next pull see v2 or v3, each complete.
    heldV1.release();
    const seen = new Set<string>();
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const lease = r.acquire()!;
        const bytes = await readLease(lease);
        const which = lease.version === 'v2' ? fills[1]! : fills[2]!;
        expect(bytes.every((b, i) => b === which(i))).toBe(true);
        seen.add(lease.version);
        lease.release();
      }
    })();
    await r.pullWeights('v3', { from: at(port) });
    await new Promise((res) => setTimeout(res, 20));
    sampling = false;
    await sampler;
    expect(r.version).toBe('v3');
    expect(seen.has('v2') || seen.has('v3')).toBe(true);
    await expectVersionBytes(r, fills[2]!);
  });

  it('resumes an aborted pull where it stopped: no chunk crosses twice', async () => {
    const pub = publisher();
    const port = pub.serve();
    await pub.publishWeights('v1', model(base).tensors);
    const r = receiver();
    const ac = new AbortController();
    r.once('chunks:fetched', () => ac.abort());
    await expect(r.pullWeights('v1', { from: at(port), signal: ac.signal, inflight: 1 })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    expect(r.version).toBeUndefined();
    const firstPart = r.metrics().bytesFetched;
    expect(firstPart).toBeGreaterThan(0);
    expect(firstPart).toBeLessThan(MODEL_BYTES);
    const rest = await r.pullWeights('v1', { from: at(port) });
    expect(rest.bytesReused).toBe(firstPart);
    expect(rest.bytesFetched).toBe(MODEL_BYTES - firstPart);
    expect(r.metrics().bytesFetched).toBe(MODEL_BYTES);
    await expectVersionBytes(r, base);
  });

  it('resumes from another node after the sender dies mid-pull', async () => {
    const pubA = publisher();
    const portA = pubA.serve();
    await pubA.publishWeights('v1', model(base).tensors);
    const r = receiver();
    r.once('chunks:fetched', () => pubA.store.server!.close());
    await expect(r.pullWeights('v1', { from: { ...at(portA), timeoutMs: 2000 }, inflight: 1 })).rejects.toBeInstanceOf(TierSyncError);
    const firstPart = r.metrics().bytesFetched;
    expect(firstPart).toBeGreaterThan(0);
    const pubB = publisher();
    await pubB.publishWeights('v1', model(base).tensors);
    const rest = await r.pullWeights('v1', { from: at(pubB.serve()) });
    expect(rest.bytesFetched + firstPart).toBe(MODEL_BYTES);
    await expectVersionBytes(r, base);
  });

  it('detects a chunk damaged at the source and fetches it again', async () => {
    const pub = publisher();
    const port = pub.serve();
    await pub.publishWeights('v1', model(base).tensors);
    const victim = pub.manifest('v1')!.chunks[4]!;
    const where = pub.store.get(victim.hash)!;
    const byte = pub.store.arena.view(where.offset + 100, 1);
    const good = byte[0]!;
    byte[0] = good ^ 0x5a; // flipped in memory: the stored CRC32C no longer matches
    const r = receiver();
    const reasons: string[] = [];
    r.on('chunk:corrupted', (e) => {
      reasons.push(`${e.hash}:${e.reason}`);
      byte[0] = good; // the source recovers (a transient fault); the retry must then succeed
    });
    const result = await r.pullWeights('v1', { from: at(port) });
    expect(result.corrupted).toBe(1);
    expect(reasons).toEqual([`${victim.hash}:crc32c`]);
    expect(r.metrics().chunksCorrupted).toBe(1);
    await expectVersionBytes(r, base);
  });

  it('detects a held chunk damaged in the receiver store when a later version reuses it, and fetches it again', async () => {
    const pub = publisher();
    const port = pub.serve();
    await pub.publishWeights('v1', model(base).tensors);
    const r = receiver();
    await r.pullWeights('v1', { from: at(port) });
    const fill2 = (i: number) => (i < CHUNK ? base(i) ^ 1 : base(i));
    await pub.publishWeights('v2', model(fill2).tensors);
    const reused = pub.manifest('v2')!.chunks[3]!;
    const held = r.store.get(reused.hash)!;
    r.store.arena.view(held.offset + 9, 1)[0] ^= 0xff; // memory damage on the receiver after it verified the chunk
    await expect(r.pullWeights('v2', { from: at(port) })).rejects.toMatchObject({ code: 'ERR_CHECKSUM' });
    expect(r.version).toBe('v1');
    expect(r.store.has(reused.hash)).toBe(false);
    const again = await r.pullWeights('v2', { from: at(port) });
    expect(again.chunksFetched).toBe(1); // only the damaged one: the changed chunk arrived in the failed attempt
    await expectVersionBytes(r, fill2);
  });

  it('fails with ERR_CHECKSUM when a chunk stays damaged', async () => {
    const pub = publisher();
    const port = pub.serve();
    await pub.publishWeights('v1', model(base).tensors);
    const victim = pub.store.get(pub.manifest('v1')!.chunks[0]!.hash)!;
    pub.store.arena.view(victim.offset, 1)[0] ^= 1;
    const r = receiver();
    await expect(r.pullWeights('v1', { from: at(port), maxAttempts: 3 })).rejects.toMatchObject({ code: 'ERR_CHECKSUM' });
    expect(r.version).toBeUndefined();
  });

  it('is pushed to: the publisher sends only the chunks the receiver lacks, then the manifest, and it switches', async () => {
    const pub = publisher();
    const r = receiver();
    const port = r.serve();
    r.acceptPushes();
    const switched = () => new Promise<string>((resolve, reject) => {
      r.once('weights:switched', (e) => resolve(e.version));
      r.once('push:failed', (e) => reject(e.error));
    });
    await pub.publishWeights('v1', model(base).tensors);
    let done = switched();
    expect(await pub.pushWeights('v1', at(port))).toEqual({ chunksSent: 29, bytesSent: MODEL_BYTES });
    expect(await done).toBe('v1');
    await expectVersionBytes(r, base);
    const fill2 = (i: number) => (i === 3 * CHUNK + 1 ? base(i) ^ 0x10 : base(i));
    await pub.publishWeights('v2', model(fill2).tensors);
    done = switched();
    expect(await pub.pushWeights('v2', at(port))).toEqual({ chunksSent: 1, bytesSent: CHUNK });
    expect(await done).toBe('v2');
    await expectVersionBytes(r, fill2);
    // A store that does not accept pushes refuses them.
    const closed = receiver();
    await expect(pub.pushWeights('v2', at(closed.serve()))).rejects.toBeInstanceOf(TierSyncError);
  });

  it('fans out through a pipelined chain of 3 receivers, each forwarding while it pulls', async () => {
    const pub = publisher();
    const port = pub.serve();
    await pub.publishWeights('v1', model(base).tensors);
    const r1 = receiver();
    const r2 = receiver();
    const r3 = receiver();
    const p1 = r1.serve();
    const p2 = r2.serve();
    // All three start at once: r2 and r3 ask for chunks their upstream does not hold yet and retry them.
    const pulls = [r1.pullWeights('v1', { from: at(port) }), r2.pullWeights('v1', { from: at(p1), waitForVersionMs: 10_000 }), r3.pullWeights('v1', { from: at(p2), waitForVersionMs: 10_000 })];
    const results = await Promise.all(pulls);
    for (const res of results) expect(res.bytesFetched).toBe(MODEL_BYTES);
    for (const r of [r1, r2, r3]) await expectVersionBytes(r, base);
  });

  it('stages a version on the fs tier; a new worker pulls it from there', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-weights-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const pub = publisher();
    await pub.publishWeights('ckpt-1', model(base).tensors);
    const tier = createTier(`fs://${dir}/stage?capacity=${256 * CHUNK}`, { engine, pageBytes: CHUNK, fingerprint: 'weights' });
    await tier.open();
    cleanup.push(() => tier.close());
    const staged = await pub.stage('ckpt-1', tier);
    expect(staged.chunksWritten).toBe(pub.manifest('ckpt-1')!.chunks.length);
    const worker = receiver();
    const source = new TierSource(tier, CHUNK);
    expect(await worker.latest(source)).toBe('ckpt-1');
    const res = await worker.pullWeights(undefined, { from: source });
    expect(res.bytesFetched).toBe(MODEL_BYTES);
    await expectVersionBytes(worker, base);
    expect((await pub.stage('ckpt-1', tier)).chunksWritten).toBe(0);
  });
});

describe('weights: safetensors', () => {
  it('publishes the tensors of a safetensors file with their dtype and shape', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-weights-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    // The format: u64 LE header length, JSON header (name -> dtype, shape, data_offsets), data.
    const a = Buffer.alloc(4 * 300 * 7);
    a.forEach((_, i) => (a[i] = (i * 7) & 0xff));
    const b = Buffer.alloc(2 * 1000, 3);
    const header = Buffer.from(JSON.stringify({ __metadata__: { format: 'pt' }, 'w.a': { dtype: 'F32', shape: [300, 7], data_offsets: [0, a.length] }, 'w.b': { dtype: 'BF16', shape: [1000], data_offsets: [a.length, a.length + b.length] } }));
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.length));
    const file = path.join(dir, 'model.safetensors');
    writeFileSync(file, Buffer.concat([len, header, a, b]));
    const set = loadSafetensors(file);
    cleanup.push(() => set.arena.close());
    expect(set.tensors.map((t) => [t.name, t.dtype, t.shape, t.length])).toEqual([['w.a', 'f32', [300, 7], a.length], ['w.b', 'bf16', [1000], b.length]]);
    const pub = publisher();
    await pub.publishWeights('st-1', set.tensors);
    const r = receiver();
    await r.pullWeights('st-1', { from: at(pub.serve()) });
    const lease = r.acquire()!;
    expect(lease.tensors.get('w.a')).toMatchObject({ dtype: 'f32', shape: [300, 7], length: a.length });
    lease.release();
    writeFileSync(file, Buffer.from('short'));
    expect(() => loadSafetensors(file)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
  });
});

describe('weights: bad input', () => {
  it('refuses an unknown version with ERR_NOT_FOUND', async () => {
    const pub = publisher();
    const port = pub.serve();
    const r = receiver();
    await expect(r.pullWeights('nope', { from: at(port) })).rejects.toMatchObject({ code: 'ERR_NOT_FOUND' });
    await expect(r.pullWeights(undefined, { from: at(port) })).rejects.toMatchObject({ code: 'ERR_NOT_FOUND' });
    await pub.publishWeights('v1', model(base).tensors);
    await expect(pub.stage('v9', {} as never)).rejects.toMatchObject({ code: 'ERR_NOT_FOUND' });
  });

  it('refuses overlapping tensors, shape/length mismatches and repeated versions', async () => {
    const pub = publisher();
    const { arena, tensors } = model(base);
    const overlap = [tensors[0]!, { ...tensors[1]!, offset: 1000 }];
    expect(() => pub.publishWeights('v1', overlap)).toThrow(expect.objectContaining({ code: 'ERR_OVERLAP' }));
    expect(() => pub.publishWeights('v1', [{ ...tensors[0]!, dtype: 'f32' }])).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    expect(() => pub.publishWeights('v1', [{ ...tensors[0]!, length: arena.capacity + 1, shape: [arena.capacity + 1] }])).toThrow(
      expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }),
    );
    expect(() => pub.publishWeights('has space', tensors)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    await pub.publishWeights('v1', tensors);
    expect(() => pub.publishWeights('v1', tensors)).toThrow(/already published/);
  });

  it('refuses bad manifests with ERR_PROTOCOL naming the fault', async () => {
    const pub = publisher();
    await pub.publishWeights('v1', model(base).tensors);
    const good = pub.manifest('v1')!;
    expect(parseManifest(encodeManifest(good), 'v1').chunks.length).toBe(good.chunks.length);
    const bad = (m: unknown) => () => parseManifest(Buffer.from(JSON.stringify(m)));
    expect(() => parseManifest(Buffer.from('{not json'))).toThrow(expect.objectContaining({ code: 'ERR_PROTOCOL' }));
    expect(bad({ ...good, format: 'x' })).toThrow(/format/);
    expect(bad({ ...good, chunks: [{ ...good.chunks[0], hash: 'zz' }] })).toThrow(/hash/);
    const overlapping = { ...good, tensors: [good.tensors[0], { ...good.tensors[1], offset: 10 }] };
    expect(bad(overlapping)).toThrow(/overlap/);
    expect(bad({ ...good, tensors: [{ ...good.tensors[0], length: 5 }] })).toThrow(/chunks hold/);
    expect(bad({ ...good, tensors: [{ ...good.tensors[0], chunks: [99999] }] })).toThrow(/chunk indexes/);
    expect(() => parseManifest(encodeManifest(good), 'v2')).toThrow(expect.objectContaining({ code: 'ERR_PROTOCOL' }));
  });

  it('refuses a manifest served under a version key that holds garbage', async () => {
    const pub = publisher();
    const port = pub.serve();
    const junk = Buffer.from('{"format":"tiersync-weights/1","version":"v1"}');
    pub.store.putBlob(manifestKey('v1'), junk, (await import('@tiersync/native')).crc32c(junk));
    const r = receiver();
    await expect(r.pullWeights('v1', { from: at(port) })).rejects.toMatchObject({ code: 'ERR_PROTOCOL' });
    expect(LATEST_KEY).toMatch(/^[0-9a-f]{66}$/);
  });
});
