import { randomFillSync } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { HostArena } from '@tiersync/native';
import { WeightPublisher, type TensorSource } from '../weights/index.js';
import { main } from './main.js';

const CHUNK = 64 * 1024;

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
  vi.restoreAllMocks();
});

function tensors(count: number): TensorSource[] {
  const arena = HostArena.create({ capacity: count * CHUNK });
  randomFillSync(arena.view(0, count * CHUNK));
  cleanup.push(() => arena.close());
  return Array.from({ length: count }, (_, i) => ({ name: `t${i}`, dtype: 'u8', shape: [CHUNK], arena, offset: i * CHUNK, length: CHUNK }));
}

describe('tiersync weights pull --follow', () => {
  it('reports a failed pull and goes on following', async () => {
    const pub = new WeightPublisher({ capacity: 128 * CHUNK, chunkBytes: CHUNK });
    cleanup.push(() => pub.close());
    const port = pub.serve();
    await pub.publishWeights('v1', tensors(4));
    const lines: string[] = [];
    vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void lines.push(a.join(' ')));
    vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void lines.push(a.join(' ')));
    const events = () => lines.map((l) => JSON.parse(l) as { event: string; version?: string; code?: string });
    // 20 slots: v1 fits, v2 (32 chunks) does not.
    const run = main(['weights', 'pull', '--from', `127.0.0.1:${port}`, '--follow', '--memory', 'host', '--chunk', '64KiB', '--capacity', `${20 * CHUNK}`, '--json']);
    try {
      await vi.waitFor(() => expect(events()).toContainEqual(expect.objectContaining({ event: 'switched', version: 'v1' })), { timeout: 5000 });
      await pub.publishWeights('v2', tensors(32));
      await vi.waitFor(() => expect(events()).toContainEqual(expect.objectContaining({ event: 'error', version: 'v2', code: 'ERR_TIER_FULL' })), { timeout: 5000 });
      await pub.publishWeights('v3', tensors(4));
      await vi.waitFor(() => expect(events()).toContainEqual(expect.objectContaining({ event: 'switched', version: 'v3' })), { timeout: 5000 });
    } finally {
      process.emit('SIGINT');
    }
    expect(await run).toBe(0);
  });
});

describe('tiersync weights publish --steps --change', () => {
  it('sizes its store for the tensors a step actually rewrites (--change 0.7 rewrites all of them)', async () => {
    const lines: string[] = [];
    vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void lines.push(a.join(' ')));
    vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void lines.push(a.join(' ')));
    const code = await main(['weights', 'publish', '--generate', '4MiB', '--tensors', '8', '--chunk', '64KiB', '--steps', '4', '--change', '0.7', '--interval-ms', '1', '--exit-after-ms', '1500', '--json']);
    const events = lines.map((l) => JSON.parse(l) as { event: string; version?: string; newChunks?: number });
    expect(events.filter((e) => e.event === 'error')).toEqual([]);
    expect(code).toBe(0);
    const published = events.filter((e) => e.event === 'published');
    expect(published.map((e) => e.version)).toEqual(['step-0', 'step-0+1', 'step-0+2', 'step-0+3', 'step-0+4']);
    expect(published.at(-1)!.newChunks).toBe(64); // every chunk rewritten
  });
});
