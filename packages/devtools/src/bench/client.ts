/**
 * `tiersync bench client`: @tiersync/core/client against a `tiersync serve` daemon in a child process, each path
 * beside the baseline a user would compare it with, measured in the same run, alternating, medians:
 * - shm store / load (same host: reserve/pin + native copy with CRC32C + commit/release) vs memcpy of the same
 *   bytes on the client engine's threads;
 * - peer store / load (the hand-off path between hosts) vs one raw loopback TCP connection (tcpBaseline);
 * - the control channel: one round trip (a 1-key lookup) on the kept-alive HTTP connection, and a 1-page load.
 */
import http from 'node:http';
import { randomFillSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HostArena, TierSyncError } from '@tiersync/native';
import { memcpyBaseline, tcpBaseline } from '@tiersync/native/bench';
import { startDaemonProcess } from '@tiersync/core/server';
import { TierSyncClient } from '@tiersync/core/client';

export interface ClientBenchOptions {
  /** Bytes per path (default 256 MiB). */
  bytes?: number;
  /** Tokens per page (default 64: 256 KiB pages of 1 layer x 8 KV heads x 128 dims x K,V x bf16). */
  tokensPerPage?: number;
  repetitions?: number;
  log?: (line: string) => void;
}

export interface PathFigure {
  medianMs: number;
  GiBps: number;
  baselineMs: number;
  baselineGiBps: number;
  /** path time / baseline time (1 = as fast as the baseline). */
  ratio: number;
}

export interface ClientBenchReport {
  bytes: number;
  pageBytes: number;
  pages: number;
  repetitions: number;
  shmStore: PathFigure;
  shmLoad: PathFigure;
  peerStore: PathFigure;
  peerLoad: PathFigure;
  /**
   * After a shm store answered: how much longer the daemon took to record its pages in the block index (in batches,
   * off the request path; waited for before the baseline runs).
   */
  recordAfterStoreMs: number;
  control: {
    roundTripUs: number;
    onePageLoadUs: number;
    requestsPerShmStore: number;
    requestsPerShmLoad: number;
    /** The channel alone: a kept-alive HTTP echo in this process over loopback TCP and over a Unix socket. */
    echoTcpUs: number;
    echoUnixUs: number;
  };
}

/** Resolves once the daemon's client API has recorded every committed page in its block index (polls /v1/stats). */
async function untilRecorded(url: string): Promise<void> {
  for (;;) {
    const stats = (await (await fetch(`${url}/v1/stats`)).json()) as { clients: { unrecordedPages: number } | null };
    if (!stats.clients?.unrecordedPages) return;
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** Median microseconds of a small JSON POST answered by an empty http.Server, kept alive, over TCP or a Unix socket. */
async function echoRoundTrip(where: { port: number } | { socketPath: string }, n: number): Promise<number> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.end('{"ok":true}'));
  });
  await new Promise<void>((r) => ('port' in where ? server.listen(0, '127.0.0.1', r) : server.listen(where.socketPath, r)));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const target = 'port' in where ? { host: '127.0.0.1', port: (server.address() as { port: number }).port } : { socketPath: where.socketPath };
  const body = JSON.stringify({ keys: ['00000000000000aa'] });
  const once = () =>
    new Promise<void>((resolve, reject) => {
      const req = http.request({ ...target, agent, method: 'POST', path: '/', headers: { 'content-type': 'application/json', 'content-length': body.length } }, (res) => {
        res.resume();
        res.on('end', resolve);
      });
      req.on('error', reject);
      req.end(body);
    });
  const times: number[] = [];
  try {
    for (let i = 0; i < n + 20; i++) {
      const t = process.hrtime.bigint();
      await once();
      if (i >= 20) times.push(Number(process.hrtime.bigint() - t) / 1e3);
    }
  } finally {
    agent.destroy();
    await new Promise((r) => server.close(r));
  }
  return median(times);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const round = (x: number, d = 3) => Number(x.toFixed(d));

function figure(bytes: number, path: number[], base: number[]): PathFigure {
  const m = median(path);
  const b = median(base);
  return { medianMs: round(m * 1000, 2), GiBps: round(bytes / 2 ** 30 / m), baselineMs: round(b * 1000, 2), baselineGiBps: round(bytes / 2 ** 30 / b), ratio: round(m / b, 2) };
}

