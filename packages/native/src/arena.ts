import { native, type NativeDeviceArena, type NativeHostArena } from './addon.js';
import { TierSyncError, checkInteger, describeValue } from './errors.js';

/** Options of {@link HostArena.create}. */
export interface HostArenaOptions {
  /** Usable bytes. Required, > 0. */
  capacity: number;
  /** Page size in bytes recorded in the geometry of a shared arena (the arena itself does not carve pages). Default 4096. */
  pageSize?: number;
  /**
   * Back the arena with this file (normally under /dev/shm) so that a restarted process can reattach the same
   * bytes. The file holds a 4 KiB header with the geometry; a mismatch refuses to reattach with
   * ERR_GEOMETRY_MISMATCH saying which field differs. Default: anonymous memory, lost at exit.
   */
  shmPath?: string;
  /** Caller's KV layout fingerprint, recorded in and checked against a shared arena's header. Default ''. */
  fingerprint?: string;
  /** With shmPath: create the file when absent. Default true. */
  create?: boolean;
  /** With shmPath: reattach when present (else ERR_INVALID_ARGUMENT). Default true. */
  attach?: boolean;
  /** mlock the arena so it is never swapped (needs RLIMIT_MEMLOCK or root). Default false. */
  lock?: boolean;
  /** Ask for transparent huge pages (madvise MADV_HUGEPAGE). Default false. */
  hugePages?: boolean;
  /** Fault every page in at creation (MAP_POPULATE) so first transfers do not pay for it. Default false. */
  prefault?: boolean;
}

function checkOptionsObject(options: unknown, what: string): asserts options is Record<string, unknown> {
  if (typeof options !== 'object' || options === null) {
    throw new TierSyncError(`${what} options must be an object, got ${describeValue(options)}`, 'ERR_INVALID_ARGUMENT');
  }
}

/**
 * Page-aligned host memory that transfers read and write on native threads. Byte ranges can be lent to
 * JavaScript with {@link HostArena.view} (zero copy).
 */
export class HostArena {
  /** @internal */
  readonly native: NativeHostArena;
  readonly capacity: number;
  readonly pageSize: number;
  /** True when a shared arena was reattached with its previous contents. */
  readonly attached: boolean;
  /** Why the arena starts empty or that it was reattached (for logs). */
  readonly attachNote: string;
  readonly shmPath: string | undefined;
  #closed = false;

  private constructor(raw: NativeHostArena, shmPath: string | undefined) {
    this.native = raw;
    const info = raw.info();
    this.capacity = info.capacity;
    this.pageSize = info.pageSize;
    this.attached = info.attached;
    this.attachNote = info.attachNote;
    this.shmPath = shmPath;
  }

  /** @throws TierSyncError ERR_INVALID_ARGUMENT, ERR_NO_MEMORY, ERR_GEOMETRY_MISMATCH, ERR_IO */
  static create(options: HostArenaOptions): HostArena {
    checkOptionsObject(options, 'HostArena');
    checkInteger(options.capacity, 'capacity', 1);
    if (options.pageSize !== undefined) checkInteger(options.pageSize, 'pageSize', 1);
    if (options.shmPath !== undefined && (typeof options.shmPath !== 'string' || options.shmPath.length === 0)) {
      throw new TierSyncError(`shmPath must be a non-empty string, got ${describeValue(options.shmPath)}`, 'ERR_INVALID_ARGUMENT');
    }
    return new HostArena(new native.HostArena(options), options.shmPath);
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Lends bytes [offset, offset+length) to JavaScript without copying. The view stays valid (it keeps the memory
   * mapped) until it is garbage collected, even after close(); writes through it race with transfers touching
   * the same range, so hand pages to the engine only when you are done writing. A view may not cross a 1 GiB
   * boundary of the arena.
   * @throws TierSyncError ERR_OUT_OF_RANGE, ERR_CLOSED, ERR_INVALID_ARGUMENT
   */
  view(offset: number, length: number): Uint8Array {
    checkInteger(offset, 'offset');
    checkInteger(length, 'length');
    if (offset + length > this.capacity) {
      throw new TierSyncError(`view [${offset}, +${length}) exceeds arena capacity ${this.capacity}`, 'ERR_OUT_OF_RANGE');
    }
    return this.native.view(offset, length);
  }

  /** Refuses new transfers at once; memory is released after in-flight transfers and lent views let go. */
  close(): void {
    this.#closed = true;
    this.native.close();
  }
}

/** Options of {@link DeviceArena.create}. */
export type DeviceArenaOptions =
  | {
      backend?: 'sim';
      /** Bytes of emulated accelerator memory. */
      capacity: number;
      /** Emulated link bandwidth in bytes per second, shared by all copies in one direction. Default: unlimited. */
      bandwidthBytesPerSec?: number;
      /** Emulated fixed latency per copy, in nanoseconds. Default 0. */
      latencyNs?: number;
    }
  | {
      backend: 'cuda';
      /** Bytes to cudaMalloc. */
      capacity: number;
      /** CUDA device ordinal. Default 0. */
      device?: number;
    };

/**
 * Accelerator memory. JavaScript never gets a view of it; bytes move in and out through the transfer engine.
 * `sim` emulates it in host memory (optionally with a bandwidth/latency model); `cuda` uses cudaMalloc through a
 * libcudart loaded at run time (see {@link cudaStatus}).
 */
export class DeviceArena {
  /** @internal */
  readonly native: NativeDeviceArena;
  readonly capacity: number;
  readonly backend: 'sim' | 'cuda';
  readonly device: number;
  #closed = false;

  private constructor(raw: NativeDeviceArena) {
    this.native = raw;
    const info = raw.info();
    this.capacity = info.capacity;
    this.backend = info.backend;
    this.device = info.device;
  }

  /** @throws TierSyncError ERR_INVALID_ARGUMENT, ERR_UNAVAILABLE (no CUDA driver/device, with CUDA's reason), ERR_NO_MEMORY */
  static create(options: DeviceArenaOptions): DeviceArena {
    checkOptionsObject(options, 'DeviceArena');
    checkInteger(options.capacity, 'capacity', 1);
    const backend = options.backend ?? 'sim';
    if (backend !== 'sim' && backend !== 'cuda') {
      throw new TierSyncError(`backend must be 'sim' or 'cuda', got ${describeValue(backend)}`, 'ERR_INVALID_ARGUMENT');
    }
    return new DeviceArena(new native.DeviceArena({ ...options, backend }));
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(): void {
    this.#closed = true;
    this.native.close();
  }
}

/** Whether the cuda backend can be used here, and CUDA's own words when it cannot. */
export function cudaStatus(): ReturnType<typeof native.cudaStatus> {
  return native.cudaStatus();
}
