/**
 * `tiersync bench client`: @tiersync/core/client against a `tiersync serve` daemon in a child process, each path
 * beside the baseline a user would compare it with, measured in the same run, alternating, medians:
 * - shm store / load (same host: reserve/pin + native copy with CRC32C + commit/release) vs memcpy of the same
 *   bytes on the client engine's threads;
 * - peer store / load (the hand-off path between hosts) vs one raw loopback TCP connection (tcpBaseline);
 * - the control channel: one round trip (a 1-key lookup) on the channel the client uses (a framed session on the
 *   daemon's Unix socket), and a 1-page load, beside a bare echo of the same frames over the same transport by a
 *   child process (what the transport itself costs on this machine).
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import http from 'node:http';
import { randomFillSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { HostArena, TierSyncError, TransferBatch, TransferEngine } from '@tiersync/native';
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
  /**
   * shm paths: the same bytes copied between the client's own arenas on the client's engine with each page's
   * CRC32C in the same pass (no daemon), / baseline: the floor of any checked copy on this machine.
   */
  copyCrcRatio?: number;
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
    /** Median of 2,000 back-to-back 1-key lookups after 3,000 to warm up (what a steady client sees). */
    roundTripUs: number;
    /** Median 1-page load (pin + copy out with its check + release), after 200 to warm up. */
    onePageLoadUs: number;
    requestsPerShmStore: number;
    requestsPerShmLoad: number;
    /** The channel alone: a kept-alive HTTP echo in this process over loopback TCP and over a Unix socket. */
    echoTcpUs: number;
    echoUnixUs: number;
    /**
     * The transport alone, across processes as the daemon is: a child process echoing the client's frames (same
     * framing and JSON) on a Unix socket (`echoFramesUs`), and echoing raw bytes (`echoRawUs`).
     */
    echoFramesUs: number;
    echoRawUs: number;
    /** roundTripUs / echoFramesUs: what the daemon and client add over the bare transport. */
    roundTripVsEcho: number;
  };
  /**
   * The Python client (packages/python) against the same daemon: a store and a load of the same bytes from/to a
   * numpy array, each / `numpy.copyto` of those bytes in the same Python run (packages/python/bench/bench_client.py).
   * `skipped` says why when Debian's Python or numpy is missing.
   */
  python: { storeRatio: number; loadRatio: number; [figure: string]: unknown } | { skipped: string };
}

/** Debian's Python, for which python3-numpy installs (scripts/system-packages.mjs). */
const DEBIAN_PYTHON = '/usr/bin/python3';
const PYTHON_BENCH = fileURLToPath(new URL('../../../python/bench/bench_client.py', import.meta.url));

