import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runExact } from '../exact.js';
import { STORAGE } from '../model/presets.js';
import { runTiered } from '../tiered.js';
import { generateMultiRoundQa } from '../trace/multi-round-qa.js';
import { exactCsv, tieredCsv } from './csv.js';
import { renderHtml } from './html.js';
import { renderLineChart } from './svg.js';
import { requireTools } from '../../../../../scripts/system-packages.mjs';
import { planSim } from '../../cli/index.js';
import { missRatioCurves } from '../mrc/curves.js';
import { traceChunks } from '../mrc/sources.js';
import { runSweep } from '../sweep.js';
import type { TieredResult } from '../tiered.js';
import { sweptTier } from './html.js';

// Every page and Chromium profile of these tests goes under one folder, removed at the end (a profile is ~5 MB).
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-report-'));
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }));

const CHROMIUM = '/usr/bin/chromium';
const qa = generateMultiRoundQa({ users: 6, rounds: 4, historyTokens: 4096 });
const exact = ['lru', 'fifo'].flatMap((policy) => [5, 20, Infinity].map((capacity) => runExact(qa, { policy, unit: 'objects', capacity })));
const hbm = { name: 'hbm', capacityBytes: 2 * 2 ** 30, readBytesPerSec: 0, writeBytesPerSec: 0, latencySec: 0, parallelism: 1 };
const tiered = [2, 8].map((gib) =>
  runTiered(qa, { policy: 'lru', model: 'llama-3-8b', accelerator: 'h100', compute: { chips: 1 }, tiers: [hbm, { name: 'host', ...STORAGE.host!, capacityBytes: gib * 2 ** 30 }] }),
);
const mrc = missRatioCurves(() => traceChunks(qa, 1), { policies: ['lru', 'fifo'], unit: 'objects', points: 6, sampleRate: 0.5 });
const html = renderHtml({ title: 'test <report>', notes: ['a & b'], exact, tiered, mrc });

const CHROME_FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'];

/**
 * Opens `page` in headless Chromium with a script appended that measures the laid-out charts, and returns what it
 * measured: per chart, its x-axis label, its x tick labels, and the legend texts whose box leaves the chart.
 */
