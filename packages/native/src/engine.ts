import { native, type NativeBatchResult, type NativeEndpoint, type NativeEngine, type NativeEngineStats } from './addon.js';
import { DeviceArena, HostArena } from './arena.js';
import { TierSyncError, checkInteger, describeValue } from './errors.js';
import { DIRECT_ALIGNMENT, FileHandle } from './file.js';

/** Anything a transfer descriptor can name. */
export type Endpoint = HostArena | DeviceArena | FileHandle;

/** Queues are served strictly in this order: demand loads before prefetches before write-backs. */
export type Priority = 'demand' | 'prefetch' | 'writeBack';
const PRIORITY: Record<Priority, number> = { demand: 0, prefetch: 1, writeBack: 2 };

const FIELDS = 5; // src endpoint, src offset, dst endpoint, dst offset, length

/**
 * A list of copy descriptors `(source endpoint, offset) -> (destination endpoint, offset), length`, packed into
 * a Float64Array so that submitting it hands numbers, not objects, to native code. Descriptors of one batch run
 * in parallel and in no particular order; put dependent copies in separate batches. Each descriptor is checked
 * when added, so a bad one is refused before anything is queued.
 */
export class TransferBatch {
  #data = new Float64Array(FIELDS * 16);
  #count = 0;
  #bytes = 0;
  readonly #endpoints: Endpoint[] = [];
  readonly #index = new Map<Endpoint, number>();

  get length(): number {
    return this.#count;
  }

  /** Total bytes the batch moves. */
  get bytes(): number {
    return this.#bytes;
  }

  /** @internal */
  get endpoints(): readonly Endpoint[] {
    return this.#endpoints;
  }

  /** @internal */
  get descriptors(): Float64Array {
    return this.#data.subarray(0, this.#count * FIELDS);
  }

