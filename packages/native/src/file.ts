import { native, type NativeFile } from './addon.js';
import { TierSyncError, checkInteger, describeValue } from './errors.js';

/** O_DIRECT use: never; when offset, length and memory address are 4 KiB aligned; or always (misaligned: ERR_MISALIGNED). */
export type DirectMode = 'never' | 'auto' | 'always';

export interface FileHandleOptions {
  /** Open for writing too. Default false (read-only: using it as a destination is ERR_READ_ONLY). */
  writable?: boolean;
  /** Create when absent (needs writable). Default false. */
  create?: boolean;
  /** Truncate to 0 bytes at open (needs writable). Default false. */
  truncate?: boolean;
  /** Default 'auto'. */
  direct?: DirectMode;
  /** Reserve this many bytes with posix_fallocate at open (needs writable). Default 0. */
  preallocate?: number;
}

/** An open file that transfers read from or write to with pread/pwrite(v) or io_uring on native threads. */
export class FileHandle {
  /** @internal */
  readonly native: NativeFile;
  readonly path: string;
  readonly writable: boolean;
  readonly direct: DirectMode;
  #closed = false;

  private constructor(raw: NativeFile, path: string, writable: boolean, direct: DirectMode) {
    this.native = raw;
    this.path = path;
    this.writable = writable;
    this.direct = direct;
  }

  /** @throws TierSyncError ERR_INVALID_ARGUMENT, ERR_IO (open failed, with the OS reason), ERR_UNSUPPORTED (O_DIRECT 'always' on a filesystem without it) */
  static open(path: string, options: FileHandleOptions = {}): FileHandle {
    if (typeof path !== 'string' || path.length === 0) {
      throw new TierSyncError(`path must be a non-empty string, got ${describeValue(path)}`, 'ERR_INVALID_ARGUMENT');
    }
    const direct = options.direct ?? 'auto';
    if (direct !== 'never' && direct !== 'auto' && direct !== 'always') {
      throw new TierSyncError(`direct must be 'never', 'auto' or 'always', got ${describeValue(direct)}`, 'ERR_INVALID_ARGUMENT');
    }
    if (options.preallocate !== undefined) checkInteger(options.preallocate, 'preallocate');
    const writable = options.writable ?? false;
    return new FileHandle(new native.FileHandle({ ...options, path, direct, writable }), path, writable, direct);
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Current size in bytes (fstat). */
  size(): number {
    return this.native.size();
  }

  /** Refuses new transfers at once; the descriptors close after in-flight transfers finish. */
  close(): void {
    this.#closed = true;
    this.native.close();
  }
}

/** Alignment O_DIRECT requests need (offset, length and memory address), in bytes. */
export const DIRECT_ALIGNMENT = 4096;

export function probeDirect(dir: string): { supported: boolean; reason?: string } {
  return native.probeDirect(dir);
}
