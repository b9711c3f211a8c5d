/**
 * Small inline SVG line charts for the HTML report: no library, no script, no network. Each chart is an `<svg>`
 * with `class="chart"` and a `data-chart` name, one `<polyline class="series">` per series, axes with ticks
 * (`class="tick x"` / `"tick y"`), an x-axis label (`class="axis x"`) and a legend (`class="legend"`) laid out
 * below the plot in as many rows as its entries need, so long labels are never cut off; a browser (or a test) can
 * see what was drawn. Every series of a chart looks different (up to {@link DISTINCT_SERIES}): once the colours
 * repeat, the stroke pattern and the point markers change.
 */

/** One line of a chart. */
export interface Series {
  name: string;
  /** [x, y] points; non-finite points are skipped. */
  points: Array<[number, number]>;
  /** Dashed stroke (e.g. for a baseline). */
  dashed?: boolean;
}

/** A line chart. */
export interface LineChart {
  /** Stable id, written to `data-chart`. */
  id: string;
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  /** Logarithmic x axis (capacities). Default false. */
  xLog?: boolean;
  /** Tick label formatters. */
  xFormat?: (v: number) => string;
  yFormat?: (v: number) => string;
  /** Force y to start at 0. Default true. */
  yZero?: boolean;
  /** Put the x ticks exactly at these values (e.g. the swept capacities) instead of round numbers. */
  xTicks?: number[];
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];
/**
 * Stroke patterns, in pairs per round of the colours: [solid series, dashed series] ('' = solid). Series `i` takes
 * colour `i % 10` and the pair of round `i / 10`, so two series of one colour always differ in pattern (and marker).
 */
const PATTERNS = ['', '6 4', '1 3', '6 3 1 3', '10 3 2 3 2 3', '2 6', '4 2 1 2 1 2 1 2', '12 4'];
const MARKERS = ['circle', 'square', 'triangle', 'diamond'] as const;

/** Series a chart can draw, each in a style of its own; beyond this, styles repeat. */
export const DISTINCT_SERIES = COLORS.length * (PATTERNS.length / 2);

/** Colour, stroke pattern and marker of series `i`. */
function seriesStyle(i: number, dashed: boolean): { color: string; dash: string; marker: (typeof MARKERS)[number] } {
  const round = Math.floor(i / COLORS.length) % (PATTERNS.length / 2);
  return { color: COLORS[i % COLORS.length]!, dash: PATTERNS[2 * round + (dashed ? 1 : 0)]!, marker: MARKERS[round % MARKERS.length]! };
}

/** A point marker centred on (x, y). */
function marker(shape: (typeof MARKERS)[number], x: number, y: number, color: string): string {
  const at = (dx: number, dy: number) => `${(x + dx).toFixed(1)},${(y + dy).toFixed(1)}`;
  if (shape === 'circle') return `<circle class="marker" cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="3" fill="${color}"/>`;
  if (shape === 'square') return `<rect class="marker" x="${(x - 2.7).toFixed(1)}" y="${(y - 2.7).toFixed(1)}" width="5.4" height="5.4" fill="${color}"/>`;
  const points = shape === 'triangle' ? [at(0, -3.5), at(3.5, 3), at(-3.5, 3)] : [at(0, -4), at(4, 0), at(0, 4), at(-4, 0)];
  return `<polygon class="marker" points="${points.join(' ')}" fill="${color}"/>`;
}

/** Escapes text for HTML/SVG. */
export function esc(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch]!);
}

function niceTicks(lo: number, hi: number, count: number): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

const fmt = (v: number) => (Math.abs(v) >= 1000 || (Math.abs(v) < 0.01 && v !== 0) ? v.toExponential(1) : String(Number(v.toPrecision(3))));

/** Legend and tick text metrics (11 px system-ui): an upper bound on the advance of one character. */
const LEGEND_CHAR = 6.6;
const LEGEND_ROW = 18;
const LEGEND_SWATCH = 28;

/** Lays legend entries out left to right in rows of at most `width` units; long names are wrapped. */
function legendLayout(names: string[], width: number): { rows: number; at: Array<{ x: number; row: number; lines: string[] }> } {
  const maxChars = Math.max(8, Math.floor((width - LEGEND_SWATCH) / LEGEND_CHAR));
  const at: Array<{ x: number; row: number; lines: string[] }> = [];
  let x = 0;
  let row = 0;
  for (const name of names) {
    const lines: string[] = [];
    for (let rest = name; rest.length > 0; ) {
      if (rest.length <= maxChars) {
        lines.push(rest);
        break;
      }
      const cut = rest.lastIndexOf(' ', maxChars);
      const end = cut > maxChars / 3 ? cut : maxChars;
      lines.push(rest.slice(0, end));
      rest = rest.slice(end).trimStart();
    }
    const w = LEGEND_SWATCH + Math.max(...lines.map((l) => l.length)) * LEGEND_CHAR + 16;
    if (x > 0 && x + w > width) {
      x = 0;
      row++;
    }
    at.push({ x, row, lines });
    if (lines.length > 1) {
      // A wrapped entry takes whole rows of its own.
      row += lines.length;
      x = 0;
    } else x += w;
  }
  return { rows: at.length === 0 ? 0 : x === 0 ? row : row + 1, at };
}

