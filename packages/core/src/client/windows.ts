/**
 * How a large store or load is cut into windows that are pipelined: while the client copies one window's pages, the
 * daemon already prepares the next (reserve, pin) and records the previous (commit, release). The daemon's work per
 * page (deriving the tenant's key, slot records, leases) then runs beside the copy instead of before and after it.
 */

/** Default bytes per window: large enough that a window's round trips are small beside its copy. */
export const DEFAULT_WINDOW_BYTES = 64 << 20;

/** Fewest pages worth a window of their own (below this, one request carries the whole batch). */
const MIN_WINDOW_PAGES = 16;

/**
 * `[start, end)` ranges that cover `n` pages of up to `pageBytes` bytes: one range when the batch fits in one
 * window, else windows of about `windowBytes` (at least MIN_WINDOW_PAGES pages, at most `maxPages`, the daemon's
 * `maxBatchPages`), the first one half as large so the copy starts sooner.
 */
export function windowsOf(n: number, pageBytes: number, maxPages: number, windowBytes: number): Array<[number, number]> {
  const per = Math.max(1, Math.min(maxPages, Math.max(MIN_WINDOW_PAGES, Math.floor(windowBytes / pageBytes))));
  if (n <= per) return [[0, n]];
  const out: Array<[number, number]> = [];
  let at = Math.max(1, Math.min(per, Math.ceil(per / 2)));
  out.push([0, at]);
  while (at < n) {
    const end = Math.min(n, at + per);
    out.push([at, end]);
    at = end;
  }
  return out;
}
