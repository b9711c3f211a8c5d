// The decode host's daemon (what `tiersync serve` runs), started as a child process by run.mjs: one hierarchy
// whose host tier lives in /dev/shm (so the decode engine maps it), served to other hosts over the peer protocol.
// Tells its parent where it listens, and stops gracefully when asked.
import { rmSync } from 'node:fs';
import { TierSyncServer, parseServerConfig } from '@tiersync/core/server';

// If run.mjs dies, do not outlive it, and remove the run's scratch (its shared-memory file and folder), which it
// cannot. Registered first: a parent killed while this starts up is noticed too.
const scratch = JSON.parse(process.argv[3] ?? '[]');
process.on('disconnect', () => {
  for (const p of scratch) rmSync(p, { recursive: true, force: true });
  process.exit(0);
});
const config = parseServerConfig(JSON.parse(process.argv[2]));
const server = await TierSyncServer.start(config);
process.send({ type: 'listening', url: server.url, peerPort: server.peerPort });
process.on('message', async (m) => {
  if (m.type !== 'stop') return;
  await server.close();
  scratch.length = 0; // run.mjs removes them after a graceful stop
  process.disconnect();
});
