/**
 * The durable catalog's I/O (resp.catalog `durable`): writing a value's manifest through the hierarchy after its
 * pages, and reading every manifest the persistent tiers hold back at start to decide, per key, which generation
 * survives (manifest.ts has the format). The door owns the keys; this module only reads and writes pages.
 */
import { crc32c, TierSyncError } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';
import { decodeManifest, encodeManifest, isManifestKey, isManifestPartKey, isValuePageKey, manifestBytes, manifestKey, manifestPageKeys, manifestSize, parseManifestKey, type Manifest } from './manifest.js';
import type { RespPageStore } from './page-store.js';
import type { StagingArea } from './staging.js';

/** What recovery found: the keys to rebuild (each with its manifest's pages), the pages to delete. */
export interface RecoveredCatalog {
  /** Per key, its newest whole generation whose value pages are all present and that has not expired. */
  values: Array<{ m: Manifest; manifestPages: PageKey[] }>;
  /** The largest generation seen: new SETs continue after it. */
  maxGeneration: number;
  /** Stale manifests, older generations and value pages no surviving manifest names. */
  drop: PageKey[];
  /** Manifest heads found (whole or not). */
  manifests: number;
  /** Value pages and manifest parts that no manifest found names. */
  orphans: number;
}

export class ManifestStore {
  constructor(
    private readonly store: RespPageStore,
    private readonly staging: StagingArea,
    private readonly timeoutMs: number,
    /** Deletes pages in the background (the door's discard, with its retries). */
    private readonly discard: (pages: readonly PageKey[]) => void,
  ) {}

  /**
   * Writes a value's manifest into the first tier and resolves with its pages once they are committed there: one
   * page, or more for a value of very many pages.
   * @throws TierSyncError ERR_TIER_FULL without room
   */
  async write(m: Manifest): Promise<PageKey[]> {
    const pageBytes = this.store.pageBytes;
    const size = manifestBytes(m.tenant, m.key, m.pages.length);
    const keys = manifestPageKeys(manifestKey(m.tenant, m.key, m.generation), size, pageBytes);
    const lengths = Uint32Array.from(keys, (_, i) => Math.min(pageBytes, size - i * pageBytes));
    const slots = this.store.slots;
    if (slots) {
      const bytes = Buffer.allocUnsafe(size);
      encodeManifest(m, bytes);
      const offsets = slots.tryReserve(keys) ?? (await slots.reserve(keys));
      const crcs = new Uint32Array(keys.length);
      keys.forEach((_, i) => {
        const part = bytes.subarray(i * pageBytes, i * pageBytes + lengths[i]!);
        slots.arena.view(offsets[i]!, lengths[i]!).set(part);
        // Small and hot: checksummed here rather than on native threads.
        crcs[i] = crc32c(part);
      });
      await slots.commit(keys, offsets, lengths, crcs);
      return keys;
    }
    const slice = await this.staging.allocate(size, this.timeoutMs);
    try {
      encodeManifest(m, slice.bytes);
      const ok = await this.store.write(keys.map((key, i) => ({ key, source: { arena: this.staging.arena, offset: slice.offset + i * pageBytes, length: lengths[i]! } })));
      if (!ok.every(Boolean)) {
        this.discard(keys.filter((_, i) => ok[i]));
        throw new TierSyncError('the tier hierarchy has no room for a catalog manifest', 'ERR_TIER_FULL');
      }
    } finally {
      this.staging.release(slice);
    }
    return keys;
  }

  /**
   * Reads the manifests the persistent tiers hold: per key, the newest generation whose manifest checks out and
   * whose pages are all present (an older one is what a kill left behind before its deletion) survives. Stale
   * manifests and value pages no surviving manifest names (a SET killed before its manifest) are to be dropped.
   */
  async recover(now = Date.now()): Promise<RecoveredCatalog> {
    const all = await this.store.persistentKeys();
    const heads = all.filter(isManifestKey);
    const pageBytes = this.store.pageBytes;
    const perBatch = Math.max(1, Math.min(256, Math.floor(this.staging.capacity / 2 / pageBytes)));
    const best = new Map<string, { pages: PageKey[]; m: Manifest }>();
    const stale: PageKey[] = [];
    let maxGeneration = 0;
    for (let at = 0; at < heads.length; at += perBatch) {
      const batch = heads.slice(at, at + perBatch);
      const slice = await this.staging.allocate(batch.length * pageBytes, this.timeoutMs);
      try {
        const found = await this.store.read(batch.map((key, i) => ({ key, into: { arena: this.staging.arena, offset: slice.offset + i * pageBytes, length: pageBytes } })));
        for (let i = 0; i < batch.length; i++) {
          const key = batch[i]!;
          const first = slice.bytes.subarray(i * pageBytes, (i + 1) * pageBytes);
          const size = found[i] ? manifestSize(first) : 0;
          const whole = !size ? undefined : size <= pageBytes ? first.subarray(0, size) : await this.#readParts(key, size, first);
          const m = whole ? decodeManifest(key, whole) : undefined;
          if (!m || m.pages.length !== Math.ceil(m.length / pageBytes)) {
            stale.push(key);
            continue;
          }
          maxGeneration = Math.max(maxGeneration, m.generation);
          const group = parseManifestKey(key).group;
          const prev = best.get(group);
          const pages = manifestPageKeys(key, size, pageBytes);
          if (prev && prev.m.generation > m.generation) stale.push(...pages);
          else {
            if (prev) stale.push(...prev.pages);
            best.set(group, { pages, m });
          }
        }
      } finally {
        this.staging.release(slice);
      }
    }
    const values: RecoveredCatalog['values'] = [];
    const kept = new Set<PageKey>();
    for (const { pages, m } of best.values()) {
      if ((m.expiresAt && m.expiresAt <= now) || !this.store.has(m.pages).every(Boolean)) {
        stale.push(...pages);
        continue;
      }
      for (const p of [...m.pages, ...pages]) kept.add(p);
      values.push({ m, manifestPages: pages });
    }
    // Value pages and manifest parts nothing live names: a SET killed before its manifest, an old generation.
    const orphans = all.filter((k) => (isValuePageKey(k) || isManifestPartKey(k)) && !kept.has(k));
    const drop = [...new Set([...stale, ...orphans])].filter((k) => !kept.has(k));
    return { values, maxGeneration, drop, manifests: heads.length, orphans: orphans.length };
  }

  /** The rest of a manifest longer than one page (`first` holds its first page): its parts read after it; undefined when one is missing. */
  async #readParts(head: PageKey, size: number, first: Uint8Array): Promise<Uint8Array | undefined> {
    const pageBytes = this.store.pageBytes;
    const keys = manifestPageKeys(head, size, pageBytes).slice(1);
    const slice = await this.staging.allocate(keys.length * pageBytes, this.timeoutMs);
    try {
      const found = await this.store.read(keys.map((key, i) => ({ key, into: { arena: this.staging.arena, offset: slice.offset + i * pageBytes, length: pageBytes } })));
      if (!found.every(Boolean)) return undefined;
      const whole = Buffer.allocUnsafe(size);
      whole.set(first.subarray(0, pageBytes));
      whole.set(slice.bytes.subarray(0, size - pageBytes), pageBytes);
      return whole;
    } finally {
      this.staging.release(slice);
    }
  }
}
