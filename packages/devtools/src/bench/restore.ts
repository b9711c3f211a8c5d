/**
 * `tiersync bench restore`: store, then restore, one long context shaped like Llama-3-8B's KV (32 layers, 8 KV
 * heads of 128, bf16: 128 KiB per token; 32,768 tokens = 4 GiB) through a TierSync hierarchy into device memory
 * (a sim DeviceArena), from two places:
 * - fromHost: a hierarchy whose only tier is host RAM, so every page is served from it; baseline: memcpy of the
 *   same bytes from the host tier's own arena into the same destination arena, on the engine's thread count, in
 *   page-sized calls;
 * - fromFs: a hierarchy whose only tier is an fs folder, so every page is read from its slab files (O_DIRECT,
 *   CRC32C-checked); baseline: a plain sequential O_DIRECT pread loop of the same bytes from one file into the
 *   same destination arena. The page cache is dropped before every timed read of either.
 * A restore is what an inference engine does on a prefix hit: lookup(tokens) (keys, index) then load() into its
 * KV pages; both are inside the timed region. Restore and baseline alternate (A B A B ...); medians reported.
 * The first (untimed) restore of each phase lands in zeroed memory and is checked byte for byte.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DeviceArena, HostArena, TransferBatch, type TransferEngine } from '@tiersync/native';
import { fileLoopBaseline, memcpyBaseline } from '@tiersync/native/bench';
import { HostTier, type PageLocation } from '@tiersync/tiers';
import { TierSync } from '@tiersync/core';
import { runLayerwiseBench, type LayerwiseBenchOptions, type LayerwiseReport } from './restore-layerwise.js';
import { GiB, KiB, MiB, formatSize, median, round } from './stats.js';

export interface RestoreBenchOptions {
  /** Context length in tokens. Default 32,768 (4 GiB of Llama-3-8B KV). Rounded down to whole pages. */
  tokens?: number;
  /** Alternative to `tokens`: bytes of KV to restore (tokens = bytes / 128 KiB). */
  bytes?: number;
  /** Tokens per page of the 'llama-3-8b' preset layout. Default 16 (2 MiB pages). */
  tokensPerPage?: number;
  /** Timed restore/baseline pairs per source. Default 7 (host), 5 (fs). */
  repetitions?: number;
  /** Folder for the fs tier and the baseline file (a filesystem with O_DIRECT). Default: the OS temp folder. */
  dir?: string;
  /** Engine threads, and threads of the memcpy baseline. Default: one per core. */
  threads?: number;
  /**
   * Drop the page cache before each timed file read: `sync; echo 3 > /proc/sys/vm/drop_caches` when permitted
   * (root), else posix_fadvise(DONTNEED) on each file via `dd iflag=nocache count=0`. Default true.
   */
  dropCaches?: boolean;
  /**
   * The layer-wise part (restore-layerwise.ts): whole vs layer-by-layer restores from host, fs, peer and object, on
   * a context of its own (default 512 MiB). `false` skips it. Its threads, dir, dropCaches and log default to
   * this run's.
   */
  layerwise?: LayerwiseBenchOptions | false;
  log?: (line: string) => void;
}

export interface RestoreFigure {
  /** Median of lookup + load, milliseconds. */
  medianMs: number;
  /** Median of the baseline moving the same bytes into the same destination, milliseconds. */
  baselineMs: number;
  /** medianMs / baselineMs: 1.0 = as fast as the baseline; target <= 1.15. */
  ratio: number;
  /**
   * Median over repetitions of (restore / the baseline run right after it): on a shared, noisy machine each pair
   * sees much the same conditions, so this is steadier than the ratio of the two medians.
   */
  pairRatio: number;
  GiBps: number;
  baselineGiBps: number;
  /** Median of lookup() alone (hashing the tokens' page keys and the index walk), milliseconds. */
  lookupMs: number;
  runsMs: number[];
  baselineRunsMs: number[];
  baseline: string;
}

export interface RestoreBenchReport {
  suite: 'restore';
  date: string;
  machine: string;
  /** 1-minute load average when the run started (other work on the machine makes every figure noisier). */
  loadAverage: number;
  layout: string;
  tokens: number;
  tokensPerPage: number;
  pageBytes: number;
  pages: number;
  bytes: number;
  threads: number;
  /** How the page cache was dropped before each timed file read. */
  cacheDrop: string;
  /** Every byte of the first restore of each source matched what was stored. */
  verified: boolean;
  /** Time to store the context into each hierarchy (not a target), milliseconds. */
  storeMs: { host: number; fs: number };
  fromHost: RestoreFigure;
  fromFs: RestoreFigure;
  /**
   * Per tier, `{firstLayerMs, totalMs, wholeMs, ...}` of a 32-layer layer-wise restore against a whole one (targets:
   * firstLayerMs <= wholeMs / 8, totalMs <= 1.1 x wholeMs); absent with `layerwise: false`.
   */
  layerwise?: LayerwiseReport;
}

