// The peer server's slot pool (servePeer) must never cost the host tier capacity: with the peer port on, a small
// host tier takes the client stores it took with the peer port off (the tier reclaims pooled slots on demand).
import { randomFillSync } from 'node:crypto';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
import { TierSyncClient } from '../client/index.js';
import { PAGE, startTestDaemon, type TestDaemon } from './test-daemon.js';

const TOKEN = 'token-peer-pool';
const keys = (from: number) => [0, 1, 2, 3].map((i) => `9e3f0011${(from + i).toString(16).padStart(8, '0')}`);

describe('peer slot pool and host-tier capacity', () => {
  let daemon: TestDaemon;
  let server: TestDaemon['server'];

  beforeAll(async () => {
    daemon = await startTestDaemon('peer-pool', {
      hostPages: 10,
      fsPages: 64,
      host: { policy: 'lru', highWatermark: 1, lowWatermark: 1 },
      config: (dir) => ({ peer: { port: 0 }, tenants: [{ name: 'agents', token: TOKEN }], client: { maxBatchPages: 32, socket: path.join(dir, 'client.sock') } }),
    });
    server = daemon.server;
  });

  afterAll(async () => {
    await daemon?.close();
  });

  it('stores three 4-page sessions into a 10-page host tier with the peer port on, evicting by LRU', async () => {
    const client = await TierSyncClient.connect({ url: server.url, token: TOKEN, transport: 'shm' });
    const arena = HostArena.create({ capacity: 4 * PAGE });
    try {
      randomFillSync(arena.view(0, 4 * PAGE));
      const pages = [0, 1, 2, 3].map((i) => ({ arena, offset: i * PAGE, length: PAGE }));
      for (const from of [0, 10, 20]) await client.store(keys(from), pages);
      // The newest session is whole in the daemon; the tier never refused a store for room the pool held.
      expect((await client.lookup(keys(20))).present).toEqual([true, true, true, true]);
    } finally {
      await client.close();
      arena.close();
    }
  });
});
