// The decode host's daemon (what `tiersync serve` runs), started as a child process by run.mjs: one hierarchy
// whose host tier lives in /dev/shm (so the decode engine maps it), served to other hosts over the peer protocol.
// Tells its parent where it listens, and stops gracefully when asked.
import { TierSyncServer, parseServerConfig } from '@tiersync/core/server';

const config = parseServerConfig(JSON.parse(process.argv[2]));
const server = await TierSyncServer.start(config);
process.send({ type: 'listening', url: server.url, peerPort: server.peerPort });
process.on('message', async (m) => {
  if (m.type !== 'stop') return;
  await server.close();
  process.disconnect();
});
// If run.mjs dies, do not outlive it.
process.on('disconnect', () => process.exit(0));
