/**
 * `tiersync bench tiers`: write and read GiB/s of each tier driver beside a baseline measured in the same run:
 * - fs: a plain sequential O_DIRECT pwrite/pread loop of the same bytes;
 * - peer: raw TCP between two native threads over loopback (the link's limit), and Redis through ioredis at the
 *   same concurrency (what a user would pick instead); as root also to a peer host in a network namespace across a
 *   veth link shaped to a datacenter rate, beside raw TCP across the same link (the wire as the limit);
 * - object: the same S3 client putting and getting the same bytes against the same s3rver without tiersync.
 * Engine and baseline alternate within each repetition; medians are reported.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HostArena, TransferEngine, peerFrameCrypto, type PeerFrameCrypto } from '@tiersync/native';
import { fileLoopBaseline, tcpBaseline } from '@tiersync/native/bench';
import { HostTier, createTier, servePeer, type PageKey, type TierDriver } from '@tiersync/tiers';
import { Redis } from 'ioredis';
import { GiB, KiB, MiB, median, round } from './stats.js';
import { s3rverCredentials, startRedis, startS3rver } from './services.js';
import { peerAckLatency, type AckLatency } from './peer-ack-latency.js';
import { busyBetween, cpuTimes, NetworkLab } from './network-lab.js';
import { spawnModule, waitForLine } from '../reliability/child-process.js';

export interface TiersBenchOptions {
  /** Bytes written and read per driver and page size. Default 1 GiB (object: a quarter of it). */
  bytes?: number;
  pageSizes?: number[];
  repetitions?: number;
  /** Folder for the fs tier (a filesystem with O_DIRECT). Default: the OS temp folder. */
  dir?: string;
  drivers?: Array<'fs' | 'peer' | 'object'>;
  /** Peer over a shaped link: 'auto' (when root and `ip netns` works), 'netns' (required), 'loopback' (skipped). */
  network?: 'auto' | 'netns' | 'loopback';
  /** Rate of that link in Gbit/s per direction. Default 10: a rate both ends fit in on two cores (see `link`). */
  linkGbit?: number;
  log?: (line: string) => void;
}

export interface DriverFigure {
  driver: 'fs' | 'peer' | 'object';
  pageBytes: number;
  bytes: number;
  writeGiBps: number;
  readGiBps: number;
  baselineWriteGiBps: number;
  baselineReadGiBps: number;
  writeRatio: number;
  readRatio: number;
  baseline: string;
  redis?: { setGiBps: number; getGiBps: number; setRatio: number; getRatio: number };
  /** peer only: the same transfers with frames encrypted as well as authenticated (the main figure authenticates). */
  encrypted?: { writeGiBps: number; readGiBps: number; writeRatio: number; readRatio: number };
  /** peer only: the same transfers to a server without a secret (frames neither authenticated nor encrypted). */
  unauthenticated?: { writeGiBps: number; readGiBps: number; writeRatio: number; readRatio: number };
  /** peer only: which library sealed the frames (peerFrameCrypto: IPsec-MB, or the newer of the system's and Node's OpenSSL). */
  frameCrypto?: PeerFrameCrypto;
  /** peer only: authenticated PUT and GET latency, one page at a time, serving thread idle and busy (peer-ack-latency.ts). */
  ackLatency?: AckLatency;
  /**
   * peer only: CPU seconds (this process, every thread: both ends run here) per GiB moved, medians. Both ends share
   * this host's cores, so when the cores are the limit the throughput ratio follows the CPU ratio; on separate hosts
   * each end pays about half of these figures and the wire is the limit while that half stays below it.
   */
  cpuSecondsPerGiB?: { rawTcp: number; write: number; read: number; unauthenticatedWrite: number; unauthenticatedRead: number; encryptedWrite: number; encryptedRead: number };
  /**
   * peer only, as root: the same authenticated transfers to a peer host in its own process and network namespace,
   * across a veth pair shaped to `gbit` per direction (tc tbf), beside raw TCP across the same link (two native
   * threads, the receiving one in the namespace). On loopback both ends share the cores and the CPU is the limit; here the wire is, as
   * between hosts, as long as `cpuBusyFraction` (the whole machine's busy share during the peer transfers) stays
   * below 1 (it is measured during the authenticated transfers). Reads cross the link the other way; both directions
   * are shaped alike.
   */
  link?: {
    gbit: number;
    writeGiBps: number;
    readGiBps: number;
    rawGiBps: number;
    writeRatio: number;
    readRatio: number;
    cpuBusyFraction: number;
    /** The same with frames encrypted too (AES-256-GCM). */
    encrypted: { writeGiBps: number; readGiBps: number; writeRatio: number; readRatio: number };
  };
}