function measure(page: string): Record<string, { xLabel: string; xTicks: string[]; legends: string[]; outside: string[] }> {
  const probe = `<pre id="probe"></pre><script>
const out = {};
for (const svg of document.querySelectorAll('svg.chart')) {
  const vb = svg.viewBox.baseVal;
  const outside = [];
  for (const t of svg.querySelectorAll('text')) {
    // The text's box in the chart's user units, its own transform (the rotated y label) applied.
    const b = t.getBBox();
    const m = svg.getScreenCTM().inverse().multiply(t.getScreenCTM());
    const xs = [], ys = [];
    for (const [x, y] of [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]]) {
      xs.push(m.a * x + m.c * y + m.e);
      ys.push(m.b * x + m.d * y + m.f);
    }
    if (Math.min(...xs) < vb.x - 0.5 || Math.min(...ys) < vb.y - 0.5 || Math.max(...xs) > vb.x + vb.width + 0.5 || Math.max(...ys) > vb.y + vb.height + 0.5) outside.push(t.textContent);
  }
  out[svg.dataset.chart] = {
    xLabel: svg.querySelector('text.axis.x')?.textContent ?? '',
    xTicks: [...svg.querySelectorAll('text.tick.x')].map((t) => t.textContent),
    legends: [...svg.querySelectorAll('text.legend')].map((t) => t.textContent),
    outside,
  };
}
document.getElementById('probe').textContent = JSON.stringify(out);
</script>`;
  const dir = fs.mkdtempSync(path.join(scratch, 'page-'));
  const file = path.join(dir, 'probe.html');
  fs.writeFileSync(file, page.replace('</body>', `${probe}</body>`));
  const dom = execFileSync(CHROMIUM, [...CHROME_FLAGS, `--user-data-dir=${path.join(dir, 'profile')}`, '--virtual-time-budget=5000', '--dump-dom', `file://${file}`], {
    encoding: 'utf8',
    timeout: 60_000,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const m = /<pre id="probe">([^<]*)<\/pre>/.exec(dom);
  if (!m) throw new Error('the probe did not run');
  return JSON.parse(m[1]!.replace(/&quot;/g, '"').replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&')) as ReturnType<typeof measure>;
}
const CHARTS = ['mrc', 'miss-ratio', 'prefix-hit-ratio', 'hit-ratio-curve', 'ttft-p50-curve', 'ttft-cdf', 'occupancy-lru'];

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
    const dir = fs.mkdtempSync(path.join(scratch, 'page-'));
    const file = path.join(dir, 'report.html');
    fs.writeFileSync(file, html);
    const dom = execFileSync(
      CHROMIUM,
      ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run', `--user-data-dir=${path.join(dir, 'profile')}`, '--dump-dom', `file://${file}`],
      { encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'ignore'] },
    );
    for (const id of CHARTS) expect(dom).toMatch(new RegExp(`<svg[^>]*data-chart="${id}"`));
    expect(dom).toContain('lru (exact, stack distances)');
    expect(dom).toContain('fifo (SHARDS 50%)');
    // every drawn series has points in the rendered DOM
    const polylines = [...dom.matchAll(/<polyline[^>]*points="([^"]*)"/g)].map((m) => m[1]!);
    expect(polylines.length).toBeGreaterThanOrEqual(10);
    for (const p of polylines) expect(p.split(' ').length).toBeGreaterThanOrEqual(2);
    const shot = path.join(dir, 'shot.png');
    execFileSync(CHROMIUM, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run', `--user-data-dir=${path.join(dir, 'profile2')}`, `--screenshot=${shot}`, '--window-size=1200,2400', `file://${file}`], { timeout: 60_000, stdio: 'ignore' });
    expect(fs.statSync(shot).size).toBeGreaterThan(20_000);
  });

  it('a host-capacity sweep is drawn against host capacity, its legends inside the charts (headless Chromium)', async () => {
    requireTools(['chromium']);
    // The command a new user tried: host swept, filestore fixed (tiny workload so the test is quick).
    const { plan } = planSim(['--workload', 'multi-round-qa', '--users', '4', '--rounds', '3', '--model', 'qwen3-235b-a22b', '--host', '0,256GiB,1TiB', '--storage', 'filestore:10TiB', '--policy', 'lru,s3fifo']);
    const results = (await runSweep({ source: plan.source, jobs: plan.jobs, threads: 1 })).map((r) => r.result as TieredResult);
    expect(sweptTier(results).name).toBe('host');
    const page = renderHtml({ title: 'host sweep', notes: [], tiered: results });
    const charts = measure(page);
    for (const id of ['hit-ratio-curve', 'ttft-p50-curve']) {
      expect(charts[id]!.xLabel).toBe('host capacity');
      expect(charts[id]!.xTicks).toEqual(['0 B', '256 GiB', '1 TiB']);
    }
    expect(charts['ttft-cdf']!.legends).toContain('s3fifo host=256 GiB');
    for (const [id, c] of Object.entries(charts)) expect(c.outside, `${id}: text outside the chart`).toEqual([]);
    // Long legend names wrap instead of running off the chart.
    const long = renderLineChart({ id: 'long', title: 't', xLabel: 'x', yLabel: 'y', series: Array.from({ length: 9 }, (_, i) => ({ name: `policy-${i} ${'with a very long description of its settings '.repeat(2)}`, points: [[1, 1], [2, 2]] as Array<[number, number]> })) });
    expect(measure(`<!DOCTYPE html><html><body>${long}</body></html>`).long!.outside).toEqual([]);
  }, 120_000);

  it('an exact sweep up to 100000 objects keeps its last x tick inside the chart (headless Chromium)', () => {
    requireTools(['chromium']);
    // The sweep a tester drew: the last tick ("100000") sits 16 units from the right edge and was cut off there.
    const sweep = ['lru', 'fifo'].flatMap((policy) => [10, 1000, 100_000].map((capacity) => ({ ...runExact(qa, { policy, unit: 'objects', capacity }) })));
    const charts = measure(renderHtml({ title: 'wide sweep', notes: [], exact: sweep }));
    expect(charts['miss-ratio']!.xTicks).toEqual(['10', '1000', '100000']);
    for (const [id, c] of Object.entries(charts)) expect(c.outside, `${id}: text outside the chart`).toEqual([]);
  }, 120_000);

  it('every series of a chart is drawn in a style of its own, past the 10 colours', () => {
    const series = Array.from({ length: 24 }, (_, i) => ({ name: `p${i}`, dashed: i % 5 === 4, points: [[1, i], [2, i + 1]] as Array<[number, number]> }));
    const svg = renderLineChart({ id: 'many', title: 't', xLabel: 'x', yLabel: 'y', series });
    const style = (tag: string) => [...svg.matchAll(new RegExp(`<${tag}[^>]*stroke="([^"]+)" stroke-width="2"(?: stroke-dasharray="([^"]+)")?`, 'g'))].map((m) => `${m[1]} ${m[2] ?? 'solid'}`);
    const lines = style('polyline');
    expect(lines).toHaveLength(24);
    expect(new Set(lines).size).toBe(24);
    // The legend draws each series as the chart does, marker included.
    const entries = [...svg.matchAll(/<g class="legend-entry"[^>]*>(.*?)<\/g>/g)].map((m) => m[1]!);
    expect(entries.map((e) => /stroke="([^"]+)" stroke-width="2"(?: stroke-dasharray="([^"]+)")?/.exec(e)!).map((m) => `${m[1]} ${m[2] ?? 'solid'}`)).toEqual(lines);
    expect(entries.map((e) => /class="marker"/.test(e))).toEqual(Array(24).fill(true));
    expect(new Set(entries.map((e) => /<(circle|rect|polygon) class="marker"/.exec(e)![1])).size).toBe(3);
  });

  it('the TTFT CDF draws every run, or says in its title which it left out', () => {
    const many = (n: number) => Array.from({ length: n }, (_, i) => ({ ...tiered[i % 2]!, policy: `p${i}`, label: `p${i}` }));
    const legends = (page: string) => [.../<svg[^>]*data-chart="ttft-cdf".*?<\/svg>/s.exec(page)![0].matchAll(/<g class="legend-entry" data-series="([^"]+)"/g)].map((m) => m[1]);
    const twelve = renderHtml({ title: 't', notes: [], tiered: many(12) });
    expect(legends(twelve)).toHaveLength(13); // 12 runs and the no-cache line
    expect(twelve).toContain('aria-label="TTFT distribution (CDF)"');
    const sixty = renderHtml({ title: 't', notes: [], tiered: many(60) });
    expect(legends(sixty)).toHaveLength(40);
    expect(sixty).toContain('TTFT distribution (CDF): first 39 of 60 runs (all in the table)');
  });
});
