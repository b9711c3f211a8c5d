/** Percentiles for simulation reports. */

/** The q-th quantile (q in [0, 1]) of ascending-sorted values, by linear interpolation; NaN when empty. */
export function quantileSorted(sorted: ArrayLike<number>, q: number): number {
  const n = sorted.length;
  if (n === 0) return Number.NaN;
  const pos = (n - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.min(n - 1, lo + 1);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

/** Summary of a latency distribution, seconds. */
export interface Distribution {
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  /** The 0th, 1st, ..., 100th percentiles (101 values), for CDF charts. */
  percentiles: number[];
}

/** Summarises `values` (not modified). */
export function distribution(values: Float64Array): Distribution {
  const s = Float64Array.from(values).sort();
  let sum = 0;
  for (const v of s) sum += v;
  const percentiles: number[] = [];
  for (let i = 0; i <= 100; i++) percentiles.push(quantileSorted(s, i / 100));
  return {
    mean: s.length ? sum / s.length : Number.NaN,
    p50: quantileSorted(s, 0.5),
    p90: quantileSorted(s, 0.9),
    p99: quantileSorted(s, 0.99),
    percentiles,
  };
}
