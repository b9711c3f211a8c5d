/** Small statistics helpers for benchmarks. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export const GiB = 1024 ** 3;
export const MiB = 1024 ** 2;
export const KiB = 1024;

/** Rounds for reports: 3 significant decimals are plenty on a noisy machine. */
export function round(value: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

export function formatBytes(bytes: number): string {
  if (bytes >= GiB) return `${round(bytes / GiB, 2)} GiB`;
  if (bytes >= MiB) return `${round(bytes / MiB, 2)} MiB`;
  if (bytes >= KiB) return `${round(bytes / KiB, 2)} KiB`;
  return `${bytes} B`;
}
