// The RESP door's page store reads through the hierarchy, which knows what the block index lists; pages committed
// into the first tier's slots reach the index a little later (the recorder's delay). A read in between must still
// find them, and a damaged one must still be refused by the tier's read check and counted, not taken for missing.
import { crc32c, HostArena } from '@tiersync/native';
import { describe, expect, it } from 'vitest';
import { parseServerConfig, type ServerConfig } from '../config.js';
import { TierSyncServer } from '../server.js';
import type { TierSyncPageStore } from './page-store.js';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;

const config = {
  model: 'resp-page-store-test@1',
  layout,
  tiers: [{ url: `host://?capacity=${64 * PAGE}&verify=true`, name: 'host' }],
  http: { port: 0 },
  peer: { enabled: false },
  log: { level: 'silent' },
  resp: { port: 0, catalog: 'memory', stagingBytes: 1 << 20, valueWindowBytes: 64 << 10 },
} as ServerConfig;

describe('RESP page store', () => {
  it('reads pages committed into the slots before the index records them, and counts a damaged one as an integrity failure', async () => {
    const server = await TierSyncServer.start(parseServerConfig(config));
    const into = HostArena.create({ capacity: 2 * PAGE });
    try {
      const store = server.resp!.store as TierSyncPageStore;
      const slots = store.slots!;
      const keys = ['a1'.repeat(16), 'b2'.repeat(16)];
      const offsets = slots.tryReserve(keys)!;
      const bytes = keys.map((_, i) => Buffer.alloc(PAGE, i + 1));
      bytes.forEach((b, i) => slots.arena.view(offsets[i]!, PAGE).set(b));
      slots.commitNow(keys, offsets, Uint32Array.of(PAGE, PAGE), Uint32Array.from(bytes, (b) => crc32c(b)));
      // Same turn as the commit: the recorder has not written these pages to the index yet.
      expect(keys.map((k) => slots.isUnrecorded(k))).toEqual([true, true]);
      slots.arena.view(offsets[1]! + 10, 1)[0]! ^= 0x5a;
      const failures = server.ts.counters.integrityFailures;

      const found = await store.read(keys.map((key, i) => ({ key, into: { arena: into, offset: i * PAGE, length: PAGE } })));

      expect(found).toEqual([true, false]);
      expect(Buffer.compare(Buffer.from(into.view(0, PAGE)), bytes[0]!)).toBe(0);
      expect(server.ts.counters.integrityFailures).toBe(failures + 1);
    } finally {
      into.close();
      await server.close();
    }
  });
});
