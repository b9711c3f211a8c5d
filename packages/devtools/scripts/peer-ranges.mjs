// Ranged GETs against whole-page GETs at the peer driver, authenticated, loopback: 256 pages of 2 MiB stored by PUT,
// then read in full by each plan (layers of 64 KiB): whole pages; two 1 MiB ranges at once; the layer-wise plan
// (1, 1, 16, 14 layers) at once; and that plan with its first read alone, as a layer-wise load does ("seq").
// 4 warm-up and 9 timed rounds; medians of time and of this process's CPU (both ends run here), as ratios to whole.
//   node packages/devtools/scripts/peer-ranges.mjs [repo root]      (build first: npx tsc -b packages/tiers)
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
const root = path.resolve(process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), '../../..'));
const load = (pkg) => import(pathToFileURL(path.join(root, 'packages', pkg, 'dist/index.js')).href);
const { HostArena, TransferEngine } = await load('native');
const { HostTier, servePeer, createTier } = await load('tiers');

const pageBytes = 2 << 20, pages = 256, bytes = pages * pageBytes, layer = 64 << 10;
const engine = new TransferEngine({ threads: 2 });
const host = new HostTier(`host://?capacity=${bytes + (64 << 20)}`, { engine, pageBytes, fingerprint: 'ranges' });
await host.open();
const server = servePeer(host, { secret: 'ranges-secret' });
const peer = createTier(`peer://127.0.0.1:${server.port}?secret=ranges-secret&streams=4`, { engine, pageBytes, fingerprint: 'ranges' });
await peer.open();
const src = HostArena.create({ capacity: bytes, prefault: true });
const dst = HostArena.create({ capacity: bytes, prefault: true });
for (let p = 0; p < pages; p++) src.view(p * pageBytes, pageBytes).fill(p & 255);
const keys = Array.from({ length: pages }, (_, i) => i.toString(16).padStart(32, '0'));
await peer.write(keys.map((key, i) => ({ key, source: { arena: src, offset: i * pageBytes, length: pageBytes } })));

/** Reads layers [from, to) of every page, one driver batch per [from, to), all at once. */
const readAll = (spans) =>
  Promise.all(
    spans.map(([from, to]) =>
      peer.read(keys.map((key, i) => {
        const offset = from * layer, length = (to - from) * layer;
        const into = { arena: dst, offset: i * pageBytes + offset, length };
        return length === pageBytes ? { key, into } : { key, into, range: { offset, length } };
      })),
    ),
  );
const plans = {
  whole: () => readAll([[0, 32]]),
  two: () => readAll([[0, 16], [16, 32]]),
  layerwise: () => readAll([[0, 1], [1, 2], [2, 18], [18, 32]]),
  seq: async () => {
    await readAll([[0, 1]]);
    await readAll([[1, 2], [2, 18], [18, 32]]);
  },
};
const times = {}, cpus = {};
for (const name in plans) (times[name] = []), (cpus[name] = []);
for (let round = 0; round < 13; round++) {
  for (const [name, run] of Object.entries(plans)) {
    const cpu = process.cpuUsage();
    const start = performance.now();
    await run();
    const ms = performance.now() - start;
    const used = process.cpuUsage(cpu);
    if (round < 4) continue;
    times[name].push(ms);
    cpus[name].push((used.user + used.system) / 1000);
  }
}
const median = (v) => [...v].sort((a, b) => a - b)[v.length >> 1];
for (const name in plans) {
  const t = median(times[name]), c = median(cpus[name]);
  console.log(`${name.padEnd(10)} ${t.toFixed(1)} ms (x${(t / median(times.whole)).toFixed(3)}), CPU ${c.toFixed(1)} ms (x${(c / median(cpus.whole)).toFixed(3)})`);
}
console.log(JSON.stringify(server.stats()));
await peer.close();
server.close();
await host.close();
await engine.close();