export interface TiersBenchReport {
  suite: 'tiers';
  date: string;
  machine: string;
  drivers: DriverFigure[];
}

/** Batches of this many bytes go to a driver per call, as a hierarchy would issue them. */
const BATCH_BYTES = 64 * MiB;

function key(i: number, salt: number): PageKey {
  return salt.toString(16).padStart(8, '0') + i.toString(16).padStart(24, '0');
}

/**
 * Writes then reads `bytes` through a driver in BATCH_BYTES batches, keeping two batches in flight as the
 * hierarchy's write-back and prefetch queues do; returns [write s, read s].
 */
/** Seconds of wall time and CPU seconds (whole process) for one write pass and one read pass. */
interface DriverTimes {
  write: number;
  read: number;
  writeCpu: number;
  readCpu: number;
}

async function timeDriver(driver: TierDriver, src: HostArena, dst: HostArena, pageBytes: number, bytes: number, salt: number): Promise<DriverTimes> {
  const pages = Math.floor(bytes / pageBytes);
  const perBatch = Math.max(1, Math.floor(BATCH_BYTES / pageBytes));
  const slots = Math.floor(src.capacity / pageBytes);
  const batches: number[][] = [];
  for (let first = 0; first < pages; first += perBatch) batches.push(Array.from({ length: Math.min(perBatch, pages - first) }, (_, k) => first + k));
  const inFlight = async (run: (batch: number[]) => Promise<void>): Promise<[number, number]> => {
    const cpu = process.cpuUsage();
    const start = process.hrtime.bigint();
    let next = 0;
    const lane = async () => {
      while (next < batches.length) await run(batches[next++]!);
    };
    await Promise.all([lane(), lane()]);
    return [Number(process.hrtime.bigint() - start) / 1e9, cpuSeconds(cpu)];
  };
  const [write, writeCpu] = await inFlight(async (batch) => {
    await driver.write(batch.map((i) => ({ key: key(i, salt), source: { arena: src, offset: (i % slots) * pageBytes, length: pageBytes } })));
  });
  const [read, readCpu] = await inFlight(async (batch) => {
    // Lanes may land pages on the same destination slots; the benchmark checks outcomes, not the bytes.
    const r = await driver.read(batch.map((i) => ({ key: key(i, salt), into: { arena: dst, offset: (i % slots) * pageBytes, length: pageBytes } })));
    const bad = r.find((o) => o.status !== 'hit');
    if (bad) throw new Error(`benchmark read of ${bad.key} returned ${bad.status}`);
  });
  return { write, read, writeCpu, readCpu };
}

/** CPU seconds (user + system, every thread of this process) since `since`. */
function cpuSeconds(since: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(since);
  return (d.user + d.system) / 1e6;
}

const rate = (bytes: number, seconds: number) => bytes / GiB / seconds;

function figure(driver: DriverFigure['driver'], pageBytes: number, bytes: number, runs: Array<[number, number, number, number]>, baseline: string): DriverFigure {
  const w = median(runs.map((r) => rate(bytes, r[0])));
  const r = median(runs.map((x) => rate(bytes, x[1])));
  const bw = median(runs.map((x) => rate(bytes, x[2])));
  const br = median(runs.map((x) => rate(bytes, x[3])));
  return { driver, pageBytes, bytes, writeGiBps: round(w), readGiBps: round(r), baselineWriteGiBps: round(bw), baselineReadGiBps: round(br), writeRatio: round(w / bw), readRatio: round(r / br), baseline };
}