const PRESET = 'llama-3-8b';
const BYTES_PER_TOKEN = 128 * KiB;
const DEFAULT_TOKENS = 32_768;
const VERIFY_CHUNK = 64 * MiB;
const elapsedMs = (start: bigint) => Number(process.hrtime.bigint() - start) / 1e6;

/** The prompt: deterministic token ids. */
function contextTokens(count: number): Uint32Array {
  return Uint32Array.from({ length: count }, (_, i) => (i * 2654435761 + 12345) % 128_000);
}

/**
 * Page contents: one random page-sized template with the page number stamped into every 4 KiB block, so a page
 * landing in the wrong slot, or a block of it not landing, shows. @internal (tests)
 */
export class Pattern {
  readonly template: Buffer;
  constructor(readonly pageBytes: number) {
    this.template = Buffer.allocUnsafe(pageBytes);
    let x = 0x9e3779b9;
    for (let i = 0; i < pageBytes; i += 4) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      this.template.writeUInt32LE(x >>> 0, i);
    }
  }
  fill(into: Uint8Array, page: number): void {
    into.set(this.template);
    const v = new DataView(into.buffer, into.byteOffset, into.byteLength);
    for (let b = 0; b + 4 <= into.byteLength; b += 4096) v.setUint32(b, page ^ 0x5a5a0000, true);
  }
}

/** Copies `pages` pages of `device` back to host memory and compares each with the pattern. @internal (tests) */
export async function verifyDevice(engine: TransferEngine, device: DeviceArena, pages: number, pattern: Pattern): Promise<boolean> {
  const pageBytes = pattern.pageBytes;
  const perChunk = Math.max(1, Math.floor(VERIFY_CHUNK / pageBytes));
  const staging = HostArena.create({ capacity: perChunk * pageBytes });
  const expected = Buffer.allocUnsafe(pageBytes);
  try {
    for (let first = 0; first < pages; first += perChunk) {
      const n = Math.min(perChunk, pages - first);
      const batch = new TransferBatch();
      batch.add(device, first * pageBytes, staging, 0, n * pageBytes);
      await engine.submit(batch);
      for (let k = 0; k < n; k++) {
        pattern.fill(expected, first + k);
        if (Buffer.compare(expected, staging.view(k * pageBytes, pageBytes)) !== 0) return false;
      }
    }
    return true;
  } finally {
    staging.close();
  }
}

/** Drops the page cache; returns how. */
function dropCaches(files: string[]): string {
  try {
    execFileSync('sync');
    writeFileSync('/proc/sys/vm/drop_caches', '3');
    return 'sync; echo 3 > /proc/sys/vm/drop_caches';
  } catch {
    for (const f of files) execFileSync('dd', [`if=${f}`, 'iflag=nocache', 'count=0', 'status=none']);
    return 'posix_fadvise(DONTNEED) per file (dd iflag=nocache count=0)';
  }
}

function figure(runs: number[], baseRuns: number[], lookups: number[], bytes: number, baseline: string): RestoreFigure {
  const m = median(runs);
  const b = median(baseRuns);
  return {
    medianMs: round(m, 1),
    baselineMs: round(b, 1),
    ratio: round(m / b),
    pairRatio: round(median(runs.map((r, i) => r / baseRuns[i]!))),
    GiBps: round(bytes / GiB / (m / 1000)),
    baselineGiBps: round(bytes / GiB / (b / 1000)),
    lookupMs: round(median(lookups), 2),
    runsMs: runs.map((r) => round(r, 1)),
    baselineRunsMs: baseRuns.map((r) => round(r, 1)),
    baseline,
  };
}

