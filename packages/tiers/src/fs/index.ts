/**
 * fs tier: a folder on local SSD or a Filestore/NFS mount, `fs:///mnt/filestore/kv?capacity=2TiB`.
 *
 * Pages live in fixed slots of preallocated slab files (`slab-000000.tsd`, ...), each slot with a 512-byte
 * header (key, length, CRC32C, generation, the page's namespace, parent and position, self-checksum). A write lands in two durable steps: all page data of
 * the call in one native batch, fdatasync; then all headers in a second batch, fdatasync. Only then is a page
 * visible. open() rebuilds the index from the headers alone, so a crash at any point leaves either the old state
 * or the complete new page, never a torn one (README.md has the argument). Every read is checked: a whole page
 * against the page's CRC32C, a range (`PageRead.range`) against the CRC32Cs of the chunks covering it (stored in
 * the header; pages written without them are read whole into a staging area for a range).
 */
import { statfsSync, truncateSync } from 'node:fs';
import { mkdir, open as openFile, readdir, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import {
  FileHandle,
  HostArena,
  PageAllocator,
  TierSyncError,
  TransferBatch,
  crc32cCombine,
  probeDirect,
  type ErrorCode,
  type Slot,
  type TransferResult,
} from '@tiersync/native';
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
import { ioLimits } from '../memory-tier.js';
import { InFlight, PinTable, TierCounters, listPages } from '../stats.js';
import { checkKeys, checkReads, checkWrites } from '../validate.js';
import { ALIGN, HEADER_BYTES, MAX_SLABS, alignUp, defaultSlabBytes, fullSlabBytes, geometryFor, parseFsUrl, slotsFor, type FsTierConfig, type Geometry } from './config.js';
import {
  MANIFEST,
  MAX_CHUNKS,
  SLAB_PATTERN,
  acquireLock,
  dataOffset,
  decodeHeader,
  encodeHeader,
  headerOffset,
  ioError,
  newManifest,
  VERSION,
  readManifest,
  releaseLock,
  slabName,
  syncFolder,
  volumeOf,
  writeManifest,
  type Volume,
} from './format.js';

export { parseFsUrl, type FsTierConfig } from './config.js';

/** What open() found in the folder. */
export interface FsRecoveryReport {
  /** Slab files present at open. */
  slabs: number;
  /** Pages recovered: valid header, inside the capacity (and, with verify=full, bytes matching their CRC32C). */
  pages: number;
  /** Headers whose self-checksum failed (a header write cut short, or damage): slot dropped and cleared. */
  torn: number;
  /** Headers with a valid checksum that do not belong in their slot (another folder, slot, key or length): dropped. */
  invalid: number;
  /** Older copies of a key stored twice (a delete whose clear was cut short, then a rewrite): dropped. */
  duplicates: number;
  /**
   * Copies, in slots beyond a capacity that shrank since they were written, of pages also held inside it: dropped
   * (whole slab files beyond it removed). A page held only beyond the capacity refuses the open (ERR_CONFIG).
   */
  beyondCapacity: number;
  /** verify=full: pages whose bytes did not match their CRC32C: dropped. */
  corrupt: number;
}

interface StoredPage {
  slot: number;
  length: number;
  crc32c: number;
  generation: number;
  /** Chunk size of `chunkCrcs`; 0 for a page written without them (older format): range reads read it whole. */
  chunkBytes: number;
  chunkCrcs: readonly number[];
  /** Namespace, parent and position the page was written with (header version 2); absent otherwise. */
  meta?: PageMeta | undefined;
}

/** One chunk of a page to read and verify: where it is in its slab file, its length and its CRC32C. */
interface ChunkRead {
  fileAt: number;
  length: number;
  crc32c: number;
}

interface Slab {
  path: string;
  /** Page data: O_DIRECT when aligned (per `direct`). */
  data: FileHandle;
  /** Headers (512 bytes, never O_DIRECT-aligned): the same handle, or a buffered one with direct=always. */
  meta: FileHandle;
}

/** Header staging cells handed to one write. */
interface Cells {
  arena: HostArena;
  bytes: Uint8Array;
  view: DataView;
  offsets: number[];
  release(): void;
}

const TIER = 'fs';
/** Header cells kept for writes (2 MiB); a larger batch stages in an arena of its own. Cell 0 stays zero. */
const POOL_CELLS = 4096;
const ZERO_CELL = 0;
/** verify=full reads pages through a staging arena this large. */
const VERIFY_CHUNK = 64 * 2 ** 20;
/** open() reads slot headers in chunks of this many (8 MiB). */
const SCAN_HEADERS = 16384;

/**
 * The fs tier driver. Create with a URL and the hierarchy's context, then `await open()`.
 *
 * Errors: ERR_CONFIG (URL, page size vs direct=always, a capacity below pages the folder holds), ERR_GEOMETRY_MISMATCH (the folder was written with another
 * page size, fingerprint or slab size; the message names the field), ERR_UNAVAILABLE (folder held by another
 * process's kernel lock, or already open in this one),
 * ERR_UNSUPPORTED (direct=always without O_DIRECT), ERR_TIER_FULL (capacity or disk full), ERR_IO, ERR_CLOSED,
 * plus the argument errors of every driver. Timeouts: none unless the caller passes `timeoutMs`.
 */
export class FsTier implements TierDriver {
  readonly capabilities: TierCapabilities = {
    kind: 'fs',
    persistent: true,
    remote: false,
    zeroCopy: true,
    // Device arenas cannot reach a file directly (cuda<->file needs GPUDirect Storage): stage through host.
    memoryKinds: ['host'],
    verifiesOnRead: true,
    // Ranges are verified too: against per-chunk CRC32Cs stored in the slot header (pages of the older format,
    // without them, are read whole into a staging area and checked against the page's CRC32C).
    rangeReads: true,
  };
  readonly url: string;
  readonly config: FsTierConfig;
  /** What open() found, for logs and tests. */
  readonly recovery: FsRecoveryReport = { slabs: 0, pages: 0, torn: 0, invalid: 0, duplicates: 0, beyondCapacity: 0, corrupt: 0 };
  /** One line on how the tier opened (new or recovered folder, O_DIRECT or buffered), for logs. */
  openNote = '';

  readonly #context: TierContext;
  readonly #table = new Map<PageKey, StoredPage>();
  /** Keys whose write is in flight, with a promise that settles when that write has finished either way. */
  readonly #pending = new Map<PageKey, Promise<void>>();
  readonly #counters = new TierCounters();
  readonly #pins = new PinTable();
  readonly #inflight = new InFlight();
  #state: 'new' | 'opening' | 'open' | 'closed' = 'new';
  #geometry: Geometry | undefined;
  #volume: Volume = [0, 0];
  #totalSlots = 0;
  #slabs: Array<Slab | undefined> = [];
  #allocator: PageAllocator | undefined;
  #staging: { arena: HostArena; bytes: Uint8Array; view: DataView; cells: PageAllocator } | undefined;
  #generation = 1;
  #usedBytes = 0;
  /** Slots whose clearing failed: kept out of use until the next open() sorts them out. */
  #quarantined = 0;
  #locked = false;

  /** @throws TierSyncError ERR_CONFIG for a bad URL (the message names the option) */
  constructor(url: string, context: TierContext) {
    this.config = parseFsUrl(url);
    this.url = this.config.redacted;
    this.#context = context;
  }

  /**
   * Opens (creating when needed) the folder: takes its lock, checks or writes the manifest, scans every slot
   * header and rebuilds the index; torn and invalid slots are cleared and counted in `recovery`.
   */
  async open(): Promise<void> {
    if (this.#state !== 'new') throw this.#error('open() may be called once per driver', 'ERR_INVALID_ARGUMENT');
    this.#state = 'opening';
    try {
      await this.#open();
    } catch (e) {
      this.#teardown(false);
      this.#state = 'closed';
      throw e;
    }
    if (this.#state !== 'opening') {
      this.#teardown(false);
      throw this.#error('closed while opening', 'ERR_CLOSED');
    }
    this.#state = 'open';
  }

  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    await this.#inflight.drained();
    this.#teardown(false);
  }

  /**
   * Stores pages durably: resolves once their data and then their headers have been fdatasync'ed. Default
   * priority 'writeBack'.
   * @throws TierSyncError ERR_TIER_FULL (the new pages do not all fit: nothing written), ERR_MISALIGNED
   *   (direct=always), ERR_UNSUPPORTED (a cuda arena), ERR_IO, ERR_ABORTED, ERR_TIMEOUT, ERR_CLOSED
   */
  write(pages: readonly PageWrite[], options: IoOptions = {}): Promise<WriteResult> {
    this.#ready();
    checkWrites(pages, this.#context.pageBytes, TIER);
    return this.#inflight.run(() => this.#write(pages, options));
  }

  /**
   * Loads pages (or ranges of pages), each checked against its CRC32C (a range: the CRC32Cs of every chunk covering
   * it): a mismatch is an 'error' outcome (ERR_CHECKSUM), as is every page of a batch that hit an I/O error
   * (ERR_IO). Chunks wholly inside a range land in place; the at most two that stick out are read into a staging
   * area and only their part inside the range is copied over, once verified. Default priority 'demand'.
   * @throws TierSyncError ERR_OUT_OF_RANGE (a destination shorter than its page), ERR_ABORTED, ERR_TIMEOUT, ERR_CLOSED
   */
  read(pages: readonly PageRead[], options: IoOptions = {}): Promise<ReadOutcome[]> {
    this.#ready();
    checkReads(pages, this.#context.pageBytes, TIER);
    return this.#inflight.run(() => this.#read(pages, options));
  }

  async has(keys: readonly PageKey[]): Promise<boolean[]> {
    this.#ready();
    checkKeys(keys, TIER);
    return keys.map((k) => this.#table.has(k));
  }

  /** Removes pages at once; their slots are reused only after their headers are durably cleared. */
  async delete(keys: readonly PageKey[]): Promise<{ deleted: PageKey[]; pinned: PageKey[] }> {
    this.#ready();
    checkKeys(keys, TIER);
    return this.#inflight.run(async () => {
      const deleted: PageKey[] = [];
      const pinned: PageKey[] = [];
      const slots: number[] = [];
      for (const k of new Set(keys)) {
        const page = this.#table.get(k);
        if (!page) continue;
        if (this.#pins.isPinned(k)) {
          pinned.push(k);
          continue;
        }
        // Invisible at once; the slot is reused only after its header is durably cleared (see #clearSlots).
        this.#table.delete(k);
        this.#usedBytes -= page.length;
        slots.push(page.slot);
        deleted.push(k);
      }
      if (slots.length > 0) await this.#clearSlots(slots);
      return { deleted, pinned };
    });
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
    return this.#counters.snapshot('fs', this.#totalSlots * this.#context.pageBytes, this.#usedBytes, this.#table.size, this.#pins.size);
  }

  /** Slots out of use because clearing their header failed (an I/O error); they come back at the next open(). */
  get quarantinedSlots(): number {
    return this.#quarantined;
  }

  /**
   * @internal White-box tests: where a stored page lives on disk.
   */
  locate(key: PageKey): { path: string; headerOffset: number; dataOffset: number; length: number; slot: number } | undefined {
    const page = this.#table.get(key);
    const g = this.#geometry;
    if (!page || !g) return undefined;
    const index = Math.floor(page.slot / g.slotsPerSlab);
    const inSlab = page.slot % g.slotsPerSlab;
    return { path: join(this.config.path, slabName(index)), headerOffset: headerOffset(inSlab), dataOffset: dataOffset(g, inSlab), length: page.length, slot: page.slot };
  }

  /**
   * @internal Tests: stop as a killed process would. Nothing is flushed or waited for; the kernel lock is dropped
   * (as the kernel drops a killed holder's) and the lock file stays behind.
   */
  simulateCrash(): void {
    this.#state = 'closed';
    this.#teardown(true);
  }

  // -------------------------------------------------------------------------------------------------------------

  #error(message: string, code: ErrorCode, cause?: unknown): TierSyncError {
    return new TierSyncError(`fs tier: ${message}`, code, { tier: TIER, ...(cause === undefined ? {} : { cause }) });
  }

  /** ERR_CONFIG found at open (it depends on the context's page size or the folder), naming the URL. */
  #configError(reason: string): TierSyncError {
    return new TierSyncError(`tier URL '${this.config.redacted}': ${reason}`, 'ERR_CONFIG', { tier: TIER });
  }

  #ready(): void {
    if (this.#state === 'closed') throw this.#error('tier is closed', 'ERR_CLOSED');
    if (this.#state !== 'open') throw this.#error('tier is not open; call open() first', 'ERR_CLOSED');
  }

  #teardown(crashed: boolean): void {
    for (const slab of this.#slabs) {
      if (!slab) continue;
      slab.data.close();
      if (slab.meta !== slab.data) slab.meta.close();
    }
    this.#slabs = [];
    this.#staging?.arena.close();
    this.#staging = undefined;
    if (this.#locked) releaseLock(this.config.path, crashed);
    this.#locked = false;
  }

  async #open(): Promise<void> {
    const c = this.config;
    const pageBytes = this.#context.pageBytes;
    // Slot headers record lengths as 32-bit numbers.
    if (!Number.isSafeInteger(pageBytes) || pageBytes < 1 || pageBytes > 0xffffffff) {
      throw this.#configError(`page size must be an integer in [1, 2^32), got ${pageBytes}`);
    }
    if (c.direct === 'always' && pageBytes % ALIGN !== 0) {
      throw this.#configError(`direct=always needs a page size that is a multiple of ${ALIGN} bytes, got ${pageBytes}`);
    }
    try {
      await mkdir(c.path, { recursive: true });
    } catch (e) {
      throw ioError(`cannot create folder ${c.path}`, e);
    }
    acquireLock(c.path);
    this.#locked = true;
    const notes: string[] = [];
    if (c.direct === 'never') {
      notes.push('buffered I/O (direct=never)');
    } else {
      const probe = probeDirect(c.path);
      if (probe.supported) notes.push('O_DIRECT for aligned pages');
      else if (c.direct === 'always') throw this.#error(`direct=always, but ${c.path} does not support O_DIRECT: ${probe.reason ?? 'unknown'}`, 'ERR_UNSUPPORTED');
      else notes.push(`buffered I/O (O_DIRECT unavailable: ${probe.reason ?? 'unknown'})`);
    }

    let names: string[];
    try {
      names = await readdir(c.path);
    } catch (e) {
      throw ioError(`cannot list ${c.path}`, e);
    }
    const slabFiles = new Map<number, string>();
    for (const n of names) {
      const m = SLAB_PATTERN.exec(n);
      if (m) slabFiles.set(Number(m[1]), n);
    }
    this.recovery.slabs = slabFiles.size;

    // Geometry: the folder's own when it has a manifest, else from the URL.
    let manifest = await readManifest(c.path);
    const wanted = c.slab === undefined ? undefined : geometryFor(pageBytes, c.slab);
    if (c.slab !== undefined && !wanted) {
      throw this.#configError(`option 'slab' (${c.slab} bytes) cannot hold one ${pageBytes}-byte page slot and its header`);
    }
    let fresh = false;
    if (!manifest) {
      if (slabFiles.size > 0) {
        throw this.#error(`${c.path} holds slab files but no ${MANIFEST}: refusing to guess its page size and fingerprint (use another folder, or remove this one)`, 'ERR_GEOMETRY_MISMATCH');
      }
      const g = wanted ?? geometryFor(pageBytes, defaultSlabBytes(c.capacity));
      if (!g) throw this.#configError(`capacity ${c.capacity} bytes cannot hold one ${pageBytes}-byte page slot and its header`);
      this.#checkSlabCount(g);
      manifest = newManifest(g, this.#context.fingerprint);
      await writeManifest(c.path, manifest);
      fresh = true;
    } else {
      const where = join(c.path, MANIFEST);
      if (manifest.pageBytes !== pageBytes) {
        throw this.#error(
          `page size mismatch: ${where} records page size ${manifest.pageBytes} bytes, this hierarchy uses ${pageBytes}; refusing to reuse its pages (use another folder, or remove this one)`,
          'ERR_GEOMETRY_MISMATCH',
        );
      }
      if (manifest.fingerprint !== this.#context.fingerprint) {
        throw this.#error(
          `fingerprint mismatch: ${where} records fingerprint '${manifest.fingerprint}', expected '${this.#context.fingerprint}'; refusing to reuse its pages (use another folder, or remove this one)`,
          'ERR_GEOMETRY_MISMATCH',
        );
      }
      if (wanted && wanted.slotsPerSlab !== manifest.slotsPerSlab) {
        throw this.#error(
          `slab size mismatch: ${where} records slabs of ${manifest.slotsPerSlab} slots, option 'slab' asks for ${wanted.slotsPerSlab}; drop the option to keep the folder's`,
          'ERR_GEOMETRY_MISMATCH',
        );
      }
      if (manifest.version !== VERSION) {
        // Before any version-2 slot header lands: from now on a build that reads only version 1 refuses the folder
        // rather than clearing headers it cannot read. Slot headers of version 1 stay as they are (read, no meta).
        manifest = { ...manifest, version: VERSION };
        await writeManifest(c.path, manifest);
        notes.push('folder format upgraded to version 2');
      }
    }
    const g: Geometry = { pageBytes, slotStride: manifest.slotStride, slotsPerSlab: manifest.slotsPerSlab, dataOffset: manifest.dataOffset };
    this.#geometry = g;
    this.#volume = volumeOf(manifest.volume);
    this.#checkSlabCount(g);
    this.#totalSlots = slotsFor(c.capacity, g);
    if (this.#totalSlots < 1) {
      throw this.#configError(`capacity ${c.capacity} bytes holds no page slot (the first needs ${g.dataOffset + g.slotStride} bytes)`);
    }

    const pages = await this.#scan(slabFiles);
    this.#allocator = new PageAllocator({ capacity: this.#totalSlots * pageBytes, pageBytes });
    this.#allocator.reserve([...pages.values()].map((p) => p.slot));
    for (const [key, p] of pages) {
      this.#table.set(key, p);
      this.#usedBytes += p.length;
      if (p.generation >= this.#generation) this.#generation = p.generation + 1;
    }
    const arena = HostArena.create({ capacity: POOL_CELLS * HEADER_BYTES });
    const bytes = arena.view(0, POOL_CELLS * HEADER_BYTES);
    const cells = new PageAllocator({ capacity: POOL_CELLS * HEADER_BYTES, pageBytes: HEADER_BYTES });
    if (cells.allocate(1)?.[0] !== ZERO_CELL) throw this.#error('staging cell 0 not free', 'ERR_INVALID_ARGUMENT');
    this.#staging = { arena, bytes, view: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), cells };
    if (c.verify === 'full') this.recovery.corrupt = await this.#verifyAll();
    this.recovery.pages = this.#table.size;

    const r = this.recovery;
    const dropped = [
      r.torn && `${r.torn} torn`,
      r.invalid && `${r.invalid} invalid`,
      r.duplicates && `${r.duplicates} duplicate`,
      r.beyondCapacity && `${r.beyondCapacity} beyond capacity`,
      r.corrupt && `${r.corrupt} corrupt`,
    ].filter(Boolean);
    this.openNote = [
      fresh ? `new folder ${c.path}` : `${c.path}: ${r.pages} page(s) recovered from ${r.slabs} slab file(s)`,
      ...(dropped.length ? [`dropped ${dropped.join(', ')} slot(s)`] : []),
      `${this.#totalSlots} slots of ${pageBytes} bytes`,
      ...notes,
    ].join('; ');
  }

  #checkSlabCount(g: Geometry): void {
    const slabs = Math.ceil(slotsFor(this.config.capacity, g) / g.slotsPerSlab);
    if (slabs > MAX_SLABS) {
      throw this.#configError(`capacity / slab size gives ${slabs} slab files, more than ${MAX_SLABS}; use a larger 'slab' (slabs here are ${fullSlabBytes(g)} bytes)`);
    }
  }

  #slotsIn(index: number): number {
    const g = this.#geometry!;
    return Math.max(0, Math.min(g.slotsPerSlab, this.#totalSlots - index * g.slotsPerSlab));
  }

  /**
   * Reads every slab's header area (with node:fs: buffered, so later 512-byte header writes find their 4 KiB page
   * cached) and changes nothing until it has read them all: pages in slots past the capacity refuse the open with
   * the folder untouched. Then clears what must not survive, removes slabs beyond the capacity and opens the rest.
   * @throws TierSyncError ERR_CONFIG (pages sit in slots past the capacity), ERR_IO
   */
  async #scan(slabFiles: Map<number, string>): Promise<Map<PageKey, StoredPage>> {
    const g = this.#geometry!;
    const c = this.config;
    const pages = new Map<PageKey, StoredPage>();
    const slabCount = Math.ceil(this.#totalSlots / g.slotsPerSlab);
    const buf = Buffer.alloc(Math.min(g.slotsPerSlab, SCAN_HEADERS) * HEADER_BYTES);
    const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    /** Slots (numbered within their slab) whose header must be zeroed before the slot is used, by slab index. */
    const clear = new Map<number, number[]>();
    const toClear = (slot: number): void => {
      const index = Math.floor(slot / g.slotsPerSlab);
      const list = clear.get(index);
      if (list) list.push(slot % g.slotsPerSlab);
      else clear.set(index, [slot % g.slotsPerSlab]);
    };
    /** Pages in slots past the capacity: the highest such slot of each key. */
    const outside = new Map<PageKey, number>();
    let outsideCopies = 0;
    const sorted = [...slabFiles].sort((a, b) => a[0] - b[0]);
    for (const [index, name] of sorted) {
      const path = join(c.path, name);
      const slotsHere = this.#slotsIn(index);
      let file;
      try {
        file = await openFile(path, 'r');
      } catch (e) {
        throw ioError(`cannot open ${path}`, e);
      }
      try {
        for (let first = 0; first < g.slotsPerSlab; first += SCAN_HEADERS) {
          const n = Math.min(SCAN_HEADERS, g.slotsPerSlab - first);
          buf.fill(0, 0, n * HEADER_BYTES); // a short file reads short: the rest stays zero (free)
          await file.read(buf, 0, n * HEADER_BYTES, headerOffset(first));
          for (let k = 0; k < n; k++) {
            const s = first + k;
            const slot = index * g.slotsPerSlab + s;
            const h = decodeHeader(buf, view, k * HEADER_BYTES, this.#volume, slot, g.pageBytes);
            if (h.kind === 'empty') continue;
            if (h.kind === 'page' && s < slotsHere) {
              const page: StoredPage = { slot, length: h.length, crc32c: h.crc32c, generation: h.generation, chunkBytes: h.chunkBytes, chunkCrcs: h.chunkCrcs, meta: h.meta };
              const prev = pages.get(h.key);
              if (!prev) {
                pages.set(h.key, page);
                continue;
              }
              // Both copies hold the key's bytes; keep the newer one.
              this.recovery.duplicates++;
              const loser = prev.generation >= page.generation ? page : prev;
              if (loser === prev) pages.set(h.key, page);
              toClear(loser.slot);
              continue;
            }
            if (h.kind === 'page') {
              outside.set(h.key, Math.max(slot, outside.get(h.key) ?? 0));
              outsideCopies++;
            } else if (h.kind === 'torn') this.recovery.torn++;
            else this.recovery.invalid++;
            toClear(slot);
          }
        }
      } catch (e) {
        throw e instanceof TierSyncError ? e : ioError(`cannot scan ${path}`, e);
      } finally {
        await file.close();
      }
    }

    // Acknowledged pages are never dropped to honour a smaller capacity: refuse before anything on disk changes.
    // (A copy past the capacity of a page also held inside it goes, as a duplicate would.)
    let lost = 0;
    let highest = 0;
    for (const [key, slot] of outside) {
      if (pages.has(key)) continue;
      lost++;
      highest = Math.max(highest, slot);
    }
    if (lost > 0) throw this.#shrinkRefused(lost, highest);
    this.recovery.beyondCapacity = outsideCopies;

    const zero = Buffer.alloc(HEADER_BYTES);
    let removed = false;
    for (const [index, name] of sorted) {
      const path = join(c.path, name);
      if (index >= slabCount) {
        await unlink(path).catch((e: unknown) => {
          throw ioError(`cannot remove ${path} (beyond the capacity)`, e);
        });
        removed = true;
        continue;
      }
      // A free slot's header must be invalid on disk before the slot is reused (README: crash protocol).
      const slots = clear.get(index);
      if (slots) {
        let file;
        try {
          file = await openFile(path, 'r+');
          for (const s of slots) await file.write(zero, 0, HEADER_BYTES, headerOffset(s));
          await file.datasync();
        } catch (e) {
          throw ioError(`cannot clear dropped slot headers in ${path}`, e);
        } finally {
          await file?.close();
        }
      }
      const want = g.dataOffset + this.#slotsIn(index) * g.slotStride;
      const have = await stat(path).then(
        (st) => st.size,
        (e: unknown) => {
          throw ioError(`cannot stat ${path}`, e);
        },
      );
      this.#slabs[index] = this.#openSlab(index, false, have < want);
    }
    if (removed) syncFolder(c.path);
    return pages;
  }

  /**
   * ERR_CONFIG for a capacity below pages the folder holds: `lost` pages (by key) sit in slots past it, the last in
   * slot `highest`. Names the least capacity that keeps them all.
   */
  #shrinkRefused(lost: number, highest: number): TierSyncError {
    const g = this.#geometry!;
    const slots = highest + 1;
    const full = Math.floor(slots / g.slotsPerSlab);
    const rest = slots - full * g.slotsPerSlab;
    const least = full * fullSlabBytes(g) + (rest > 0 ? g.dataOffset + rest * g.slotStride : 0);
    return this.#configError(
      `capacity ${this.config.capacity} bytes holds ${this.#totalSlots} page slot(s), but ${lost} page(s) in ${this.config.path} sit in slots past them ` +
        `(the capacity shrank since they were written); refusing to drop them. Set capacity to at least ${least} bytes (capacity=${Math.ceil(least / 2 ** 20)}MiB) to keep them, ` +
        `or empty the tier deliberately first (delete its pages from a daemon running with the old capacity, or remove the folder's slab files: their pages are lost)`,
    );
  }

  /**
   * Opens (or creates) slab `index`, sized for the slots the capacity gives it. Creating one is synchronous: a
   * posix_fallocate (milliseconds on ext4/xfs; see README for NFS) and a folder fsync so the file survives a crash.
   */
  #openSlab(index: number, create: boolean, grow: boolean): Slab {
    const g = this.#geometry!;
    const c = this.config;
    const path = join(c.path, slabName(index));
    const size = g.dataOffset + this.#slotsIn(index) * g.slotStride;
    if (create) {
      const fsInfo = statfsSync(c.path);
      const free = Number(fsInfo.bavail) * Number(fsInfo.bsize);
      if (free < size) {
        throw this.#error(`the filesystem of ${c.path} has ${free} bytes free, slab ${index} needs ${size}`, 'ERR_TIER_FULL');
      }
    }
    let data: FileHandle;
    try {
      data = FileHandle.open(path, { writable: true, create, direct: c.direct, ...(c.preallocate && (create || grow) ? { preallocate: size } : {}) });
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      if (/No space left|ENOSPC|Disk quota/i.test(message)) throw this.#error(`no space for slab ${index} (${size} bytes): ${message}`, 'ERR_TIER_FULL', e);
      const code = e instanceof TierSyncError ? e.code : 'ERR_IO';
      throw this.#error(`cannot open slab ${path}: ${message}`, code, e);
    }
    try {
      if (!c.preallocate && (create || grow) && data.size() < size) truncateSync(path, size);
      const meta = c.direct === 'always' ? FileHandle.open(path, { writable: true, direct: 'never' }) : data;
      if (create) syncFolder(c.path);
      return { path, data, meta };
    } catch (e) {
      data.close();
      throw e instanceof TierSyncError ? e : ioError(`cannot prepare slab ${path}`, e);
    }
  }

  #slabFor(slot: number): Slab {
    const index = Math.floor(slot / this.#geometry!.slotsPerSlab);
    return this.#slabs[index] ?? (this.#slabs[index] = this.#openSlab(index, true, true));
  }

  async #write(pages: readonly PageWrite[], options: IoOptions): Promise<WriteResult> {
    // A key that another call is writing right now: wait for that call, then see whether it landed (first wins).
    let fresh: PageWrite[];
    let known: Map<PageKey, number>;
    for (;;) {
      const waits = new Set<Promise<void>>();
      fresh = [];
      known = new Map();
      for (const p of pages) {
        const stored = this.#table.get(p.key);
        if (stored) {
          known.set(p.key, stored.crc32c);
          continue;
        }
        const w = this.#pending.get(p.key);
        if (w) waits.add(w);
        else fresh.push(p);
      }
      if (waits.size === 0) break;
      await Promise.all(waits);
    }
    const written = fresh.length > 0 ? await this.#store(fresh, options) : new Map<PageKey, number>();
    return {
      written: fresh.map((p) => p.key),
      existing: pages.filter((p) => !written.has(p.key)).map((p) => p.key),
      crc32c: pages.map((p) => written.get(p.key) ?? known.get(p.key)!),
    };
  }

  /** Data batch (durable), then header batch (durable), then visible. All-or-nothing for capacity. */
  async #store(fresh: readonly PageWrite[], options: IoOptions): Promise<Map<PageKey, number>> {
    const g = this.#geometry!;
    const allocator = this.#allocator!;
    const engine = this.#context.engine;
    const slots = allocator.allocate(fresh.length);
    if (!slots) {
      throw this.#error(`${fresh.length} new page(s) do not fit: ${allocator.freeCount} of ${this.#totalSlots} slots free`, 'ERR_TIER_FULL');
    }
    let settle!: () => void;
    const landed = new Promise<void>((resolve) => (settle = resolve));
    for (const p of fresh) this.#pending.set(p.key, landed);
    const priority = options.priority ?? 'writeBack';
    const limits = ioLimits(options);
    let stage: 'data' | 'headers' = 'data';
    let cells: Cells | undefined;
    try {
      // One descriptor per chunk of each page: the engine's per-descriptor CRC32Cs, computed while it writes, are
      // the chunk checksums that range reads verify, and they combine into the page's checksum (no second pass).
      const data = new TransferBatch();
      const firstDescriptor: number[] = [];
      for (let i = 0; i < fresh.length; i++) {
        const p = fresh[i]!;
        const slot = slots[i]!;
        const slab = this.#slabFor(slot).data;
        const base = dataOffset(g, slot % g.slotsPerSlab);
        const chunk = this.#chunkSize(p.source.length);
        firstDescriptor.push(data.length);
        for (let at = 0; at < p.source.length; at += chunk) data.add(p.source.arena, p.source.offset + at, slab, base + at, Math.min(chunk, p.source.length - at));
      }
      const r = await engine.submit(data, { durable: true, checksums: true, priority, ...limits });
      const sums = r.checksums!;
      const chunks = fresh.map((p, i) => {
        const chunkBytes = this.#chunkSize(p.source.length);
        const chunkCrcs: number[] = [];
        let whole = 0;
        for (let k = 0, at = 0; at < p.source.length; k++, at += chunkBytes) {
          const c = sums[firstDescriptor[i]! + k]!;
          whole = k === 0 ? c : crc32cCombine(whole, c, Math.min(chunkBytes, p.source.length - at));
          chunkCrcs.push(c);
        }
        return { whole, chunkBytes, chunkCrcs };
      });
      const crcs = chunks.map((c) => c.whole);
      stage = 'headers';
      cells = this.#headerCells(fresh.length);
      const headers = new TransferBatch();
      const writtenAt = Date.now();
      const generation = this.#generation;
      this.#generation += fresh.length;
      for (let i = 0; i < fresh.length; i++) {
        const slot = slots[i]!;
        const at = cells.offsets[i]!;
        encodeHeader(cells.bytes, cells.view, at, this.#volume, {
          key: fresh[i]!.key,
          slot,
          length: fresh[i]!.source.length,
          crc32c: crcs[i]!,
          generation: generation + i,
          writtenAt,
          chunkBytes: chunks[i]!.chunkBytes,
          chunkCrcs: chunks[i]!.chunkCrcs,
          meta: fresh[i]!.meta,
        });
        headers.add(cells.arena, at, this.#slabFor(slot).meta, headerOffset(slot % g.slotsPerSlab), HEADER_BYTES);
      }
      await engine.submit(headers, { durable: true, priority, ...limits });
      const out = new Map<PageKey, number>();
      for (let i = 0; i < fresh.length; i++) {
        const p = fresh[i]!;
        const crc = crcs[i]!;
        // The caller's bytes changed between hashing and writing: store what was written, say so.
        if (p.crc32c !== undefined && p.crc32c !== crc) this.#counters.checksumFailures++;
        this.#table.set(p.key, { slot: slots[i]!, length: p.source.length, crc32c: crc, generation: generation + i, chunkBytes: chunks[i]!.chunkBytes, chunkCrcs: chunks[i]!.chunkCrcs, meta: p.meta });
        this.#usedBytes += p.source.length;
        this.#counters.bytesWritten += p.source.length;
        out.set(p.key, crc);
      }
      this.#counters.writes += fresh.length;
      return out;
    } catch (e) {
      this.#counters.errors++;
      // Before the header batch no header names these slots: free at once. After it started, some headers may
      // have landed: clear them durably before the slots can be reused.
      if (stage === 'data') allocator.free(slots);
      else await this.#clearSlots(slots);
      throw e instanceof TierSyncError && e.tier === undefined ? new TierSyncError(`fs tier: write failed: ${e.message}`, e.code, { tier: TIER, cause: e }) : e;
    } finally {
      cells?.release();
      for (const p of fresh) if (this.#pending.get(p.key) === landed) this.#pending.delete(p.key);
      settle();
    }
  }

  #chunkSize(length: number): number {
    const chunk = this.config.crcChunk;
    return Math.ceil(length / chunk) <= MAX_CHUNKS ? chunk : alignUp(Math.ceil(length / MAX_CHUNKS));
  }

  #headerCells(count: number): Cells {
    const staging = this.#staging!;
    const taken = staging.cells.allocate(count);
    if (taken) {
      return { arena: staging.arena, bytes: staging.bytes, view: staging.view, offsets: taken.map((c) => c * HEADER_BYTES), release: () => staging.cells.free(taken) };
    }
    // More headers than the pool holds (a very large batch, or many concurrent ones): an arena of its own.
    const arena = HostArena.create({ capacity: count * HEADER_BYTES });
    const bytes = arena.view(0, count * HEADER_BYTES);
    return {
      arena,
      bytes,
      view: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength),
      offsets: Array.from({ length: count }, (_, i) => i * HEADER_BYTES),
      release: () => arena.close(),
    };
  }

  /**
   * Zeroes the headers of `slots` (durably), then returns the slots to the allocator. Keeps the invariant the
   * crash protocol rests on: a free slot never has a valid header on disk. On failure the slots stay out of use.
   */
  async #clearSlots(slots: readonly number[]): Promise<boolean> {
    const g = this.#geometry!;
    try {
      const batch = new TransferBatch();
      for (const slot of slots) batch.add(this.#staging!.arena, ZERO_CELL, this.#slabFor(slot).meta, headerOffset(slot % g.slotsPerSlab), HEADER_BYTES);
      // Small and frees space a waiting writer may need: ahead of write-back traffic.
      await this.#context.engine.submit(batch, { durable: true, priority: 'demand' });
      this.#allocator!.free(slots as Slot[]);
      return true;
    } catch {
      this.#quarantined += slots.length;
      this.#counters.errors++;
      return false;
    }
  }

  async #read(pages: readonly PageRead[], options: IoOptions): Promise<ReadOutcome[]> {
    const g = this.#geometry!;
    const outcomes: ReadOutcome[] = new Array(pages.length);
    const batch = new TransferBatch();
    const expected: number[] = [];
    /** Per found page: its descriptors in `batch`, and the bytes it delivers. */
    const found: Array<{ index: number; key: PageKey; page: StoredPage; first: number; count: number; length: number }> = [];
    /** Chunks that only partly overlap a range: read into `staged`, verified, then their part copied over. */
    const staged: Array<{ fileAt: number; slot: number; length: number; crc32c: number; at: number; from: number; to: PageRead['into']; part: number; page: number }> = [];
    let stagedBytes = 0;
    let misses = 0;
    pages.forEach((p, index) => {
      const page = this.#table.get(p.key);
      if (!page) {
        outcomes[index] = { key: p.key, status: 'miss' };
        misses++;
        return;
      }
      const base = dataOffset(g, page.slot % g.slotsPerSlab);
      const first = expected.length;
      const range = p.range;
      if (range === undefined) {
        if (p.into.length < page.length) {
          throw this.#error(`pages[${index}].into holds ${p.into.length} bytes, the page has ${page.length}`, 'ERR_OUT_OF_RANGE');
        }
        batch.add(this.#slabFor(page.slot).data, base, p.into.arena, p.into.offset, page.length);
        expected.push(page.crc32c);
        found.push({ index, key: p.key, page, first, count: 1, length: page.length });
        return;
      }
      if (typeof range !== 'object' || range === null || !Number.isSafeInteger(range.offset) || !Number.isSafeInteger(range.length) || range.offset < 0 || range.length < 1 || range.offset + range.length > page.length) {
        throw this.#error(`pages[${index}].range [${String(range?.offset)}, +${String(range?.length)}) is not inside the page's ${page.length} bytes`, 'ERR_OUT_OF_RANGE');
      }
      if (p.into.length < range.length) throw this.#error(`pages[${index}].into holds ${p.into.length} bytes, the range has ${range.length}`, 'ERR_OUT_OF_RANGE');
      // Every chunk covering the range is read whole and checked against its own CRC32C; a page without chunk
      // CRCs is one chunk (the whole page, its CRC32C). Chunks inside the range land in place; the (at most two)
      // that stick out land in a staging area, and only their part inside the range is copied over once verified.
      const chunk = page.chunkBytes > 0 ? page.chunkBytes : page.length;
      const crcs = page.chunkBytes > 0 ? page.chunkCrcs : [page.crc32c];
      const end = range.offset + range.length;
      for (let k = Math.floor(range.offset / chunk); k * chunk < end; k++) {
        const cs = k * chunk;
        const ce = Math.min(cs + chunk, page.length);
        const c: ChunkRead = { fileAt: base + cs, length: ce - cs, crc32c: crcs[k]! };
        // direct=always refuses misaligned memory: such a chunk goes through the (aligned) staging area instead.
        const aligned = this.config.direct !== 'always' || (p.into.offset + (cs - range.offset)) % ALIGN === 0;
        if (cs >= range.offset && ce <= end && aligned) {
          batch.add(this.#slabFor(page.slot).data, c.fileAt, p.into.arena, p.into.offset + (cs - range.offset), c.length);
          expected.push(c.crc32c);
        } else {
          const lo = Math.max(cs, range.offset);
          const hi = Math.min(ce, end);
          staged.push({ ...c, slot: page.slot, at: stagedBytes, from: lo - cs, to: { arena: p.into.arena, offset: p.into.offset + (lo - range.offset), length: hi - lo }, part: hi - lo, page: found.length });
          stagedBytes += alignUp(c.length);
        }
      }
      found.push({ index, key: p.key, page, first, count: expected.length - first, length: range.length });
    });
    this.#counters.misses += misses;
    if (found.length === 0) return outcomes;
    // Pinned while bytes move, so a concurrent delete cannot free and reuse the slot under the copy.
    const keys = found.map((f) => f.key);
    this.#pins.pin(keys, () => true);
    const staging = stagedBytes > 0 ? HostArena.create({ capacity: stagedBytes }) : undefined;
    try {
      const firstStaged = expected.length;
      for (const s of staged) {
        batch.add(this.#slabFor(s.slot).data, s.fileAt, staging!, s.at, s.length);
        expected.push(s.crc32c);
      }
      const limits = { priority: options.priority ?? 'demand', ...ioLimits(options) } as const;
      const failed = (e: unknown): ReadOutcome[] => {
        if (!(e instanceof TierSyncError) || e.code !== 'ERR_IO') throw e;
        // The batch failed as a whole (a disk or NFS error): none of its pages can be trusted.
        this.#counters.errors += found.length;
        for (const f of found) outcomes[f.index] = { key: f.key, status: 'error', error: this.#error(`page ${f.key} could not be read: ${e.message}`, 'ERR_IO', e) };
        return outcomes;
      };
      let r: TransferResult;
      try {
        r = await this.#context.engine.submit(batch, { expected: Uint32Array.from(expected), ...limits });
      } catch (e) {
        return failed(e);
      }
      const badDescriptors = new Set(r.mismatches ?? []);
      const bad = new Set<number>();
      found.forEach((f, n) => {
        for (let d = f.first; d < f.first + f.count; d++) if (badDescriptors.has(d)) bad.add(n);
      });
      staged.forEach((s, i) => {
        if (badDescriptors.has(firstStaged + i)) bad.add(s.page);
      });
      // Verified parts of staged chunks move to their destinations; nothing of a page with a bad chunk does.
      const copies = new TransferBatch();
      let copying = 0;
      for (const s of staged) {
        if (bad.has(s.page)) continue;
        copies.add(staging!, s.at + s.from, s.to.arena, s.to.offset, s.part);
        copying++;
      }
      if (copying > 0) {
        try {
          await this.#context.engine.submit(copies, limits);
        } catch (e) {
          return failed(e);
        }
      }
      found.forEach((f, n) => {
        if (bad.has(n)) {
          this.#counters.checksumFailures++;
          this.#counters.errors++;
          const what = f.length === f.page.length && pages[f.index]!.range === undefined ? 'page' : `range of page`;
          outcomes[f.index] = { key: f.key, status: 'error', error: this.#error(`${what} ${f.key} failed its CRC32C check (slot ${f.page.slot})`, 'ERR_CHECKSUM') };
        } else {
          outcomes[f.index] = { key: f.key, status: 'hit', length: f.length, crc32c: f.page.crc32c };
          this.#counters.hits++;
          this.#counters.reads++;
          this.#counters.bytesRead += f.length;
        }
      });
      return outcomes;
    } finally {
      staging?.close();
      this.#pins.unpin(keys);
    }
  }

  /** verify=full: reads every recovered page through a staging arena, drops those whose CRC32C differs. */
  async #verifyAll(): Promise<number> {
    const g = this.#geometry!;
    const entries = [...this.#table];
    if (entries.length === 0) return 0;
    const chunk = Math.max(g.slotStride, VERIFY_CHUNK);
    const arena = HostArena.create({ capacity: chunk });
    const bad: Array<[PageKey, StoredPage]> = [];
    try {
      for (let i = 0; i < entries.length; ) {
        const batch = new TransferBatch();
        const part: Array<[PageKey, StoredPage]> = [];
        for (let used = 0; i < entries.length && used + g.slotStride <= chunk; used += g.slotStride) {
          const entry = entries[i++]!;
          batch.add(this.#slabFor(entry[1].slot).data, dataOffset(g, entry[1].slot % g.slotsPerSlab), arena, used, entry[1].length);
          part.push(entry);
        }
        const r = await this.#context.engine.submit(batch, { expected: Uint32Array.from(part, (e) => e[1].crc32c), priority: 'prefetch' });
        for (const m of r.mismatches ?? []) bad.push(part[m]!);
      }
    } finally {
      arena.close();
    }
    for (const [key, p] of bad) {
      this.#table.delete(key);
      this.#usedBytes -= p.length;
    }
    if (bad.length > 0) await this.#clearSlots(bad.map((b) => b[1].slot));
    return bad.length;
  }
}
