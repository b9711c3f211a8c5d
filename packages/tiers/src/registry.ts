import type { TierContext, TierDriver } from './driver.js';
import { FaultTier } from './fault/index.js';
import { FsTier } from './fs/index.js';
import { HbmTier } from './hbm/index.js';
import { HostTier } from './host/index.js';
import { ObjectTier } from './object/index.js';
import { PeerTier } from './peer/index.js';
import { configError, splitUrl } from './url.js';

type Factory = (url: string, context: TierContext) => TierDriver;

const factories: Record<string, Factory> = {
  hbm: (url, ctx) => new HbmTier(url, ctx),
  host: (url, ctx) => new HostTier(url, ctx),
  fs: (url, ctx) => new FsTier(url, ctx),
  s3: (url, ctx) => new ObjectTier(url, ctx),
  gs: (url, ctx) => new ObjectTier(url, ctx),
  peer: (url, ctx) => new PeerTier(url, ctx),
  // Fault injection around another driver (reliability tests); it builds its inner driver through createTier.
  fault: (url, ctx) => new FaultTier(url, ctx, createTier),
};

/** URL schemes with a driver. */
export function tierSchemes(): string[] {
  return Object.keys(factories);
}

/**
 * Creates (does not open) the driver for a tier URL. Bad URLs and options throw ERR_CONFIG naming the part that
 * is wrong.
 */
export function createTier(url: string, context: TierContext): TierDriver {
  const u = splitUrl(url);
  const factory = factories[u.scheme];
  if (!factory) throw configError(u, `unknown scheme '${u.scheme}://' (known: ${tierSchemes().map((s) => `${s}://`).join(', ')})`);
  return factory(url, context);
}
