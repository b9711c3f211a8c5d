/**
 * `tiersync bench resp`: redis-benchmark (the real one, from apt) against the RESP door of a TierSyncServer and
 * against a redis-server started in the same run, with the same options:
 *   redis-benchmark -p PORT -d 262144 -c 50 -t get,set -n N --csv [-r KEYSPACE]
 * Door and redis-server alternate (A B A B ...); medians of the requests per second are reported, with the ratio
 * door / redis-server (1.0: as fast as Redis). A run counts only if redis-benchmark exits 0 and prints no error.
 *
 * The door's hierarchy: one host tier (RAM, like redis-server without persistence), pages of the llama-3-8b layout
 * with 2 tokens per page = 256 KiB, so each value is one page; the index in memory. Values are received into the
 * host tier's slots and GETs sent from them. With `durable` (`--durable`) the host tier is a /dev/shm file and the
 * door's catalog durable (resp.catalog): each SET also writes its manifest page before it is acknowledged, and the
 * acknowledged keys survive a kill -9 of the daemon; redis-server runs as before (no persistence) as the baseline.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { TierSyncError } from '@tiersync/native';
import { parseServerConfig, TierSyncServer, type ResolvedServerConfig } from '@tiersync/core/server';
import { startRedis } from './services.js';
import { median, round } from './stats.js';

const exec = promisify(execFile);

const DEFAULT_HOST_BYTES = 512 * 1024 ** 2;

export interface RespBenchOptions {
  /** Requests per test (-n). Default 20,000. */
  requests?: number;
  /** Value size, bytes (-d). Default 262,144. */
  valueBytes?: number;
  /** Parallel clients (-c). Default 50. */
  clients?: number;
  /** Door / redis-server pairs. Default 3. */
  repetitions?: number;
  /**
   * Keys drawn at random from this many (-r): each SET and GET names one of them. Default: one key, as
   * redis-benchmark does without -r (then a SET always replaces the value the previous SET wrote, and a GET reads
   * the value the last one left).
   */
  keyspace?: number;
  /** Host tier of the door, bytes. Default 512 MiB (prefaulted at start, like memory a cache claims). */
  hostBytes?: number;
  /** A /dev/shm host tier and a durable catalog (see the file comment). Default false. */
  durable?: boolean;
  /** The door's engine (resp.engine). Default: the config default (node, or TIERSYNC_RESP_ENGINE). */
  engine?: 'native' | 'node';
  /**
   * Also run a third target: a bare Node.js RESP sink in this process (net.Server, Node's own socket reads,
   * values counted and dropped, GETs answered from one fixed buffer). It stores nothing: it is the ceiling any
   * door running on Node's socket path can reach on this machine. Default false.
   */
  nodeSink?: boolean;
  /**
   * Also time `MGET` of this many keys (batched connectors read chunks so): their values (`valueBytes` each) are
   * stored first on both targets, then `redis-benchmark -c CLIENTS -n REQUESTS/K MGET mget:0 ... mget:K-1`.
   * Default: not run.
   */
  mgetKeys?: number;
  log?: (line: string) => void;
}

export interface RespRun {
  target: 'door' | 'redis' | 'node-sink';
  setRps: number;
  getRps: number;
  /** With `mgetKeys`: MGETs per second (each of mgetKeys values), and the target's CPU per MGET, microseconds. */
  mgetRps?: number;
  mgetCpuUs?: number;
}

