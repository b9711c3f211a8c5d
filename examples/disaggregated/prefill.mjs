// The prefill engine (a child process of run.mjs). It "computes" a long context's KV into its accelerator memory
// (a sim device arena, filled with deterministic bytes), stores the pages in its own hierarchy (its prefix cache),
// and on `push` hands them to the decode host: the bytes go over the peer protocol straight into the decode host's
// RAM (its host tier), where the daemon records them in its block index.
import { createHash } from 'node:crypto';
import { DeviceArena, HostArena, TransferBatch, crc32c } from '@tiersync/native';
import { TierSync, kvLayout, kvLayoutPreset } from '@tiersync/core';
import { TierSyncClient } from '@tiersync/core/client';

// If run.mjs dies, do not outlive it (registered first: a parent killed while this starts up is noticed too).
process.on('disconnect', () => process.exit(0));

const { layout, model, tokens: tokenCount, decodeUrl } = JSON.parse(process.argv[2]);
const kv = typeof layout === 'string' ? kvLayoutPreset(layout) : kvLayout(layout);
const pageBytes = kv.bytesPerPage;
const pages = Math.floor(tokenCount / kv.tokensPerPage);
// The prefill host's own hierarchy (its prefix cache): host RAM for one context.
const hierarchy = new TierSync({ model, layout, tiers: [{ url: `host://?capacity=${pages * pageBytes}&prefault=false`, name: 'host' }], index: { path: ':memory:' } });
await hierarchy.open();

const tokens = Uint32Array.from({ length: pages * hierarchy.tokensPerPage }, (_, i) => (i * 2654435761) % 128_000);
const keys = hierarchy.keysOf(tokens);
const device = DeviceArena.create({ backend: 'sim', capacity: pages * pageBytes });
const where = keys.map((_, i) => ({ arena: device, offset: i * pageBytes, length: pageBytes }));

// "Prefill": KV bytes are a hash stream of the page's key, written through host memory into the device arena.
const crcs = [];
{
  const chunk = Math.max(1, Math.floor((64 << 20) / pageBytes));
  const host = HostArena.create({ capacity: chunk * pageBytes });
  for (let at = 0; at < pages; at += chunk) {
    const n = Math.min(chunk, pages - at);
    const batch = new TransferBatch();
    for (let i = 0; i < n; i++) {
      const view = host.view(i * pageBytes, pageBytes);
      let seed = createHash('sha256').update(keys[at + i]).digest();
      for (let o = 0; o < pageBytes; o += 32) {
        view.set(seed.subarray(0, Math.min(32, pageBytes - o)), o);
        seed = createHash('sha256').update(seed).digest();
      }
      crcs.push(crc32c(view));
      batch.add(host, i * pageBytes, device, (at + i) * pageBytes, pageBytes);
    }
    await hierarchy.engine.submit(batch);
  }
  host.close();
}
await hierarchy.store(tokens, where);

const client = await TierSyncClient.connect({ url: decodeUrl, transport: 'peer' });
process.send({ type: 'ready', keys, crcs, pageBytes, pages });

process.on('message', async (m) => {
  if (m.type === 'push') {
    // The client stages the device pages through host memory (CRC32C computed on that copy) and sends them over
    // the peer protocol; the accelerator's bytes go through host RAM on their way to the NIC.
    // In chunks of m.chunkPages: each chunk is announced as soon as it is in the decode host's RAM, so decode can
    // load it while the next one is on the wire.
    const t0 = process.hrtime.bigint();
    const batchPages = Math.min(client.hello.maxBatchPages, m.chunkPages ?? keys.length);
    let stored = 0;
    for (let at = 0; at < keys.length; at += batchPages) {
      const part = where.slice(at, at + batchPages);
      const r = await client.store(keys.slice(at, at + batchPages), part);
      stored += r.stored + r.existing;
      process.send({ type: 'chunk', from: at, to: Math.min(keys.length, at + batchPages) });
    }
    process.send({ type: 'pushed', stored, sendMs: Number(process.hrtime.bigint() - t0) / 1e6 });
  } else if (m.type === 'stop') {
    await client.close();
    device.close();
    await hierarchy.close();
    process.disconnect();
  }
});
