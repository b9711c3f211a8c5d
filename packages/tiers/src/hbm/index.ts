/**
 * hbm tier: accelerator memory. `hbm://sim?capacity=8GiB` (emulated, optional link model) or
 * `hbm://cuda/0?capacity=40GiB` (cudaMalloc on device 0). Volatile: pages are lost when the process exits.
 */
import { DeviceArena } from '@tiersync/native';
import { z } from 'zod';
import type { TierCapabilities, TierContext } from '../driver.js';
import { MemoryTier, type SlotStore } from '../memory-tier.js';
import { bool, configError, parseOptions, size, splitUrlOf } from '../url.js';

const options = z
  .object({
    capacity: size('a capacity'),
    /** Emulated link bandwidth in bytes per second ("25GB" = 25e9 B/s). sim only. */
    bandwidth: size('a bandwidth in bytes per second').optional(),
    /** Emulated latency per copy in microseconds. sim only. */
    latencyUs: z.string().regex(/^\d+(\.\d+)?$/, 'must be a number of microseconds').transform(Number).optional(),
    /** Verify CRC32C on every read (device memory is normally trusted). Default false. */
    verify: bool.optional(),
  })
  .strict();

export interface HbmTierConfig {
  backend: 'sim' | 'cuda';
  device: number;
  capacity: number;
  bandwidthBytesPerSec?: number;
  latencyUs?: number;
  verify: boolean;
  redacted: string;
}

export function parseHbmUrl(url: string): HbmTierConfig {
  const u = splitUrlOf(url, 'hbm');
  const o = parseOptions(u, options);
  const backend = u.host === '' ? 'sim' : u.host;
  if (backend !== 'sim' && backend !== 'cuda') {
    throw configError(u, `backend '${backend}' must be 'sim' or 'cuda' (hbm://sim or hbm://cuda/<device>)`);
  }
  const devicePart = u.path.replace(/^\//, '');
  if (backend === 'sim' && devicePart !== '') throw configError(u, `hbm://sim takes no device, got '${devicePart}'`);
  if (backend === 'cuda' && devicePart !== '' && !/^\d+$/.test(devicePart)) throw configError(u, `device '${devicePart}' must be a number`);
  if (backend === 'cuda' && (o.bandwidth !== undefined || o.latencyUs !== undefined)) {
    throw configError(u, 'bandwidth and latencyUs model a sim link; a cuda device has a real one');
  }
  return {
    backend,
    device: devicePart === '' ? 0 : Number(devicePart),
    capacity: o.capacity,
    ...(o.bandwidth !== undefined ? { bandwidthBytesPerSec: o.bandwidth } : {}),
    ...(o.latencyUs !== undefined ? { latencyUs: o.latencyUs } : {}),
    verify: o.verify ?? false,
    redacted: u.redacted,
  };
}

export class HbmTier extends MemoryTier {
  readonly capabilities: TierCapabilities;
  readonly config: HbmTierConfig;
  #arena: DeviceArena | undefined;

  constructor(url: string, context: TierContext) {
    const config = parseHbmUrl(url);
    super(config.redacted, context, config.capacity);
    this.config = config;
    this.capabilities = { kind: 'hbm', persistent: false, remote: false, zeroCopy: true, memoryKinds: ['host', 'device'], verifiesOnRead: config.verify, rangeReads: !config.verify };
  }

  protected async openStore(): Promise<SlotStore> {
    const c = this.config;
    const slots = Math.floor(c.capacity / this.context.pageBytes);
    this.#arena =
      c.backend === 'cuda'
        ? DeviceArena.create({ backend: 'cuda', device: c.device, capacity: Math.max(1, slots) * this.context.pageBytes })
        : DeviceArena.create({
            backend: 'sim',
            capacity: Math.max(1, slots) * this.context.pageBytes,
            ...(c.bandwidthBytesPerSec ? { bandwidthBytesPerSec: c.bandwidthBytesPerSec } : {}),
            ...(c.latencyUs ? { latencyNs: Math.round(c.latencyUs * 1000) } : {}),
          });
    return { arena: this.#arena, dataOffset: 0 };
  }

  protected closeStore(): void {
    this.#arena?.close();
  }
}
