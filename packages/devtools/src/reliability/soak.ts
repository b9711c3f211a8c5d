/**
 * Load and soak: a `tiersync serve` daemon in its own process under many concurrent sessions, each storing,
 * looking up, loading (checking every byte) and deleting its own pages through @tiersync/core/client, for a fixed
 * time. Reports errors, hangs, corrupt pages, latency percentiles per operation and the daemon's RSS growth after
 * warm-up (read from /proc, so the daemon's memory is measured apart from the load generator's).
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HostArena, TierSyncError } from '@tiersync/native';
import { TierSyncClient } from '@tiersync/core/client';
import { type DaemonProcess, startDaemonProcess } from '@tiersync/core/server';
import { Deadline, scenario, withDeadline, type ScenarioResult } from './report.js';
import { fillPage, pageMatches } from './workload.js';

export interface SoakOptions {
  /** Concurrent sessions. Default 1000. */
  sessions?: number;
  /** Seconds of load. Default 600 (the benchmark); CI runs 60. */
  seconds?: number;
  /** Client connections the sessions share (each a kept-alive HTTP channel and a mapping of the host tier). Default 8. */
  clients?: number;
  log?: (line: string) => void;
}

/** 1 layer x 2 KV heads x 64 dims, bf16, 16 tokens per page = 8 KiB pages. */
const LAYOUT = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;
/** Each session owns two prompts of four pages. */
const PROMPT_PAGES = 4;
const SESSION_PAGES = 2 * PROMPT_PAGES;
const OP_MS = 30_000;

/** Resident set of a process, bytes (VmRSS), or 0 once it is gone. */
function rssOf(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

function percentile(sorted: Float64Array, q: number): number {
  if (!sorted.length) return 0;
  return Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! * 100) / 100;
}

