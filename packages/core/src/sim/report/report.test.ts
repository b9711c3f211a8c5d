import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runExact } from '../exact.js';
import { STORAGE } from '../model/presets.js';
import { runTiered } from '../tiered.js';
import { generateMultiRoundQa } from '../trace/multi-round-qa.js';
import { exactCsv, tieredCsv } from './csv.js';
import { renderHtml } from './html.js';
import { renderLineChart } from './svg.js';
import { requireTools } from '../../../../../scripts/system-packages.mjs';

const CHROMIUM = '/usr/bin/chromium';
const qa = generateMultiRoundQa({ users: 6, rounds: 4, historyTokens: 4096 });
const exact = ['lru', 'fifo'].flatMap((policy) => [5, 20, Infinity].map((capacity) => runExact(qa, { policy, unit: 'objects', capacity })));
const hbm = { name: 'hbm', capacityBytes: 2 * 2 ** 30, readBytesPerSec: 0, writeBytesPerSec: 0, latencySec: 0, parallelism: 1 };
const tiered = [2, 8].map((gib) =>
  runTiered(qa, { policy: 'lru', model: 'llama-3-8b', accelerator: 'h100', compute: { chips: 1 }, tiers: [hbm, { name: 'host', ...STORAGE.host!, capacityBytes: gib * 2 ** 30 }] }),
);
const html = renderHtml({ title: 'test <report>', notes: ['a & b'], exact, tiered });
const CHARTS = ['miss-ratio', 'prefix-hit-ratio', 'hit-ratio-curve', 'ttft-p50-curve', 'ttft-cdf', 'occupancy-lru'];

describe('reports', () => {
  it('svg charts carry one polyline per series and escape text', () => {
    const svg = renderLineChart({ id: 'x', title: 'a<b', xLabel: 'x', yLabel: 'y', series: [{ name: 's&1', points: [[1, 2], [2, 3]] }, { name: 's2', points: [[1, 1], [2, 0]], dashed: true }] });
    expect(svg.match(/<polyline class="series"/g)).toHaveLength(2);
    expect(svg).toContain('a&lt;b');
    expect(svg).toContain('data-series="s&amp;1"');
  });

  it('the HTML is self-contained and holds every chart', () => {
    for (const id of CHARTS) expect(html).toContain(`data-chart="${id}"`);
    expect(html).not.toMatch(/<script|<link|src=|href="http/);
    expect(html).toContain('test &lt;report&gt;');
  });

  it('CSV has a header and one row per result', () => {
    expect(exactCsv(exact).trim().split('\n')).toHaveLength(1 + exact.length);
    expect(tieredCsv(tiered).trim().split('\n')).toHaveLength(1 + tiered.length);
    expect(tieredCsv(tiered).split('\n')[0]).toContain('host.capacityBytes');
  });

  it('headless Chromium renders the charts', () => {
    requireTools(['chromium']);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-report-'));
    const file = path.join(dir, 'report.html');
    fs.writeFileSync(file, html);
    const dom = execFileSync(
      CHROMIUM,
      ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run', `--user-data-dir=${path.join(dir, 'profile')}`, '--dump-dom', `file://${file}`],
      { encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'ignore'] },
    );
    for (const id of CHARTS) expect(dom).toMatch(new RegExp(`<svg[^>]*data-chart="${id}"`));
    // every drawn series has points in the rendered DOM
    const polylines = [...dom.matchAll(/<polyline[^>]*points="([^"]*)"/g)].map((m) => m[1]!);
    expect(polylines.length).toBeGreaterThanOrEqual(10);
    for (const p of polylines) expect(p.split(' ').length).toBeGreaterThanOrEqual(2);
    const shot = path.join(dir, 'shot.png');
    execFileSync(CHROMIUM, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run', `--user-data-dir=${path.join(dir, 'profile2')}`, `--screenshot=${shot}`, '--window-size=1200,2400', `file://${file}`], { timeout: 60_000, stdio: 'ignore' });
    expect(fs.statSync(shot).size).toBeGreaterThan(20_000);
  });
});
