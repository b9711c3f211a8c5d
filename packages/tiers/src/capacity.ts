/**
 * How many pages a tier URL holds, without opening the tier or loading the native addon
 * (`@tiersync/tiers/capacity`): what `floor(driver.stats().capacityBytes / pageBytes)` gives once the tier is open,
 * for planning offline (the simulator gives each tier the slot count the live hierarchy will have).
 */
import { TierSyncError } from '@tiersync/native/errors';
import { defaultSlabBytes, geometryFor, parseFsUrl, slotsFor } from './fs/config.js';
import { parseSize, splitUrl } from './url.js';

/**
 * Pages of `pageBytes` that the tier at `url` holds; undefined when the URL sets no bound (a peer without
 * `capacity`: the hierarchy then treats the tier as unlimited).
 *
 * fs: the slots of the slab geometry the URL gives a new folder (slot headers take room); a folder that already
 * exists keeps the slab size in its manifest, which only differs from this when it was created with another
 * `slab`. host, hbm, object, peer: `floor(capacity / pageBytes)` (object without `capacity`: unbounded, as the
 * driver counts it). fault: its `inner` tier's.
 * @throws TierSyncError ERR_CONFIG for a URL the driver would refuse, ERR_INVALID_ARGUMENT for a bad page size
 */
export function capacityPagesOf(url: string, pageBytes: number): number | undefined {
  if (!Number.isSafeInteger(pageBytes) || pageBytes < 1) throw new TierSyncError(`pageBytes must be a positive integer, got ${String(pageBytes)}`, 'ERR_INVALID_ARGUMENT');
  const u = splitUrl(url);
  if (u.scheme === 'fs') {
    const c = parseFsUrl(url);
    const g = geometryFor(pageBytes, c.slab ?? defaultSlabBytes(c.capacity));
    return g ? slotsFor(c.capacity, g) : 0;
  }
  if (u.scheme === 'fault') {
    const inner = u.params['inner'];
    if (!inner) throw new TierSyncError(`tier URL '${u.redacted}': option 'inner' is required`, 'ERR_CONFIG');
    return capacityPagesOf(inner, pageBytes);
  }
  const text = u.params['capacity'];
  if (text === undefined) return u.scheme === 's3' || u.scheme === 'gs' ? Math.floor(Number.MAX_SAFE_INTEGER / pageBytes) : undefined;
  const bytes = parseSize(text);
  if (bytes === undefined || bytes <= 0) throw new TierSyncError(`tier URL '${u.redacted}': option 'capacity' must be a size like 64GiB, got '${text}'`, 'ERR_CONFIG');
  return Math.floor(bytes / pageBytes);
}
