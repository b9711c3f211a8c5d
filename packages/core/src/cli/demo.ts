import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { probeMachine } from '@tiersync/native';
import { TierSyncError } from '@tiersync/native/errors';
import { replayLive } from '../replay/index.js';
import { bundledTrace, countersLine, formatSize, readMooncake, round, workloadPages } from '../sim/index.js';
import { formatReport } from './doctor.js';
import type { Command } from './command.js';
import { demoConfigPath, loadReplayConfig } from './replay-config.js';

const usage = `Usage: tiersync demo [--config FILE] [--requests N] [--json]

Starts an embedded hierarchy and replays the first N requests (default 400) of the bundled Mooncake conversation
trace with real bytes: each request looks up its prompt's cached prefix, loads it, "computes" the pages that were
not cached, and stores them; background moves are drained after each step. Prints per-tier hits, bytes moved, load
throughput and the prefill tokens saved.

  --config FILE   hierarchy config, YAML or JSON, as TierSync and \`tiersync serve\` take it; \`{tmp}\` in tier URLs
                  and the index path is a temporary folder removed at exit. Default: the package's configs/demo.yaml
                  (sim HBM 64 MiB, host RAM 256 MiB, an fs tier). The layout's tokensPerPage must divide 512.
  --requests N    requests to replay (default 400)
  --json          print the report as JSON; the last line is {"counters":{...}}, the same object
                  \`tiersync sim --config FILE --json\` prints for the same config and requests`;

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
    const { values } = parseArgs({ args, options: { config: { type: 'string' }, requests: { type: 'string' }, json: { type: 'boolean' } } });
    const count = values.requests === undefined ? 400 : Number(values.requests);
    if (!Number.isSafeInteger(count) || count < 1) throw new TierSyncError(`--requests must be a positive integer, got '${values.requests}'`, 'ERR_INVALID_ARGUMENT');
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-demo-'));
    try {
      const config = loadReplayConfig(values.config ?? demoConfigPath(), dir);
      if (!values.json) {
        console.log('== this machine ==');
        console.log(formatReport(probeMachine(dir)));
      }
      const trace = readMooncake(bundledTrace());
      const tokensPerPage = typeof config.layout === 'string' ? config.tokensPerPage : Number((config.layout as { tokensPerPage?: unknown }).tokensPerPage ?? 16);
      const workload = workloadPages(trace, tokensPerPage, count);
      if (!values.json) {
        console.log(`\n== replaying ${workload.pages.length} requests of ${path.basename(bundledTrace())} through ${config.tiers.map((t) => t.name ?? t.url.split(':')[0]).join(' > ')} (${tokensPerPage}-token pages) ==`);
      }
      const r = await replayLive({
        config,
        workload,
        onRequest: (done, total, loaded, requested) => progress(done, total, `hit ${round((100 * loaded) / Math.max(1, requested), 1)}% of pages`),
      });
      const report = {
        requests: r.counters.requests,
        pagesRequested: r.pagesRequested,
        pagesLoaded: r.pagesLoaded,
        pageHitRatio: round(r.pagesLoaded / Math.max(1, r.pagesRequested), 4),
        prefillTokensSaved: r.pagesLoaded * tokensPerPage,
        loadedBytes: r.loadedBytes,
        loadGiBps: round(r.loadedBytes / 2 ** 30 / Math.max(r.loadSeconds, 1e-9), 3),
        pagesStored: r.pagesStored,
        hitsByTier: r.loadsByTier,
        tiers: r.tiers,
        integrityFailures: r.integrityFailures,
        corruptPagesServed: r.corruptPagesServed,
        seconds: round(r.seconds, 2),
      };
      const moves = (f: 'demotions' | 'evictions' | 'promotions') => r.counters.tiers.reduce((s, t) => s + t[f], 0);
      if (values.json) {
        console.log(JSON.stringify(report));
        console.log(countersLine(r.counters));
      } else {
        console.log(`\npages requested ${report.pagesRequested}, loaded from cache ${report.pagesLoaded} (${round(report.pageHitRatio * 100, 1)}%), stored ${report.pagesStored}`);
        console.log(`prefill tokens saved: ${report.prefillTokensSaved.toLocaleString('en-US')}`);
        console.log(`loads: ${formatSize(report.loadedBytes)} at ${report.loadGiBps} GiB/s; hits by tier: ${Object.entries(report.hitsByTier).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`);
        console.log('tier     used/capacity pages   written      read');
        for (const t of report.tiers) {
          console.log(`${t.name.padEnd(8)} ${`${t.usedPages}/${t.capacityPages}`.padStart(20)}   ${formatSize(t.bytesWritten).padStart(10)} ${formatSize(t.bytesRead).padStart(10)}`);
        }
        console.log(`moves: ${moves('demotions')} pages demoted, ${moves('evictions')} evicted from a tier, ${moves('promotions')} promoted; integrity failures ${r.integrityFailures}`);
        console.log(`every loaded page matched its bytes: ${r.corruptPagesServed === 0 ? 'yes' : `NO (${r.corruptPagesServed} bad)`}; ${round(r.seconds, 1)} s`);
      }
      return r.corruptPagesServed === 0 ? 0 : 1;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
