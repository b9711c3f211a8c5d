/**
 * Request latency of the peer plane, seen by a client on another thread (its own event loop, so only the serving
 * side's loop is made busy): one page per request, one request at a time, PUTs then GETs of the same pages, first
 * with the serving thread idle, then with it busy (a 10 ms synchronous task every 12 ms, as a long index
 * transaction would be). The client waits for each answer before it sends the next request, so most requests fall
 * in the 2 ms gaps: a wait for the serving thread shows in the mean and p99, less in the median. A PUT into the server's slot pool is acknowledged on its connection thread, so its busy figures
 * should stay near the idle ones; a GET is still planned by the page table on the serving thread.
 */
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { HostTier } from '@tiersync/tiers';
import { round } from './stats.js';

interface Percentiles {
  meanUs: number;
  p50Us: number;
  p99Us: number;
}

export interface AckLatency {
  /** PUTs (and GETs) timed per condition. */
  puts: number;
  idle: Percentiles;
  busyServer: Percentiles;
  /** GETs of the pages just put, one at a time. */
  getIdle: Percentiles;
  getBusyServer: Percentiles;
}

/** The client side: runs in a worker, reports the sorted PUT and GET latencies in microseconds. */
const CLIENT = `
const { workerData: w, parentPort } = await import('node:worker_threads');
const { HostArena, PeerClient, crc32c } = await import(w.native);
const client = await PeerClient.connect({ host: '127.0.0.1', port: w.port, secret: w.secret, streams: 1 });
const arena = HostArena.create({ capacity: w.pageBytes });
arena.view(0, w.pageBytes).fill(0x5a);
const crcs = Uint32Array.of(crc32c(arena.view(0, w.pageBytes)));
const time = async (op) => {
  const us = [];
  for (let i = 0; i < w.puts; i++) {
    const t = performance.now();
    const r = await op([w.prefix + i.toString(16).padStart(24, '0')]);
    if (r.statuses[0] !== 0) throw new Error('peer request ' + i + ' answered status ' + r.statuses[0]);
    us.push((performance.now() - t) * 1000);
  }
  return us.sort((a, b) => a - b);
};
const put = await time((keys) => client.put(arena, keys, Float64Array.of(0), Uint32Array.of(w.pageBytes), crcs));
const get = await time((keys) => client.get(arena, keys, Float64Array.of(0), Uint32Array.of(w.pageBytes)));
client.close();
arena.close();
parentPort.postMessage({ put, get });
`;

async function timeRequests(port: number, secret: string, pageBytes: number, puts: number, prefix: string): Promise<{ put: number[]; get: number[] }> {
  const native = import.meta.resolve('@tiersync/native');
  // Under vitest this module and @tiersync/native resolve to TypeScript sources: the worker then loads them through
  // the module hooks the reliability suite's children use.
  const execArgv = native.endsWith('.ts') ? ['--import', fileURLToPath(new URL('../reliability/ts-loader.mjs', import.meta.url))] : [];
  const worker = new Worker(CLIENT, { eval: true, execArgv, workerData: { native, port, secret, pageBytes, puts, prefix } });
  try {
    return await new Promise((resolve, reject) => worker.once('message', resolve).once('error', reject));
  } finally {
    await worker.terminate();
  }
}

/**
 * Times `puts` PUTs then GETs to the server at `port` serving `host`, idle then busy; the pages are deleted after
 * each. A request that does not answer ok fails the measurement.
 */
export async function peerAckLatency(host: HostTier, port: number, secret: string, pageBytes: number, puts: number): Promise<AckLatency> {
  const pick = (us: number[]): Percentiles => ({
    meanUs: round(us.reduce((a, b) => a + b, 0) / us.length),
    p50Us: round(us[Math.floor(us.length * 0.5)]!),
    p99Us: round(us[Math.floor(us.length * 0.99)]!),
  });
  const run = async (prefix: string): Promise<{ put: number[]; get: number[] }> => {
    const us = await timeRequests(port, secret, pageBytes, puts, prefix);
    await host.delete(Array.from({ length: puts }, (_, i) => prefix + i.toString(16).padStart(24, '0')));
    return us;
  };
  const idle = await run('a1d1e000');
  // Busy: a 10 ms synchronous task every 12 ms (a long index transaction, say); the loop polls for I/O only between.
  const busy = setInterval(() => {
    const until = performance.now() + 10;
    while (performance.now() < until);
  }, 12);
  try {
    const loaded = await run('b05e0000');
    return { puts, idle: pick(idle.put), busyServer: pick(loaded.put), getIdle: pick(idle.get), getBusyServer: pick(loaded.get) };
  } finally {
    clearInterval(busy);
  }
}
