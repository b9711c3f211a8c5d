/** Public types of the block index. */
import type { TierKind } from '@tiersync/tiers';

/** Lower-case hex, 16..128 characters, an even count (the tiers' PageKey). */
export type PageKey = string;

/** A tier as the index sees it. */
export interface IndexTier {
  /** Name stored with each copy, unique among tiers. Default: `kind`. 1..64 characters of [A-Za-z0-9_.-]. */
  name?: string;
  kind: TierKind;
  /**
   * Whether copies survive a restart of this process. At open, copies on non-persistent tiers are dropped;
   * durable copies on persistent tiers are kept, marked unverified until a read checks their checksum.
   */
  persistent: boolean;
}

export interface BlockIndexOptions {
  /** SQLite database file (created if absent), or ':memory:' for a throwaway index. */
  path: string;
  /** The tiers in use, fastest first (lookups list a page's tiers in this order). At least one. */
  tiers: readonly IndexTier[];
  /**
   * Pages whose segments the in-memory cache in front of SQLite keeps (keys, per-page data, copy states and lookup
   * answers; whole segments are kept or dropped, least recently used first). Default 262,144 (~40 MiB).
   */
  cacheEntries?: number;
  /**
   * 'normal' (default): WAL with synchronous=NORMAL: a crash of the process never loses or tears a commit; a power
   * loss may lose the last commits but never corrupts. 'full': every commit that records something a restart keeps
   * is fsync'ed (durable) before returning; beginStore, beginCopies, abortCopies and access times (touch, endLoad)
   * commit without their own fsync, because recovery drops pending copies anyway: the next durable commit's fsync
   * covers them. A durable one-page store thus costs one fsync.
   */
  synchronous?: 'normal' | 'full';
  /** SQLite page cache, in MiB. Default 64. */
  sqliteCacheMiB?: number;
  /** Clock in ms since the epoch, for access times and pin expiry. Default Date.now. */
  now?: () => number;
}

/** A namespace row, as registered with the index. */
export interface NamespaceRecord {
  /** The namespace id (64 hex characters, from createNamespace()). */
  id: string;
  /** Model fingerprint, 1..512 characters. */
  model: string;
  /** KV layout fingerprint. */
  layoutFingerprint: string;
  /** Tenant label. Default ''. */
  tenant?: string;
  /** Tokens per page of the layout. */
  tokensPerPage: number;
}

/** One page to store, as passed to beginStore. */
export interface StorePage {
  key: PageKey;
  /** Key of the previous page in the chain; null for the first page of a context. */
  parent: PageKey | null;
  /** 0-based page position in its context. */
  position: number;
  /** Bytes of the page. */
  length: number;
  /** Where the copy is on the target tier (slot, file name, object name...), 1..4096 characters. */
  location: string;
  /** CRC32C of the page bytes when already known (otherwise give it to commitCopies). */
  crc32c?: number;
}

export interface BeginStoreResult {
  /** Pages that were new: each now has a pending copy on the tier, invisible until committed. */
  fresh: PageKey[];
  /** Pages that already had a copy (in any state) on some tier: store nothing for them. */
  existing: PageKey[];
}

export interface CommitEntry {
  key: PageKey;
  tier: string;
  /** The copy was written durably (fdatasync or equivalent). Default false. */
  durable?: boolean;
  /** CRC32C of the page bytes, recorded on the page when given. */
  crc32c?: number;
}

export interface CommitResult {
  committed: number;
  /** Entries with no pending copy (aborted or removed meanwhile): nothing was changed for them. */
  missing: PageKey[];
}

/** A page of a lookup hit. Shared, frozen objects: do not mutate. */
export interface PageHit {
  readonly key: PageKey;
  /** Tiers holding a ready copy, fastest first (the order of BlockIndexOptions.tiers). */
  readonly tiers: readonly string[];
  /** Bytes of the page. */
  readonly length: number;
}

export type CopyState = 'pending' | 'ready' | 'evicting';

export interface CopyRecord {
  tier: string;
  location: string;
  state: CopyState;
  durable: boolean;
  /** The copy's bytes were checked against the page CRC32C since the last open (or written in this run). */
  verified: boolean;
  updatedMs: number;
}

export interface PageRecord {
  key: PageKey;
  namespace: string;
  parent: PageKey | null;
  position: number;
  length: number;
  crc32c: number | null;
  createdMs: number;
  lastAccessMs: number;
  hits: number;
}

export interface RemoveResult {
  removed: PageKey[];
  /** Skipped: an unexpired pin holds them (pass force to remove anyway). */
  pinned: PageKey[];
  /** No copy on that tier. */
  missing: PageKey[];
}

export interface RecoveryReport {
  /** Schema version found in the file (0: new file). */
  migratedFrom: number;
  schemaVersion: number;
  /** Ready copies dropped because their tier is not persistent, per tier. */
  droppedVolatile: Record<string, number>;
  /** Copies dropped because their tier is no longer configured, per tier name. */
  droppedUnknownTier: Record<string, number>;
  /** Copies that were still being written when the last process stopped. */
  droppedPending: number;
  /** Copies that were being evicted when the last process stopped. */
  droppedEvicting: number;
  /** Ready copies on persistent tiers that were never written durably. */
  droppedNotDurable: number;
  /** Durable copies kept; trusted once markVerified() records a matching checksum. */
  unverified: number;
  /** Page rows deleted because no copy of them remained. */
  orphanPages: number;
  expiredPins: number;
}

export interface TierStats {
  pending: number;
  ready: number;
  evicting: number;
  durable: number;
  unverified: number;
  /** Bytes of ready copies. */
  readyBytes: number;
}

export interface IndexStats {
  namespaces: number;
  pages: number;
  /** Bytes of all pages (each counted once, whatever its copies). */
  pageBytes: number;
  tiers: Record<string, TierStats>;
  /** Unexpired pins. */
  pins: number;
  cache: { entries: number; max: number; hits: number; misses: number };
  /** SQLite file size in bytes (main file, without the WAL). */
  fileBytes: number;
}

/** A page found on a tier, as passed to adoptPages (rebuilding the index from what the tiers hold). */
export interface AdoptPage {
  key: PageKey;
  /** Key of the previous page in the chain; null for the first page of a context. */
  parent: PageKey | null;
  /** 0-based page position in its context. */
  position: number;
  /** Bytes of the page. */
  length: number;
  /** CRC32C of the page bytes, as the tier recorded it. */
  crc32c: number;
  /** The tier holds the copy durably (it survives a crash of the writer). */
  durable: boolean;
}

export interface AdoptResult {
  /** Pages now recorded with a ready copy on the tier (new pages, or pages known on other tiers). */
  adopted: PageKey[];
  /** Pages that already had a copy (in any state) on that tier: left as they were. */
  existing: PageKey[];
}
