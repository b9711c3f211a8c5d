/**
 * The one interface every tier driver implements. The hierarchy (packages/core) and the policy engine talk to
 * tiers only through it, so they never care which tier holds a page.
 *
 * Pages are opaque byte ranges named by a key (the hex chained hash computed by the hierarchy). Page bytes never
 * pass through JavaScript: a write names where the bytes are (an arena range), a read names where they go, and the
 * driver moves them with the shared native TransferEngine (drivers whose third-party client forces a JS copy say
 * so in their README and capabilities).
 */
import type { DeviceArena, HostArena, TransferEngine, TierSyncError } from '@tiersync/native';

export type TierKind = 'hbm' | 'host' | 'fs' | 'object' | 'peer';

/** What a driver can do; declared first, so callers plan around it (NIXL-style). */
export interface TierCapabilities {
  kind: TierKind;
  /** Pages survive a restart of this process (and `list()` enumerates them). */
  persistent: boolean;
  /** Bytes cross a network to reach the tier. */
  remote: boolean;
  /** Pages move between arenas and the tier on native threads, with no copy through JavaScript. */
  zeroCopy: boolean;
  /** Arena kinds the driver can read from and write into directly. */
  memoryKinds: ReadonlyArray<'host' | 'device'>;
  /** Every read is checked against the page's stored CRC32C (tiers that can lose or corrupt data). */
  verifiesOnRead: boolean;
  /**
   * read() honours `PageRead.range` (a sub-page read, e.g. one layer group of a KV page). Declared by tiers that
   * need no checksum on read, and by tiers that verify on read only when they can verify a range on its own (the
   * fs tier: per-chunk CRC32Cs; a range's outcome is a `hit` only when every chunk covering it matched, else an
   * `error` with ERR_CHECKSUM). Unverified bytes are never delivered. Callers fall back to whole-page reads
   * elsewhere. Default false.
   */
  rangeReads?: boolean;
}

/** Lower-case hex, 16..128 characters: never used as a path without this check. */
export type PageKey = string;
export const PAGE_KEY_PATTERN = /^[0-9a-f]{16,128}$/;

/** A byte range in an arena: where a page's bytes are, or where they go. */
export interface PageLocation {
  arena: HostArena | DeviceArena;
  offset: number;
  length: number;
}

/**
 * What the block index needs, beyond key, length and CRC32C, to find a page again after it lost its record of it
 * (a `:memory:` index, a deleted or stale index file): persistent tiers store it with the page and `list()` yields
 * it, so opening a hierarchy adopts the pages its tiers hold instead of forgetting them.
 */
export interface PageMeta {
  /** The page's namespace id (lower-case hex, 1..64 characters; createNamespace() gives 64). */
  namespace: string;
  /** Key of the previous page of its context; null for the first page (and for pages stored by key alone). */
  parent: PageKey | null;
  /** 0-based page position in its context (0 for pages stored by key alone), below 2^32. */
  position: number;
}

/** PageMeta.namespace: lower-case hex, 1..64 characters. */
export const NAMESPACE_ID_PATTERN = /^[0-9a-f]{1,64}$/;

export interface PageWrite {
  key: PageKey;
  /** The page's bytes, read by the driver's native transfer. */
  source: PageLocation;
  /** CRC32C of the bytes when the caller already knows it; the driver computes it otherwise. */
  crc32c?: number;
  /**
   * Namespace, parent and position, recorded with the page by persistent tiers (fs, object, host with `shm`) and
   * yielded by `list()`; volatile tiers ignore it. Optional: a page written without it is listed without it (the
   * index can then adopt it only as a keyed page). A parent longer than 64 hex characters, or a key longer than
   * 64 on the host tier, does not fit the tier's record: the page is stored, its meta is not (see each README).
   */
  meta?: PageMeta;
}

export interface PageRead {
  key: PageKey;
  /** Where the bytes go; must hold at least the page's length (with `range`: at least `range.length`). */
  into: PageLocation;
  /**
   * Read only bytes [offset, offset + length) of the page (offsets from the page's first byte). Only for drivers
   * whose capabilities say `rangeReads`; others refuse it (ERR_UNSUPPORTED). A range beyond the page's length is
   * ERR_OUT_OF_RANGE. The outcome's `length` is then the range's length.
   */
  range?: { offset: number; length: number };
}

export interface IoOptions {
  signal?: AbortSignal;
  /** Deadline for the whole call, in ms. Default: the driver's own (see its README). */
  timeoutMs?: number;
  /** Queue class in the shared engine. Default 'demand' for reads, 'writeBack' for writes. */
  priority?: 'demand' | 'prefetch' | 'writeBack';
}

export interface WriteResult {
  /** Keys now stored (newly written). */
  written: PageKey[];
  /** Keys that were already stored (content-addressed: left as they were). */
  existing: PageKey[];
  /** CRC32C per input page, in input order. */
  crc32c: number[];
}

export type ReadOutcome =
  | { key: PageKey; status: 'hit'; length: number; crc32c: number }
  | { key: PageKey; status: 'miss' }
  /** The stored copy failed its checksum (or could not be read); its bytes were not delivered as data. */
  | { key: PageKey; status: 'error'; error: TierSyncError };

export interface PageInfo {
  key: PageKey;
  length: number;
  crc32c: number;
  /** What the page was written with (`PageWrite.meta`); absent for pages written without it or in an older format. */
  meta?: PageMeta;
}

export interface TierStats {
  kind: TierKind;
  capacityBytes: number;
  usedBytes: number;
  pages: number;
  pinned: number;
  bytesWritten: number;
  bytesRead: number;
  writes: number;
  reads: number;
  hits: number;
  misses: number;
  errors: number;
  checksumFailures: number;
}

/** Shared by every driver of one hierarchy. */
export interface TierContext {
  engine: TransferEngine;
  /** Size of one page slot in bytes; pages may be shorter, never longer. */
  pageBytes: number;
  /** Namespace/layout fingerprint: persistent tiers refuse to reuse state written under another one. */
  fingerprint: string;
}

export interface TierDriver {
  readonly capabilities: TierCapabilities;
  /** The URL the driver was created from, with secrets removed. */
  readonly url: string;
  /** Prepares the tier (maps memory, opens or recovers files, checks the bucket). Must be called once first. */
  open(): Promise<void>;
  /** Refuses new work at once; resolves when in-flight work has finished. */
  close(): Promise<void>;
  /**
   * Stores pages. All-or-nothing for capacity: when the new pages do not fit, throws ERR_TIER_FULL and nothing
   * becomes visible. A page becomes visible (has/read/list) only once its bytes are complete (durable for
   * persistent tiers).
   */
  write(pages: readonly PageWrite[], options?: IoOptions): Promise<WriteResult>;
  /** Loads pages; one outcome per input, in input order. A missing page is a 'miss', not an error. */
  read(pages: readonly PageRead[], options?: IoOptions): Promise<ReadOutcome[]>;
  has(keys: readonly PageKey[]): Promise<boolean[]>;
  /** Removes pages and frees their space; pinned pages are kept and returned in `pinned`. */
  delete(keys: readonly PageKey[]): Promise<{ deleted: PageKey[]; pinned: PageKey[] }>;
  /** Every stored page (persistent tiers: what survived a restart, with the `meta` each was written with). */
  list(): AsyncIterable<PageInfo>;
  /** Pins count: a page pinned n times needs n unpins before it can be deleted. Unknown keys are ignored. */
  pin(keys: readonly PageKey[]): void;
  unpin(keys: readonly PageKey[]): void;
  stats(): TierStats;
}
