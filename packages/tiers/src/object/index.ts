/**
 * object tier: pages in a GCS bucket (S3-compatible XML API, HMAC keys), AWS S3, or any S3-compatible store
 * (MinIO, Ceph), through @aws-sdk/client-s3. URL syntax and options: ./config.ts and README.md.
 *
 * Each write() batch becomes one or more data objects holding its pages back to back plus a footer (manifest of
 * key, offset, length, CRC32C). The footer is the commit record: an object is uploaded whole in one PUT or one
 * CompleteMultipartUpload, so it exists complete or not at all, and open() rebuilds the page index from the
 * footers alone. Reads are ranged GETs of just the pages asked for (adjacent pages of one object share one GET),
 * each checked against its CRC32C.
 *
 * Threading and copies: pages are gathered into a staging HostArena by the native engine (which computes their
 * CRC32C on its threads) and the SDK sends a zero-copy view of it; downloads are copied once by JavaScript from
 * the socket's buffers into the destination (a view of a HostArena, or staging memory that the engine then
 * copies to a DeviceArena). Hence `zeroCopy: false`.
 */
import { setMaxListeners } from 'node:events';
import { HostArena, TierSyncError, TransferBatch, crc32c, crc32cCombine, type ErrorCode } from '@tiersync/native';
import type {
  IoOptions,
  PageInfo,
  PageKey,
  PageMeta,
  PageRead,
  PageWrite,
  ReadOutcome,
  TierCapabilities,
  TierContext,
  TierDriver,
  TierStats,
  WriteResult,
} from '../driver.js';
import { InFlight, PinTable, TierCounters, listPages } from '../stats.js';
import { checkKeys, checkReads, checkWrites } from '../validate.js';
import { Bucket, createS3Client } from './bucket.js';
import { parseObjectUrl, type ObjectTierConfig } from './config.js';
import {
  DESCRIPTOR_NAME,
  FORMAT,
  chunkBytesFor,
  dataName,
  deadName,
  decodeDescriptor,
  decodeTombstone,
  encodeFooter,
  fetchFooter,
  encodeTombstone,
  footerBound,
  isObjectId,
  MANIFEST_FORMAT,
  MAX_CHUNKS,
  newObjectId,
  type ManifestPage,
} from './layout.js';
import { CircuitBreaker, Limiter, RequestRunner, type BreakerState, type CallScope } from './resilience.js';
import { StagingPool, type Staged } from './staging.js';

export { GCS_ENDPOINT, parseObjectUrl, type ObjectTierConfig } from './config.js';
export type { BreakerState } from './resilience.js';

const TIER = 'object';
/** Most staged uploads (or device-bound downloads) at once: bounds staging memory to this x object size. */
const STAGED_OBJECTS = 4;
/** Bounds an object's manifest (and staging footprint) when pages are tiny. */
const MAX_PAGES_PER_OBJECT = 65_536;
const GIB = 2 ** 30;

/** One data object in the bucket. */
interface StoredObject {
  id: string;
  name: string;
  /** Object size in bytes, footer included. */
  size: number;
  dataBytes: number;
  /** Keys whose index entry points into this object, and the sum of their lengths. */
  live: Set<PageKey>;
  liveBytes: number;
  /** Keys of this object that are deleted, superseded, or moved away by compaction. */
  dead: Set<PageKey>;
  /** Ranged GETs in flight on this object; its deletion waits for them. */
  readers: number;
  compacting: boolean;
  /** A dead/<id> object may exist (set before its PUT, so a final delete always tries to remove it). */
  tombstoned: boolean;
  /** The object was deleted from the bucket. */
  gone: boolean;
  /** Serializes the bucket updates of this object (tombstone rewrites, the final delete). */
  chain: Promise<unknown>;
}

interface StoredPage {
  object: StoredObject;
  offset: number;
  length: number;
  crc32c: number;
  /** Namespace, parent and position from the object's manifest (version 2); carried along by compaction. */
  meta?: PageMeta | undefined;
  /** Chunk CRC32Cs from the manifest (version 3), which range reads check; carried along by compaction. */
  chunkBytes?: number | undefined;
  chunkCrcs?: readonly number[] | undefined;
}

/** Driver counters beyond TierStats: objects, wire bytes, requests, breaker. */
export interface ObjectTierStats {
  objects: number;
  /** Bytes of data objects in the bucket (footers and not-yet-removed deleted pages included). */
  storedBytes: number;
  /** Payload bytes uploaded / downloaded (retries included). */
  bytesUp: number;
  bytesDown: number;
  requests: number;
  attempts: number;
  retries: number;
  timeouts: number;
  failedRequests: number;
  rejectedByBreaker: number;
  breaker: BreakerState;
  breakerOpened: number;
}

/**
 * The object tier driver. Create with the URL and the hierarchy's context, then `open()`.
 * @throws TierSyncError ERR_CONFIG from the constructor for a bad URL or option (named in the message).
 */
export class ObjectTier implements TierDriver {
  readonly capabilities: TierCapabilities = {
    kind: 'object',
    persistent: true,
    remote: true,
    zeroCopy: false,
    memoryKinds: ['host', 'device'],
    verifiesOnRead: true,
    // A range is fetched with one ranged GET of the chunks covering it, each checked against its own CRC32C.
    rangeReads: true,
  };
  readonly url: string;
  readonly config: ObjectTierConfig;
  /** What open() found in the bucket (for logs). */
  attachNote = '';
  /** Objects rewritten by compaction since open. */
  compactions = 0;
  readonly #context: TierContext;
  readonly #table = new Map<PageKey, StoredPage>();
  readonly #objects = new Map<string, StoredObject>();
  readonly #pins = new PinTable();
  readonly #inflight = new InFlight();
  readonly #counters = new TierCounters();
  readonly #runner: RequestRunner;
  #bucket: Bucket | undefined;
  #staging: StagingPool | undefined;
  #state: 'new' | 'opening' | 'open' | 'closed' = 'new';
  #usedBytes = 0;
  /** Bytes of writes in flight, counted against capacity so concurrent batches cannot overcommit. */
  #reservedBytes = 0;