export interface RespBenchReport {
  command: string;
  requests: number;
  valueBytes: number;
  clients: number;
  repetitions: number;
  /** Keys the requests are spread over (-r); 1: one key (no -r). */
  keyspace: number;
  /** The door's catalog: `durable` (manifest per SET, on a /dev/shm host tier) or `memory`. */
  catalog: 'durable' | 'memory';
  /** The door's engine as it ran (resp.engine). */
  engine: 'native' | 'node';
  door: { setRps: number; getRps: number; setGiBps: number; getGiBps: number };
  redis: { setRps: number; getRps: number; setGiBps: number; getGiBps: number };
  /** door / redis-server, medians: 1.0 = as fast as Redis. */
  ratio: { set: number; get: number };
  /** Median over repetitions of door / the redis-server run right after it (steadier on a noisy machine). */
  pairRatio: { set: number; get: number };
  /** With `nodeSink`: the bare Node sink's medians, and door / sink and sink / redis-server (medians). */
  nodeSink?: { setRps: number; getRps: number; doorRatio: { set: number; get: number }; redisRatio: { set: number; get: number } };
  /** With `mgetKeys`: medians of MGETs per second (and the values' GiB/s), door / redis-server, per pair too. */
  mget?: {
    command: string;
    keys: number;
    door: { rps: number; GiBps: number };
    redis: { rps: number; GiBps: number };
    ratio: number;
    pairRatio: number;
    /** MGETs the door thread answered itself (native engine), warm-up included. */
    doorNative: number;
    /** CPU per MGET, microseconds (medians): the door's process (this one) and redis-server's (10 ms ticks). */
    cpuUs: { door: number; redis: number };
  };
  runs: RespRun[];
  machine: string;
}

/** What every redis-benchmark run of a bench shares. */
type BenchShape = Required<Pick<RespBenchOptions, 'requests' | 'valueBytes' | 'clients' | 'keyspace'>>;

function keyspaceArgs(o: BenchShape): string[] {
  return o.keyspace > 1 ? ['-r', String(o.keyspace)] : [];
}

/**
 * Every key's value must stay in the door's host tier (its only tier): an evicted value would answer GETs with nil
 * and flatter the door. A quarter of the tier is left for the door's slot pool and values in flight.
 * @throws TierSyncError ERR_INVALID_ARGUMENT
 */
function checkKeyspaceFits(o: BenchShape, hostBytes: number): void {
  if (o.keyspace * o.valueBytes > hostBytes * 0.75) {
    throw new TierSyncError(`--keyspace ${o.keyspace} x ${o.valueBytes} bytes exceeds 3/4 of the door's ${hostBytes}-byte host tier: values would be evicted`, 'ERR_INVALID_ARGUMENT');
  }
}

/** The redis-benchmark command line a report names (host and port left out). */
function commandLine(o: BenchShape, tests: string): string {
  return ['redis-benchmark', '-d', o.valueBytes, '-c', o.clients, '-t', tests, '-n', o.requests, ...keyspaceArgs(o)].join(' ');
}

/**
 * Runs redis-benchmark against 127.0.0.1:`port` with `args` (and --csv); throws when it fails or reports an error.
 * Returns the requests per second of the test named `name` (a line `"NAME"` or `"NAME args..."`), checked > 0.
 */
