/**
 * Another "host" for the network fault scenario: serves a host tier over the peer protocol, normally inside a
 * network namespace (also the peer host of `bench tiers` over a shaped link). Usage: peer-host-child LISTEN_ADDRESS
 * PORT SECRET PAGE_BYTES [CAPACITY_PAGES (default 2048)]. Prints `listening PORT`.
 */
import { TransferEngine } from '@tiersync/native';
import { HostTier, servePeer } from '@tiersync/tiers';

const [listen, port, secret, page, pages] = process.argv.slice(2);
const pageBytes = Number(page);
const engine = new TransferEngine({ threads: 1 });
const tier = new HostTier(`host://?capacity=${Number(pages ?? 2048) * pageBytes}`, { engine, pageBytes, fingerprint: '' });
await tier.open();
const server = servePeer(tier, { host: listen!, port: Number(port), secret: secret! });
process.stdout.write(`listening ${server.port}\n`);
process.on('SIGTERM', () => {
  server.close();
  process.exit(0);
});