export async function runClientBench(options: ClientBenchOptions = {}): Promise<ClientBenchReport> {
  const log = options.log ?? (() => undefined);
  const tokensPerPage = options.tokensPerPage ?? 64;
  const layout = { tokensPerPage, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 8, headDim: 128 } }] };
  const pageBytes = tokensPerPage * 8 * 128 * 2 * 2;
  const pages = Math.max(1, Math.floor((options.bytes ?? 256 << 20) / pageBytes));
  const bytes = pages * pageBytes;
  const reps = options.repetitions ?? 3;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-bench-client-'));
  const shm = `/dev/shm/tiersync-bench-client-${process.pid}`;
  const configFile = path.join(dir, 'serve.json');
  writeFileSync(
    configFile,
    JSON.stringify({
      model: 'bench-client@1',
      layout,
      tiers: [{ url: `host://?capacity=${(pages + 4) * pageBytes}&shm=${shm}`, name: 'host', highWatermark: 1 }],
      index: { path: path.join(dir, 'index.sqlite') },
      http: { port: 0 },
      peer: { port: 0 },
      client: { maxBatchPages: Math.max(4096, pages) },
      log: { level: 'info' },
    }),
  );
  const { child, url } = await startDaemonProcess(configFile, { deadlineMs: 30_000 });
  const src = HostArena.create({ capacity: bytes, prefault: true });
  const dst = HostArena.create({ capacity: bytes, prefault: true });
  const shmClient = await TierSyncClient.connect({ url, transport: 'shm', threads: 2 });
  const peerClient = await TierSyncClient.connect({ url, transport: 'peer' });
  try {
    if (shmClient.pageBytes !== pageBytes) throw new TierSyncError(`daemon page size ${shmClient.pageBytes}, expected ${pageBytes}`, 'ERR_CONFIG');
    randomFillSync(src.view(0, Math.min(bytes, 1 << 30)));
    const where = (arena: HostArena) => Array.from({ length: pages }, (_, i) => ({ arena, offset: i * pageBytes, length: pageBytes }));
    const keys = (tag: number) => Array.from({ length: pages }, (_, i) => `${tag.toString(16).padStart(8, '0')}${i.toString(16).padStart(8, '0')}`);
    const time = async (fn: () => Promise<unknown>) => {
      const t = process.hrtime.bigint();
      await fn();
      return Number(process.hrtime.bigint() - t) / 1e9;
    };
    const t = { shmStore: [] as number[], shmLoad: [] as number[], memcpy: [] as number[], peerStore: [] as number[], peerLoad: [] as number[], tcp: [] as number[] };
    // Warm-up: page faults, JIT, connections.
    memcpyBaseline(dst, src, bytes, 2, pageBytes);
    tcpBaseline(src, dst, bytes, Math.min(bytes, 4 << 20));
    await shmClient.store(keys(0), where(src));
    await shmClient.load(keys(0), where(dst));
    await shmClient.delete(keys(0));
    let requestsPerStore = 0;
    const recordMs: number[] = [];
    let requestsPerLoad = 0;
    for (let r = 1; r <= reps; r++) {
      log(`repetition ${r}/${reps}`);
      const k = keys(r);
      const before = shmClient.controlRequests;
      t.shmStore.push(await time(() => shmClient.store(k, where(src))));
      requestsPerStore = shmClient.controlRequests - before;
      // The daemon records committed pages in its index after answering: let that finish before the baseline runs,
      // so the daemon's background work neither slows the baseline nor hides in it.
      recordMs.push(await time(() => untilRecorded(url)));
      t.memcpy.push(memcpyBaseline(dst, src, bytes, 2, pageBytes));
      const beforeLoad = shmClient.controlRequests;
      t.shmLoad.push(await time(() => shmClient.load(k, where(dst))));
      requestsPerLoad = shmClient.controlRequests - beforeLoad;
      t.memcpy.push(memcpyBaseline(dst, src, bytes, 2, pageBytes));
      await shmClient.delete(k);
      t.peerStore.push(await time(() => peerClient.store(k, where(src))));
      t.tcp.push(tcpBaseline(src, dst, bytes, Math.min(bytes, 4 << 20)));
      t.peerLoad.push(await time(() => peerClient.load(k, where(dst))));
      t.tcp.push(tcpBaseline(src, dst, bytes, Math.min(bytes, 4 << 20)));
      await shmClient.delete(k);
    }
    // The last load must have delivered exactly what was stored.
    if (Buffer.compare(Buffer.from(src.view(0, Math.min(bytes, 1 << 30))), Buffer.from(dst.view(0, Math.min(bytes, 1 << 30)))) !== 0) {
      throw new TierSyncError('bytes loaded differ from bytes stored', 'ERR_CHECKSUM');
    }
    // Control channel: one round trip, and a whole 1-page load (pin + copy + release).
    const one = [keys(999)[0]!];
    await shmClient.store(one, [{ arena: src, offset: 0, length: pageBytes }]);
    const rtt: number[] = [];
    const onePage: number[] = [];
    for (let i = 0; i < 200; i++) {
      rtt.push(await time(() => shmClient.lookup(one)));
      onePage.push(await time(() => shmClient.load(one, [{ arena: dst, offset: 0, length: pageBytes }])));
    }
    const echoTcpUs = await echoRoundTrip({ port: 0 }, 500);
    const echoUnixUs = await echoRoundTrip({ socketPath: path.join(dir, 'echo.sock') }, 500);
    return {
      bytes,
      pageBytes,
      pages,
      repetitions: reps,
      shmStore: figure(bytes, t.shmStore, t.memcpy),
      shmLoad: figure(bytes, t.shmLoad, t.memcpy),
      peerStore: figure(bytes, t.peerStore, t.tcp),
      peerLoad: figure(bytes, t.peerLoad, t.tcp),
      recordAfterStoreMs: round(median(recordMs) * 1000, 2),
      control: { roundTripUs: round(median(rtt) * 1e6, 1), onePageLoadUs: round(median(onePage) * 1e6, 1), requestsPerShmStore: requestsPerStore, requestsPerShmLoad: requestsPerLoad, echoTcpUs: round(echoTcpUs, 1), echoUnixUs: round(echoUnixUs, 1) },
    };
  } finally {
    await shmClient.close();
    await peerClient.close();
    src.close();
    dst.close();
    await new Promise<void>((resolve) => {
      if (child.exitCode !== null) return resolve();
      const kill = setTimeout(() => child.kill('SIGKILL'), 15_000);
      child.once('exit', () => {
        clearTimeout(kill);
        resolve();
      });
      child.kill('SIGTERM');
    });
    rmSync(dir, { recursive: true, force: true });
    rmSync(shm, { force: true });
  }
}
