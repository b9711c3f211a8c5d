/**
 * The self-contained HTML report: inline CSS and inline SVG charts (report/svg.ts), no script and no external
 * resource, so it opens offline and renders the same everywhere.
 */
import type { ExactResult } from '../exact.js';
import type { MrcResult } from '../mrc/curves.js';
import type { TieredResult } from '../tiered.js';
import { formatSize } from '../units.js';
import { DISTINCT_SERIES, esc, renderLineChart, type Series } from './svg.js';

/** What a report shows. */
export interface ReportInput {
  title: string;
  /** Lines describing the run (trace, options). */
  notes: string[];
  exact?: readonly ExactResult[];
  tiered?: readonly TieredResult[];
  /** Miss-ratio curves (`tiersync sim --mrc`). */
  mrc?: MrcResult;
}

/**
 * Policies that are bounds rather than policies: drawn dashed as "OPT (bound)". Belady's `opt` and `opt-size`
 * come from the policy registry when they are registered; any result under these names is drawn as the bound.
 */
const BOUNDS: Record<string, string> = { opt: 'OPT (Belady bound)', 'opt-size': 'OPT-size (bound)' };
const isBound = (policy: string) => policy in BOUNDS;
const seriesName = (policy: string) => BOUNDS[policy] ?? policy;

const pct = (v: number) => `${(v * 100).toFixed(1)}%`;
const secs = (v: number) => (v >= 1 ? `${v.toFixed(2)} s` : `${(v * 1000).toFixed(1)} ms`);

function groupBy<T>(items: readonly T[], key: (t: T) => string): Map<string, T[]> {
  const m = new Map<string, T[]>();
  for (const it of items) {
    const k = key(it);
    const list = m.get(k) ?? [];
    list.push(it);
    m.set(k, list);
  }
  return m;
}

