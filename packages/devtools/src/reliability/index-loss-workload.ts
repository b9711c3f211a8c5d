/**
 * The index-loss scenario's hierarchy, shared by the writer it kills and the checker: the crash workload's layout
 * and prompts, over two persistent tiers (host on a /dev/shm file, fs by write-through) and an index file that the
 * checker deletes.
 */
import path from 'node:path';
import type { TierSyncConfig } from '@tiersync/core';
import { CRASH_LAYOUT, CRASH_PAGE_BYTES, FS_CAPACITY } from './workload.js';

/** Host pages: fewer than the prompts' pages, so stores also demote (pages then live on fs only). */
export const INDEX_LOSS_HOST_PAGES = 64;

/** `index` overrides the index path (':memory:' for the in-memory variant). */
export function indexLossConfig(dir: string, shm: string, index: string = path.join(dir, 'index.sqlite')): TierSyncConfig {
  return {
    model: 'reliability-index-loss@1',
    layout: CRASH_LAYOUT,
    tiers: [
      { url: `host://?capacity=${INDEX_LOSS_HOST_PAGES * CRASH_PAGE_BYTES}&shm=${shm}&prefault=false`, highWatermark: 1, lowWatermark: 0.75 },
      { url: `fs://${path.join(dir, 'fs')}?capacity=${FS_CAPACITY}`, writeThrough: true },
    ],
    index: { path: index },
    stagingPages: 16,
    threads: 2,
    promoteOnHit: false,
  };
}