/** Renders a chart as an SVG string (640 units wide, taller with a longer legend; scales with the page). */
export function renderLineChart(c: LineChart): string {
  const W = 640;
  const m = { l: 64, r: 16, t: 28, b: 48 };
  const pw = W - m.l - m.r;
  const ph = 284;
  const legend = legendLayout(c.series.map((s) => s.name), W - m.l - 8);
  const H = m.t + ph + m.b + legend.rows * LEGEND_ROW + 8;
  const pts = c.series.flatMap((s) => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y) && (!c.xLog || x > 0));
  const xs = pts.map((p) => p[0]);
  const ys = pts.map((p) => p[1]);
  const tx = (v: number) => (c.xLog ? Math.log10(v) : v);
  let x0 = xs.length ? Math.min(...xs.map(tx)) : 0;
  let x1 = xs.length ? Math.max(...xs.map(tx)) : 1;
  if (x1 === x0) {
    x0 -= 0.5;
    x1 += 0.5;
  }
  let y0 = c.yZero === false && ys.length ? Math.min(...ys) : 0;
  let y1 = ys.length ? Math.max(...ys) : 1;
  if (y1 === y0) y1 = y0 + 1;
  y1 += (y1 - y0) * 0.05;
  const sx = (v: number) => m.l + ((tx(v) - x0) / (x1 - x0)) * pw;
  const sy = (v: number) => m.t + ph - ((v - y0) / (y1 - y0)) * ph;
  const xf = c.xFormat ?? fmt;
  const yf = c.yFormat ?? fmt;
  const parts: string[] = [];
  parts.push(`<svg class="chart" data-chart="${esc(c.id)}" viewBox="0 0 ${W} ${H}" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="${esc(c.title)}">`);
  parts.push(`<text x="${m.l}" y="18" class="title" font-size="14" font-weight="600">${esc(c.title)}</text>`);
  parts.push(`<rect x="${m.l}" y="${m.t}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  for (const v of niceTicks(y0, y1, 5)) {
    const y = sy(v).toFixed(1);
    parts.push(`<line x1="${m.l}" x2="${m.l + pw}" y1="${y}" y2="${y}" stroke="#eee"/><text x="${m.l - 6}" y="${y}" text-anchor="end" dominant-baseline="middle" class="tick y" font-size="11">${esc(yf(v))}</text>`);
  }
  const xTicks = c.xTicks
    ? [...new Set(c.xTicks)].filter((v) => Number.isFinite(v) && (!c.xLog || v > 0)).sort((a, b) => a - b)
    : c.xLog
    ? niceTicks(Math.floor(x0), Math.ceil(x1), Math.max(1, Math.ceil(x1) - Math.floor(x0))).filter((e) => e >= x0 - 1e-9 && e <= x1 + 1e-9).map((e) => 10 ** e)
    : niceTicks(x0, x1, 6);
  const uniqueX = c.xLog && xTicks.length < 2 ? [...new Set(xs)].sort((a, b) => a - b) : xTicks;
  for (const v of uniqueX) {
    const x = sx(v);
    // Centred under its tick, but moved inward where half its width would leave the chart (the last capacity
    // sits 16 units from the right edge).
    const label = xf(v);
    const half = (label.length * LEGEND_CHAR) / 2;
    const lx = Math.min(Math.max(x, half + 1), W - half - 1);
    parts.push(`<line x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${m.t + ph}" y2="${m.t + ph + 4}" stroke="#999"/><text x="${lx.toFixed(1)}" y="${m.t + ph + 16}" text-anchor="middle" class="tick x" font-size="11">${esc(label)}</text>`);
  }
  parts.push(`<text x="${m.l + pw / 2}" y="${m.t + ph + 36}" text-anchor="middle" class="axis x" font-size="12">${esc(c.xLabel)}</text>`);
  parts.push(`<text transform="translate(14 ${m.t + ph / 2}) rotate(-90)" text-anchor="middle" class="axis y" font-size="12">${esc(c.yLabel)}</text>`);
  c.series.forEach((s, i) => {
    const { color, dash, marker: shape } = seriesStyle(i, s.dashed === true);
    const stroke = `stroke="${color}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ''}`;
    const shown = s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y) && (!c.xLog || x > 0));
    const p = shown.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(' ');
    parts.push(`<polyline class="series" data-series="${esc(s.name)}" points="${p}" fill="none" ${stroke}/>`);
    const markers = s.points.length <= 24;
    if (markers) for (const [x, y] of shown) parts.push(marker(shape, sx(x), sy(y), color));
    const slot = legend.at[i]!;
    const lx = m.l + slot.x;
    const ly = m.t + ph + m.b + 8 + slot.row * LEGEND_ROW;
    const text = slot.lines.map((line, k) => `<tspan x="${lx + LEGEND_SWATCH}" y="${ly + k * LEGEND_ROW}">${esc(line)}</tspan>`).join('');
    parts.push(`<g class="legend-entry" data-series="${esc(s.name)}"><line x1="${lx}" x2="${lx + 20}" y1="${ly}" y2="${ly}" ${stroke}/>${markers ? marker(shape, lx + 10, ly, color) : ''}<text dominant-baseline="middle" class="legend" font-size="11">${text}</text></g>`);
  });
  parts.push('</svg>');
  return parts.join('');
}
