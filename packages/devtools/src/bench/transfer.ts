/**
 * `tiersync bench transfer`: the native engine against the machine's limits, measured in the same run.
 * - memory paths (host->device on the sim backend, device->host, host->host) against plain memcpy of the same
 *   bytes on the same number of threads;
 * - file write (O_DIRECT, durable) and read through the engine against a plain sequential O_DIRECT
 *   pwrite/pread loop of the same bytes;
 * - CRC32C on one thread (the implementation every checksummed path uses) against a one-thread memcpy of the
 *   same bytes, and the copy-and-checksum pass against the same memcpy;
 * - the event loop's delay while an 8 GiB transfer storm runs.
 * Engine and baseline alternate (A B A B ...) and medians are reported, since the machine is shared and noisy.
 */
import { rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { DeviceArena, FileHandle, HostArena, TransferBatch, TransferEngine, crc32cImplementations, crc32cWith, type Crc32cImplementation } from '@tiersync/native';
import { fileLoopBaseline, memcpyBaseline } from '@tiersync/native/bench';
import { GiB, KiB, MiB, median, round } from './stats.js';

export interface TransferBenchOptions {
  /** Bytes moved per path and page size, per repetition. Default 4 GiB. */
  bytesPerPath?: number;
  /** Page sizes to measure. Default 256 KiB and 2 MiB. */
  pageSizes?: number[];
  /** Repetitions of each engine/baseline pair. Default 3 (memory), 2 (file). */
  repetitions?: number;
  /** Folder for the file benchmark (needs O_DIRECT). Default: the OS temp folder. */
  dir?: string;
  /** Bytes moved during the event-loop measurement. Default 8 GiB. */
  stormBytes?: number;
  /** Worker threads of the engine and of the memcpy baseline. Default: one per core. */
  threads?: number;
  log?: (line: string) => void;
}

export interface PathFigure {
  path: 'host->device' | 'device->host' | 'host->host';
  pageBytes: number;
  GiBps: number;
  baselineGiBps: number;
  ratio: number;
}
export interface FileFigure {
  GiBps: number;
  baselineGiBps: number;
  ratio: number;
}
/**
 * CRC32C on one thread over `bytes` of host memory, beside a one-thread memcpy of the same bytes in the same run.
 * memcpyRatio >= 1: checksumming a page costs no more than copying it once.
 */
export interface Crc32cFigure {
  implementation: Crc32cImplementation;
  bytes: number;
  GiBps: number;
  memcpyGiBps: number;
  memcpyRatio: number;
  /** Copy and checksum in one pass (what checksummed engine copies do), against the same memcpy. */
  copyGiBps: number;
  copyRatio: number;
  /** Every implementation this CPU runs, checksum only, same bytes (the fallbacks, for comparison). */
  byImplementation: Array<{ implementation: Crc32cImplementation; GiBps: number }>;
  /**
   * The selected implementation over `bytes` that stay in cache (checksummed again and again, 1 GiB per run): what
   * checksums of bytes a recv has just written cost (the peer plane's passes as pages land).
   */
  inCache: { bytes: number; GiBps: number };
}
export interface TransferBenchReport {
  suite: 'transfer';
  date: string;
  machine: string;
  threads: number;
  bytesPerPath: number;
  baseline: { memcpyGiBps: number };
  paths: PathFigure[];
  crc32c: Crc32cFigure;
  file: { pageBytes: number; write: FileFigure; read: FileFigure; byPageSize: Array<{ pageBytes: number; write: FileFigure; read: FileFigure }> };
  eventLoop: { p99Ms: number; maxMs: number; idleP99Ms: number; stormBytes: number; stormGiBps: number; background: { p99Ms: number; maxMs: number; stormGiBps: number; backgroundThreads: number } };
  io: string;
}

/** Arenas are reused across rounds; a path moves `bytes` as ceil(bytes / arena) full-arena batches. */
const ARENA_BYTES = GiB;

export async function runTransferBench(options: TransferBenchOptions = {}): Promise<TransferBenchReport> {
  const log = options.log ?? (() => undefined);
  const bytes = options.bytesPerPath ?? 4 * GiB;
  const pageSizes = options.pageSizes ?? [256 * KiB, 2 * MiB];
  const reps = options.repetitions ?? 3;
  const threads = options.threads ?? os.availableParallelism();
  const arenaBytes = Math.min(ARENA_BYTES, bytes);
  const engine = new TransferEngine({ threads });
  const hostA = HostArena.create({ capacity: arenaBytes, prefault: true, hugePages: true });
  const hostB = HostArena.create({ capacity: arenaBytes, prefault: true, hugePages: true });
  const device = DeviceArena.create({ backend: 'sim', capacity: arenaBytes });
  hostA.view(0, Math.min(arenaBytes, GiB)).fill(0xa5);

  const rounds = Math.ceil(bytes / arenaBytes);
  const moveThrough = async (src: HostArena | DeviceArena, dst: HostArena | DeviceArena, pageBytes: number) => {
    const batch = new TransferBatch();
    for (let off = 0; off + pageBytes <= arenaBytes; off += pageBytes) batch.add(src, off, dst, off, pageBytes);
    const start = process.hrtime.bigint();
    for (let r = 0; r < rounds; r++) await engine.submit(batch);
    return Number(process.hrtime.bigint() - start) / 1e9;
  };
  const baselineThrough = (src: HostArena | DeviceArena, dst: HostArena | DeviceArena, pageBytes: number) => {
    let seconds = 0;
    for (let r = 0; r < rounds; r++) seconds += memcpyBaseline(dst, src, arenaBytes - (arenaBytes % pageBytes), threads, pageBytes);
    return seconds;
  };
  const moved = (pageBytes: number) => rounds * (arenaBytes - (arenaBytes % pageBytes));

  // Warm-up: fault in every page of every arena and let the JIT settle.
  await moveThrough(hostA, device, 2 * MiB);
  await moveThrough(device, hostB, 2 * MiB);
  baselineThrough(hostA, hostB, 2 * MiB);

  const paths: PathFigure[] = [];
  const allBaselines: number[] = [];
  const cases: Array<[PathFigure['path'], HostArena | DeviceArena, HostArena | DeviceArena]> = [
    ['host->device', hostA, device],
    ['device->host', device, hostB],
    ['host->host', hostA, hostB],
  ];
  for (const pageBytes of pageSizes) {
    for (const [name, src, dst] of cases) {
      const engineRates: number[] = [];
      const baseRates: number[] = [];
      for (let i = 0; i < reps; i++) {
        engineRates.push(moved(pageBytes) / GiB / (await moveThrough(src, dst, pageBytes)));
        baseRates.push(moved(pageBytes) / GiB / baselineThrough(src, dst, pageBytes));
      }
      const fig = { path: name, pageBytes, GiBps: round(median(engineRates)), baselineGiBps: round(median(baseRates)), ratio: round(median(engineRates) / median(baseRates)) };
      allBaselines.push(...baseRates);
      paths.push(fig);
      log(`${name.padEnd(13)} ${String(pageBytes / KiB).padStart(5)} KiB pages: ${fig.GiBps} GiB/s, memcpy ${fig.baselineGiBps} GiB/s, ratio ${fig.ratio}`);
    }
  }

  const crc32c = crcBench(hostA, hostB, Math.min(256 * MiB, arenaBytes), reps + 2, log);

  const byPageSize = [];
  for (const pageBytes of pageSizes) {
    byPageSize.push(await fileBench(engine, hostA, hostB, pageBytes, bytes, options.dir ?? os.tmpdir(), options.repetitions ?? 2, log));
  }
  const headline = byPageSize[byPageSize.length - 1]!;

  const eventLoop = await eventLoopBench(engine, hostA, device, options.stormBytes ?? 8 * GiB, log);
  const io = engine.stats().io;
  await engine.close();
  for (const a of [hostA, hostB, device]) a.close();
  return {
    suite: 'transfer',
    date: new Date().toISOString(),
    machine: `${os.cpus()[0]?.model ?? 'cpu'} x${os.availableParallelism()}, ${round(os.totalmem() / GiB, 1)} GiB, ${os.type()} ${os.release()}`,
    threads,
    bytesPerPath: bytes,
    baseline: { memcpyGiBps: round(median(allBaselines)) },
    paths,
    crc32c,
    file: { pageBytes: headline.pageBytes, write: headline.write, read: headline.read, byPageSize },
    eventLoop,
    io,
  };
}

/** Stays in L2 (1 MiB here) and takes long enough that the cost of a call is noise (the peer plane receives 256 KiB pieces). */
const IN_CACHE_BYTES = 256 * KiB;

/** Medians of CRC32C alone, copy + CRC32C, and memcpy, one thread each, alternating (A B C A B C ...). */
function crcBench(src: HostArena, dst: HostArena, bytes: number, reps: number, log: (line: string) => void): Crc32cFigure {
  const { selected, available } = crc32cImplementations();
  const from = src.view(0, bytes);
  const to = dst.view(0, bytes);
  const time = (f: () => unknown) => {
    const t = process.hrtime.bigint();
    f();
    return Number(process.hrtime.bigint() - t) / 1e9;
  };
  const rate = (seconds: number[]) => bytes / GiB / median(seconds);
  const crc: number[] = [];
  const copy: number[] = [];
  const mem: number[] = [];
  const pieceBytes = 2 * MiB; // the memcpy baseline's calls; one 256 MiB call would be no faster
  time(() => crc32cWith(selected, from, 0, to)); // warm-up: both ranges faulted in and in the TLB
  for (let i = 0; i < reps; i++) {
    crc.push(time(() => crc32cWith(selected, from)));
    copy.push(time(() => crc32cWith(selected, from, 0, to)));
    mem.push(memcpyBaseline(dst, src, bytes, 1, pieceBytes));
  }
  const byImplementation = available.map((implementation) => {
    const runs = Array.from({ length: implementation === 'table' ? 1 : reps }, () => time(() => crc32cWith(implementation, from)));
    return { implementation, GiBps: round(rate(runs)) };
  });
  const piece = from.subarray(0, Math.min(bytes, IN_CACHE_BYTES));
  const inCacheRuns = Array.from({ length: reps }, () =>
    time(() => {
      for (let done = 0; done < GiB; done += piece.length) crc32cWith(selected, piece);
    }),
  );
  const fig: Crc32cFigure = {
    implementation: selected,
    bytes,
    GiBps: round(rate(crc)),
    memcpyGiBps: round(rate(mem)),
    memcpyRatio: round(rate(crc) / rate(mem)),
    copyGiBps: round(rate(copy)),
    copyRatio: round(rate(copy) / rate(mem)),
    byImplementation,
    inCache: { bytes: piece.length, GiBps: round((Math.ceil(GiB / piece.length) * piece.length) / GiB / median(inCacheRuns)) },
  };
  log(`crc32c (${selected}, 1 thread, ${bytes / MiB} MiB): ${fig.GiBps} GiB/s, memcpy ${fig.memcpyGiBps} GiB/s, ratio ${fig.memcpyRatio}; copy+crc32c ${fig.copyGiBps} GiB/s, ratio ${fig.copyRatio}; ${byImplementation.map((x) => `${x.implementation} ${x.GiBps}`).join(', ')} GiB/s; in cache (${fig.inCache.bytes / KiB} KiB) ${fig.inCache.GiBps} GiB/s`);
  return fig;
}

async function fileBench(
  engine: TransferEngine,
  src: HostArena,
  dst: HostArena,
  pageBytes: number,
  bytes: number,
  dir: string,
  reps: number,
  log: (line: string) => void,
): Promise<{ pageBytes: number; write: FileFigure; read: FileFigure }> {
  const enginePath = path.join(dir, `tiersync-bench-engine-${process.pid}.bin`);
  const basePath = path.join(dir, `tiersync-bench-baseline-${process.pid}.bin`);
  const total = Math.floor(bytes / pageBytes) * pageBytes;
  const arenaPages = Math.floor(src.capacity / pageBytes);
  const w: number[][] = [[], []];
  const r: number[][] = [[], []];
  try {
    for (let i = 0; i < reps; i++) {
      rmSync(enginePath, { force: true });
      const out = FileHandle.open(enginePath, { writable: true, create: true, truncate: true, direct: 'always' });
      const write = new TransferBatch();
      for (let p = 0; p * pageBytes < total; p++) write.add(src, (p % arenaPages) * pageBytes, out, p * pageBytes, pageBytes);
      let t = process.hrtime.bigint();
      await engine.submit(write, { durable: true });
      w[0]!.push(total / GiB / (Number(process.hrtime.bigint() - t) / 1e9));
      out.close();
      rmSync(basePath, { force: true });
      w[1]!.push(total / GiB / fileLoopBaseline(basePath, 'write', src, total, pageBytes));

      const input = FileHandle.open(enginePath, { direct: 'always' });
      const read = new TransferBatch();
      for (let p = 0; p * pageBytes < total; p++) read.add(input, p * pageBytes, dst, (p % arenaPages) * pageBytes, pageBytes);
      t = process.hrtime.bigint();
      await engine.submit(read);
      r[0]!.push(total / GiB / (Number(process.hrtime.bigint() - t) / 1e9));
      input.close();
      r[1]!.push(total / GiB / fileLoopBaseline(basePath, 'read', dst, total, pageBytes));
    }
  } finally {
    rmSync(enginePath, { force: true });
    rmSync(basePath, { force: true });
  }
  const fig = (pair: number[][]): FileFigure => ({
    GiBps: round(median(pair[0]!)),
    baselineGiBps: round(median(pair[1]!)),
    ratio: round(median(pair[0]!) / median(pair[1]!)),
  });
  const result = { pageBytes, write: fig(w), read: fig(r) };
  log(`file write    ${String(pageBytes / KiB).padStart(5)} KiB pages: ${result.write.GiBps} GiB/s, O_DIRECT pwrite loop ${result.write.baselineGiBps} GiB/s, ratio ${result.write.ratio}`);
  log(`file read     ${String(pageBytes / KiB).padStart(5)} KiB pages: ${result.read.GiBps} GiB/s, O_DIRECT pread loop ${result.read.baselineGiBps} GiB/s, ratio ${result.read.ratio}`);
  return result;
}

/** p99 and max event-loop delay while `stormBytes` move host->device, with a 1 ms timer running. */
async function eventLoopBench(engine: TransferEngine, host: HostArena, device: DeviceArena, stormBytes: number, log: (line: string) => void) {
  const pageBytes = 256 * KiB;
  const batchBytes = 64 * MiB;
  const measure = async (work: () => Promise<void>) => {
    const h = monitorEventLoopDelay({ resolution: 1 });
    const tick = setInterval(() => undefined, 1);
    h.enable();
    await work();
    h.disable();
    clearInterval(tick);
    return { p99: h.percentile(99) / 1e6, max: h.max / 1e6 };
  };
  const idle = await measure(() => new Promise((resolve) => setTimeout(resolve, 500)));
  const batches: TransferBatch[] = [];
  for (let off = 0; off + batchBytes <= host.capacity; off += batchBytes) {
    const b = new TransferBatch();
    for (let p = off; p < off + batchBytes; p += pageBytes) b.add(host, p, device, p, pageBytes);
    batches.push(b);
  }
  const count = Math.ceil(stormBytes / batchBytes);
  const runStorm = async (priority: 'demand' | 'writeBack') => {
    let seconds = 0;
    const delay = await measure(async () => {
      const start = process.hrtime.bigint();
      const inflight: Promise<unknown>[] = [];
      for (let i = 0; i < count; i++) {
        inflight.push(engine.submit(batches[i % batches.length]!, { priority }));
        if (inflight.length >= 8) await inflight.shift();
      }
      await Promise.all(inflight);
      seconds = Number(process.hrtime.bigint() - start) / 1e9;
    });
    return { p99Ms: round(delay.p99), maxMs: round(delay.max), stormGiBps: round((count * batchBytes) / GiB / seconds) };
  };
  const storm = await runStorm('demand');
  // The same storm as write-back: at most `backgroundThreads` workers run it, so a core stays with the caller.
  const background = await runStorm('writeBack');
  const result = {
    ...storm,
    idleP99Ms: round(idle.p99),
    stormBytes: count * batchBytes,
    background: { ...background, backgroundThreads: engine.stats().backgroundThreads },
  };
  log(`event loop during ${round(result.stormBytes / GiB, 1)} GiB storm (${result.stormGiBps} GiB/s): p99 ${result.p99Ms} ms, max ${result.maxMs} ms (idle p99 ${result.idleP99Ms} ms)`);
  log(`event loop during the same storm as write-back on ${result.background.backgroundThreads} worker(s) (${background.stormGiBps} GiB/s): p99 ${background.p99Ms} ms, max ${background.maxMs} ms`);
  return result;
}
