import { randomFillSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
import { loadSafetensors } from './tensor-sets.js';
import { WeightPublisher, WeightReceiver, type TensorSource } from './index.js';

const CHUNK = 64 * 1024;

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** `count` random u8 tensors of `bytes` each, back to back in one host arena. */
function tensors(count: number, bytes: number): { arena: HostArena; tensors: TensorSource[] } {
  const arena = HostArena.create({ capacity: count * bytes });
  randomFillSync(arena.view(0, count * bytes));
  cleanup.push(() => arena.close());
  return { arena, tensors: Array.from({ length: count }, (_, i) => ({ name: `t${i}`, dtype: 'u8', shape: [bytes], arena, offset: i * bytes, length: bytes })) };
}

function publisher(slots: number, keepVersions = 2): WeightPublisher {
  const p = new WeightPublisher({ capacity: slots * CHUNK, chunkBytes: CHUNK, keepVersions });
  cleanup.push(() => p.close());
  return p;
}

describe('weights publisher: version names', () => {
  it('refuses a second publish of a version still in flight, and leaks nothing', async () => {
    const pub = publisher(12, 1);
    const a = tensors(4, CHUNK);
    const b = tensors(4, CHUNK);
    const first = pub.publishWeights('step-7', a.tensors);
    expect(() => pub.publishWeights('step-7', b.tensors)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/already being published/) }));
    await first;
    expect(pub.versions()).toEqual(['step-7']);
    // keepVersions 1: each later version releases the one before; the store holds one version plus blobs.
    for (let s = 8; s < 16; s++) {
      randomFillSync(a.arena.view(0, 4 * CHUNK));
      await pub.publishWeights(`step-${s}`, a.tensors);
    }
    expect(pub.store.chunks).toBeLessThanOrEqual(4 + 4 + 2); // this version, an evictable leftover window, manifest, latest
  });

  it('frees the name of a publish that failed, so it can be retried', async () => {
    const pub = publisher(4);
    const big = tensors(8, CHUNK);
    await expect(pub.publishWeights('v1', big.tensors)).rejects.toMatchObject({ code: 'ERR_TIER_FULL' });
    await expect(pub.publishWeights('v1', big.tensors.slice(0, 2))).resolves.toMatchObject({ version: 'v1', chunks: 2 });
  });
});

describe('weights: zero-size tensors', () => {
  it('publishes and pulls a zero-size tensor as a manifest entry without chunks', async () => {
    const { arena, tensors: [w] } = tensors(1, 3 * CHUNK);
    const pub = publisher(32);
    const port = pub.serve();
    // Empty tensors may sit anywhere, even inside another tensor's bytes: they hold none.
    const empty: TensorSource[] = [
      { name: 'empty.bias', dtype: 'bf16', shape: [0], arena, offset: CHUNK, length: 0 },
      { name: 'empty.end', dtype: 'f32', shape: [4, 0], arena, offset: arena.capacity, length: 0 },
    ];
    await pub.publishWeights('v1', [w!, ...empty]);
    expect(pub.manifest('v1')!.tensors.find((t) => t.name === 'empty.bias')).toMatchObject({ length: 0, shape: [0], chunks: [] });
    const rx = new WeightReceiver({ capacity: 32 * CHUNK, slotBytes: CHUNK, memory: { kind: 'host' } });
    cleanup.push(() => rx.close());
    await rx.pullWeights('v1', { from: { host: '127.0.0.1', port } });
    const lease = rx.acquire()!;
    try {
      expect(lease.tensors.get('empty.end')).toMatchObject({ length: 0, shape: [4, 0] });
      const t = lease.tensors.get('t0')!;
      expect(Buffer.compare((lease.arena as HostArena).view(t.offset, t.length), arena.view(0, 3 * CHUNK))).toBe(0);
    } finally {
      lease.release();
    }
  });

  it('loads a zero-size tensor from a safetensors file', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-st-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const header = Buffer.from(JSON.stringify({ 'w': { dtype: 'U8', shape: [4], data_offsets: [0, 4] }, 'empty.bias': { dtype: 'BF16', shape: [0], data_offsets: [4, 4] } }));
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.length));
    const file = path.join(dir, 'm.safetensors');
    writeFileSync(file, Buffer.concat([len, header, Buffer.from([1, 2, 3, 4])]));
    const set = loadSafetensors(file);
    cleanup.push(() => set.arena.close());
    expect(set.tensors.map((t) => [t.name, t.length])).toEqual([['w', 4], ['empty.bias', 0]]);
  });
});

describe('weights: bad input is refused with a typed error that says what is wrong', () => {
  it('checks the shape of dtypes spelt as safetensors and torch spell them, and lists them canonically', async () => {
    const pub = publisher(32);
    const { tensors: [w] } = tensors(1, 2048);
    for (const dtype of ['BF16', 'torch.bfloat16', 'bfloat16']) {
      expect(() => pub.publishWeights('v1', [{ ...w!, dtype, shape: [7] }])).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/shape \[7\] of .* is 14 bytes, length says 2048/) }));
    }
    await pub.publishWeights('v1', [{ ...w!, dtype: 'torch.bfloat16', shape: [1024] }]);
    expect(pub.manifest('v1')!.tensors[0]!.dtype).toBe('bf16');
  });

  it('names a bad shape and a bad from', () => {
    const pub = publisher(32);
    const { tensors: [w] } = tensors(1, 2048);
    expect(() => pub.publishWeights('v1', [{ ...w!, shape: [-1, -2048] }])).toThrow(/got \[-1, -2048\]/);
    const rx = new WeightReceiver({ capacity: 4 * CHUNK, slotBytes: CHUNK });
    cleanup.push(() => rx.close());
    expect(() => rx.pullWeights('v1', { from: '127.0.0.1:1234' as never })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringContaining('"127.0.0.1:1234"') }));
  });
});
