/** CSV output of sweep results: one row per job, a header first, RFC 4180 quoting. */
import type { ExactResult } from '../exact.js';
import type { TieredResult } from '../tiered.js';

function cell(v: unknown): string {
  const s = v === null || v === undefined ? '' : String(v);
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

function toCsv(header: string[], rows: unknown[][]): string {
  return [header, ...rows].map((r) => r.map(cell).join(',')).join('\n') + '\n';
}

/** Exact-mode rows. */
export function exactCsv(results: readonly ExactResult[]): string {
  return toCsv(
    ['policy', 'capacityBytes', 'capacityObjects', 'requests', 'misses', 'missRatio', 'bytesRequested', 'bytesMissed', 'byteMissRatio', 'prefixPageHitRatio'],
    results.map((r) => [
      r.policy, r.capacityBytes, r.capacityObjects, r.requests, r.misses, r.requests ? r.misses / r.requests : '',
      r.bytesRequested, r.bytesMissed, r.bytesRequested ? r.bytesMissed / r.bytesRequested : '', r.prefixPageHitRatio,
    ]),
  );
}

/** Tiered-mode rows; tier columns are `<tier>.capacityBytes`, `<tier>.pageHitRatio`, `<tier>.readBytes`, `<tier>.writeBytes`. */
export function tieredCsv(results: readonly TieredResult[]): string {
  const tierNames = [...new Set(results.flatMap((r) => r.tiers.map((t) => t.name)))];
  const header = [
    'label', 'policy', 'model', 'accelerator', 'chips', 'pageBytes', 'requests', 'pages', 'requestHitRatio', 'pageHitRatio', 'tokenHitRatio',
    'ttftMeanSec', 'ttftP50Sec', 'ttftP90Sec', 'ttftP99Sec', 'noCacheMeanSec', 'noCacheP50Sec', 'noCacheP90Sec', 'noCacheP99Sec',
    'ttftReductionMean', 'ttftReductionP50',
    ...tierNames.flatMap((n) => [`${n}.capacityBytes`, `${n}.pageHitRatio`, `${n}.readBytes`, `${n}.writeBytes`]),
  ];
  const rows = results.map((r) => [
    r.label, r.policy, r.model, r.accelerator, r.chips, r.pageBytes, r.requests, r.pages, r.requestHitRatio, r.pageHitRatio, r.tokenHitRatio,
    r.ttft.mean, r.ttft.p50, r.ttft.p90, r.ttft.p99, r.noCacheTtft.mean, r.noCacheTtft.p50, r.noCacheTtft.p90, r.noCacheTtft.p99,
    r.ttftReductionMean, r.ttftReductionP50,
    ...tierNames.flatMap((n): unknown[] => {
      const t = r.tiers.find((x) => x.name === n);
      return t ? [t.capacityBytes, t.pageHitRatio, t.readBytes, t.writeBytes] : ['', '', '', ''];
    }),
  ]);
  return toCsv(header, rows);
}
