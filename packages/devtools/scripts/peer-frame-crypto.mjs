// Peer transfers against raw TCP with frames sealed by one library: this process's pick (peerFrameCrypto()), or the
// one TIERSYNC_PEER_FRAME_CRYPTO names (ipsec-mb, system, node); NOSECRET=1: unauthenticated. One host tier served
// over loopback (STREAMS streams, default 4), 256 MiB of PAGE-byte pages (default 256 KiB) written 4 times (deleted between) then
// read 4 times, between two raw TCP loops of the same bytes (tcpBaseline, the bench's baseline). Prints one JSON
// line: ratios to the mean raw rate and this process's CPU s/GiB (both ends run here). Run alternately per library:
//   for v in ipsec-mb system; do TIERSYNC_PEER_FRAME_CRYPTO=$v node packages/devtools/scripts/peer-frame-crypto.mjs; done
// (build first: npx tsc -b packages/tiers)
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
const root = path.resolve(process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), '../../..'));
const load = (file) => import(pathToFileURL(path.join(root, 'packages', file)).href);
const { HostArena, TransferEngine, peerFrameCrypto } = await load('native/dist/index.js');
const { tcpBaseline } = await load('native/dist/bench.js');
const { HostTier, servePeer, createTier } = await load('tiers/dist/index.js');

const pageBytes = Number(process.env.PAGE ?? 256 * 1024), bytes = 256 << 20, pages = bytes / pageBytes, rounds = 4;
const secret = process.env.NOSECRET ? undefined : 'frame-crypto';
const streams = Number(process.env.STREAMS ?? 4);
const engine = new TransferEngine({ threads: 2 });
const host = new HostTier(`host://?capacity=${bytes + (64 << 20)}`, { engine, pageBytes, fingerprint: 'frame-crypto' });
await host.open();
const server = servePeer(host, secret ? { secret } : {});
const peer = createTier(`peer://127.0.0.1:${server.port}?streams=${streams}${secret ? `&secret=${secret}` : ''}`, { engine, pageBytes, fingerprint: 'frame-crypto' });
await peer.open();
const src = HostArena.create({ capacity: bytes, prefault: true });
const dst = HostArena.create({ capacity: bytes, prefault: true });
for (let p = 0; p < pages; p++) src.view(p * pageBytes, pageBytes).fill(p & 255);

const gib = (rounds * bytes) / 2 ** 30;
let generation = 0;
let keys = [];
const writeAll = async () => {
  keys = Array.from({ length: pages }, (_, i) => `${++generation}`.padStart(16, '0') + i.toString(16).padStart(16, '0'));
  await peer.write(keys.map((key, i) => ({ key, source: { arena: src, offset: i * pageBytes, length: pageBytes } })));
};
/** Seconds and this process's CPU seconds per GiB of `run`. */
const timed = async (run) => {
  const cpu = process.cpuUsage();
  const start = performance.now();
  await run();
  const used = process.cpuUsage(cpu);
  return { seconds: (performance.now() - start) / 1000, cpuPerGiB: (used.user + used.system) / 1e6 / gib };
};
const raw = () => timed(async () => {
  for (let r = 0; r < rounds; r++) tcpBaseline(src, dst, bytes, pageBytes);
});

await writeAll(); // warm-up
await peer.delete(keys);
const before = await raw();
const write = await timed(async () => {
  for (let r = 0; r < rounds; r++) {
    await writeAll();
    if (r < rounds - 1) await peer.delete(keys);
  }
});
const read = await timed(async () => {
  for (let r = 0; r < rounds; r++) await peer.read(keys.map((key, i) => ({ key, into: { arena: dst, offset: i * pageBytes, length: pageBytes } })));
});
const after = await raw();
const rawSeconds = (before.seconds + after.seconds) / 2;
const round = (x) => Number(x.toFixed(3));
console.log(JSON.stringify({
  sealedBy: secret ? peerFrameCrypto().source : 'none',
  pageBytes,
  streams,
  rawGiBps: round(gib / rawSeconds),
  writeRatio: round(rawSeconds / write.seconds),
  readRatio: round(rawSeconds / read.seconds),
  cpuPerGiB: { raw: round(before.cpuPerGiB), write: round(write.cpuPerGiB), read: round(read.cpuPerGiB) },
}));
await peer.close();
server.close();
await host.close();
await engine.close();