function table(header: string[], rows: string[][]): string {
  return `<table><thead><tr>${header.map((h) => `<th>${esc(h)}</th>`).join('')}</tr></thead><tbody>${rows
    .map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`)
    .join('')}</tbody></table>`;
}

function exactSection(results: readonly ExactResult[]): string {
  const byObjects = results.some((r) => r.capacityObjects !== null);
  const cap = (r: ExactResult) => (byObjects ? r.capacityObjects : r.capacityBytes);
  const finite = results.filter((r) => cap(r) !== null);
  const caps = finite.map((r) => cap(r)!);
  const xLog = caps.length > 0 && Math.max(...caps) / Math.min(...caps) > 10;
  const series: Series[] = [...groupBy(finite, (r) => r.policy)].map(([policy, rs]) => ({
    name: seriesName(policy),
    dashed: isBound(policy),
    points: rs.map((r) => [cap(r)!, r.requests ? r.misses / r.requests : 0] as [number, number]).sort((a, b) => a[0] - b[0]),
  }));
  const xTicks = [...new Set(caps)];
  const xFormat = byObjects ? (v: number) => String(Math.round(v)) : (v: number) => formatSize(v);
  let html = `<h2>Exact mode</h2>`;
  html += renderLineChart({ id: 'miss-ratio', title: 'Miss ratio against capacity', xLabel: byObjects ? 'capacity (objects)' : 'capacity (bytes)', yLabel: 'miss ratio', series, xLog, xFormat, yFormat: (v) => v.toFixed(2), ...(xTicks.length <= 12 ? { xTicks } : {}) });
  if (results.some((r) => r.prefixPageHitRatio !== undefined)) {
    const pseries: Series[] = [...groupBy(finite, (r) => r.policy)].map(([policy, rs]) => ({
      name: seriesName(policy),
      dashed: isBound(policy),
      points: rs.map((r) => [cap(r)!, r.prefixPageHitRatio ?? 0] as [number, number]).sort((a, b) => a[0] - b[0]),
    }));
    const ceiling = results.find((r) => cap(r) === null && r.prefixPageHitRatio !== undefined);
    if (ceiling && caps.length) pseries.push({ name: 'unbounded (ceiling)', dashed: true, points: [[Math.min(...caps), ceiling.prefixPageHitRatio!], [Math.max(...caps), ceiling.prefixPageHitRatio!]] });
    html += renderLineChart({ id: 'prefix-hit-ratio', title: 'Prefix page hit ratio against capacity', xLabel: byObjects ? 'capacity (objects)' : 'capacity (bytes)', yLabel: 'prefix page hit ratio', series: pseries, xLog, xFormat, yFormat: (v) => v.toFixed(2), ...(xTicks.length <= 12 ? { xTicks } : {}) });
  }
  html += table(
    ['policy', 'capacity', 'requests', 'misses', 'miss ratio', 'byte miss ratio', 'prefix page hit ratio'],
    results.map((r) => [
      r.policy,
      cap(r) === null ? 'inf' : byObjects ? String(cap(r)) : formatSize(cap(r)!),
      String(r.requests),
      String(r.misses),
      r.requests ? pct(r.misses / r.requests) : '-',
      r.bytesRequested ? pct(r.bytesMissed / r.bytesRequested) : '-',
      r.prefixPageHitRatio === undefined ? '-' : pct(r.prefixPageHitRatio),
    ]),
  );
  return html;
}

/**
 * The swept dimension: the tier (by name) whose capacity differs between results, a tier absent from a run
 * counting as 0 bytes (`--host 0` leaves the host tier out). Falls back to the last tier when nothing differs.
 */
export function sweptTier(results: readonly TieredResult[]): { name: string; capacityOf: (r: TieredResult) => number } {
  const names = [...new Set(results.flatMap((r) => r.tiers.map((t) => t.name)))];
  const capacityOf = (name: string) => (r: TieredResult) => r.tiers.find((t) => t.name === name)?.capacityBytes ?? 0;
  for (const name of names) {
    const of = capacityOf(name);
    const first = of(results[0]!);
    if (results.some((r) => of(r) !== first)) return { name, capacityOf: of };
  }
  const last = results[0]!.tiers.at(-1)!.name;
  return { name: last, capacityOf: capacityOf(last) };
}

function tieredSection(results: readonly TieredResult[]): string {
  if (results.length === 0) return '';
  const swept = sweptTier(results);
  const tierName = swept.name;
  const byPolicy = [...groupBy(results, (r) => r.policy)];
  const cap = swept.capacityOf;
  const all = results.map(cap);
  const caps = all.filter((c) => c > 0);
  // A log axis cannot show 0 (no host tier): linear whenever 0 is swept.
  const xLog = caps.length === all.length && caps.length > 0 && Math.max(...caps) / Math.min(...caps) > 10;
  const xTicks = [...new Set(all)];
  const tickOpt = xTicks.length <= 12 ? { xTicks } : {};
  const short = (r: TieredResult) => `${r.policy} ${tierName}=${formatSize(cap(r))}`;
  let html = '<h2>Tiered model</h2>';
  html += renderLineChart({
    id: 'hit-ratio-curve',
    title: `Page hit ratio against ${tierName} capacity`,
    xLabel: `${tierName} capacity`,
    yLabel: 'prefix page hit ratio',
    series: byPolicy.map(([p, rs]) => ({ name: p, points: rs.map((r) => [cap(r), r.pageHitRatio] as [number, number]).sort((a, b) => a[0] - b[0]) })),
    xLog,
    xFormat: formatSize,
    yFormat: (v) => v.toFixed(2),
    ...tickOpt,
  });
  html += renderLineChart({
    id: 'ttft-p50-curve',
    title: `TTFT p50 against ${tierName} capacity (dashed: no cache)`,
    xLabel: `${tierName} capacity`,
    yLabel: 'TTFT p50 (s)',
    series: [
      ...byPolicy.map(([p, rs]) => ({ name: p, points: rs.map((r) => [cap(r), r.ttft.p50] as [number, number]).sort((a, b) => a[0] - b[0]) })),
      { name: 'no cache', dashed: true, points: results.map((r) => [cap(r), r.noCacheTtft.p50] as [number, number]).sort((a, b) => a[0] - b[0]) },
    ],
    xLog,
    xFormat: formatSize,
    ...tickOpt,
  });
  // Every run while each can have a style of its own (one is the no-cache line); past that the first ones, and
  // the title says so (the table below lists every run).
  const shown = results.slice(0, DISTINCT_SERIES - 1);
  html += renderLineChart({
    id: 'ttft-cdf',
    title: `TTFT distribution (CDF)${shown.length < results.length ? `: first ${shown.length} of ${results.length} runs (all in the table)` : ''}`,
    xLabel: 'TTFT (s)',
    yLabel: 'fraction of requests',
    series: [
      ...shown.map((r) => ({ name: short(r), points: r.ttftPercentiles.map((v, i) => [v, i / 100] as [number, number]) })),
      { name: 'no cache', dashed: true, points: results[0]!.noCacheTtftPercentiles.map((v, i) => [v, i / 100] as [number, number]) },
    ],
    yFormat: (v) => v.toFixed(1),
  });
  for (const [policy, rs] of byPolicy) {
    const r = rs.reduce((a, b) => (cap(b) > cap(a) ? b : a));
    html += renderLineChart({
      id: `occupancy-${policy}`,
      title: `Tier occupancy over time: ${short(r)}`,
      xLabel: 'time (s)',
      yLabel: 'GiB used',
      series: r.tiers.map((tier, i) => ({ name: tier.name, points: r.occupancy.timeMs.map((ms, k) => [ms / 1000, r.occupancy.usedBytes[i]![k]! / 2 ** 30] as [number, number]) })),
    });
  }
  html += table(
    ['run', 'page hit', 'token hit', 'per tier (found pages)', 'TTFT p50', 'p90', 'p99', 'no cache p50', 'p90', 'p99', 'mean reduction'],
    results.map((r) => [
      r.label,
      pct(r.pageHitRatio),
      pct(r.tokenHitRatio),
      r.tiers.map((x) => `${x.name} ${pct(x.pageHitRatio)}`).join(', '),
      secs(r.ttft.p50), secs(r.ttft.p90), secs(r.ttft.p99),
      secs(r.noCacheTtft.p50), secs(r.noCacheTtft.p90), secs(r.noCacheTtft.p99),
      pct(r.ttftReductionMean),
    ]),
  );
  html += table(
    ['run', ...results[0]!.tiers.flatMap((x) => [`${x.name} capacity`, `${x.name} read`, `${x.name} written`])],
    results.map((r) => [r.label, ...r.tiers.flatMap((x) => [formatSize(x.capacityBytes), formatSize(x.readBytes), formatSize(x.writeBytes)])]),
  );
  return html;
}

/** The miss-ratio curves, with the OPT bound from exact results when a sweep ran `opt` / `opt-size`. */
function mrcSection(mrc: MrcResult, exact: readonly ExactResult[] | undefined): string {
  const objects = mrc.unit === 'objects';
  const series: Series[] = mrc.curves.map((c) => ({
    name: `${c.policy} (${c.method === 'stack-distance' ? 'exact, stack distances' : `SHARDS ${+(c.sampleRate * 100).toPrecision(3)}%`})`,
    points: c.points.map((p) => [p.capacity, p.missRatio] as [number, number]),
  }));
  for (const [policy, rs] of groupBy((exact ?? []).filter((r) => isBound(r.policy)), (r) => r.policy)) {
    const cap = (r: ExactResult) => (objects ? r.capacityObjects : r.capacityBytes);
    series.push({ name: seriesName(policy), dashed: true, points: rs.filter((r) => cap(r) !== null).map((r) => [cap(r)!, r.requests ? r.misses / r.requests : 0] as [number, number]).sort((a, b) => a[0] - b[0]) });
  }
  const caps = mrc.curves.flatMap((c) => c.points.map((p) => p.capacity));
  const xLog = caps.length > 0 && Math.max(...caps) / Math.min(...caps) > 10;
  let html = '<h2>Miss-ratio curves</h2>';
  const about = mrc.estimated ? '~' : '';
  const footprint = objects ? `${Math.round(mrc.footprint)} objects` : formatSize(mrc.footprint);
  html += `<p>${mrc.requests} requests, ${about}${mrc.distinct} distinct, footprint ${about}${footprint}${mrc.estimated ? ' (estimates, scaled up from the sampled LRU pass)' : ''}.</p>`;
  html += renderLineChart({ id: 'mrc', title: 'Miss-ratio curves', xLabel: objects ? 'capacity (objects)' : 'capacity (bytes)', yLabel: 'miss ratio', series, xLog, xFormat: objects ? (v) => String(Math.round(v)) : formatSize, yFormat: (v) => v.toFixed(2) });
  const skipped = mrc.curves.flatMap((c) => (c.skipped ?? []).map((s) => [c.policy, objects ? String(s.capacity) : formatSize(s.capacity), s.reason]));
  html += table(['policy', 'method', 'sample rate', 'sampled requests', 'points'], mrc.curves.map((c) => [c.policy, c.method, String(c.sampleRate), String(c.sampledRequests), String(c.points.length)]));
  if (skipped.length) html += table(['policy', 'capacity left out', 'why'], skipped);
  return html;
}

/** Renders the whole report as one HTML document. */
export function renderHtml(input: ReportInput): string {
  const css = `body{font:14px/1.45 system-ui,sans-serif;margin:24px;max-width:1100px;color:#222}
svg.chart{width:100%;max-width:760px;height:auto;display:block;margin:16px 0;border:1px solid #eee}
svg .title{font-size:14px;font-weight:600}svg .tick,svg .legend{font-size:11px}svg .axis{font-size:12px}
table{border-collapse:collapse;margin:12px 0;font-size:12px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}code{background:#f4f4f4;padding:1px 4px}`;
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(input.title)}</title><style>${css}</style></head>
<body><h1>${esc(input.title)}</h1>
<ul>${input.notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul>
${input.exact?.length ? exactSection(input.exact) : ''}
${input.mrc ? mrcSection(input.mrc, input.exact) : ''}
${input.tiered?.length ? tieredSection(input.tiered) : ''}
<p>Generated by <code>tiersync sim</code>. Model assumptions: docs/SIMULATION.md.</p>
</body></html>
`;
}