export async function runSoak(options: SoakOptions = {}): Promise<ScenarioResult> {
  const sessions = options.sessions ?? 1000;
  const seconds = options.seconds ?? 600;
  const clientCount = options.clients ?? 8;
  const log = options.log ?? (() => undefined);
  const result = scenario(`soak: daemon, ${sessions} concurrent sessions, ${seconds} s`, `tiersync bench reliability --scenarios soak --sessions ${sessions} --seconds ${seconds} --json`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-soak-'));
  const shm = `/dev/shm/tiersync-soak-${process.pid}`;
  const hostPages = Math.ceil(sessions * SESSION_PAGES * 1.5);
  const config = {
    model: 'reliability-soak@1',
    layout: LAYOUT,
    tiers: [
      { url: `host://?capacity=${hostPages * PAGE}&shm=${shm}`, name: 'host' },
      { url: `fs://${dir}/fs?capacity=${hostPages * 2 * PAGE}`, name: 'fs', writeThrough: true },
    ],
    index: { path: path.join(dir, 'index.sqlite') },
    http: { port: 0 },
    peer: { enabled: false },
    client: { maxLeases: 4 * sessions, maxBatchPages: 64 },
    log: { level: 'info' },
  };
  writeFileSync(path.join(dir, 'daemon.json'), JSON.stringify(config));
  const run = createHash('sha256').update(`${process.pid}/${Date.now()}`).digest('hex').slice(0, 8);
  const keyOf = (s: number, i: number) => createHash('sha256').update(`${run}/${s}/${i}`).digest('hex').slice(0, 32);
  const src = HostArena.create({ capacity: sessions * SESSION_PAGES * PAGE });
  const dst = HostArena.create({ capacity: sessions * PROMPT_PAGES * PAGE });
  const latencies: Record<string, number[]> = { store: [], lookup: [], load: [], delete: [] };
  const counts = { stored: 0, existing: 0, loaded: 0, missing: 0, errors: 0 };
  const rss: Array<{ t: number; bytes: number }> = [];
  let daemon: DaemonProcess | undefined;
  const clients: TierSyncClient[] = [];
  try {
    for (let s = 0; s < sessions; s++) for (let i = 0; i < SESSION_PAGES; i++) fillPage(src, (s * SESSION_PAGES + i) * PAGE, PAGE, keyOf(s, i));
    daemon = await startDaemonProcess(path.join(dir, 'daemon.json'));
    const pid = daemon.child.pid!;
    for (let c = 0; c < clientCount; c++) clients.push(await TierSyncClient.connect({ url: daemon.url, timeoutMs: OP_MS }));
    const started = Date.now();
    const end = started + seconds * 1000;
    const sampler = setInterval(() => rss.push({ t: (Date.now() - started) / 1000, bytes: rssOf(pid) }), 1000);
    const timed = async <T>(op: string, p: () => Promise<T>): Promise<T> => {
      const t0 = performance.now();
      const v = await withDeadline(p(), OP_MS, op);
      latencies[op]!.push(performance.now() - t0);
      return v;
    };
    const session = async (s: number) => {
      const client = clients[s % clients.length]!;
      let step = s;
      while (Date.now() < end) {
        step++;
        const prompt = step % 2;
        const keys = Array.from({ length: PROMPT_PAGES }, (_, i) => keyOf(s, prompt * PROMPT_PAGES + i));
        const pages = keys.map((_, i) => ({ arena: src, offset: (s * SESSION_PAGES + prompt * PROMPT_PAGES + i) * PAGE, length: PAGE }));
        const into = keys.map((_, i) => ({ arena: dst, offset: (s * PROMPT_PAGES + i) * PAGE, length: PAGE }));
        result.runs++;
        try {
          const roll = (step * 2654435761) % 100;
          if (roll < 30) {
            const r = await timed('store', () => client.store(keys, pages));
            counts.stored += r.stored;
            counts.existing += r.existing;
            if (r.badChecksum.length) {
              result.failures++;
              result.notes.push(`session ${s}: the daemon refused good pages as bad checksums`);
            }
          } else if (roll < 55) {
            await timed('lookup', () => client.lookup(keys));
          } else if (roll < 95) {
            const r = await timed('load', () => client.load(keys, into));
            const missing = new Set(r.missing);
            counts.loaded += r.loaded;
            counts.missing += r.missing.length;
            keys.forEach((k, i) => {
              if (missing.has(i) || pageMatches(dst, into[i]!.offset, PAGE, k)) return;
              result.corruptPagesServed++;
              if (result.notes.length < 20) result.notes.push(`session ${s}: page ${k} loaded with wrong bytes`);
            });
          } else {
            await timed('delete', () => client.delete(keys));
          }
        } catch (e) {
          counts.errors++;
          if (e instanceof Deadline) result.hangs++;
          else result.failures++;
          if (result.notes.length < 20) result.notes.push(`session ${s}: ${e instanceof TierSyncError ? e.code : ''} ${(e as Error).message}`.slice(0, 300));
        }
      }
    };
    let lastLog = Date.now();
    const progress = setInterval(() => {
      if (Date.now() - lastLog < 30_000) return;
      lastLog = Date.now();
      log(`soak: ${Math.round((Date.now() - started) / 1000)} s, ${result.runs} operations, ${counts.errors} errors, daemon RSS ${Math.round(rssOf(pid) / 2 ** 20)} MiB`);
    }, 5000);
    await Promise.all(Array.from({ length: sessions }, (_, s) => session(s)));
    clearInterval(sampler);
    clearInterval(progress);
    const elapsed = (Date.now() - started) / 1000;
    // Warm-up: the first fifth of the run (at least 10 s): the host tier fills, JIT and allocator pools settle.
    // Growth compares the median RSS of the tenth of the run right after warm-up with that of the last tenth
    // (medians, so one sample taken mid-GC does not decide).
    const warmEnd = Math.max(10, seconds / 5);
    const span = Math.max(3, seconds / 10);
    const median = (xs: number[]) => (xs.length ? xs.sort((p, q) => p - q)[Math.floor(xs.length / 2)]! : 0);
    const warm = median(rss.filter((x) => x.t >= warmEnd && x.t < warmEnd + span).map((x) => x.bytes));
    const last = median(rss.filter((x) => x.t >= elapsed - span).map((x) => x.bytes));
    // A leak keeps climbing past every earlier high; allocator pools and the host tier filling swing by tens of
    // MiB under load (one CI run: 405 MiB after warm-up, 464 at 60 s, 435 at the end). So the leak figure compares
    // the end with the highest RSS of the first half after warm-up.
    const firstHalfPeak = Math.max(0, ...rss.filter((x) => x.t >= warmEnd && x.t < (warmEnd + elapsed) / 2).map((x) => x.bytes));
    const details: Record<string, number | string> = {
      sessions,
      seconds: Math.round(elapsed),
      operationsPerSec: Math.round(result.runs / elapsed),
      ...counts,
      rssAfterWarmupMiB: Math.round(warm / 2 ** 20),
      rssEndMiB: Math.round(last / 2 ** 20),
      rssPeakMiB: Math.round(Math.max(0, ...rss.map((x) => x.bytes)) / 2 ** 20),
      rssGrowthPct: warm ? Math.round(((last - warm) / warm) * 1000) / 10 : 'n/a',
      rssOverFirstHalfPeakPct: firstHalfPeak ? Math.round(((last - firstHalfPeak) / firstHalfPeak) * 1000) / 10 : 'n/a',
    };
    for (const [op, list] of Object.entries(latencies)) {
      const sorted = Float64Array.from(list).sort();
      details[`${op}P50Ms`] = percentile(sorted, 0.5);
      details[`${op}P99Ms`] = percentile(sorted, 0.99);
      details[`${op}P999Ms`] = percentile(sorted, 0.999);
    }
    result.details = details;
  } finally {
    for (const c of clients) await c.close().catch(() => undefined);
    const code = daemon ? await daemon.stop() : 0;
    if (code !== 0) {
      result.failures++;
      result.notes.push(`daemon exited with ${code} on SIGTERM`);
    }
    src.close();
    dst.close();
    rmSync(dir, { recursive: true, force: true });
    rmSync(shm, { force: true });
  }
  return result;
}
