/** Parsing and printing of sizes and lists for the simulator's options. */
import { invalid } from './errors.js';

const BINARY: Record<string, number> = { B: 1, KiB: 2 ** 10, MiB: 2 ** 20, GiB: 2 ** 30, TiB: 2 ** 40, PiB: 2 ** 50 };
const DECIMAL: Record<string, number> = { KB: 1e3, MB: 1e6, GB: 1e9, TB: 1e12, PB: 1e15 };

/**
 * Parses a byte size: `128MiB`, `1.5GiB`, `500GB` (decimal), `4096` (bytes) or `inf` (unbounded: returns
 * `Infinity`). Units are case-sensitive as written by IEC/SI.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming `name` when the text is not a size
 */
export function parseSize(text: string, name: string): number {
  const t = text.trim();
  if (t === 'inf' || t === 'infinity' || t === 'unbounded') return Infinity;
  const m = /^(\d+(?:\.\d+)?)\s*([KMGTP]i?B|B)?$/.exec(t);
  const unit = m?.[2] ?? 'B';
  const scale = BINARY[unit] ?? DECIMAL[unit];
  if (!m || scale === undefined) throw invalid(`${name}: expected a size like 128MiB, 2GB, 4096 or inf, got '${text}'`);
  const bytes = Math.round(Number(m[1]) * scale);
  if (!Number.isSafeInteger(bytes)) throw invalid(`${name}: ${text} is too large`);
  return bytes;
}

/**
 * Parses an object count: `1000`, `10k`, `1.5M` (powers of 1000) or `inf`. A count is a whole number: `1.5` or
 * `1.0005k` is refused, not rounded.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming `name`
 */
export function parseCount(text: string, name: string): number {
  const t = text.trim();
  if (t === 'inf' || t === 'infinity' || t === 'unbounded') return Infinity;
  const m = /^(\d+)(?:\.(\d+))?([kMG])?$/.exec(t);
  if (!m) throw invalid(`${name}: expected a count like 1000, 10k, 2M or inf, got '${text}'`);
  // Whole when the fraction has no more digits than the suffix has zeros (trailing zeros aside): decided on the
  // digits, since 1.1 * 1000 is not exactly 1100 in binary floating point.
  const zeros = { k: 3, M: 6, G: 9 }[m[3] ?? ''] ?? 0;
  const fraction = (m[2] ?? '').replace(/0+$/, '');
  if (fraction.length > zeros) throw invalid(`${name}: a count is a whole number of objects, got '${text}'`);
  const n = Number(m[1] + fraction.padEnd(zeros, '0'));
  if (!Number.isSafeInteger(n)) throw invalid(`${name}: ${text} is too large`);
  return n;
}

/**
 * Parses a finite byte size (as {@link parseSize}, without `inf`): `4GiB`, `512MiB`, `1048576`.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming `name`
 */
export function parseBytes(text: string, name: string): number {
  const bytes = parseSize(text, name);
  if (!Number.isFinite(bytes)) throw invalid(`${name}: expected a finite size like 4GiB, 512MiB or a byte count, got '${text}'`);
  return bytes;
}

/** Rounds for reports: 3 significant decimals are plenty on a noisy machine. */
export function round(value: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** Splits a comma-separated option, dropping empty items. */
export function parseList(text: string): string[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/** `1.5 GiB`-style text for reports (binary units). `inf` for Infinity. */
export function formatSize(bytes: number): string {
  if (!Number.isFinite(bytes)) return 'inf';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = bytes;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${Number.isInteger(v) ? v : v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}
