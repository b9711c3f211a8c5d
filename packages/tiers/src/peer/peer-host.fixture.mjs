// A separate "host" for peer tests: serves a host tier over the peer protocol. Uses the compiled packages.
// argv: listen address, secret, page bytes, and optionally an shm path (a persistent host tier). Prints
// "listening <port> sealed-by <library>" (peerFrameCrypto().source). A line "block" on stdin blocks its JavaScript thread (printing "blocked" first), so that only
// the native data plane answers until the process is killed.
import { createInterface } from 'node:readline';
import { TransferEngine, peerFrameCrypto } from '../../../native/dist/index.js';
import { HostTier } from '../../dist/host/index.js';
import { servePeer } from '../../dist/peer/server.js';

const [listen, secret, page, shm] = process.argv.slice(2);
const pageBytes = Number(page);
const engine = new TransferEngine({ threads: 1 });
const tier = new HostTier(`host://?capacity=${64 * pageBytes}${shm ? `&shm=${shm}` : ''}`, { engine, pageBytes, fingerprint: '' });
await tier.open();
const server = servePeer(tier, { host: listen, secret });
process.stdout.write(`listening ${server.port} sealed-by ${peerFrameCrypto().source}\n`);
createInterface({ input: process.stdin }).on('line', (line) => {
  if (line !== 'block') return;
  process.stdout.write('blocked\n');
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 120_000);
});
process.on('SIGTERM', () => {
  server.close();
  process.exit(0);
});