export async function runTiersBench(options: TiersBenchOptions = {}): Promise<TiersBenchReport> {
  const log = options.log ?? (() => undefined);
  const bytes = options.bytes ?? GiB;
  const pageSizes = options.pageSizes ?? [256 * KiB, 2 * MiB];
  const reps = options.repetitions ?? 2;
  const drivers = options.drivers ?? ['fs', 'peer', 'object'];
  const engine = new TransferEngine();
  const arenaBytes = Math.min(bytes, 256 * MiB);
  const src = HostArena.create({ capacity: arenaBytes, prefault: true });
  const dst = HostArena.create({ capacity: arenaBytes, prefault: true });
  const view = src.view(0, arenaBytes);
  for (let i = 0; i < arenaBytes; i += 4096) view[i] = (i >>> 12) & 0xff;
  const out: DriverFigure[] = [];
  let salt = 0;
  const network = options.network ?? 'auto';
  const gbit = options.linkGbit ?? DEFAULT_LINK_GBIT;
  let lab: NetworkLab | undefined;
  try {
    if (drivers.includes('peer') && network !== 'loopback') lab = await NetworkLab.create(network, 1, gbit, log);
    const link = lab?.rawTransfer ? lab : undefined; // undefined: 'auto' found no namespaces (not root)
    for (const pageBytes of pageSizes) {
      if (drivers.includes('fs')) out.push(await benchFs(engine, src, dst, pageBytes, bytes, reps, options.dir ?? os.tmpdir(), () => ++salt, log));
      if (drivers.includes('peer')) {
        const f = await benchPeer(engine, src, dst, pageBytes, bytes, reps, () => ++salt, log);
        if (link) f.link = await peerOverLink(link, gbit, engine, src, dst, pageBytes, f.bytes, reps, () => ++salt, log);
        out.push(f);
      }
      if (drivers.includes('object')) out.push(await benchObject(engine, src, dst, pageBytes, Math.max(pageBytes, Math.floor(bytes / 4)), reps, () => ++salt, log));
    }
  } finally {
    await lab?.close();
    await engine.close();
    src.close();
    dst.close();
  }
  return {
    suite: 'tiers',
    date: new Date().toISOString(),
    machine: `${os.cpus()[0]?.model ?? 'cpu'} x${os.availableParallelism()}, ${round(os.totalmem() / GiB, 1)} GiB, ${os.type()} ${os.release()}`,
    drivers: out,
  };
}

function describeFigure(f: DriverFigure): string {
  const enc = f.encrypted ? `; encrypted: write ${f.encrypted.writeGiBps} (ratio ${f.encrypted.writeRatio}), read ${f.encrypted.readGiBps} (ratio ${f.encrypted.readRatio})` : '';
  const plain = f.unauthenticated ? `; unauthenticated: write ratio ${f.unauthenticated.writeRatio}, read ratio ${f.unauthenticated.readRatio}` : '';
  const cpu = f.cpuSecondsPerGiB
    ? `; CPU s/GiB raw TCP ${f.cpuSecondsPerGiB.rawTcp}, write ${f.cpuSecondsPerGiB.write} (unauthenticated ${f.cpuSecondsPerGiB.unauthenticatedWrite}), read ${f.cpuSecondsPerGiB.read} (unauthenticated ${f.cpuSecondsPerGiB.unauthenticatedRead})`
    : '';
  const owner = { 'ipsec-mb': '', node: "Node's ", system: "the system's " } as const;
  const crypto = f.frameCrypto ? `; frames sealed by ${owner[f.frameCrypto.source]}${f.frameCrypto.version}` : '';
  const a = f.ackLatency;
  const acks = a
    ? `; PUT ack mean/p99 us: idle ${a.idle.meanUs}/${a.idle.p99Us}, serving thread busy ${a.busyServer.meanUs}/${a.busyServer.p99Us}; GET: idle ${a.getIdle.meanUs}/${a.getIdle.p99Us}, busy ${a.getBusyServer.meanUs}/${a.getBusyServer.p99Us}`
    : '';
  const extra = (f.redis ? `; redis SET ${f.redis.setGiBps} GET ${f.redis.getGiBps} GiB/s (x${f.redis.setRatio} / x${f.redis.getRatio})` : '') + enc + plain + cpu + crypto + acks;
  return `${f.driver.padEnd(6)} ${String(f.pageBytes / KiB).padStart(5)} KiB: write ${f.writeGiBps} GiB/s (ratio ${f.writeRatio}), read ${f.readGiBps} GiB/s (ratio ${f.readRatio}) vs ${f.baseline}${extra}`;
}