  constructor(url: string, context: TierContext) {
    this.config = parseObjectUrl(url);
    this.url = this.config.redacted;
    this.#context = context;
    const c = this.config;
    const where = `${c.endpoint ?? 'AWS S3'} (bucket ${c.bucket})`;
    this.#runner = new RequestRunner(
      { retries: c.retries, backoffMs: c.backoffMs, backoffMaxMs: c.backoffMaxMs, timeoutMs: c.timeoutMs },
      new CircuitBreaker(c.breakerThreshold, c.breakerCooldownMs, where),
      new Limiter(c.concurrency),
    );
  }

  /** Bytes of one staging arena: an object's pages plus the largest footer they can need. */
  get #objectCapacity(): number {
    const pages = Math.min(MAX_PAGES_PER_OBJECT, Math.ceil(this.config.objectBytes / this.#context.pageBytes));
    return this.config.objectBytes + footerBound(pages, this.#context.fingerprint, this.#chunksPerPage);
  }

  /** Most chunk CRCs a page written now carries. */
  get #chunksPerPage(): number {
    const page = this.#context.pageBytes;
    return Math.ceil(page / chunkBytesFor(page, this.config.crcChunk));
  }

  /**
   * Checks the bucket, checks or writes the tier descriptor, and rebuilds the page index from the objects'
   * footers (one or two small ranged GETs per object, in parallel).
   * @throws TierSyncError ERR_CONFIG (missing bucket, refused credentials, object smaller than a page),
   *   ERR_GEOMETRY_MISMATCH (the prefix holds pages of another fingerprint or page size), ERR_UNAVAILABLE,
   *   ERR_TIMEOUT, ERR_IO (the endpoint failed after retries).
   */
  async open(): Promise<void> {
    if (this.#state !== 'new') throw this.#error(this.#state === 'closed' ? 'tier is closed' : 'tier is already open', this.#state === 'closed' ? 'ERR_CLOSED' : 'ERR_INVALID_ARGUMENT');
    if (this.#context.pageBytes > this.config.objectBytes) {
      throw this.#error(`option 'object' (${this.config.objectBytes} bytes) is smaller than one page (${this.#context.pageBytes} bytes)`, 'ERR_CONFIG');
    }
    this.#state = 'opening';
    const bucket = new Bucket(createS3Client(this.config), this.config.bucket, this.#runner);
    const staging = new StagingPool(this.#objectCapacity, STAGED_OBJECTS);
    this.#bucket = bucket;
    this.#staging = staging;
    // Counted as work in flight, so a close() during open() waits for it (and open then fails with ERR_CLOSED).
    await this.#inflight.run(() => this.#openBucket(bucket, staging));
  }

  async #openBucket(bucket: Bucket, staging: StagingPool): Promise<void> {
    try {
      // The descriptor GET doubles as the bucket check: a missing bucket or refused credentials fail it with
      // ERR_CONFIG (no HEAD bucket: that needs storage.buckets.get on GCS, which object roles lack).
      await this.#checkDescriptor(bucket).catch((e: unknown) => {
        if (e instanceof TierSyncError && e.code === 'ERR_CONFIG') {
          throw this.#error(`bucket '${this.config.bucket}' at ${this.config.endpoint ?? 'AWS S3'} cannot be used: ${e.message}`, 'ERR_CONFIG', e);
        }
        throw e;
      });
      await this.#recover(bucket);
      if (this.#state !== 'opening') throw this.#error('tier was closed while opening', 'ERR_CLOSED');
      this.#state = 'open';
    } catch (e) {
      this.#state = 'closed';
      bucket.destroy();
      staging.close();
      throw e;
    }
  }

  async #checkDescriptor(bucket: Bucket): Promise<void> {
    const name = `${this.config.prefix}${DESCRIPTOR_NAME}`;
    let bytes: Uint8Array;
    try {
      bytes = await bucket.getAll(name);
    } catch (e) {
      if (!(e instanceof TierSyncError && e.code === 'ERR_NOT_FOUND')) throw e;
      const d = { format: FORMAT, fingerprint: this.#context.fingerprint, pageBytes: this.#context.pageBytes };
      await bucket.put(name, new TextEncoder().encode(JSON.stringify(d)));
      return;
    }
    const d = decodeDescriptor(bytes);
    const where = `${this.config.redacted}: ${name}`;
    if (typeof d === 'string') throw this.#error(`${where} is ${d}; remove it or use another prefix`, 'ERR_GEOMETRY_MISMATCH');
    if (d.format !== FORMAT) throw this.#error(`${where}: format is ${d.format}, this driver reads ${FORMAT}`, 'ERR_GEOMETRY_MISMATCH');
    if (d.fingerprint !== this.#context.fingerprint) {
      throw this.#error(`${where}: fingerprint is '${d.fingerprint}', expected '${this.#context.fingerprint}' (use another prefix per model/layout)`, 'ERR_GEOMETRY_MISMATCH');
    }
    if (d.pageBytes !== this.#context.pageBytes) {
      throw this.#error(`${where}: page size is ${d.pageBytes} bytes, expected ${this.#context.pageBytes}`, 'ERR_GEOMETRY_MISMATCH');
    }
  }

  async #recover(bucket: Bucket): Promise<void> {
    const dataPrefix = `${this.config.prefix}data/`;
    const deadPrefix = `${this.config.prefix}dead/`;
    const listed: Array<{ id: string; name: string; size: number }> = [];
    const skipped: string[] = [];
    for await (const o of bucket.list(dataPrefix)) {
      const id = o.name.slice(dataPrefix.length);
      if (isObjectId(id)) listed.push({ id, name: o.name, size: o.size });
      else skipped.push(`${o.name}: not a tiersync object name`);
    }
    const tombstones = new Map<string, string>();
    for await (const o of bucket.list(deadPrefix)) {
      const id = o.name.slice(deadPrefix.length);
      if (isObjectId(id)) tombstones.set(id, o.name);
    }
    const expect = { fingerprint: this.#context.fingerprint, pageBytes: this.#context.pageBytes };
    const footers = await Promise.all(listed.map((o) => fetchFooter(bucket, o.name, o.size, expect).then((r) => ({ ...o, r }))));
    const live = new Set(listed.map((o) => o.id));
    const deadLists = new Map<string, PageKey[]>();
    await Promise.all(
      [...tombstones].filter(([id]) => live.has(id)).map(async ([id, name]) => {
        const dead = decodeTombstone(await bucket.getAll(name));
        if (dead) deadLists.set(id, dead);
        else skipped.push(`${name}: unreadable tombstone (its pages count as live)`);
      }),
    );
    // Oldest first: when two objects hold the same key (a write raced another), the older copy wins.
    footers.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const empty: StoredObject[] = [];
    for (const f of footers) {
      if (typeof f.r === 'string') {
        skipped.push(`${f.name}: ${f.r}`);
        continue;
      }
      const obj = this.#newObject(f.id, f.name, f.size, f.r.dataBytes);
      obj.tombstoned = tombstones.has(f.id);
      const dead = new Set(deadLists.get(f.id) ?? []);
      for (const p of f.r.pages) {
        if (dead.has(p.key) || this.#table.has(p.key) || obj.live.has(p.key)) {
          obj.dead.add(p.key);
          continue;
        }
        this.#index(obj, p.key, p);
      }
      if (obj.live.size === 0) empty.push(obj);
    }
    // Leftovers of an interrupted delete or compaction: objects with no live page, tombstones without an object.
    const cleanup = [
      ...empty.map((o) => this.#persist(o)),
      ...[...tombstones].filter(([id]) => !live.has(id)).map(([, name]) => bucket.delete(name)),
    ];
    const failed = (await Promise.allSettled(cleanup)).filter((s) => s.status === 'rejected').length;
    this.attachNote =
      `${this.config.redacted}: ${this.#table.size} page(s) in ${this.#objects.size} object(s) recovered` +
      (empty.length ? `, ${empty.length} empty object(s) removed` : '') +
      (failed ? `, ${failed} cleanup request(s) failed (retried at the next open)` : '') +
      (skipped.length ? `; skipped: ${skipped.join('; ')}` : '');
  }

  #newObject(id: string, name: string, size: number, dataBytes: number): StoredObject {
    const obj: StoredObject = {
      id,
      name,
      size,
      dataBytes,
      live: new Set(),
      liveBytes: 0,
      dead: new Set(),
      readers: 0,
      compacting: false,
      tombstoned: false,
      gone: false,
      chain: Promise.resolve(),
    };
    this.#objects.set(id, obj);
    return obj;
  }

  /** Makes `key` visible, stored in `obj`. */
  #index(obj: StoredObject, key: PageKey, page: Omit<StoredPage, 'object'>): StoredPage {
    const stored: StoredPage = { object: obj, offset: page.offset, length: page.length, crc32c: page.crc32c, meta: page.meta, chunkBytes: page.chunkBytes, chunkCrcs: page.chunkCrcs };
    this.#table.set(key, stored);
    obj.live.add(key);
    obj.liveBytes += page.length;
    obj.dead.delete(key);
    this.#usedBytes += page.length;
    return stored;
  }

  /** Removes `key` from the index; its copy in the object becomes dead. */
  #unindex(key: PageKey, page: StoredPage): void {
    this.#table.delete(key);
    page.object.live.delete(key);
    page.object.liveBytes -= page.length;
    page.object.dead.add(key);
    this.#usedBytes -= page.length;
  }

  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    await this.#inflight.drained();
    this.#bucket?.destroy();
    this.#staging?.close();
  }

  #error(message: string, code: ErrorCode, cause?: unknown): TierSyncError {
    return new TierSyncError(`object tier: ${message}`, code, { tier: TIER, ...(cause === undefined ? {} : { cause }) });
  }

  #ready(): { bucket: Bucket; staging: StagingPool } {
    if (this.#state === 'closed') throw this.#error('tier is closed', 'ERR_CLOSED');
    if (this.#state !== 'open' || !this.#bucket || !this.#staging) throw this.#error('tier is not open; call open() first', 'ERR_CLOSED');
    return { bucket: this.#bucket, staging: this.#staging };
  }

  /**
   * Uploads the pages not stored yet, packed into objects of up to `object` bytes, uploaded in parallel.
   * Nothing becomes visible until every object of the batch is complete in the bucket.
   * @throws TierSyncError ERR_TIER_FULL (nothing stored), ERR_INVALID_ARGUMENT / ERR_OUT_OF_RANGE (bad input,
   *   before any I/O), ERR_UNAVAILABLE (breaker open), ERR_TIMEOUT, ERR_ABORTED, ERR_IO, ERR_CLOSED.
   */
  write(pages: readonly PageWrite[], options: IoOptions = {}): Promise<WriteResult> {
    const { bucket, staging } = this.#ready();
    checkWrites(pages, this.#context.pageBytes, TIER);
    const known = new Map<PageKey, number>();
    const fresh = pages.filter((p) => {
      const s = this.#table.get(p.key);
      if (s) known.set(p.key, s.crc32c);
      return !s;
    });
    const bytes = fresh.reduce((n, p) => n + p.source.length, 0);
    if (bytes > 0 && this.#usedBytes + this.#reservedBytes + bytes > this.config.capacity) {
      return Promise.reject(
        this.#error(
          `${fresh.length} new page(s) (${bytes} bytes) do not fit: ${this.#usedBytes} of ${this.config.capacity} bytes used, ${this.#reservedBytes} reserved by writes in flight`,
          'ERR_TIER_FULL',
        ),
      );
    }
    this.#reservedBytes += bytes;
    return this.#inflight.run(async () => {
      const scope = openScope(options);
      try {
        const groups = this.#pack(fresh);
        const settled = await Promise.allSettled(groups.map((g) => this.#upload(bucket, staging, g, scope, options)));
        const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
        const uploaded = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
        if (failed) {
          this.#counters.errors++;
          // All or nothing: take back what landed. Should that fail too, those pages reappear after a restart,
          // complete and checksummed (keys are content hashes, so they are never wrong data).
          await Promise.allSettled(uploaded.map((u) => bucket.delete(u.name)));
          throw failed.reason;
        }
        return this.#commit(pages, fresh, uploaded, known);
      } finally {
        scope.dispose();
        this.#reservedBytes -= bytes;
      }
    });
  }

  /** Greedy packing in input order, so a batch's pages stay adjacent and read back with few GETs. */
  #pack(fresh: PageWrite[]): PageWrite[][] {
    const groups: PageWrite[][] = [];
    let group: PageWrite[] = [];
    let data = 0;
    const limit = this.#objectCapacity;
    for (const p of fresh) {
      const full = group.length === MAX_PAGES_PER_OBJECT || data + p.source.length + footerBound(group.length + 1, this.#context.fingerprint, this.#chunksPerPage) > limit;
      if (group.length > 0 && full) {
        groups.push(group);
        group = [];
        data = 0;
      }
      group.push(p);
      data += p.source.length;
    }
    if (group.length > 0) groups.push(group);
    return groups;
  }

  async #upload(bucket: Bucket, staging: StagingPool, group: PageWrite[], scope: CallScope, options: IoOptions): Promise<Uploaded> {
    const offsets: number[] = [];
    let dataBytes = 0;
    for (const p of group) {
      offsets.push(dataBytes);
      dataBytes += p.source.length;
    }
    const staged = await staging.acquire(dataBytes + footerBound(group.length, this.#context.fingerprint, this.#chunksPerPage));
    try {
      // One descriptor per chunk of each page: the engine's per-descriptor CRC32Cs, computed while it gathers, are
      // the chunk checksums range reads verify, and they combine into the page's checksum (no second pass).
      const batch = new TransferBatch();
      const first: number[] = [];
      group.forEach((p, i) => {
        const chunk = chunkBytesFor(p.source.length, this.config.crcChunk);
        first.push(batch.length);
        for (let at = 0; at < p.source.length; at += chunk) batch.add(p.source.arena, p.source.offset + at, staged.arena, offsets[i]! + at, Math.min(chunk, p.source.length - at));
      });
      const r = await this.#context.engine.submit(batch, { checksums: true, priority: options.priority ?? 'writeBack', ...engineLimits(scope) });
      const sums = r.checksums ?? new Uint32Array(0);
      const pages: ManifestPage[] = group.map((p, i) => {
        const chunkBytes = chunkBytesFor(p.source.length, this.config.crcChunk);
        const chunkCrcs: number[] = [];
        let whole = 0;
        for (let k = 0, at = 0; at < p.source.length; k++, at += chunkBytes) {
          const c = sums[first[i]! + k]!;
          whole = k === 0 ? c : crc32cCombine(whole, c, Math.min(chunkBytes, p.source.length - at));
          chunkCrcs.push(c);
        }
        return { key: p.key, offset: offsets[i]!, length: p.source.length, crc32c: whole, meta: p.meta, chunkBytes, chunkCrcs };
      });
      return await this.#putObject(bucket, staged.arena, dataBytes, pages, scope);
    } finally {
      staged.release();
    }
  }

  /** Appends the footer after `dataBytes` of staged pages and uploads the object (multipart when large). */
  async #putObject(bucket: Bucket, staged: HostArena, dataBytes: number, pages: ManifestPage[], scope?: CallScope): Promise<Uploaded> {
    const id = newObjectId();
    const name = dataName(this.config.prefix, id);
    const footer = encodeFooter(
      { format: MANIFEST_FORMAT, fingerprint: this.#context.fingerprint, pageBytes: this.#context.pageBytes, pages },
      dataBytes,
      staged.view(dataBytes, staged.capacity - dataBytes),
    );
    // A zero-copy view of the staging arena is the request body.
    const body = staged.view(0, dataBytes + footer);
    if (body.length > this.config.partBytes) await bucket.putMultipart(name, body, this.config.partBytes, scope);
    else await bucket.put(name, body, scope);
    return { id, name, size: body.length, dataBytes, pages };
  }

  #commit(pages: readonly PageWrite[], fresh: PageWrite[], uploaded: Uploaded[], known: Map<PageKey, number>): WriteResult {
    const stored = new Map<PageKey, number>();
    const given = new Map(fresh.map((p) => [p.key, p.crc32c]));
    for (const u of uploaded) {
      const obj = this.#newObject(u.id, u.name, u.size, u.dataBytes);
      for (const p of u.pages) {
        if (this.#table.has(p.key)) {
          obj.dead.add(p.key); // a concurrent write of the same key landed first
          continue;
        }
        const expected = given.get(p.key);
        // The caller's bytes changed between hashing and writing: store what was written, say so.
        if (expected !== undefined && expected !== p.crc32c) this.#counters.checksumFailures++;
        this.#index(obj, p.key, p);
        this.#counters.bytesWritten += p.length;
        stored.set(p.key, p.crc32c);
      }
      if (obj.dead.size > 0) void this.#inflight.run(() => this.#persist(obj)).catch(() => this.#counters.errors++);
    }
    this.#counters.writes += stored.size;
    return {
      written: fresh.filter((p) => stored.has(p.key)).map((p) => p.key),
      existing: pages.filter((p) => !stored.has(p.key)).map((p) => p.key),
      crc32c: pages.map((p) => stored.get(p.key) ?? known.get(p.key) ?? this.#table.get(p.key)?.crc32c ?? 0),
    };
  }

  /**
   * Ranged GETs of the pages asked for; adjacent pages of one object share a GET. Every page is checked against
   * its CRC32C: a mismatch is an 'error' outcome with ERR_CHECKSUM (the destination then holds bytes that must
   * not be used). A read with `range` is one GET of the chunks covering the range, each checked against its own
   * CRC32C (pages written without chunk CRCs: the whole page, checked whole); only the range lands in `into`. A GET that fails after retries (or while the breaker is open) gives 'error' outcomes for its
   * pages with the request's code (ERR_UNAVAILABLE, ERR_TIMEOUT, ERR_IO); an object that vanished gives misses.
   * @throws TierSyncError ERR_INVALID_ARGUMENT / ERR_OUT_OF_RANGE (bad input, before any I/O), ERR_ABORTED and
   *   ERR_TIMEOUT (the caller's signal or deadline), ERR_CLOSED.
   */
  read(pages: readonly PageRead[], options: IoOptions = {}): Promise<ReadOutcome[]> {
    const { bucket, staging } = this.#ready();
    checkReads(pages, this.#context.pageBytes, TIER);
    const found: ReadItem[] = [];
    const outcomes: ReadOutcome[] = new Array(pages.length);
    for (const [index, p] of pages.entries()) {
      const page = this.#table.get(p.key);
      if (!page) continue;
      const range = p.range;
      if (range !== undefined) {
        if (typeof range !== 'object' || range === null || !Number.isSafeInteger(range.offset) || !Number.isSafeInteger(range.length) || range.offset < 0 || range.length < 1 || range.offset + range.length > page.length) {
          return Promise.reject(this.#error(`pages[${index}].range [${String(range?.offset)}, +${String(range?.length)}) is not inside the page's ${page.length} bytes`, 'ERR_OUT_OF_RANGE'));
        }
        if (p.into.length < range.length) return Promise.reject(this.#error(`pages[${index}].into holds ${p.into.length} bytes, the range has ${range.length}`, 'ERR_OUT_OF_RANGE'));
        found.push({ index, key: p.key, page, into: p.into, range: { offset: range.offset, length: range.length } });
        continue;
      }
      if (p.into.length < page.length) {
        return Promise.reject(this.#error(`pages[${index}].into holds ${p.into.length} bytes, the page has ${page.length}`, 'ERR_OUT_OF_RANGE'));
      }
      found.push({ index, key: p.key, page, into: p.into });
    }
    const hit = new Set(found.map((f) => f.index));
    pages.forEach((p, index) => {
      if (!hit.has(index)) {
        outcomes[index] = { key: p.key, status: 'miss' };
        this.#counters.misses++;
      }
    });
    // Pinned while bytes move, so a concurrent delete cannot remove the object under the GET.
    const keys = found.map((f) => f.key);
    this.#pins.pin(keys, () => true);
    return this.#inflight.run(async () => {
      const scope = openScope(options);
      try {
        const whole = found.filter((f) => f.range === undefined);
        const ranged = found.filter((f) => f.range !== undefined);
        const settled = await Promise.allSettled([
          ...coalesce(whole).map((run) => this.#fetchRun(bucket, staging, run, outcomes, scope, options)),
          ...ranged.map((f) => this.#fetchRange(bucket, staging, f, outcomes, scope, options)),
        ]);
        const fatal = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
        if (fatal) throw fatal.reason;
        return outcomes;
      } finally {
        scope.dispose();
        this.#pins.unpin(keys);
      }
    });
  }

  async #fetchRun(bucket: Bucket, staging: StagingPool, run: ReadItem[], outcomes: ReadOutcome[], scope: CallScope, options: IoOptions): Promise<void> {
    const first = run[0]!;
    const object = first.page.object;
    const deviceBytes = run.reduce((n, f) => n + (f.into.arena instanceof HostArena ? 0 : f.page.length), 0);
    this.#beginRead(object);
    let staged: Staged | undefined;
    try {
      if (deviceBytes > 0) staged = await staging.acquire(deviceBytes);
      let at = 0;
      const stagedAt: number[] = [];
      const targets = run.map((f, i) => {
        if (f.into.arena instanceof HostArena) return viewsOf(f.into.arena, f.into.offset, f.page.length);
        stagedAt[i] = at;
        at += f.page.length;
        return [staged!.arena.view(stagedAt[i]!, f.page.length)];
      });
      try {
        await bucket.getInto(object.name, first.page.offset, targets.flat(), scope);
      } catch (e) {
        const code = e instanceof TierSyncError ? e.code : 'ERR_IO';
        if (code === 'ERR_ABORTED' || (code === 'ERR_TIMEOUT' && scope.deadline !== undefined && Date.now() >= scope.deadline)) throw e;
        if (code === 'ERR_NOT_FOUND') return this.#vanished(object, run, outcomes);
        this.#counters.errors += run.length;
        for (const f of run) outcomes[f.index] = { key: f.key, status: 'error', error: this.#error(`page ${f.key} could not be read: ${(e as Error).message}`, code, e) };
        return;
      }
      const toDevice = new TransferBatch();
      const deviceItems: ReadItem[] = [];
      run.forEach((f, i) => {
        const views = targets[i]!;
        let crc = 0;
        for (const v of views) crc = crc32c(v, crc);
        if (crc !== f.page.crc32c) {
          this.#counters.checksumFailures++;
          this.#counters.errors++;
          outcomes[f.index] = {
            key: f.key,
            status: 'error',
            error: this.#error(`page ${f.key} failed its CRC32C check (stored ${hex(f.page.crc32c)}, read ${hex(crc)}) in ${object.name}`, 'ERR_CHECKSUM'),
          };
          return;
        }
        if (f.into.arena instanceof HostArena) this.#hit(f, outcomes);
        else {
          toDevice.add(staged!.arena, stagedAt[i]!, f.into.arena, f.into.offset, f.page.length);
          deviceItems.push(f);
        }
      });
      if (deviceItems.length > 0) {
        try {
          await this.#context.engine.submit(toDevice, { priority: options.priority ?? 'demand', ...engineLimits(scope) });
          for (const f of deviceItems) this.#hit(f, outcomes);
        } catch (e) {
          const code = e instanceof TierSyncError ? e.code : 'ERR_IO';
          if (code === 'ERR_ABORTED' || code === 'ERR_TIMEOUT') throw e;
          this.#counters.errors += deviceItems.length;
          for (const f of deviceItems) outcomes[f.index] = { key: f.key, status: 'error', error: this.#error(`page ${f.key}: copy to device failed: ${(e as Error).message}`, code, e) };
        }
      }
    } finally {
      staged?.release();
      this.#endRead(object);
    }
  }

  /**
   * One range of one page: a GET of the chunks covering it. Chunks wholly inside the range land in place (host
   * destinations); the (at most two) that stick out land in scratch memory, and only their part inside the range
   * is copied over once every chunk matched. Device destinations: all of it through staging, then one copy.
   */
  async #fetchRange(bucket: Bucket, staging: StagingPool, f: ReadItem, outcomes: ReadOutcome[], scope: CallScope, options: IoOptions): Promise<void> {
    const { page, into } = f;
    const range = f.range!;
    const object = page.object;
    const chunked = page.chunkBytes !== undefined && page.chunkCrcs !== undefined;
    const chunk = chunked ? page.chunkBytes! : page.length;
    const crcs = chunked ? page.chunkCrcs! : [page.crc32c];
    const end = range.offset + range.length;
    const k0 = Math.floor(range.offset / chunk);
    const k1 = Math.ceil(end / chunk);
    const spanStart = k0 * chunk;
    const spanEnd = Math.min(k1 * chunk, page.length);
    const host = into.arena instanceof HostArena;
    this.#beginRead(object);
    let staged: Staged | undefined;
    try {
      if (!host) staged = await staging.acquire(spanEnd - spanStart);
      const chunks: Array<{ views: Uint8Array[]; crc32c: number; scratch?: { bytes: Uint8Array; lo: number; hi: number } }> = [];
      for (let k = k0; k < k1; k++) {
        const cs = k * chunk;
        const ce = Math.min(cs + chunk, page.length);
        if (!host) chunks.push({ views: [staged!.arena.view(cs - spanStart, ce - cs)], crc32c: crcs[k]! });
        else if (cs >= range.offset && ce <= end) chunks.push({ views: viewsOf(into.arena as HostArena, into.offset + (cs - range.offset), ce - cs), crc32c: crcs[k]! });
        else {
          const bytes = new Uint8Array(ce - cs);
          chunks.push({ views: [bytes], crc32c: crcs[k]!, scratch: { bytes, lo: Math.max(cs, range.offset) - cs, hi: Math.min(ce, end) - cs } });
        }
      }
      try {
        await bucket.getInto(object.name, page.offset + spanStart, chunks.flatMap((c) => c.views), scope);
      } catch (e) {
        const code = e instanceof TierSyncError ? e.code : 'ERR_IO';
        if (code === 'ERR_ABORTED' || (code === 'ERR_TIMEOUT' && scope.deadline !== undefined && Date.now() >= scope.deadline)) throw e;
        if (code === 'ERR_NOT_FOUND') return this.#vanished(object, [f], outcomes);
        this.#counters.errors++;
        outcomes[f.index] = { key: f.key, status: 'error', error: this.#error(`range of page ${f.key} could not be read: ${(e as Error).message}`, code, e) };
        return;
      }
      for (const [n, c] of chunks.entries()) {
        let crc = 0;
        for (const v of c.views) crc = crc32c(v, crc);
        if (crc === c.crc32c) continue;
        this.#counters.checksumFailures++;
        this.#counters.errors++;
        outcomes[f.index] = {
          key: f.key,
          status: 'error',
          error: this.#error(`range [${range.offset}, +${range.length}) of page ${f.key} failed its CRC32C check (chunk ${k0 + n}: stored ${hex(c.crc32c)}, read ${hex(crc)}) in ${object.name}`, 'ERR_CHECKSUM'),
        };
        return;
      }
      if (host) {
        for (const [n, c] of chunks.entries()) {
          if (!c.scratch) continue;
          const { bytes, lo, hi } = c.scratch;
          let at = 0;
          for (const v of viewsOf(into.arena as HostArena, into.offset + (spanStart + n * chunk + lo - range.offset), hi - lo)) {
            v.set(bytes.subarray(lo + at, lo + at + v.length));
            at += v.length;
          }
        }
      } else {
        const toDevice = new TransferBatch();
        toDevice.add(staged!.arena, range.offset - spanStart, into.arena, into.offset, range.length);
        try {
          await this.#context.engine.submit(toDevice, { priority: options.priority ?? 'demand', ...engineLimits(scope) });
        } catch (e) {
          const code = e instanceof TierSyncError ? e.code : 'ERR_IO';
          if (code === 'ERR_ABORTED' || code === 'ERR_TIMEOUT') throw e;
          this.#counters.errors++;
          outcomes[f.index] = { key: f.key, status: 'error', error: this.#error(`range of page ${f.key}: copy to device failed: ${(e as Error).message}`, code, e) };
          return;
        }
      }
      this.#hit(f, outcomes);
    } finally {
      staged?.release();
      this.#endRead(object);
    }
  }

  #beginRead(object: StoredObject): void {
    object.readers++;
  }

  /** The last reader of an object whose pages all left (deleted or compacted away) lets it be deleted. */
  #endRead(object: StoredObject): void {
    if (--object.readers === 0 && object.live.size === 0 && !object.gone) {
      void this.#inflight.run(() => this.#persist(object)).catch(() => this.#counters.errors++);
    }
  }

  #hit(f: ReadItem, outcomes: ReadOutcome[]): void {
    const length = f.range?.length ?? f.page.length;
    outcomes[f.index] = { key: f.key, status: 'hit', length, crc32c: f.page.crc32c };
    this.#counters.hits++;
    this.#counters.reads++;
    this.#counters.bytesRead += length;
  }

  /** The object was removed behind our back: its pages are misses now, and leave the index. */
  #vanished(object: StoredObject, run: ReadItem[], outcomes: ReadOutcome[]): void {
    for (const f of run) {
      outcomes[f.index] = { key: f.key, status: 'miss' };
      this.#counters.misses++;
    }
    if (object.gone) return;
    object.gone = true;
    this.#objects.delete(object.id);
    for (const key of [...object.live]) {
      this.#unindex(key, this.#table.get(key)!);
      this.#pins.forget(key);
    }
  }

  async has(keys: readonly PageKey[]): Promise<boolean[]> {
    this.#ready();
    checkKeys(keys, TIER);
    return keys.map((k) => this.#table.has(k));
  }

  /**
   * Removes pages. An object whose pages are all deleted is deleted from the bucket; otherwise the deleted keys
   * are recorded in its tombstone (dead/<id>), so they stay deleted after a restart.
   * @throws TierSyncError (the code of the failed request) when the bucket could not be updated; the pages of the
   *   objects concerned are then kept, as if not deleted.
   */
  async delete(keys: readonly PageKey[]): Promise<{ deleted: PageKey[]; pinned: PageKey[] }> {
    this.#ready();
    checkKeys(keys, TIER);
    const deleted: PageKey[] = [];
    const pinned: PageKey[] = [];
    const touched = new Map<StoredObject, Array<[PageKey, StoredPage]>>();
    for (const k of new Set(keys)) {
      const page = this.#table.get(k);
      if (!page) continue;
      if (this.#pins.isPinned(k)) {
        pinned.push(k);
        continue;
      }
      this.#unindex(k, page);
      const list = touched.get(page.object) ?? [];
      list.push([k, page]);
      touched.set(page.object, list);
      deleted.push(k);
    }
    if (touched.size === 0) return { deleted, pinned };
    return this.#inflight.run(async () => {
      const objects = [...touched.keys()];
      const settled = await Promise.allSettled(objects.map((o) => this.#persist(o)));
      let failure: unknown;
      const kept = new Set<PageKey>();
      settled.forEach((s, i) => {
        if (s.status === 'fulfilled') return;
        failure ??= s.reason;
        const obj = objects[i]!;
        for (const [k, page] of touched.get(obj)!) {
          kept.add(k);
          if (this.#table.has(k) || obj.gone) continue; // written again meanwhile: the new copy stays
          this.#index(obj, k, page);
        }
        // A concurrent update may have recorded these keys as dead; rewrite the tombstone in the background.
        void this.#inflight.run(() => this.#persist(obj)).catch(() => undefined);
      });
      if (failure !== undefined) {
        this.#counters.errors++;
        const code = failure instanceof TierSyncError ? failure.code : 'ERR_IO';
        throw this.#error(
          `${kept.size} page(s) kept because the bucket could not be updated (${deleted.length - kept.size} deleted): ${(failure as Error).message}`,
          code,
          failure,
        );
      }
      for (const obj of objects) {
        if (!obj.gone && !obj.compacting && obj.live.size > 0 && obj.liveBytes < obj.dataBytes * this.config.compactBelow) {
          void this.#inflight.run(() => this.#compact(obj)).catch(() => this.#counters.errors++);
        }
      }
      return { deleted, pinned };
    });
  }

  /** Brings the bucket in line with an object's live/dead sets; serialized per object. */
  #persist(obj: StoredObject): Promise<void> {
    const next = obj.chain.then(() => this.#persistNow(obj));
    obj.chain = next.catch(() => undefined);
    return next;
  }

  async #persistNow(obj: StoredObject): Promise<void> {
    const bucket = this.#bucket!;
    if (obj.gone) return;
    if (obj.live.size === 0) {
      if (obj.readers > 0) return; // #endRead finishes the job
      await bucket.delete(obj.name);
      obj.gone = true;
      this.#objects.delete(obj.id);
      // A tombstone left behind (this delete failing) is removed at the next open.
      if (obj.tombstoned) await bucket.delete(deadName(this.config.prefix, obj.id)).catch(() => undefined);
      return;
    }
    if (obj.dead.size === 0 && !obj.tombstoned) return;
    obj.tombstoned = true;
    await bucket.put(deadName(this.config.prefix, obj.id), encodeTombstone(obj.dead));
  }

  /**
   * Rewrites the live pages of a mostly-deleted object into a new object, then lets the old one go. Runs in the
   * background after a delete. Safe at every step: until the swap, reads use the old object; after it, the old
   * object is deleted once its last in-flight GET has finished. A crash in between leaves both objects, and the
   * next open keeps the older copy of each key and deletes the then-empty newer object.
   */
  async #compact(old: StoredObject): Promise<void> {
    const { bucket, staging } = { bucket: this.#bucket!, staging: this.#staging! };
    old.compacting = true;
    this.#beginRead(old);
    try {
      const moving = [...old.live]
        .map((key) => ({ key, page: this.#table.get(key)! }))
        .filter((m) => m.page.object === old)
        .sort((a, b) => a.page.offset - b.page.offset);
      if (moving.length === 0) return;
      const offsets: number[] = [];
      let dataBytes = 0;
      for (const m of moving) {
        offsets.push(dataBytes);
        dataBytes += m.page.length;
      }
      const staged = await staging.acquire(dataBytes + footerBound(moving.length, this.#context.fingerprint, MAX_CHUNKS));
      let upload: Uploaded;
      const corrupt: typeof moving = [];
      try {
        // Adjacent live pages are read with one GET, straight to their new place in the staging arena.
        const runs: number[][] = [];
        moving.forEach((m, i) => {
          const prev = moving[i - 1];
          if (prev && prev.page.offset + prev.page.length === m.page.offset) runs[runs.length - 1]!.push(i);
          else runs.push([i]);
        });
        await Promise.all(
          runs.map((run) =>
            bucket.getInto(
              old.name,
              moving[run[0]!]!.page.offset,
              run.map((i) => staged.arena.view(offsets[i]!, moving[i]!.page.length)),
            ),
          ),
        );
        const pages: ManifestPage[] = [];
        moving.forEach((m, i) => {
          if (crc32c(staged.arena.view(offsets[i]!, m.page.length)) === m.page.crc32c) {
            pages.push({ key: m.key, offset: offsets[i]!, length: m.page.length, crc32c: m.page.crc32c, meta: m.page.meta, chunkBytes: m.page.chunkBytes, chunkCrcs: m.page.chunkCrcs });
          }
          else corrupt.push(m);
        });
        upload = await this.#putObject(bucket, staged.arena, dataBytes, pages);
      } finally {
        staged.release();
      }
      // The swap: synchronous, so no read or delete sees a half-moved object.
      const fresh = this.#newObject(upload.id, upload.name, upload.size, dataBytes);
      const before = new Map(moving.map((m) => [m.key, m.page]));
      for (const p of upload.pages) {
        const page = this.#table.get(p.key);
        if (page !== undefined && page === before.get(p.key)) {
          this.#unindex(p.key, page);
          this.#index(fresh, p.key, p);
        } else fresh.dead.add(p.key); // deleted (or restored elsewhere) while the copy ran
      }
      // A page that fails its checksum can never be served: drop it rather than carry it forward.
      for (const m of corrupt) {
        this.#counters.checksumFailures++;
        this.#counters.errors++;
        if (this.#table.get(m.key) === m.page) this.#unindex(m.key, m.page);
      }
      this.compactions++;
      await Promise.all([fresh.dead.size > 0 || fresh.live.size === 0 ? this.#persist(fresh) : undefined, this.#persist(old)]);
    } finally {
      old.compacting = false;
      this.#endRead(old);
    }
  }

  list(): AsyncIterable<PageInfo> {
    this.#ready();
    return listPages(this.#table);
  }

  pin(keys: readonly PageKey[]): void {
    this.#ready();
    this.#pins.pinKeys(keys, TIER, (k) => this.#table.has(k));
  }

  unpin(keys: readonly PageKey[]): void {
    this.#pins.unpinKeys(keys, TIER);
  }

  stats(): TierStats {
    return this.#counters.snapshot('object', this.config.capacity, this.#usedBytes, this.#table.size, this.#pins.size);
  }

  /** @internal For tests: resolves when no call or background work (tombstones, compaction) is in flight. */
  idle(): Promise<void> {
    return this.#inflight.drained();
  }

  /** @internal For white-box tests: where a page's bytes are in the bucket. */
  locate(key: PageKey): { name: string; offset: number; length: number } | undefined {
    const p = this.#table.get(key);
    return p && { name: p.object.name, offset: p.offset, length: p.length };
  }

  /** Objects, wire bytes, request and breaker counters. */
  objectStats(): ObjectTierStats {
    const r = this.#runner.counters;
    let storedBytes = 0;
    for (const o of this.#objects.values()) storedBytes += o.size;
    return {
      objects: this.#objects.size,
      storedBytes,
      bytesUp: this.#bucket?.wire.bytesUp ?? 0,
      bytesDown: this.#bucket?.wire.bytesDown ?? 0,
      requests: r.requests,
      attempts: r.attempts,
      retries: r.retries,
      timeouts: r.timeouts,
      failedRequests: r.failures,
      rejectedByBreaker: r.rejectedByBreaker,
      breaker: this.#runner.breaker.state,
      breakerOpened: this.#runner.breaker.opened,
    };
  }
}

/** A data object just written. */
interface Uploaded {
  id: string;
  name: string;
  size: number;
  dataBytes: number;
  pages: ManifestPage[];
}

interface ReadItem {
  index: number;
  key: PageKey;
  page: StoredPage;
  into: PageRead['into'];
  /** A sub-page read (PageRead.range), checked chunk by chunk. */
  range?: { offset: number; length: number };
}

/** Groups pages into runs that are adjacent in one object, so each run is one ranged GET. */
function coalesce(found: ReadItem[]): ReadItem[][] {
  const sorted = [...found].sort((a, b) => (a.page.object.id < b.page.object.id ? -1 : a.page.object.id > b.page.object.id ? 1 : a.page.offset - b.page.offset));
  const runs: ReadItem[][] = [];
  let run: ReadItem[] = [];
  for (const f of sorted) {
    const last = run[run.length - 1];
    if (last && (last.page.object !== f.page.object || last.page.offset + last.page.length !== f.page.offset)) {
      runs.push(run);
      run = [];
    }
    run.push(f);
  }
  if (run.length > 0) runs.push(run);
  return runs;
}

/** Views of [offset, +length) of a host arena, split where the range crosses a 1 GiB boundary (a view may not). */
function viewsOf(arena: HostArena, offset: number, length: number): Uint8Array[] {
  const views: Uint8Array[] = [];
  while (length > 0) {
    const n = Math.min(length, GIB - (offset % GIB));
    views.push(arena.view(offset, n));
    offset += n;
    length -= n;
  }
  return views;
}

/**
 * The caller's limits for one call. The caller's signal is relayed through a signal of our own, so that the many
 * requests of a large batch listen to ours (no listener-leak warnings on the caller's signal, nothing left
 * attached to it after the call).
 */
function openScope(options: IoOptions): CallScope & { dispose(): void } {
  const deadline = options.timeoutMs ? { deadline: Date.now() + options.timeoutMs } : {};
  const outer = options.signal;
  if (!outer) return { ...deadline, dispose: () => undefined };
  const relay = new AbortController();
  setMaxListeners(0, relay.signal);
  const forward = () => relay.abort(outer.reason);
  if (outer.aborted) forward();
  else outer.addEventListener('abort', forward, { once: true });
  return { ...deadline, signal: relay.signal, dispose: () => outer.removeEventListener('abort', forward) };
}

/** The caller's remaining limits, for an engine submit. */
function engineLimits(scope: CallScope): { signal?: AbortSignal; timeoutMs?: number } {
  const out: { signal?: AbortSignal; timeoutMs?: number } = {};
  if (scope.signal) out.signal = scope.signal;
  if (scope.deadline !== undefined) {
    const left = scope.deadline - Date.now();
    if (left < 1) throw new TierSyncError(`object tier: the call's deadline passed`, 'ERR_TIMEOUT', { tier: TIER });
    out.timeoutMs = Math.ceil(left);
  }
  return out;
}

const hex = (n: number) => `0x${n.toString(16).padStart(8, '0')}`;
