/**
 * Statistics for benchmark reports. Sizes are printed and figures rounded with the simulator's helpers
 * (`formatSize`, `round` of @tiersync/core/sim), so the CLI and the benchmarks print the same way.
 */
export { formatSize, round } from '@tiersync/core/sim';

/** The median (the mean of the two middle values for an even count); NaN for no values. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export const GiB = 1024 ** 3;
export const MiB = 1024 ** 2;
export const KiB = 1024;
