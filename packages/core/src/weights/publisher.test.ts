import { randomFillSync } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
import { WeightPublisher, type TensorSource } from './index.js';

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