async function benchFs(engine: TransferEngine, src: HostArena, dst: HostArena, pageBytes: number, bytes: number, reps: number, dir: string, nextSalt: () => number, log: (l: string) => void): Promise<DriverFigure> {
  const folder = mkdtempSync(path.join(dir, 'tiersync-bench-fs-'));
  const basePath = path.join(folder, 'baseline.bin');
  const runs: Array<[number, number, number, number]> = [];
  try {
    for (let r = 0; r < reps; r++) {
      const tierDir = path.join(folder, `tier-${r}`);
      const driver = createTier(`fs://${tierDir}?capacity=${bytes + 64 * MiB}`, { engine, pageBytes, fingerprint: 'bench' });
      await driver.open();
      const { write: w, read: rd } = await timeDriver(driver, src, dst, pageBytes, bytes, nextSalt());
      await driver.close();
      rmSync(tierDir, { recursive: true, force: true });
      rmSync(basePath, { force: true });
      const bw = fileLoopBaseline(basePath, 'write', src, Math.floor(bytes / pageBytes) * pageBytes, pageBytes);
      const br = fileLoopBaseline(basePath, 'read', dst, Math.floor(bytes / pageBytes) * pageBytes, pageBytes);
      runs.push([w, rd, bw, br]);
    }
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
  const f = figure('fs', pageBytes, Math.floor(bytes / pageBytes) * pageBytes, runs, 'sequential O_DIRECT pwrite/pread loop');
  log(describeFigure(f));
  return f;
}

async function benchPeer(engine: TransferEngine, src: HostArena, dst: HostArena, pageBytes: number, bytes: number, reps: number, nextSalt: () => number, log: (l: string) => void): Promise<DriverFigure> {
  const moved = Math.floor(bytes / pageBytes) * pageBytes;
  const host = new HostTier(`host://?capacity=${moved + 64 * MiB}`, { engine, pageBytes, fingerprint: 'bench' });
  await host.open();
  // The main figure authenticates frames (a secret is set, as off loopback); `encrypted` adds AES-256-GCM encryption;
  // `unauthenticated` talks to a second server on the same tier without a secret: the plane's own cost.
  const server = servePeer(host, { secret: 'bench-secret' });
  const plainServer = servePeer(host, {});
  const streams = 4;
  const redis = await startRedis();
  const clients = Array.from({ length: streams }, () => new Redis({ port: redis.port, host: '127.0.0.1', lazyConnect: false, maxRetriesPerRequest: 1 }));
  const variants = { authenticated: [] as DriverTimes[], encrypted: [] as DriverTimes[], unauthenticated: [] as DriverTimes[] };
  const raw: Array<{ seconds: number; cpu: number }> = [];
  const redisRuns: Array<[number, number]> = [];
  let ackLatency: AckLatency | undefined;
  const timePeer = async (variant: keyof typeof variants, timed = true): Promise<void> => {
    const url =
      variant === 'unauthenticated'
        ? `peer://127.0.0.1:${plainServer.port}?streams=${streams}`
        : `peer://127.0.0.1:${server.port}?secret=bench-secret&streams=${streams}${variant === 'encrypted' ? '&encrypt=true' : ''}`;
    const driver = createTier(url, { engine, pageBytes, fingerprint: 'bench' });
    await driver.open();
    const salt = nextSalt();
    const times = await timeDriver(driver, src, dst, pageBytes, moved, salt);
    if (timed) variants[variant].push(times);
    await driver.delete(Array.from({ length: moved / pageBytes }, (_, i) => key(i, salt)));
    await driver.close();
  };
  try {
    // One untimed pass of each variant first. The first transfers after the servers start ran several times
    // slower here (0.11-0.16 GiB/s and 6-9 s of CPU per GiB for whichever variant went first, 1-2 GiB/s and
    // 1-2 s/GiB after), and with two repetitions that one pass was half the median of the variant measured first
    // (the authenticated one, the main figure).
    for (const variant of ['authenticated', 'encrypted', 'unauthenticated'] as const) await timePeer(variant, false);
    for (let r = 0; r < reps; r++) {
      await timePeer('authenticated');
      const cpu = process.cpuUsage();
      const seconds = tcpBaseline(src, dst, moved, pageBytes);
      raw.push({ seconds, cpu: cpuSeconds(cpu) });
      await timePeer('encrypted');
      await timePeer('unauthenticated');
      redisRuns.push(await timeRedis(clients, src, dst, pageBytes, moved));
      await clients[0]!.flushall();
    }
    ackLatency = await peerAckLatency(host, server.port, 'bench-secret', pageBytes, Math.min(1000, Math.floor(moved / 2 / pageBytes)));
  } finally {
    for (const c of clients) c.disconnect();
    await redis.stop();
    server.close();
    plainServer.close();
    await host.close();
  }
  // Each run's peer times pair with the raw TCP time of the same repetition.
  const paired = (times: DriverTimes[]) => times.map((t, i): [number, number, number, number] => [t.write, t.read, raw[i]!.seconds, raw[i]!.seconds]);
  const baseline = 'raw TCP between two native threads (loopback, 1 connection)';
  const f = figure('peer', pageBytes, moved, paired(variants.authenticated), baseline);
  const side = (times: DriverTimes[]) => {
    const e = figure('peer', pageBytes, moved, paired(times), baseline);
    return { writeGiBps: e.writeGiBps, readGiBps: e.readGiBps, writeRatio: e.writeRatio, readRatio: e.readRatio };
  };
  f.encrypted = side(variants.encrypted);
  f.unauthenticated = side(variants.unauthenticated);
  f.frameCrypto = peerFrameCrypto();
  if (ackLatency) f.ackLatency = ackLatency;
  const perGiB = (cpu: number[]) => round(median(cpu) / (moved / GiB));
  f.cpuSecondsPerGiB = {
    rawTcp: perGiB(raw.map((x) => x.cpu)),
    write: perGiB(variants.authenticated.map((t) => t.writeCpu)),
    read: perGiB(variants.authenticated.map((t) => t.readCpu)),
    unauthenticatedWrite: perGiB(variants.unauthenticated.map((t) => t.writeCpu)),
    unauthenticatedRead: perGiB(variants.unauthenticated.map((t) => t.readCpu)),
    encryptedWrite: perGiB(variants.encrypted.map((t) => t.writeCpu)),
    encryptedRead: perGiB(variants.encrypted.map((t) => t.readCpu)),
  };
  const set = median(redisRuns.map((x) => rate(moved, x[0])));
  const get = median(redisRuns.map((x) => rate(moved, x[1])));
  f.redis = { setGiBps: round(set), getGiBps: round(get), setRatio: round(f.writeGiBps / set), getRatio: round(f.readGiBps / get) };
  log(describeFigure(f));
  return f;
}

/**
 * 10 Gbit/s: both ends and the link fit in this machine's two cores (authenticated transfers cost about 1 s of CPU
 * per GiB for both ends together, 1.16 GiB/s at most here). At 20 and 40 Gbit/s raw TCP across the veth pair itself
 * stopped at 1.5-2.0 GiB/s with the machine 0.96-0.99 busy: the CPU, not the link model, was the limit (2026-12-07).
 */
const DEFAULT_LINK_GBIT = 10;

/** Authenticated peer writes and reads across a shaped link to a peer host in the lab's namespace (DriverFigure.link). */
async function peerOverLink(lab: NetworkLab, gbit: number, engine: TransferEngine, src: HostArena, dst: HostArena, pageBytes: number, moved: number, reps: number, nextSalt: () => number, log: (l: string) => void): Promise<NonNullable<DriverFigure['link']>> {
  const secret = randomBytes(16).toString('hex');
  const port = 7410; // the namespace is this benchmark's own: nothing else listens there
  const address = lab.hostAddress(0);
  const host = spawnModule('peer-host-child', [address, String(port), secret, String(pageBytes), String(moved / pageBytes + 32)], lab.prefixFor(0));
  const killHost = () => host.kill('SIGKILL');
  process.once('exit', killHost);
  const runs = { authenticated: [] as Array<[number, number, number, number]>, encrypted: [] as Array<[number, number, number, number]> };
  const busy: number[] = [];
  try {
    host.stderr!.resume();
    await waitForLine(host, `listening ${port}`, 60_000);
    host.stdout!.resume();
    const open = async (encrypt: boolean) => {
      const d = createTier(`peer://${address}:${port}?secret=${secret}&streams=4${encrypt ? '&encrypt=true' : ''}`, { engine, pageBytes, fingerprint: '' });
      await d.open();
      return d;
    };
    const drivers = { authenticated: await open(false), encrypted: await open(true) };
    try {
      await lab.rawTransfer!(moved, src, dst); // warm-up of the link and the sink
      for (let r = 0; r < reps; r++) {
        // Each variant beside the raw transfer that follows it.
        for (const variant of ['authenticated', 'encrypted'] as const) {
          const salt = nextSalt();
          const cpu = cpuTimes();
          const t = await timeDriver(drivers[variant], src, dst, pageBytes, moved, salt);
          if (variant === 'authenticated') busy.push(busyBetween(cpu, cpuTimes()));
          await drivers[variant].delete(Array.from({ length: moved / pageBytes }, (_, i) => key(i, salt)));
          const raw = await lab.rawTransfer!(moved, src, dst);
          runs[variant].push([t.write, t.read, raw, raw]);
        }
      }
    } finally {
      await drivers.authenticated.close();
      await drivers.encrypted.close();
    }
  } finally {
    process.off('exit', killHost);
    killHost();
  }
  const f = figure('peer', pageBytes, moved, runs.authenticated, 'raw TCP across the same link');
  const e = figure('peer', pageBytes, moved, runs.encrypted, 'raw TCP across the same link');
  const out = {
    gbit,
    writeGiBps: f.writeGiBps,
    readGiBps: f.readGiBps,
    rawGiBps: f.baselineWriteGiBps,
    writeRatio: f.writeRatio,
    readRatio: f.readRatio,
    cpuBusyFraction: round(median(busy)),
    encrypted: { writeGiBps: e.writeGiBps, readGiBps: e.readGiBps, writeRatio: e.writeRatio, readRatio: e.readRatio },
  };
  log(
    `peer ${String(pageBytes / KiB).padStart(5)} KiB across a ${gbit} Gbit/s link (network namespace): authenticated write ${out.writeGiBps} GiB/s (ratio ${out.writeRatio}), read ${out.readGiBps} GiB/s (ratio ${out.readRatio}); encrypted write ratio ${e.writeRatio}, read ratio ${e.readRatio}; raw TCP ${out.rawGiBps} GiB/s; machine busy ${out.cpuBusyFraction}`,
  );
  return out;
}

/** SET then GET the same pages through ioredis, BATCH_BYTES per round spread over the connections. */
async function timeRedis(clients: Redis[], src: HostArena, dst: HostArena, pageBytes: number, bytes: number): Promise<[number, number]> {
  const pages = bytes / pageBytes;
  const perBatch = Math.max(1, Math.floor(BATCH_BYTES / pageBytes));
  const slots = Math.floor(src.capacity / pageBytes);
  const srcView = src.view(0, slots * pageBytes);
  const dstView = dst.view(0, slots * pageBytes);
  let t = process.hrtime.bigint();
  for (let first = 0; first < pages; first += perBatch) {
    const sets = [];
    for (let i = first; i < Math.min(pages, first + perBatch); i++) {
      const at = (i % slots) * pageBytes;
      sets.push(clients[i % clients.length]!.set(`p${i}`, Buffer.from(srcView.buffer, srcView.byteOffset + at, pageBytes)));
    }
    await Promise.all(sets);
  }
  const set = Number(process.hrtime.bigint() - t) / 1e9;
  t = process.hrtime.bigint();
  for (let first = 0; first < pages; first += perBatch) {
    const gets = [];
    for (let i = first; i < Math.min(pages, first + perBatch); i++) {
      gets.push(
        clients[i % clients.length]!.getBuffer(`p${i}`).then((b) => {
          if (!b) throw new Error(`redis lost p${i}`);
          dstView.set(b, (i % slots) * pageBytes); // land the page in the engine's memory, as a tier would
        }),
      );
    }
    await Promise.all(gets);
  }
  return [set, Number(process.hrtime.bigint() - t) / 1e9];
}

async function benchObject(engine: TransferEngine, src: HostArena, dst: HostArena, pageBytes: number, bytes: number, reps: number, nextSalt: () => number, log: (l: string) => void): Promise<DriverFigure> {
  const moved = Math.floor(bytes / pageBytes) * pageBytes;
  const s3 = await startS3rver(['tiersync-bench']);
  const { S3Client, PutObjectCommand, GetObjectCommand } = await import('@aws-sdk/client-s3');
  const client = new S3Client({ endpoint: s3.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } });
  const runs: Array<[number, number, number, number]> = [];
  const objectBytes = BATCH_BYTES;
  try {
    for (let r = 0; r < reps; r++) {
      const salt = nextSalt();
      // One PUT per object, like the baseline: s3rver assembles multipart uploads by rewriting every part, which
      // halved its throughput here (write ratio 0.44-0.67 with the driver's default 16 MiB parts).
      const driver = createTier(`s3://tiersync-bench/run${salt}/?endpoint=${s3.endpoint}&${s3rverCredentials()}&object=${objectBytes}&partSize=${2 * objectBytes}`, { engine, pageBytes, fingerprint: 'bench' });
      await driver.open();
      const { write: w, read: rd } = await timeDriver(driver, src, dst, pageBytes, moved, salt);
      await driver.close();
      // Baseline: the same bytes as objects of the same size, put and got whole by the same SDK.
      const view = src.view(0, Math.min(src.capacity, objectBytes));
      const objects = Math.ceil(moved / objectBytes);
      // Two objects in flight, like the two batches in flight through the driver.
      const twoLanes = async (fn: (o: number) => Promise<void>) => {
        const start = process.hrtime.bigint();
        let next = 0;
        const lane = async () => {
          while (next < objects) await fn(next++);
        };
        await Promise.all([lane(), lane()]);
        return Number(process.hrtime.bigint() - start) / 1e9;
      };
      const bw = await twoLanes(async (o) => {
        const len = Math.min(objectBytes, moved - o * objectBytes, view.length);
        await client.send(new PutObjectCommand({ Bucket: 'tiersync-bench', Key: `baseline${salt}/${o}`, Body: Buffer.from(view.buffer, view.byteOffset, len) }));
      });
      const into = dst.view(0, Math.min(dst.capacity, objectBytes));
      const br = await twoLanes(async (o) => {
        const got = await client.send(new GetObjectCommand({ Bucket: 'tiersync-bench', Key: `baseline${salt}/${o}` }));
        into.set(await got.Body!.transformToByteArray(), 0); // land the bytes in the engine's memory
      });
      runs.push([w, rd, bw, br]);
    }
  } finally {
    client.destroy();
    await s3.stop();
  }
  const f = figure('object', pageBytes, moved, runs, `@aws-sdk/client-s3 PutObject/GetObject of ${objectBytes / MiB} MiB objects, same s3rver`);
  log(describeFigure(f));
  return f;
}
