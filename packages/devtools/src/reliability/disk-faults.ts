/**
 * Storage faults under a live hierarchy (host tier over an fs tier with write-through), each of which must end in
 * a defined outcome: a fallback (the page is reported missing, the caller recomputes it), a typed TierSyncError,
 * or a retry that succeeds; never a hang, a crash or a corrupt page.
 *
 * - io-errors: the fault tier (`fault://`) fails fs writes, reads and deletes at random;
 * - bit-rot: bytes of stored pages are flipped on disk behind the driver's back;
 * - disk-full: the fs tier lives on a small tmpfs that fills up (needs root to mount; skipped otherwise).
 */
import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, readSync, rmSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HostArena, TierSyncError } from '@tiersync/native';
import { FaultTier, FsTier, faultUrl, type PageKey } from '@tiersync/tiers';
import { TierSync, type TierSyncConfig } from '@tiersync/core';
import { Deadline, scenario, withDeadline, type ScenarioResult } from './report.js';
import { CRASH_LAYOUT, CRASH_PAGE_BYTES, PROMPTS, PROMPT_PAGES, fillPage, pageMatches, promptTokens } from './workload.js';

const OP_MS = 30_000;

export interface DiskFaultOptions {
  /** Operations (stores and loads) per scenario. Default 400. */
  operations?: number;
  seed?: number;
  log?: (line: string) => void;
}

/** Host tier (32 pages) over `lowerUrl` with write-through, the index in `dir`. */
export function config(dir: string, lowerUrl: string): TierSyncConfig {
  return {
    model: 'reliability-faults@1',
    layout: CRASH_LAYOUT,
    tiers: [
      { url: `host://?capacity=${32 * CRASH_PAGE_BYTES}`, highWatermark: 1, lowWatermark: 0.75 },
      { url: lowerUrl, writeThrough: true },
    ],
    index: { path: path.join(dir, 'index.sqlite') },
    stagingPages: 16,
    threads: 2,
  };
}

function rng(seed: number): (n: number) => number {
  let x = seed >>> 0 || 1;
  return (n) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
}

/**
 * Runs `operations` stores and loads of the shared workload against `ts`. Every call has a deadline; a typed
 * error is a defined outcome (counted), any other error a failure; every page delivered is checked byte-exact.
 */
export async function traffic(ts: TierSync, operations: number, seed: number, result: ScenarioResult, outcomes: Record<string, number>): Promise<void> {
  const random = rng(seed);
  const src = HostArena.create({ capacity: PROMPT_PAGES * CRASH_PAGE_BYTES });
  const dst = HostArena.create({ capacity: PROMPT_PAGES * CRASH_PAGE_BYTES });
  try {
    for (let op = 0; op < operations; op++) {
      result.runs++;
      try {
        if (random(100) < 55) {
          const tokens = promptTokens(random(PROMPTS), 2 + random(PROMPT_PAGES - 1));
          const keys = ts.keysOf(tokens);
          keys.forEach((k, i) => fillPage(src, i * CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, k));
          await withDeadline(ts.store(tokens, keys.map((_, i) => ({ arena: src, offset: i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES }))), OP_MS, 'store');
          outcomes.stored = (outcomes.stored ?? 0) + 1;
        } else {
          const hit = ts.lookup(promptTokens(random(PROMPTS)));
          if (!hit.pages.length) continue;
          const r = await withDeadline(ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES }))), OP_MS, 'load');
          const missing = new Set(r.missing);
          hit.pages.forEach((p, i) => {
            if (missing.has(i)) return;
            if (!pageMatches(dst, i * CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, p.key)) {
              result.corruptPagesServed++;
              result.notes.push(`page ${p.key} was served with wrong bytes`);
            }
          });
          outcomes.loaded = (outcomes.loaded ?? 0) + 1;
          if (r.missing.length) outcomes.fellBackToRecompute = (outcomes.fellBackToRecompute ?? 0) + r.missing.length;
        }
      } catch (e) {
        if (e instanceof Deadline) {
          result.hangs++;
          result.notes.push(e.message);
        } else if (e instanceof TierSyncError) {
          outcomes[`typed ${e.code}`] = (outcomes[`typed ${e.code}`] ?? 0) + 1;
        } else {
          result.failures++;
          result.notes.push(`untyped error: ${String(e)}`);
        }
      }
    }
    await withDeadline(ts.flush(), OP_MS, 'flush').catch((e) => {
      if (e instanceof Deadline) result.hangs++;
    });
  } finally {
    src.close();
    dst.close();
  }
}

/** Pages with a ready copy on `tier` (persistent) now: what a caller may treat as acknowledged durable. */
export function durableNow(ts: TierSync, tier = 'fs'): PageKey[] {
  const all: PageKey[] = [];
  for (let p = 0; p < PROMPTS; p++) all.push(...ts.keysOf(promptTokens(p)));
  return ts.lookupKeys(all).pages.filter((p) => p.tiers.includes(tier)).map((p) => p.key);
}

