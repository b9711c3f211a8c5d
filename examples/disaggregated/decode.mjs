// The decode engine (a child process of run.mjs) on the decode host. It maps its host daemon's host tier
// (shared memory) and, on `load`, copies the pages the prefill pushed into its accelerator memory (a sim device
// arena), each page checked against its CRC32C on the way. No page byte crosses a socket here.
import { DeviceArena, HostArena, TransferBatch, TransferEngine, crc32c } from '@tiersync/native';
import { TierSyncClient } from '@tiersync/core/client';

// If run.mjs dies, do not outlive it (registered first: a parent killed while this starts up is noticed too).
process.on('disconnect', () => process.exit(0));

const { daemonUrl, pages, pageBytes } = JSON.parse(process.argv[2]);
const client = await TierSyncClient.connect({ url: daemonUrl, transport: 'shm' });
const device = DeviceArena.create({ backend: 'sim', capacity: pages * pageBytes });
process.send({ type: 'ready', transport: client.transport });

process.on('message', async (m) => {
  if (m.type === 'load') {
    // m.keys are pages m.first.. of the context; they go to the same place in device memory.
    const t0 = process.hrtime.bigint();
    const first = m.first ?? 0;
    const batchPages = client.hello.maxBatchPages;
    let loaded = 0;
    const missing = [];
    for (let at = 0; at < m.keys.length; at += batchPages) {
      const part = m.keys.slice(at, at + batchPages);
      const r = await client.load(part, part.map((_, i) => ({ arena: device, offset: (first + at + i) * pageBytes, length: pageBytes })));
      loaded += r.loaded;
      missing.push(...r.missing.map((i) => first + at + i));
    }
    const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
    process.send({ type: 'loaded', loaded, missing, loadMs });
  } else if (m.type === 'verify') {
    // Outside the timed path: copy the device pages back out and compare each page's CRC32C with the prefill's.
    const engine = new TransferEngine({ threads: 1 });
    const host = HostArena.create({ capacity: pages * pageBytes });
    const batch = new TransferBatch();
    for (let i = 0; i < pages; i++) batch.add(device, i * pageBytes, host, i * pageBytes, pageBytes);
    await engine.submit(batch);
    const bad = [];
    for (let i = 0; i < pages; i++) if (crc32c(host.view(i * pageBytes, pageBytes)) !== m.crcs[i]) bad.push(i);
    host.close();
    await engine.close();
    process.send({ type: 'verified', bad });
  } else if (m.type === 'forget') {
    await client.delete(m.keys);
    process.send({ type: 'forgotten' });
  } else if (m.type === 'stop') {
    await client.close();
    device.close();
    process.disconnect();
  }
});