  /**
   * Adds one copy. Offsets and length in bytes.
   * @throws TierSyncError ERR_INVALID_ARGUMENT, ERR_OUT_OF_RANGE, ERR_OVERLAP, ERR_CLOSED, ERR_READ_ONLY,
   *   ERR_MISALIGNED (O_DIRECT 'always' file), ERR_UNSUPPORTED (file->file, cuda<->file)
   */
  add(src: Endpoint, srcOffset: number, dst: Endpoint, dstOffset: number, length: number): this {
    const where = `descriptor ${this.#count}`;
    checkEndpoint(src, `${where}: source`);
    checkEndpoint(dst, `${where}: destination`);
    checkInteger(srcOffset, `${where}: srcOffset`);
    checkInteger(dstOffset, `${where}: dstOffset`);
    checkInteger(length, `${where}: length`, 1);
    if (src instanceof FileHandle && dst instanceof FileHandle) {
      throw new TierSyncError(`${where}: file->file copies are not supported; stage through an arena`, 'ERR_UNSUPPORTED');
    }
    const cuda = (e: Endpoint) => e instanceof DeviceArena && e.backend === 'cuda';
    if ((src instanceof FileHandle && cuda(dst)) || (dst instanceof FileHandle && cuda(src))) {
      throw new TierSyncError(`${where}: cuda<->file needs GPUDirect Storage; stage through a host arena`, 'ERR_UNSUPPORTED');
    }
    if (!(src instanceof FileHandle)) checkRange(src, srcOffset, length, `${where}: source`);
    if (!(dst instanceof FileHandle)) checkRange(dst, dstOffset, length, `${where}: destination`);
    if (dst instanceof FileHandle && !dst.writable) {
      throw new TierSyncError(`${where}: destination file ${dst.path} is opened read-only`, 'ERR_READ_ONLY');
    }
    if (src === dst && srcOffset < dstOffset + length && dstOffset < srcOffset + length) {
      throw new TierSyncError(`${where}: source and destination ranges overlap`, 'ERR_OVERLAP');
    }
    const file = src instanceof FileHandle ? src : dst instanceof FileHandle ? dst : undefined;
    if (file?.direct === 'always') {
      const fileOffset = file === src ? srcOffset : dstOffset;
      const memOffset = file === src ? dstOffset : srcOffset;
      // Arena bases are page aligned, so a memory offset that is aligned gives an aligned address.
      if (fileOffset % DIRECT_ALIGNMENT || length % DIRECT_ALIGNMENT || memOffset % DIRECT_ALIGNMENT) {
        throw new TierSyncError(
          `${where}: O_DIRECT needs file offset (${fileOffset}), length (${length}) and memory offset (${memOffset}) aligned to ${DIRECT_ALIGNMENT} bytes`,
          'ERR_MISALIGNED',
        );
      }
    }
    if ((this.#count + 1) * FIELDS > this.#data.length) {
      const grown = new Float64Array(this.#data.length * 2);
      grown.set(this.#data);
      this.#data = grown;
    }
    const at = this.#count * FIELDS;
    this.#data[at] = this.#slot(src);
    this.#data[at + 1] = srcOffset;
    this.#data[at + 2] = this.#slot(dst);
    this.#data[at + 3] = dstOffset;
    this.#data[at + 4] = length;
    this.#count++;
    this.#bytes += length;
    return this;
  }

  #slot(e: Endpoint): number {
    let i = this.#index.get(e);
    if (i === undefined) {
      i = this.#endpoints.length;
      this.#endpoints.push(e);
      this.#index.set(e, i);
    }
    return i;
  }
}

function checkEndpoint(e: unknown, name: string): asserts e is Endpoint {
  if (!(e instanceof HostArena || e instanceof DeviceArena || e instanceof FileHandle)) {
    throw new TierSyncError(`${name} must be a HostArena, DeviceArena or FileHandle, got ${describeValue(e)}`, 'ERR_INVALID_ARGUMENT');
  }
  if (e.closed) throw new TierSyncError(`${name} is closed`, 'ERR_CLOSED');
}

function checkRange(e: HostArena | DeviceArena, offset: number, length: number, name: string): void {
  if (offset + length > e.capacity) {
    throw new TierSyncError(`${name} range [${offset}, +${length}) exceeds arena capacity ${e.capacity}`, 'ERR_OUT_OF_RANGE');
  }
}

export interface SubmitOptions {
  /** Default 'demand'. */
  priority?: Priority;
  /** Abort the batch: queued work is dropped, running copies stop at the next chunk; rejects with ERR_ABORTED. */
  signal?: AbortSignal;
  /** Deadline in milliseconds from submission; rejects with ERR_TIMEOUT. Default: none. */
  timeoutMs?: number;
  /** fdatasync every destination file before the promise resolves. Default false. */
  durable?: boolean;
  /** Compute the CRC32C of every descriptor's bytes (returned in `checksums`). Default false. */
  checksums?: boolean;
  /**
   * Verify: the expected CRC32C of each descriptor, in order. The result lists the descriptors whose bytes
   * did not match in `mismatches` (the copy still happened; the caller must not use those bytes).
   */
  expected?: Uint32Array;
}

export type TransferResult = NativeBatchResult;

export type TransferStats = NativeEngineStats;

export interface TransferEngineOptions {
  /** Worker threads. Default: one per core. */
  threads?: number;
  /**
   * io_uring queue depth per worker for file I/O (ops of up to 4 MiB). A worker also takes up to this many small
   * file groups (one op of <= 4 MiB each, 16 MiB together: ranges or pages of one batch) in one turn. Default 32.
   */
  ioDepth?: number;
  /** 'auto' uses io_uring when built with liburing and the kernel allows it; 'sync' forces preadv/pwritev. Default 'auto'. */
  io?: 'auto' | 'sync';
  /** Run workers under SCHED_BATCH so the JS thread preempts them when it wakes. Default true. */
  batchScheduling?: boolean;
  /**
   * Most workers that run prefetch and write-back batches at once. Default: threads - 1 (at least 1), so a demand
   * batch always finds a free worker and background storms leave a core to the caller's thread.
   */
  backgroundThreads?: number;
}

/**
 * Moves bytes between arenas and files on a pool of native threads. `submit` returns at once; the promise settles
 * on the JS thread when the whole batch is done. Nothing of a page's bytes passes through JavaScript.
 */
export class TransferEngine {
  readonly #native: NativeEngine;
  #closed = false;

  constructor(options: TransferEngineOptions = {}) {
    if (options.threads !== undefined) checkInteger(options.threads, 'threads', 1);
    if (options.ioDepth !== undefined) checkInteger(options.ioDepth, 'ioDepth', 1);
    if (options.backgroundThreads !== undefined) checkInteger(options.backgroundThreads, 'backgroundThreads', 1);
    this.#native = new native.TransferEngine(options);
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Queues a batch. Rejects with ERR_ABORTED, ERR_TIMEOUT, ERR_IO (with the OS reason) or ERR_CLOSED (engine closed
   * before the batch ran); throws synchronously for bad input, before anything is queued.
   */
  submit(batch: TransferBatch, options: SubmitOptions = {}): Promise<TransferResult> {
    if (!(batch instanceof TransferBatch)) {
      throw new TierSyncError(`batch must be a TransferBatch, got ${describeValue(batch)}`, 'ERR_INVALID_ARGUMENT');
    }
    if (this.#closed) throw new TierSyncError('transfer engine is closed', 'ERR_CLOSED');
    const priority = PRIORITY[options.priority ?? 'demand'];
    if (priority === undefined) {
      throw new TierSyncError(`priority must be 'demand', 'prefetch' or 'writeBack', got ${describeValue(options.priority)}`, 'ERR_INVALID_ARGUMENT');
    }
    if (options.timeoutMs !== undefined) checkInteger(options.timeoutMs, 'timeoutMs', 1);
    if (options.expected !== undefined) {
      if (!(options.expected instanceof Uint32Array) || options.expected.length !== batch.length) {
        throw new TierSyncError(`expected must be a Uint32Array with one checksum per descriptor (${batch.length})`, 'ERR_INVALID_ARGUMENT');
      }
    }
    if (options.signal?.aborted) {
      return Promise.reject(new TierSyncError('transfer aborted before submission', 'ERR_ABORTED', { cause: options.signal.reason }));
    }
    for (const e of batch.endpoints) if (e.closed) throw new TierSyncError('an endpoint of the batch is closed', 'ERR_CLOSED');
    // Captured now so that an asynchronous failure points at the caller, not at the event loop.
    const origin: { stack?: string } = {};
    Error.captureStackTrace(origin, this.submit);
    const { id, promise } = this.#native.submit(
      batch.endpoints.map((e) => e.native as NativeEndpoint),
      batch.descriptors,
      {
        priority,
        durable: options.durable ?? false,
        checksums: options.checksums ?? false,
        ...(options.expected ? { expected: options.expected } : {}),
        ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
      },
    );
    const signal = options.signal;
    const onAbort = () => this.#native.cancel(id, 'abort');
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer = options.timeoutMs ? setTimeout(() => this.#native.cancel(id, 'timeout'), options.timeoutMs) : undefined;
    timer?.unref();
    return promise.then(
      (result) => {
        signal?.removeEventListener('abort', onAbort);
        if (timer) clearTimeout(timer);
        return result;
      },
      (error: unknown) => {
        signal?.removeEventListener('abort', onAbort);
        if (timer) clearTimeout(timer);
        if (error instanceof Error && origin.stack) error.stack = `${error.stack}\n    --- submitted at ---${origin.stack.slice(origin.stack.indexOf('\n'))}`;
        throw error;
      },
    );
  }

  /** Counters: bytes and operations per path, queue depth per priority, busy time, errors. */
  stats(): TransferStats {
    return this.#native.stats();
  }

  /** Refuses new batches at once; resolves when every pending batch has settled and the threads have stopped. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#native.close();
  }
}