/**
 * Reopens the hierarchy with every fault healed and checks that each of `durable` loads byte-exact, and that the
 * fs tier holds no page the index does not reference (leaked slots).
 */
export async function reopenAndCheck(dir: string, fsUrl: string, durable: readonly PageKey[], result: ScenarioResult, tier = 'fs'): Promise<void> {
  const ts = new TierSync({ ...config(dir, fsUrl), promoteOnHit: false });
  const arena = HostArena.create({ capacity: 64 * CRASH_PAGE_BYTES });
  try {
    await withDeadline(ts.open(), OP_MS, 'reopen');
    result.details.leakedSlots = ts.tierDriver(tier).stats().pages - (ts.stats().index.tiers[tier]?.ready ?? 0);
    for (let at = 0; at < durable.length; at += 64) {
      const hit = ts.lookupKeys(durable.slice(at, at + 64));
      const r = hit.pages.length ? await withDeadline(ts.load(hit, hit.pages.map((_, i) => ({ arena, offset: i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES }))), OP_MS, 'load after reopen') : { missing: [] as number[] };
      const good = new Set<PageKey>();
      hit.pages.forEach((p, i) => {
        if (r.missing.includes(i)) return;
        if (pageMatches(arena, i * CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, p.key)) good.add(p.key);
        else result.corruptPagesServed++;
      });
      for (const k of durable.slice(at, at + 64)) {
        if (good.has(k)) continue;
        result.lostDurablePages++;
        if (result.notes.length < 20) result.notes.push(`page ${k} had a ready ${tier} copy before the faults were healed and is not readable after reopening`);
      }
    }
  } catch (e) {
    if (e instanceof Deadline) result.hangs++;
    else result.failures++;
    result.notes.push(`reopen: ${(e as Error).message}`);
  } finally {
    await ts.close().catch(() => undefined);
    arena.close();
  }
}