export async function runRestoreBench(options: RestoreBenchOptions = {}): Promise<RestoreBenchReport> {
  const log = options.log ?? (() => undefined);
  const tokensPerPage = options.tokensPerPage ?? 16;
  const pageBytes = tokensPerPage * BYTES_PER_TOKEN;
  const wanted = options.tokens ?? (options.bytes !== undefined ? Math.floor(options.bytes / BYTES_PER_TOKEN) : DEFAULT_TOKENS);
  const pages = Math.floor(wanted / tokensPerPage);
  if (pages < 1) throw new RangeError(`restore bench: ${wanted} tokens is less than one page of ${tokensPerPage}`);
  const tokens = contextTokens(pages * tokensPerPage);
  const bytes = pages * pageBytes;
  const threads = options.threads ?? os.availableParallelism();
  const hostReps = options.repetitions ?? 7;
  const fsReps = options.repetitions ?? 5;
  const drop = options.dropCaches ?? true;
  const loadAverage = round(os.loadavg()[0] ?? 0, 2);
  const pattern = new Pattern(pageBytes);
  const folder = mkdtempSync(path.join(options.dir ?? os.tmpdir(), 'tiersync-bench-restore-'));
  const base = {
    model: 'meta-llama/Meta-Llama-3-8B@bench',
    layout: PRESET,
    tokensPerPage,
    threads,
    promoteOnHit: false,
    // The first (warm-up) load writes every page of a fresh device arena. On this VM each page's first touch costs
    // ~6.5 us even after MAP_POPULATE (BENCHMARKS, session 8), so 4 GiB took 10-12 s and hit the default 10 s
    // load deadline (every page then reported missing). The measured loads take well under a second.
    deadlines: { loadMs: 120_000 },
  } as const;
  log(`restore: ${tokens.length} tokens of ${PRESET} = ${pages} pages of ${formatSize(pageBytes)} (${formatSize(bytes)}), ${threads} threads`);

  /** The engine's KV memory, filled with the context's pages, as store() sources. */
  const sourceArena = () => {
    const src = HostArena.create({ capacity: bytes, prefault: true, hugePages: true });
    for (let p = 0; p < pages; p++) pattern.fill(src.view(p * pageBytes, pageBytes), p);
    return src;
  };
  const slots = (arena: HostArena | DeviceArena): PageLocation[] => Array.from({ length: pages }, (_, i) => ({ arena, offset: i * pageBytes, length: pageBytes }));

  /** One timed restore: lookup + load of every page into `into`; [total ms, lookup ms]. */
  const restore = async (ts: TierSync, into: PageLocation[], tier: string): Promise<[number, number]> => {
    const start = process.hrtime.bigint();
    const hit = ts.lookup(tokens);
    const lookupMs = elapsedMs(start);
    if (hit.pages.length !== pages) throw new Error(`restore bench: lookup found ${hit.pages.length} of ${pages} pages`);
    const r = await ts.load(hit, into);
    const ms = elapsedMs(start);
    if (r.loaded !== pages || r.missing.length || r.byTier[tier] !== pages) {
      throw new Error(`restore bench: load gave ${r.loaded} pages (${JSON.stringify(r.byTier)}), ${r.missing.length} missing; expected all ${pages} from ${tier}`);
    }
    return [ms, lookupMs];
  };

  const storeMs = { host: 0, fs: 0 };
  /** Stores the whole context through `ts` (timed into storeMs[tier]); `alsoWith` sees the source before it is freed. */
  const storeAll = async (ts: TierSync, tier: 'host' | 'fs', alsoWith?: (src: HostArena) => void): Promise<void> => {
    const src = sourceArena();
    try {
      const t = process.hrtime.bigint();
      const s = await ts.store(tokens, slots(src));
      storeMs[tier] = round(elapsedMs(t), 1);
      if (s.stored !== pages) throw new Error(`restore bench: stored ${s.stored} of ${pages} pages on ${tier} (${s.dropped} dropped)`);
      alsoWith?.(src);
    } finally {
      src.close();
    }
    log(`  stored on ${tier} in ${storeMs[tier]} ms`);
  };

  let verified = true;
  let cacheDrop = drop ? '' : 'none (dropCaches: false)';
  let fromHost: RestoreFigure;
  let fromFs: RestoreFigure;
  try {
    // ---- from host: a hierarchy of host RAM only ------------------------------------------------------------
    {
      const ts = new TierSync({
        ...base,
        tiers: [{ url: `host://?capacity=${bytes}`, name: 'host', highWatermark: 1, lowWatermark: 1 }],
      });
      await ts.open();
      let device: DeviceArena | undefined;
      try {
        await storeAll(ts, 'host');
        const hostArena = (ts.tierDriver('host') as HostTier).arena!;
        device = DeviceArena.create({ backend: 'sim', capacity: bytes });
        const into = slots(device);
        await restore(ts, into, 'host'); // warm-up, into zeroed memory: check every byte
        verified &&= await verifyDevice(ts.engine, device, pages, pattern);
        memcpyBaseline(device, hostArena, bytes, threads, pageBytes);
        const runs: number[] = [];
        const lookups: number[] = [];
        const baseRuns: number[] = [];
        for (let i = 0; i < hostReps; i++) {
          const [ms, lookupMs] = await restore(ts, into, 'host');
          runs.push(ms);
          lookups.push(lookupMs);
          baseRuns.push(memcpyBaseline(device, hostArena, bytes, threads, pageBytes) * 1000);
        }
        fromHost = figure(runs, baseRuns, lookups, bytes, `memcpy of the same bytes from the host tier's arena into the same device arena, ${threads} threads, ${formatSize(pageBytes)} calls`);
        log(`  from host: ${fromHost.medianMs} ms (${fromHost.GiBps} GiB/s), memcpy ${fromHost.baselineMs} ms (${fromHost.baselineGiBps} GiB/s), ratio ${fromHost.ratio} (per pair ${fromHost.pairRatio}); lookup ${fromHost.lookupMs} ms`);
      } finally {
        device?.close();
        await ts.close();
      }
    }

    // ---- from fs: a hierarchy of one fs folder only ----------------------------------------------------------
    {
      const tierDir = path.join(folder, 'fs');
      const basePath = path.join(folder, 'baseline.bin');
      // Slot headers and the last slab's rounding take a little more than the pages themselves.
      const capacity = bytes + Math.ceil(bytes / 64) + 64 * MiB;
      const ts = new TierSync({
        ...base,
        tiers: [{ url: `fs://${tierDir}?capacity=${capacity}`, name: 'fs', highWatermark: 1, lowWatermark: 1 }],
      });
      await ts.open();
      let device: DeviceArena | undefined;
      try {
        // The baseline's file: the same bytes, in page order.
        await storeAll(ts, 'fs', (src) => {
          rmSync(basePath, { force: true });
          fileLoopBaseline(basePath, 'write', src, bytes, pageBytes);
        });
        const files = () => [basePath, ...readdirSync(tierDir).filter((f) => f.endsWith('.tsd')).map((f) => path.join(tierDir, f))];
        const flush = () => {
          if (drop) cacheDrop = dropCaches(files());
        };
        device = DeviceArena.create({ backend: 'sim', capacity: bytes });
        const into = slots(device);
        // The sim device is host memory; fileLoopBaseline reads into any host-visible arena (the native side
        // checks that), its TypeScript signature only names HostArena.
        const baselineInto = device as unknown as HostArena;
        flush();
        await restore(ts, into, 'fs'); // warm-up, into zeroed memory: check every byte
        verified &&= await verifyDevice(ts.engine, device, pages, pattern);
        const runs: number[] = [];
        const lookups: number[] = [];
        const baseRuns: number[] = [];
        for (let i = 0; i < fsReps; i++) {
          flush();
          const [ms, lookupMs] = await restore(ts, into, 'fs');
          runs.push(ms);
          lookups.push(lookupMs);
          flush();
          baseRuns.push(fileLoopBaseline(basePath, 'read', baselineInto, bytes, pageBytes) * 1000);
        }
        fromFs = figure(runs, baseRuns, lookups, bytes, `sequential O_DIRECT pread loop of the same bytes from one file into the same device arena, ${formatSize(pageBytes)} calls`);
        log(`  from fs: ${fromFs.medianMs} ms (${fromFs.GiBps} GiB/s), O_DIRECT pread loop ${fromFs.baselineMs} ms (${fromFs.baselineGiBps} GiB/s), ratio ${fromFs.ratio} (per pair ${fromFs.pairRatio}); lookup ${fromFs.lookupMs} ms`);
      } finally {
        device?.close();
        await ts.close();
      }
    }
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
  const layerwise =
    options.layerwise === false
      ? undefined
      : await runLayerwiseBench({ threads, dropCaches: drop, log, tokensPerPage, ...(options.dir === undefined ? {} : { dir: options.dir }), ...options.layerwise });
  return {
    suite: 'restore',
    date: new Date().toISOString(),
    machine: `${os.cpus()[0]?.model ?? 'cpu'} x${os.availableParallelism()}, ${round(os.totalmem() / GiB, 1)} GiB, ${os.type()} ${os.release()}`,
    loadAverage,
    layout: PRESET,
    tokens: tokens.length,
    tokensPerPage,
    pageBytes,
    pages,
    bytes,
    threads,
    cacheDrop,
    verified,
    storeMs,
    fromHost,
    fromFs,
    ...(layerwise ? { layerwise } : {}),
  };
}
