import { describe, expect, it } from 'vitest';
import { runRespBench } from './resp.js';

describe('bench resp', () => {
  it('spreads requests over random keys with --keyspace and reports them (door and redis-server, real redis-benchmark)', async () => {
    const r = await runRespBench({ requests: 400, valueBytes: 4096, clients: 4, repetitions: 1, keyspace: 50, engine: 'native' });
    expect(r).toMatchObject({ keyspace: 50, requests: 400, valueBytes: 4096, clients: 4, repetitions: 1, engine: 'native', catalog: 'memory' });
    expect(r.command).toBe('redis-benchmark -d 4096 -c 4 -t get,set -n 400 -r 50');
    expect(r.runs.map((x) => x.target)).toEqual(['door', 'redis']);
    for (const x of r.runs) {
      expect(x.setRps).toBeGreaterThan(0);
      expect(x.getRps).toBeGreaterThan(0);
    }
  });

  it('times MGET of K stored keys on both targets with --mget; the native door answers them on its thread', async () => {
    const r = await runRespBench({ requests: 400, valueBytes: 8192, clients: 2, repetitions: 1, engine: 'native', mgetKeys: 4 });
    expect(r.mget).toMatchObject({ keys: 4, command: 'redis-benchmark -c 2 -n 100 MGET mget:0 mget:1 mget:2 mget:3 (values of 8192 bytes)' });
    for (const x of r.runs) expect(x.mgetRps).toBeGreaterThan(0);
    // Warm-up and timed run: every MGET of the four mirrored values was answered by the door thread.
    expect(r.mget!.doorNative).toBeGreaterThanOrEqual(200);
  });

  it('refuses a keyspace whose values would not stay in the door host tier, before starting anything', async () => {
    await expect(runRespBench({ keyspace: 4096, valueBytes: 262_144, hostBytes: 512 * 1024 ** 2 })).rejects.toMatchObject({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringContaining('--keyspace 4096') });
  });
});
