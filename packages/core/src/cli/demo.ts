import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { HostArena, probeMachine } from '@tiersync/native';
import { TierSync } from '../hierarchy/tier-sync.js';
import { readMooncake } from '../sim/trace/mooncake.js';
import { GiB, formatBytes, round } from '../bench/stats.js';
import { formatReport } from './doctor.js';
import type { Command } from './main.js';

const usage = `Usage: tiersync demo [--requests N] [--json]

Starts an embedded hierarchy (sim HBM 64 MiB, host RAM 256 MiB, an fs tier in a temporary folder) and replays
the first N requests (default 400) of the bundled Mooncake conversation trace with real bytes: each request looks
up its prompt's cached prefix, loads it, "computes" the pages that were not cached, and stores them. Prints
per-tier hits, bytes moved, load throughput and the prefill tokens saved.`;

// A small model so the demo moves real bytes quickly: 1 layer x 2 KV heads x 64 dims, bf16 = 512 B per token;
// one page per Mooncake hash block (512 tokens) = 256 KiB pages.
const LAYOUT = { tokensPerPage: 512, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const TRACE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../traces/conversation_trace.jsonl.gz');

/** Tokens of one Mooncake hash block: deterministic, different per block. */
function blockTokens(block: number, into: Uint32Array, at: number): void {
  for (let j = 0; j < 512; j++) into[at + j] = (block * 2654435761 + j * 40503) % 128_000;
}

/** What "prefill" writes for a page: a pattern derived from its key, checked again whenever the page is loaded. */
function fillPage(view: Uint8Array, key: string): void {
  let x = Number.parseInt(key.slice(0, 8), 16) | 1;
  for (let i = 0; i < view.length; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    view[i] = x & 0xff;
  }
}

function pageMatches(view: Uint8Array, key: string): boolean {
  let x = Number.parseInt(key.slice(0, 8), 16) | 1;
  for (let i = 0; i < view.length; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    if (view[i] !== (x & 0xff)) return false;
  }
  return true;
}

function progress(done: number, total: number, note: string): void {
  if (!process.stderr.isTTY) {
    if (done === total || done % Math.max(1, Math.floor(total / 10)) === 0) process.stderr.write(`  ${done}/${total} requests ${note}\n`);
    return;
  }
  const width = 30;
  const filled = Math.round((done / total) * width);
  process.stderr.write(`\r  [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} ${note}   `);
  if (done === total) process.stderr.write('\n');
}

export const demoCommand: Command = {
  summary: 'replay real conversation traffic through an embedded hierarchy (HBM, host RAM, fs) with real bytes',
  usage,
  async run(args) {
    const { values } = parseArgs({ args, options: { requests: { type: 'string' }, json: { type: 'boolean' } } });
    const count = values.requests === undefined ? 400 : Number(values.requests);
    if (!Number.isSafeInteger(count) || count < 1) {
      console.error('tiersync demo: --requests must be a positive integer');
      return 2;
    }
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-demo-'));
    if (!values.json) {
      console.log('== this machine ==');
      console.log(formatReport(probeMachine(dir)));
    }
    const trace = readMooncake(TRACE);
    const requests = trace.requests.slice(0, count);
    const maxPages = Math.max(...requests.map((r) => r.pages.length));
    const ts = new TierSync({
      model: 'tiersync-demo/tiny-llama@1',
      layout: LAYOUT,
      tiers: [
        { url: 'hbm://sim?capacity=64MiB', name: 'hbm', highWatermark: 0.95, lowWatermark: 0.8 },
        { url: 'host://?capacity=256MiB', name: 'host', highWatermark: 0.95, lowWatermark: 0.8 },
        { url: `fs://${dir}/fs?capacity=4GiB`, name: 'fs' },
      ],
      index: { path: path.join(dir, 'index.sqlite') },
    });
    const events = { demoted: 0, evicted: 0, promoted: 0, integrity: 0 };
    ts.on('block:demoted', (e) => (events.demoted += e.keys.length));
    ts.on('block:evicted', (e) => (events.evicted += e.keys.length));
    ts.on('block:promoted', (e) => (events.promoted += e.keys.length));
    ts.on('integrity:failed', () => events.integrity++);
    if (!values.json) {
      console.log(`\n== replaying ${requests.length} requests of ${path.basename(TRACE)} (${formatBytes(ts.pageBytes)} pages, 512 tokens each) ==`);
    }
    await ts.open();
    // The engine's KV memory for one request.
    const kv = HostArena.create({ capacity: maxPages * ts.pageBytes, prefault: true });
    const totals = { pages: 0, hitPages: 0, loadedBytes: 0, loadSeconds: 0, stored: 0, badPages: 0, missing: 0, byTier: {} as Record<string, number> };
    const started = process.hrtime.bigint();
    try {
      for (const [n, req] of requests.entries()) {
        const tokens = new Uint32Array(req.pages.length * 512);
        req.pages.forEach((block, i) => blockTokens(block, tokens, i * 512));
        const pages = req.pages.length;
        const slots = Array.from({ length: pages }, (_, i) => ({ arena: kv, offset: i * ts.pageBytes, length: ts.pageBytes }));
        const hit = ts.lookup(tokens);
        let loaded = new Set<number>();
        if (hit.pages.length) {
          const t = process.hrtime.bigint();
          const r = await ts.load(hit, slots);
          totals.loadSeconds += Number(process.hrtime.bigint() - t) / 1e9;
          totals.loadedBytes += r.bytes;
          totals.missing += r.missing.length;
          for (const [tier, k] of Object.entries(r.byTier)) totals.byTier[tier] = (totals.byTier[tier] ?? 0) + k;
          loaded = new Set(hit.pages.map((_, i) => i).filter((i) => !r.missing.includes(i)));
          for (const i of loaded) if (!pageMatches(kv.view(i * ts.pageBytes, ts.pageBytes), hit.keys[i]!)) totals.badPages++;
        }
        // "Prefill" the pages that were not loaded, then store the whole prompt (stored pages are skipped).
        for (let i = 0; i < pages; i++) if (!loaded.has(i)) fillPage(kv.view(i * ts.pageBytes, ts.pageBytes), hit.keys[i]!);
        const s = await ts.store(tokens, slots);
        totals.stored += s.stored;
        totals.pages += pages;
        totals.hitPages += loaded.size;
        progress(n + 1, requests.length, `hit ${round((100 * totals.hitPages) / totals.pages, 1)}% of pages`);
      }
      await ts.flush();
    } finally {
      kv.close();
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const stats = ts.stats();
    await ts.close();
    rmSync(dir, { recursive: true, force: true });
    const report = {
      requests: requests.length,
      pagesRequested: totals.pages,
      pagesLoaded: totals.hitPages,
      pageHitRatio: round(totals.hitPages / totals.pages, 4),
      prefillTokensSaved: totals.hitPages * 512,
      loadedBytes: totals.loadedBytes,
      loadGiBps: round(totals.loadedBytes / GiB / Math.max(totals.loadSeconds, 1e-9), 3),
      pagesStored: totals.stored,
      hitsByTier: totals.byTier,
      tiers: stats.tiers.map((t) => ({ name: t.name, usedPages: t.usedPages, capacityPages: t.capacityPages, bytesWritten: t.bytesWritten, bytesRead: t.bytesRead, checksumFailures: t.checksumFailures })),
      events,
      corruptPagesServed: totals.badPages,
      seconds: round(seconds, 2),
    };
    if (values.json) {
      console.log(JSON.stringify(report));
    } else {
      console.log(`\npages requested ${report.pagesRequested}, loaded from cache ${report.pagesLoaded} (${round(report.pageHitRatio * 100, 1)}%), stored ${report.pagesStored}`);
      console.log(`prefill tokens saved: ${report.prefillTokensSaved.toLocaleString('en-US')}`);
      console.log(`loads: ${formatBytes(report.loadedBytes)} at ${report.loadGiBps} GiB/s; hits by tier: ${Object.entries(report.hitsByTier).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`);
      console.log('tier     used/capacity pages   written      read');
      for (const t of report.tiers) {
        console.log(`${t.name.padEnd(8)} ${`${t.usedPages}/${t.capacityPages}`.padStart(20)}   ${formatBytes(t.bytesWritten).padStart(10)} ${formatBytes(t.bytesRead).padStart(10)}`);
      }
      console.log(`moves: ${events.demoted} pages demoted, ${events.evicted} evicted from a tier, ${events.promoted} promoted; integrity failures ${events.integrity}`);
      console.log(`every loaded page matched its bytes: ${totals.badPages === 0 ? 'yes' : `NO (${totals.badPages} bad)`}; ${round(seconds, 1)} s`);
    }
    return totals.badPages === 0 ? 0 : 1;
  },
};


