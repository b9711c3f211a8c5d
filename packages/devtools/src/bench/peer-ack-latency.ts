/**
 * PUT acknowledgement latency of the peer plane, seen by a client on another thread (its own event loop, so only
 * the serving side's loop is made busy): one page per PUT, one PUT at a time, first with the serving thread idle,
 * then with it busy (a timer that spins 2 ms each time it fires, as a burst of index work would). A PUT into the
 * server's slot pool is acknowledged on its connection thread, so the busy figures should stay near the idle ones.
 */
import { Worker } from 'node:worker_threads';
import type { HostTier } from '@tiersync/tiers';
import { round } from './stats.js';

export interface AckLatency {
  /** PUTs timed per condition. */
  puts: number;
  idle: { p50Us: number; p99Us: number };
  busyServer: { p50Us: number; p99Us: number };
}

/** The client side: runs in a worker, reports the sorted latencies in microseconds. */
const CLIENT = `
const { workerData: w, parentPort } = await import('node:worker_threads');
const { HostArena, PeerClient, crc32c } = await import(w.native);
const client = await PeerClient.connect({ host: '127.0.0.1', port: w.port, secret: w.secret, streams: 1 });
const arena = HostArena.create({ capacity: w.pageBytes });
arena.view(0, w.pageBytes).fill(0x5a);
const crcs = Uint32Array.of(crc32c(arena.view(0, w.pageBytes)));
const us = [];
for (let i = 0; i < w.puts; i++) {
  const t = performance.now();
  await client.put(arena, [w.prefix + i.toString(16).padStart(24, '0')], Float64Array.of(0), Uint32Array.of(w.pageBytes), crcs);
  us.push((performance.now() - t) * 1000);
}
client.close();
arena.close();
parentPort.postMessage(us.sort((a, b) => a - b));
`;

async function timePuts(port: number, secret: string, pageBytes: number, puts: number, prefix: string): Promise<number[]> {
  const native = import.meta.resolve('@tiersync/native');
  const worker = new Worker(CLIENT, { eval: true, workerData: { native, port, secret, pageBytes, puts, prefix } });
  try {
    return await new Promise<number[]>((resolve, reject) => worker.once('message', resolve).once('error', reject));
  } finally {
    await worker.terminate();
  }
}

/** Times `puts` PUTs to the server at `port` serving `host`, idle then busy; the pages are deleted after each. */
export async function peerAckLatency(host: HostTier, port: number, secret: string, pageBytes: number, puts: number): Promise<AckLatency> {
  const pick = (us: number[]) => ({ p50Us: round(us[Math.floor(us.length * 0.5)]!), p99Us: round(us[Math.floor(us.length * 0.99)]!) });
  const run = async (prefix: string): Promise<number[]> => {
    const us = await timePuts(port, secret, pageBytes, puts, prefix);
    await host.delete(Array.from({ length: puts }, (_, i) => prefix + i.toString(16).padStart(24, '0')));
    return us;
  };
  const idle = await run('a1d1e000');
  const busy = setInterval(() => {
    const until = performance.now() + 2;
    while (performance.now() < until);
  }, 1);
  try {
    return { puts, idle: pick(idle), busyServer: pick(await run('b05e0000')) };
  } finally {
    clearInterval(busy);
  }
}
