// A separate "host" for peer tests: serves a host tier over the peer protocol. Uses the compiled packages.
// argv: listen address, secret, page bytes. Prints "listening <port>".
import { TransferEngine } from '../../../native/dist/index.js';
import { HostTier } from '../../dist/host/index.js';
import { servePeer } from '../../dist/peer/server.js';

const [listen, secret, page] = process.argv.slice(2);
const pageBytes = Number(page);
const engine = new TransferEngine({ threads: 1 });
const tier = new HostTier(`host://?capacity=${64 * pageBytes}`, { engine, pageBytes, fingerprint: '' });
await tier.open();
const server = servePeer(tier, { host: listen, secret });
process.stdout.write(`listening ${server.port}\n`);
process.on('SIGTERM', () => {
  server.close();
  process.exit(0);
});
