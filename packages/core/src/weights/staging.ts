/**
 * Staging a version on a persistent tier (fs on a shared mount, object storage): a checkpoint that workers
 * starting later pull from (`WeightReceiver.pullWeights(version, { from: new TierSource(tier, pageBytes) })`).
 * Chunks go first, then the manifest, then the latest pointer, so a reader never finds a manifest whose chunks
 * are not all there. The tier's page size must hold one chunk and the manifest.
 */
import { TierSyncError } from '@tiersync/native';
import type { TierDriver } from '@tiersync/tiers';
import type { ChunkStore } from './chunk-store.js';
import { LATEST_KEY, manifestKey, type WeightManifest } from './manifest.js';

const WRITE_GROUP = 32;

export async function stageVersion(store: ChunkStore, m: WeightManifest, tier: TierDriver): Promise<{ chunksWritten: number; bytesWritten: number }> {
  let chunksWritten = 0;
  let bytesWritten = 0;
  const hashes = m.chunks.map((c) => c.hash);
  const held = await tier.has(hashes);
  const todo = hashes.filter((_, i) => !held[i]);
  for (let g = 0; g < todo.length; g += WRITE_GROUP) {
    const group = todo.slice(g, g + WRITE_GROUP);
    const pinned = group.map((k) => {
      const e = store.pin(k);
      if (!e) throw new TierSyncError(`chunk ${k} of version '${m.version}' is no longer in the store`, 'ERR_NOT_FOUND');
      return e;
    });
    try {
      const r = await tier.write(group.map((key, i) => ({ key, source: { arena: store.arena, offset: pinned[i]!.offset, length: pinned[i]!.length }, crc32c: pinned[i]!.crc32c })));
      chunksWritten += r.written.length;
      for (const k of r.written) bytesWritten += store.get(k)!.length;
    } finally {
      for (const k of group) store.unpin(k);
    }
  }
  for (const key of [manifestKey(m.version), LATEST_KEY]) {
    const e = store.pin(key);
    if (!e) throw new TierSyncError(`blob ${key} of version '${m.version}' is not in the store`, 'ERR_NOT_FOUND');
    try {
      await tier.delete([key]);
      await tier.write([{ key, source: { arena: store.arena, offset: e.offset, length: e.length }, crc32c: e.crc32c }]);
    } finally {
      store.unpin(key);
    }
  }
  return { chunksWritten, bytesWritten };
}