/** fs I/O errors injected through the fault tier: writes, reads and deletes fail at random. */
export async function runIoErrors(options: DiskFaultOptions = {}): Promise<ScenarioResult> {
  const operations = options.operations ?? 400;
  const result = scenario('fs I/O errors (fault tier: EIO on writes, reads, deletes)', `tiersync bench reliability --scenarios io-errors --operations ${operations} --json`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-ioerr-'));
  const fsUrl = `fs://${path.join(dir, 'fs')}?capacity=24MiB`;
  const url = faultUrl(fsUrl, { seed: options.seed ?? 7, writeErrors: 0.15, lostWriteAcks: 0.1, readErrors: 0.15, deleteErrors: 0.1 });
  const outcomes: Record<string, number> = {};
  try {
    const ts = new TierSync(config(dir, url));
    await ts.open();
    const fault = ts.tierDriver('fs') as FaultTier;
    await traffic(ts, operations, options.seed ?? 7, result, outcomes);
    // What is durable now must survive the faults that follow and a restart.
    fault.heal();
    const durable = durableNow(ts);
    fault.inject({ readErrors: 0.3 });
    await traffic(ts, Math.ceil(operations / 4), (options.seed ?? 7) + 1, result, outcomes);
    result.faults = Object.values(fault.injected).reduce((a, b) => a + b, 0);
    await ts.close();
    await reopenAndCheck(dir, fsUrl, durable, result);
    result.details = { ...result.details, durablePagesChecked: durable.length, ...outcomes };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return result;
}

/** Flips one byte of stored pages' data in the slab files; loads must fall back or miss, never serve them. */
export async function runBitRot(options: DiskFaultOptions = {}): Promise<ScenarioResult> {
  const operations = options.operations ?? 400;
  const result = scenario('fs bit rot (bytes flipped on disk)', `tiersync bench reliability --scenarios bit-rot --operations ${operations} --json`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-bitrot-'));
  const fsUrl = `fs://${path.join(dir, 'fs')}?capacity=24MiB&direct=never`;
  const outcomes: Record<string, number> = {};
  const random = rng(options.seed ?? 11);
  try {
    const ts = new TierSync({ ...config(dir, fsUrl), promoteOnHit: false });
    await ts.open();
    await traffic(ts, Math.ceil(operations / 2), options.seed ?? 11, result, outcomes);
    const fs = ts.tierDriver('fs') as FsTier;
    const onDisk = durableNow(ts);
    // Rot a third of the pages on disk; their host copies (if any) stay good.
    for (const key of onDisk) {
      if (random(3) !== 0) continue;
      const where = fs.locate(key);
      if (!where) continue;
      const fd = openSync(where.path, 'r+');
      const at = where.dataOffset + random(where.length);
      const b = Buffer.alloc(1);
      readSync(fd, b, 0, 1, at);
      b[0] = b[0]! ^ (1 << random(8));
      writeSync(fd, b, 0, 1, at);
      closeSync(fd);
      result.faults++;
    }
    await traffic(ts, Math.ceil(operations / 2), (options.seed ?? 11) + 1, result, outcomes);
    result.details = { ...outcomes, checksumFailuresDetected: ts.counters.integrityFailures };
    await ts.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return result;
}

/** The fs tier on a 4 MiB tmpfs (root only): write-through and demotion hit ENOSPC. */
export async function runDiskFull(options: DiskFaultOptions = {}): Promise<ScenarioResult> {
  const operations = options.operations ?? 400;
  const result = scenario('disk full (fs tier on a 4 MiB tmpfs)', `tiersync bench reliability --scenarios disk-full --operations ${operations} --json`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-full-'));
  const mount = path.join(dir, 'small');
  mkdirSync(mount);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tiersync-full', mount], { stdio: 'pipe' });
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    result.notes.push(`skipped: cannot mount a tmpfs (${(e as Error).message.split('\n')[0]}); run as root`);
    result.details.skipped = 'no tmpfs mount';
    return result;
  }
  // The tier believes it has 24 MiB; the filesystem has 4. Sparse slabs of 1 MiB, so writes meet ENOSPC.
  const fsUrl = `fs://${path.join(mount, 'fs')}?capacity=24MiB&slab=1MiB&preallocate=false&direct=never`;
  const outcomes: Record<string, number> = {};
  try {
    const ts = new TierSync(config(dir, fsUrl));
    let failedMoves = 0;
    ts.on('transfer:failed', (e) => {
      failedMoves++;
      outcomes[`background ${e.error.code}`] = (outcomes[`background ${e.error.code}`] ?? 0) + 1;
    });
    await ts.open();
    await traffic(ts, operations, options.seed ?? 13, result, outcomes);
    result.faults = failedMoves + Object.entries(outcomes).filter(([k]) => k.startsWith('typed ')).reduce((a, [, v]) => a + v, 0);
    const durable = durableNow(ts);
    await ts.close();
    await reopenAndCheck(dir, fsUrl, durable, result);
    result.details = { ...result.details, durablePagesChecked: durable.length, ...outcomes };
  } finally {
    try {
      execFileSync('umount', [mount], { stdio: 'pipe' });
    } catch (e) {
      result.notes.push(`umount ${mount}: ${(e as Error).message.split('\n')[0]}`);
    }
    rmSync(dir, { recursive: true, force: true });
  }
  return result;
}

/**
 * A tier whose reads stall (a hung NFS server, a wedged disk): a load must still settle by a deadline, falling
 * back to recompute (the hierarchy's `deadlines.loadMs` bounds each driver read; a load past the scenario's own
 * deadline counts as a hang).
 */
export async function runStalledTier(options: DiskFaultOptions & { loads?: number; deadlineMs?: number } = {}): Promise<ScenarioResult> {
  const loads = options.loads ?? 5;
  const deadlineMs = options.deadlineMs ?? 2_000;
  const result = scenario('stalled fs reads (fault tier: calls hang)', `tiersync bench reliability --scenarios stall --json`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-stall-'));
  const url = faultUrl(`fs://${path.join(dir, 'fs')}?capacity=24MiB`, { seed: options.seed ?? 17 });
  const arena = HostArena.create({ capacity: PROMPT_PAGES * CRASH_PAGE_BYTES });
  try {
    const first = new TierSync(config(dir, url));
    await first.open();
    for (let p = 0; p < loads; p++) {
      const tokens = promptTokens(p);
      const keys = first.keysOf(tokens);
      keys.forEach((k, i) => fillPage(arena, i * CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, k));
      await first.store(tokens, keys.map((_, i) => ({ arena, offset: i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES })));
    }
    await first.close();
    // Reopened, the pages are on fs only (host is volatile); every fs read now stalls.
    // The hierarchy's load deadline, well inside the scenario's own: a stalled read must end as a fallback.
    const ts = new TierSync({ ...config(dir, url), promoteOnHit: false, deadlines: { loadMs: Math.max(1, Math.floor(deadlineMs / 4)) } });
    await ts.open();
    (ts.tierDriver('fs') as FaultTier).inject({ stalls: 1 });
    for (let p = 0; p < loads; p++) {
      result.runs++;
      result.faults++;
      const hit = ts.lookup(promptTokens(p));
      try {
        const r = await withDeadline(ts.load(hit, hit.pages.map((_, i) => ({ arena, offset: i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES }))), deadlineMs, 'load from a stalled tier');
        result.details.fellBackToRecompute = Number(result.details.fellBackToRecompute ?? 0) + r.missing.length;
      } catch (e) {
        if (e instanceof Deadline) result.hangs++;
        else if (!(e instanceof TierSyncError)) result.failures++;
      }
    }
    if (result.hangs) result.notes.push(`${result.hangs} of ${loads} loads from a stalled tier had not settled after ${deadlineMs} ms`);
    // Closing the tier releases the stalled reads (ERR_CLOSED), so nothing is left behind.
    await withDeadline(ts.close(), 10_000, 'close with stalled reads').catch((e) => {
      result.hangs++;
      result.notes.push((e as Error).message);
    });
  } finally {
    arena.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return result;
}