async function runRedisBenchmark(port: number, args: string[]): Promise<(name: string) => number> {
  const r = await exec('redis-benchmark', ['-h', '127.0.0.1', '-p', String(port), '--csv', ...args], { timeout: 600_000, maxBuffer: 1 << 20 }).catch((e: { stdout?: string; stderr?: string; message: string }) => {
    throw new TierSyncError(`redis-benchmark failed: ${e.message} ${e.stderr ?? ''}`.trim(), 'ERR_IO');
  });
  if (/error/i.test(r.stdout + r.stderr)) throw new TierSyncError(`redis-benchmark reported errors: ${(r.stdout + r.stderr).slice(0, 500)}`, 'ERR_IO');
  return (name) => {
    const line = r.stdout.split('\n').find((l) => l.startsWith(`"${name}"`) || l.startsWith(`"${name} `));
    const v = Number(line?.split(',')[1]?.replace(/"/g, ''));
    if (!Number.isFinite(v) || v <= 0) throw new TierSyncError(`redis-benchmark printed no ${name} figure: ${r.stdout.slice(0, 300)}`, 'ERR_IO');
    return v;
  };
}

/** Runs redis-benchmark's SET and GET tests (`tests`) with the bench's shape. */
async function redisBenchmark(port: number, o: BenchShape, tests: 'get,set' | 'set' | 'get' = 'get,set'): Promise<{ setRps: number; getRps: number }> {
  const rps = await runRedisBenchmark(port, ['-d', String(o.valueBytes), '-c', String(o.clients), '-t', tests, '-n', String(o.requests), ...keyspaceArgs(o)]);
  return { setRps: tests === 'get' ? 0 : rps('SET'), getRps: tests === 'set' ? 0 : rps('GET') };
}

/** Stores `keys` values of `valueBytes` under mget:0 ... on the server at `port`, over one pipelined connection. */
async function storeMgetValues(port: number, keys: number, valueBytes: number): Promise<void> {
  const value = Buffer.alloc(valueBytes, 0x6d);
  const commands = Array.from({ length: keys }, (_, i) => Buffer.concat([Buffer.from(`*3\r\n$3\r\nSET\r\n$${`mget:${i}`.length}\r\nmget:${i}\r\n$${valueBytes}\r\n`), value, Buffer.from('\r\n')]));
  const want = Buffer.from('+OK\r\n'.repeat(keys));
  await new Promise<void>((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const timer = setTimeout(() => fail(new TierSyncError(`storing the MGET values on port ${port} took over 30 s`, 'ERR_TIMEOUT')), 30_000);
    let got = Buffer.alloc(0);
    function fail(e: Error): void {
      clearTimeout(timer);
      socket.destroy();
      reject(e);
    }
    socket.on('error', fail);
    socket.on('data', (c: Buffer) => {
      got = Buffer.concat([got, c]);
      if (got.length < want.length) return;
      if (!got.equals(want)) return fail(new TierSyncError(`SET of the MGET values on port ${port} answered ${got.toString('latin1', 0, 200)}`, 'ERR_IO'));
      clearTimeout(timer);
      socket.end();
      resolve();
    });
    socket.write(Buffer.concat(commands));
  });
}

/** The MGET keys of `mgetKeys`. */
function mgetArgs(keys: number): string[] {
  return ['MGET', ...Array.from({ length: keys }, (_, i) => `mget:${i}`)];
}

/**
 * Runs redis-benchmark with `MGET mget:0 ... mget:K-1`; MGETs per second, and the CPU per MGET `cpu` counted
 * meanwhile (microseconds; the target's process).
 */
async function mgetBenchmark(port: number, o: BenchShape, keys: number, cpu?: () => { user: number; system: number }): Promise<{ mgetRps: number; mgetCpuUs?: number }> {
  const requests = Math.max(100, Math.floor(o.requests / keys));
  const before = cpu?.();
  const v = (await runRedisBenchmark(port, ['-c', String(o.clients), '-n', String(requests), ...mgetArgs(keys)]))('MGET');
  const after = cpu?.();
  return { mgetRps: v, ...(before && after ? { mgetCpuUs: round((after.user + after.system - before.user - before.system) / requests, 1) } : {}) };
}

/**
 * The bare Node.js RESP sink (`nodeSink`): parses arrays of bulk strings as they arrive, never copies a bulk longer
 * than 4 KiB (its bytes are counted and dropped), answers SET with +OK, GET with one fixed value of `valueBytes`,
 * CONFIG GET with an empty value (redis-benchmark asks for `save` and `appendonly`), anything else with +OK.
 */
async function startNodeSink(valueBytes: number): Promise<{ port: number; stop: () => Promise<void> }> {
  const OK = Buffer.from('+OK\r\n');
  const value = Buffer.concat([Buffer.from(`$${valueBytes}\r\n`), Buffer.alloc(valueBytes, 0x78), Buffer.from('\r\n')]);
  const server = net.createServer({ noDelay: true }, (socket) => {
    let head: Buffer = Buffer.alloc(0);
    let skip = 0;
    let args: string[] | undefined;
    let count = 0;
    const reply = (a: string[]) => {
      const name = (a[0] ?? '').toUpperCase();
      if (name === 'GET') socket.write(value);
      else if (name === 'CONFIG') socket.write(`*2\r\n$${(a[2] ?? '').length}\r\n${a[2] ?? ''}\r\n$0\r\n\r\n`);
      else socket.write(OK);
    };
    socket.on('error', () => undefined);
    socket.on('data', (chunk: Buffer) => {
      let c = chunk;
      if (skip) {
        const n = Math.min(skip, c.length);
        skip -= n;
        c = c.subarray(n);
        if (skip) return;
      }
      head = head.length ? Buffer.concat([head, c]) : c;
      for (;;) {
        if (!args) {
          const eol = head.indexOf('\r\n');
          if (eol < 0) return;
          count = Number(head.subarray(1, eol).toString('latin1'));
          args = [];
          head = head.subarray(eol + 2);
        }
        if (args.length === count) {
          reply(args);
          args = undefined;
          continue;
        }
        const eol = head.indexOf('\r\n');
        if (eol < 0) return;
        const len = Number(head.subarray(1, eol).toString('latin1'));
        if (len > 4096) {
          args.push('');
          const have = head.length - eol - 2;
          if (have >= len + 2) {
            head = head.subarray(eol + 2 + len + 2);
            continue;
          }
          skip = len + 2 - have;
          head = Buffer.alloc(0);
          return;
        }
        if (head.length < eol + 2 + len + 2) return;
        args.push(head.subarray(eol + 2, eol + 2 + len).toString('latin1'));
        head = head.subarray(eol + 4 + len);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as net.AddressInfo).port, stop: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** The benchmarked door: a host tier first, RESP on an ephemeral port; with `shm`, a shm host tier and the durable catalog. */
function doorConfig(options: RespBenchOptions, valueBytes: number, shm?: string): ResolvedServerConfig {
  return parseServerConfig({
    model: 'resp-bench',
    layout: 'llama-3-8b',
    tokensPerPage: 2,
    tiers: [{ url: `host://?capacity=${options.hostBytes ?? DEFAULT_HOST_BYTES}${shm ? `&shm=${shm}` : ''}`, name: 'host' }],
    http: { port: 0 },
    peer: { enabled: false },
    log: { level: 'warn' },
    resp: { port: 0, maxBulkBytes: Math.max(1 << 20, valueBytes), catalog: shm ? 'durable' : 'memory', ...(options.engine ? { engine: options.engine } : {}) },
  });
}

export async function runRespBench(options: RespBenchOptions = {}): Promise<RespBenchReport> {
  const o: BenchShape = { requests: options.requests ?? 20_000, valueBytes: options.valueBytes ?? 262_144, clients: options.clients ?? 50, keyspace: options.keyspace ?? 1 };
  const repetitions = options.repetitions ?? 3;
  const log = options.log ?? (() => undefined);
  checkKeyspaceFits(o, options.hostBytes ?? DEFAULT_HOST_BYTES);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-bench-resp-'));
  const shm = options.durable ? `/dev/shm/tiersync-bench-resp-${process.pid}` : undefined;
  const redis = await startRedis();
  const sink = options.nodeSink ? await startNodeSink(o.valueBytes) : undefined;
  let server: TierSyncServer | undefined;
  const runs: RespRun[] = [];
  let engine: 'native' | 'node' = 'node';
  let doorNativeMgets = 0;
  try {
    server = await TierSyncServer.start(doorConfig(options, o.valueBytes, shm));
    engine = server.resp!.engine;
    log(`door (${engine} engine) on port ${server.respPort} (page ${server.ts.pageBytes} bytes), redis-server on port ${redis.port}`);
    // Warm-up of both (JIT, page faults of the arenas), not counted.
    const warm = { ...o, requests: Math.max(500, Math.floor(o.requests / 10)) };
    await redisBenchmark(server.respPort, warm);
    await redisBenchmark(redis.port, warm);
    if (sink) await redisBenchmark(sink.port, warm);
    const mgetKeys = options.mgetKeys;
    if (mgetKeys) {
      for (const port of [server.respPort, redis.port]) {
        await storeMgetValues(port, mgetKeys, o.valueBytes);
        await mgetBenchmark(port, warm, mgetKeys);
      }
    }
    // MGET runs after the SETs and GETs of each target: the SETs of redis-benchmark write key:__rand_int__ (or one
    // key), never the mget:* values.
    const mget = async (port: number, cpu: () => { user: number; system: number }): Promise<{ mgetRps?: number; mgetCpuUs?: number }> => (mgetKeys ? await mgetBenchmark(port, o, mgetKeys, cpu) : {});
    const doorCpu = () => process.cpuUsage();
    const redisCpu = () => procCpu(redis.child.pid!);
    for (let i = 0; i < repetitions; i++) {
      const door = { ...(await redisBenchmark(server.respPort, o)), ...(await mget(server.respPort, doorCpu)) };
      runs.push({ target: 'door', ...door });
      log(`door   SET ${round(door.setRps, 0)} req/s  GET ${round(door.getRps, 0)} req/s${door.mgetRps ? `  MGET ${round(door.mgetRps, 0)} req/s` : ''}`);
      const base = { ...(await redisBenchmark(redis.port, o)), ...(await mget(redis.port, redisCpu)) };
      runs.push({ target: 'redis', ...base });
      log(`redis  SET ${round(base.setRps, 0)} req/s  GET ${round(base.getRps, 0)} req/s${base.mgetRps ? `  MGET ${round(base.mgetRps, 0)} req/s` : ''}`);
      if (sink) {
        const bare = await redisBenchmark(sink.port, o);
        runs.push({ target: 'node-sink', ...bare });
        log(`sink   SET ${round(bare.setRps, 0)} req/s  GET ${round(bare.getRps, 0)} req/s`);
      }
    }
    doorNativeMgets = server.resp!.nativeStats()?.nativeMgets ?? 0;
  } finally {
    await server?.close();
    await redis.stop();
    await sink?.stop();
    rmSync(dir, { recursive: true, force: true });
    if (shm) rmSync(shm, { force: true });
  }
  const figure = (target: RespRun['target']) => {
    const set = median(runs.filter((r) => r.target === target).map((r) => r.setRps));
    const get = median(runs.filter((r) => r.target === target).map((r) => r.getRps));
    return { setRps: round(set, 0), getRps: round(get, 0), setGiBps: round((set * o.valueBytes) / 1024 ** 3), getGiBps: round((get * o.valueBytes) / 1024 ** 3) };
  };
  const pairs: Array<[RespRun, RespRun]> = [];
  const doorRuns = runs.filter((r) => r.target === 'door');
  const redisRuns = runs.filter((r) => r.target === 'redis');
  for (let i = 0; i < Math.min(doorRuns.length, redisRuns.length); i++) pairs.push([doorRuns[i]!, redisRuns[i]!]);
  const door = figure('door');
  const base = figure('redis');
  const bare = sink ? figure('node-sink') : undefined;
  const mgetKeys = options.mgetKeys;
  let mget: RespBenchReport['mget'];
  if (mgetKeys) {
    const rps = (target: RespRun['target']) => median(runs.filter((r) => r.target === target).map((r) => r.mgetRps!));
    const [d, b] = [rps('door'), rps('redis')];
    const GiBps = (v: number) => round((v * mgetKeys * o.valueBytes) / 1024 ** 3);
    mget = {
      command: `redis-benchmark -c ${o.clients} -n ${Math.max(100, Math.floor(o.requests / mgetKeys))} ${mgetArgs(mgetKeys).join(' ')} (values of ${o.valueBytes} bytes)`,
      keys: mgetKeys,
      door: { rps: round(d, 0), GiBps: GiBps(d) },
      redis: { rps: round(b, 0), GiBps: GiBps(b) },
      ratio: round(d / b),
      pairRatio: round(median(pairs.map(([x, y]) => x.mgetRps! / y.mgetRps!))),
      doorNative: doorNativeMgets,
      cpuUs: {
        door: round(median(runs.filter((r) => r.target === 'door').map((r) => r.mgetCpuUs!)), 1),
        redis: round(median(runs.filter((r) => r.target === 'redis').map((r) => r.mgetCpuUs!)), 1),
      },
    };
  }
  return {
    command: commandLine(o, 'get,set'),
    ...o,
    repetitions,
    catalog: shm ? 'durable' : 'memory',
    engine,
    door,
    redis: base,
    ratio: { set: round(door.setRps / base.setRps), get: round(door.getRps / base.getRps) },
    pairRatio: {
      set: round(median(pairs.map(([d, b]) => d.setRps / b.setRps))),
      get: round(median(pairs.map(([d, b]) => d.getRps / b.getRps))),
    },
    ...(mget ? { mget } : {}),
    ...(bare ? { nodeSink: { setRps: bare.setRps, getRps: bare.getRps, doorRatio: { set: round(door.setRps / bare.setRps), get: round(door.getRps / bare.getRps) }, redisRatio: { set: round(bare.setRps / base.setRps), get: round(bare.getRps / base.getRps) } } } : {}),
    runs,
    machine: `${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, ${round(os.totalmem() / 1024 ** 3, 1)} GiB`,
  };
}

/** CPU time of one test: per request, microseconds (user + sys, and each), with the rate it ran at. */
export interface RespCpuFigure {
  rps: number;
  usPerRequest: number;
  userUs: number;
  sysUs: number;
  /**
   * The door process's share by thread (per request, us; 10 ms ticks): `js` the event loop, `door` the native
   * engine's door thread (named tiersync-resp), `other` the rest (V8's GC and compiler threads, libuv's pool).
   */
  threads?: Record<'js' | 'door' | 'other', { userUs: number; sysUs: number }>;
}

export interface RespCpuReport {
  command: string;
  engine: 'native' | 'node';
  requests: number;
  valueBytes: number;
  clients: number;
  /** The door process (this one: the door runs in-process), around each redis-benchmark run. */
  door: { set: RespCpuFigure; get: RespCpuFigure };
  /** redis-server's process (/proc/PID/stat, 10 ms ticks), the same runs against it. */
  redis: { set: RespCpuFigure; get: RespCpuFigure };
  machine: string;
}

/** user and sys CPU from a /proc stat file (a process's or a thread's), microseconds (clock ticks of 10 ms), and its name. */
function statCpu(path: string): { user: number; system: number; name: string } {
  const stat = readFileSync(path, 'latin1');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14 and 15 (utime, stime) are at 11 and 12 after the command name; USER_HZ is 100 on Linux.
  return { user: Number(f[11]) * 10_000, system: Number(f[12]) * 10_000, name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) };
}

function procCpu(pid: number): { user: number; system: number } {
  return statCpu(`/proc/${pid}/stat`);
}

/** This process's CPU by thread group: the event loop, the door thread, the rest. */
function threadCpu(): Record<'js' | 'door' | 'other', { user: number; system: number }> {
  const out = { js: { user: 0, system: 0 }, door: { user: 0, system: 0 }, other: { user: 0, system: 0 } };
  for (const tid of readdirSync('/proc/self/task')) {
    let t: ReturnType<typeof statCpu>;
    try {
      t = statCpu(`/proc/self/task/${tid}/stat`);
    } catch {
      continue; // the thread ended meanwhile
    }
    const group = tid === String(process.pid) ? out.js : t.name === 'tiersync-resp' ? out.door : out.other;
    group.user += t.user;
    group.system += t.system;
  }
  return out;
}

/**
 * `bench resp --cpu`: CPU per request of the door process (this process, the door in it) and of redis-server,
 * from `redis-benchmark -t set` and then `-t get` (after a warm-up of both), so that the figure that bounds
 * throughput on a machine with few cores is measured apart from the rate.
 */
export async function runRespCpu(options: RespBenchOptions = {}): Promise<RespCpuReport> {
  const o: BenchShape = { requests: options.requests ?? 10_000, valueBytes: options.valueBytes ?? 262_144, clients: options.clients ?? 50, keyspace: options.keyspace ?? 1 };
  checkKeyspaceFits(o, options.hostBytes ?? DEFAULT_HOST_BYTES);
  const redis = await startRedis();
  let server: TierSyncServer | undefined;
  try {
    server = await TierSyncServer.start(doorConfig(options, o.valueBytes));
    const engine = server.resp!.engine;
    const warm = { ...o, requests: Math.max(500, Math.floor(o.requests / 5)) };
    await redisBenchmark(server.respPort, warm);
    await redisBenchmark(redis.port, warm);
    const pid = redis.child.pid!;
    const measure = async (port: number, test: 'set' | 'get', cpu: () => { user: number; system: number }, byThread = false): Promise<RespCpuFigure> => {
      const before = cpu();
      const threadsBefore = byThread ? threadCpu() : undefined;
      const r = await redisBenchmark(port, o, test);
      const after = cpu();
      const threadsAfter = byThread ? threadCpu() : undefined;
      const user = (after.user - before.user) / o.requests;
      const sys = (after.system - before.system) / o.requests;
      const figure: RespCpuFigure = { rps: round(test === 'set' ? r.setRps : r.getRps, 0), usPerRequest: round(user + sys, 1), userUs: round(user, 1), sysUs: round(sys, 1) };
      if (threadsBefore && threadsAfter) {
        const per = (g: 'js' | 'door' | 'other') => ({ userUs: round((threadsAfter[g].user - threadsBefore[g].user) / o.requests, 1), sysUs: round((threadsAfter[g].system - threadsBefore[g].system) / o.requests, 1) });
        figure.threads = { js: per('js'), door: per('door'), other: per('other') };
      }
      return figure;
    };
    const self = () => process.cpuUsage();
    const door = { set: await measure(server.respPort, 'set', self, true), get: await measure(server.respPort, 'get', self, true) };
    options.log?.(`door (${engine}): SET ${door.set.usPerRequest} us, GET ${door.get.usPerRequest} us per request`);
    const base = { set: await measure(redis.port, 'set', () => procCpu(pid)), get: await measure(redis.port, 'get', () => procCpu(pid)) };
    return {
      command: commandLine(o, 'set|get'),
      engine,
      ...o,
      door,
      redis: base,
      machine: `${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, ${round(os.totalmem() / 1024 ** 3, 1)} GiB`,
    };
  } finally {
    await server?.close();
    await redis.stop();
  }
}

const usage = `Usage: tiersync bench resp [--json] [--requests N] [--bytes N] [--clients N] [--repetitions N] [--keyspace N] [--durable]

redis-benchmark -d BYTES -c CLIENTS -t get,set -n REQUESTS against the RESP door of a TierSyncServer and against a
redis-server started in the same run (alternating); reports both and the ratio.
  --requests N     requests per test (default 20000)
  --bytes N        value size in bytes (default 262144)
  --clients N      parallel clients (default 50)
  --repetitions N  door/redis pairs (default 3)
  --keyspace N     spread SETs and GETs over N random keys (redis-benchmark -r N; default: one key)
  --engine E       the door's engine: native or node (default: resp.engine's default)
  --durable        the door's host tier on /dev/shm and its catalog durable (every SET writes its manifest first)
  --node-sink      also run a bare Node.js RESP sink (stores nothing: the ceiling of Node's socket path here)
  --mget K         also time MGET of K keys (values of BYTES stored first on both), -n REQUESTS/K
  --cpu            instead: CPU microseconds per SET and per GET of the door process (in-process door) and of
                   redis-server, from redis-benchmark -t set, then -t get (default -n 10000), after a warm-up`;

function positive(v: string | undefined, name: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 1) throw new TierSyncError(`${name} must be a positive integer, got '${v}'`, 'ERR_INVALID_ARGUMENT');
  return n;
}

/** `tiersync bench resp ...` (its own options). */
export async function respBenchCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { json: { type: 'boolean' }, requests: { type: 'string' }, bytes: { type: 'string' }, clients: { type: 'string' }, repetitions: { type: 'string' }, keyspace: { type: 'string' }, durable: { type: 'boolean' }, engine: { type: 'string' }, 'node-sink': { type: 'boolean' }, mget: { type: 'string' }, cpu: { type: 'boolean' }, help: { type: 'boolean' } } });
  if (values.help) {
    console.log(usage);
    return 0;
  }
  const log = (line: string) => (values.json ? console.error(line) : console.log(line));
  const opts: RespBenchOptions = { log };
  const requests = positive(values.requests, '--requests');
  const bytes = positive(values.bytes, '--bytes');
  const clients = positive(values.clients, '--clients');
  const repetitions = positive(values.repetitions, '--repetitions');
  if (requests) opts.requests = requests;
  if (bytes) opts.valueBytes = bytes;
  if (clients) opts.clients = clients;
  if (repetitions) opts.repetitions = repetitions;
  const keyspace = positive(values.keyspace, '--keyspace');
  if (keyspace) opts.keyspace = keyspace;
  if (values.durable) opts.durable = true;
  if (values.engine !== undefined) {
    if (values.engine !== 'native' && values.engine !== 'node') throw new TierSyncError(`--engine must be native or node, got '${values.engine}'`, 'ERR_CONFIG');
    opts.engine = values.engine;
  }
  if (values['node-sink']) opts.nodeSink = true;
  const mgetKeys = positive(values.mget, '--mget');
  if (mgetKeys) opts.mgetKeys = mgetKeys;
  if (values.cpu) {
    const c = await runRespCpu(opts);
    const line = (f: RespCpuFigure) => `${f.usPerRequest} us (user ${f.userUs}, sys ${f.sysUs}) at ${f.rps} req/s`;
    const threads = (f: RespCpuFigure) => (f.threads ? Object.entries(f.threads).map(([k, v]) => `${k} ${v.userUs}+${v.sysUs}`).join(', ') : '');
    console.log(
      values.json
        ? JSON.stringify(c)
        : [`${c.command} (engine: ${c.engine}), CPU per request`, `door         SET ${line(c.door.set)}  GET ${line(c.door.get)}`, `  by thread (user+sys us)  SET ${threads(c.door.set)}  GET ${threads(c.door.get)}`, `redis-server SET ${line(c.redis.set)}  GET ${line(c.redis.get)}`].join('\n'),
    );
    return 0;
  }
  const r = await runRespBench(opts);
  console.log(
    values.json
      ? JSON.stringify(r)
      : [`${r.command} (door catalog: ${r.catalog}, engine: ${r.engine})`, `door         SET ${r.door.setRps} req/s (${r.door.setGiBps} GiB/s)  GET ${r.door.getRps} req/s (${r.door.getGiBps} GiB/s)`, `redis-server SET ${r.redis.setRps} req/s (${r.redis.setGiBps} GiB/s)  GET ${r.redis.getRps} req/s (${r.redis.getGiBps} GiB/s)`, `ratio        SET ${r.ratio.set}  GET ${r.ratio.get}  (per pair: SET ${r.pairRatio.set}  GET ${r.pairRatio.get})`, ...(r.mget ? [`MGET of ${r.mget.keys}: door ${r.mget.door.rps} req/s (${r.mget.door.GiBps} GiB/s)  redis-server ${r.mget.redis.rps} req/s (${r.mget.redis.GiBps} GiB/s)  ratio ${r.mget.ratio} (per pair ${r.mget.pairRatio}); CPU per MGET: door ${r.mget.cpuUs.door} us, redis-server ${r.mget.cpuUs.redis} us`] : []), ...(r.nodeSink ? [`node sink    SET ${r.nodeSink.setRps} req/s  GET ${r.nodeSink.getRps} req/s  (door / sink: SET ${r.nodeSink.doorRatio.set}  GET ${r.nodeSink.doorRatio.get}; sink / redis: SET ${r.nodeSink.redisRatio.set}  GET ${r.nodeSink.redisRatio.get})`] : [])].join('\n'),
  );
  return 0;
}