/** Runs the Python client's bench against the daemon at `url`; its last stdout line is `{"python": {...}}`. */
async function pythonBench(url: string, mib: number, reps: number, deadlineMs = 600_000): Promise<ClientBenchReport['python']> {
  const child = spawn(DEBIAN_PYTHON, [PYTHON_BENCH, '--json', '--url', url, '--mib', String(mib), '--reps', String(reps)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
  const timer = setTimeout(() => child.kill('SIGKILL'), deadlineMs);
  const code = await new Promise<number | null>((resolve) => {
    child.once('error', () => resolve(-1));
    child.once('exit', (c) => resolve(c));
  }).finally(() => clearTimeout(timer));
  if (code !== 0) {
    if (/No module named 'numpy'|ENOENT/.test(err) || code === -1) return { skipped: `${DEBIAN_PYTHON} with numpy is needed (apt package python3-numpy)` };
    throw new TierSyncError(`python bench exited with ${code}: ${err.trim().split('\n').slice(-3).join(' | ')}`, 'ERR_IO');
  }
  const last = out.trim().split('\n').pop() ?? '';
  return (JSON.parse(last) as { python: ClientBenchReport['python'] }).python;
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

/** A child process echoing on a Unix socket: frames (parsed and answered like a lookup) or raw bytes. */
const ECHO_CHILD = `
const net = require('node:net');
const [path, mode] = process.argv.slice(1);
net.createServer((s) => {
  if (mode === 'raw') return s.on('data', (c) => s.write(c));
  let buf = Buffer.alloc(0);
  s.on('data', (c) => {
    buf = buf.length ? Buffer.concat([buf, c]) : c;
    while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32LE(0)) {
      const n = buf.readUInt32LE(0);
      const v = JSON.parse(buf.toString('utf8', 4, 4 + n));
      buf = buf.subarray(4 + n);
      const json = Buffer.from(JSON.stringify({ id: v.id, status: 200, body: { present: [true], lengths: [262144], tiers: ['host'], estimatedLoadMs: 0 } }));
      const out = Buffer.allocUnsafe(4 + json.length);
      out.writeUInt32LE(json.length, 0);
      json.copy(out, 4);
      s.write(out);
    }
  });
}).listen(path, () => process.stdout.write('ready\\n'));
`;

/** Median microseconds of one request frame answered by a child process over a Unix socket (framed JSON, or raw). */
async function echoChildRoundTrip(socketPath: string, mode: 'frames' | 'raw', n: number, warmUp: number): Promise<number> {
  const child = spawn(process.execPath, ['-e', ECHO_CHILD, socketPath, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise((resolve, reject) => {
      child.stdout!.once('data', resolve);
      child.once('exit', (code) => reject(new TierSyncError(`echo child exited (${code})`, 'ERR_IO')));
    });
    const socket = net.createConnection({ path: socketPath });
    await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    let answered: (() => void) | undefined;
    let buf: Buffer = Buffer.alloc(0);
    socket.on('data', (c: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, c]) : c;
      // Frames: one whole reply frame; raw: the request's bytes back.
      const want = mode === 'raw' ? request(0).length : buf.length >= 4 ? 4 + buf.readUInt32LE(0) : Infinity;
      if (buf.length < want) return;
      const reply = buf.subarray(0, want);
      buf = buf.subarray(want);
      if (mode === 'frames') JSON.parse(reply.toString('utf8', 4));
      const a = answered;
      answered = undefined;
      a?.();
    });
    const times: number[] = [];
    for (let i = 0; i < n + warmUp; i++) {
      const t = process.hrtime.bigint();
      await new Promise<void>((resolve) => {
        answered = resolve;
        socket.write(request(i + 1));
      });
      if (i >= warmUp) times.push(Number(process.hrtime.bigint() - t) / 1e3);
    }
    socket.destroy();
    return median(times);
  } finally {
    child.kill();
  }
}

/** A lookup request frame as the client sends it (fixed length for a given id width). */
function request(id: number): Buffer {
  const json = Buffer.from(JSON.stringify({ id: 1e9 + id, op: 'lookup', body: { keys: ['00000000000003e7'] } }));
  const out = Buffer.allocUnsafe(4 + json.length);
  out.writeUInt32LE(json.length, 0);
  json.copy(out, 4);
  return out;
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
      // Room for every page (the peer server's slot pool is lent from free slots and taken back when short).
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
    const t = { shmStore: [] as number[], shmLoad: [] as number[], memcpy: [] as number[], copyCrc: [] as number[], peerStore: [] as number[], peerLoad: [] as number[], tcp: [] as number[] };
    // The floor of a checked copy: the client's engine, same threads, each page's CRC32C in the same pass.
    const engine = new TransferEngine({ threads: 2 });
    const copyCrc = async () => {
      const batch = new TransferBatch();
      for (let i = 0; i < pages; i++) batch.add(src, i * pageBytes, dst, i * pageBytes, pageBytes);
      await engine.submit(batch, { checksums: true, priority: 'demand' });
    };
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
      t.copyCrc.push(await time(copyCrc));
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
    // Steady state, as the echo below is measured: warmed up, then back-to-back requests. Measured here: a fresh
    // client's round trip falls from ~2.5x to ~1x the echo over its first ~2,500 requests (JIT of both processes).
    for (let i = 0; i < 3000; i++) await shmClient.lookup(one);
    for (let i = 0; i < 2000; i++) rtt.push(await time(() => shmClient.lookup(one)));
    for (let i = 0; i < 200; i++) await shmClient.load(one, [{ arena: dst, offset: 0, length: pageBytes }]);
    for (let i = 0; i < 300; i++) onePage.push(await time(() => shmClient.load(one, [{ arena: dst, offset: 0, length: pageBytes }])));
    await engine.close();
    const echoTcpUs = await echoRoundTrip({ port: 0 }, 500);
    const echoUnixUs = await echoRoundTrip({ socketPath: path.join(dir, 'echo.sock') }, 500);
    const echoFramesUs = await echoChildRoundTrip(path.join(dir, 'frames.sock'), 'frames', 2000, 3000);
    const echoRawUs = await echoChildRoundTrip(path.join(dir, 'raw.sock'), 'raw', 2000, 3000);
    log('python client');
    const python = await pythonBench(url, Math.max(1, Math.round(bytes / 2 ** 20)), reps);
    const roundTripUs = median(rtt) * 1e6;
    const copyCrcRatio = round(median(t.copyCrc) / median(t.memcpy), 2);
    return {
      bytes,
      pageBytes,
      pages,
      repetitions: reps,
      shmStore: { ...figure(bytes, t.shmStore, t.memcpy), copyCrcRatio },
      shmLoad: { ...figure(bytes, t.shmLoad, t.memcpy), copyCrcRatio },
      peerStore: figure(bytes, t.peerStore, t.tcp),
      peerLoad: figure(bytes, t.peerLoad, t.tcp),
      recordAfterStoreMs: round(median(recordMs) * 1000, 2),
      control: {
        roundTripUs: round(roundTripUs, 1),
        onePageLoadUs: round(median(onePage) * 1e6, 1),
        requestsPerShmStore: requestsPerStore,
        requestsPerShmLoad: requestsPerLoad,
        echoTcpUs: round(echoTcpUs, 1),
        echoUnixUs: round(echoUnixUs, 1),
        echoFramesUs: round(echoFramesUs, 1),
        echoRawUs: round(echoRawUs, 1),
        roundTripVsEcho: round(roundTripUs / echoFramesUs, 2),
      },
      python,
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
