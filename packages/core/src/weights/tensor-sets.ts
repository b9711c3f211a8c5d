/**
 * Tensor sets to publish from the command line and benchmarks: a safetensors file (the Hugging Face format: an
 * 8-byte little-endian header length, a JSON header mapping names to dtype, shape and data_offsets relative to the
 * data section, then the data), or a generated set of random tensors shaped like a model's layers.
 */
import { randomFillSync } from 'node:crypto';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { HostArena, TierSyncError } from '@tiersync/native';
import type { TensorSource } from './publisher.js';

const GiB = 1024 ** 3;
const READ_PIECE = 64 * 1024 * 1024;

/** Fills `length` bytes of `arena` at `offset` through views that never cross a 1 GiB boundary. */
function forEachView(arena: HostArena, offset: number, length: number, fn: (view: Uint8Array, at: number) => void): void {
  for (let at = 0; at < length; ) {
    const pos = offset + at;
    const n = Math.min(length - at, READ_PIECE, GiB - (pos % GiB));
    fn(arena.view(pos, n), at);
    at += n;
  }
}

export interface LoadedTensors {
  arena: HostArena;
  tensors: TensorSource[];
}

/**
 * Loads every tensor of a safetensors file into one host arena.
 * @throws TierSyncError ERR_IO (unreadable), ERR_INVALID_ARGUMENT (not a safetensors file, naming what is wrong)
 */
export function loadSafetensors(file: string): LoadedTensors {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (e) {
    throw new TierSyncError(`cannot open ${file}: ${(e as Error).message}`, 'ERR_IO', { cause: e });
  }
  try {
    const size = fstatSync(fd).size;
    const head = Buffer.alloc(8);
    if (size < 8 || readSync(fd, head, 0, 8, 0) !== 8) throw new TierSyncError(`${file}: too short for a safetensors file`, 'ERR_INVALID_ARGUMENT');
    const headerBytes = Number(head.readBigUInt64LE(0));
    if (headerBytes < 2 || headerBytes > 100 * 1024 * 1024 || 8 + headerBytes > size) throw new TierSyncError(`${file}: header length ${headerBytes} is not plausible`, 'ERR_INVALID_ARGUMENT');
    const json = Buffer.alloc(headerBytes);
    readSync(fd, json, 0, headerBytes, 8);
    let header: Record<string, unknown>;
    try {
      header = JSON.parse(json.toString('utf8')) as Record<string, unknown>;
    } catch (e) {
      throw new TierSyncError(`${file}: header is not JSON`, 'ERR_INVALID_ARGUMENT', { cause: e });
    }
    const dataStart = 8 + headerBytes;
    const dataBytes = size - dataStart;
    // Zero-size tensors only leave an empty data section; the arena still needs a byte.
    const arena = HostArena.create({ capacity: Math.max(dataBytes, 1) });
    forEachView(arena, 0, dataBytes, (view, at) => {
      readSync(fd, view, 0, view.length, dataStart + at);
    });
    const tensors: TensorSource[] = [];
    for (const [name, info] of Object.entries(header)) {
      if (name === '__metadata__') continue;
      const t = info as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
      const offsets = t.data_offsets;
      if (typeof t.dtype !== 'string' || !Array.isArray(t.shape) || !Array.isArray(offsets) || offsets.length !== 2) {
        arena.close();
        throw new TierSyncError(`${file}: tensor '${name}' lacks dtype, shape or data_offsets`, 'ERR_INVALID_ARGUMENT');
      }
      const [begin, end] = offsets as [number, number];
      if (!(Number.isSafeInteger(begin) && Number.isSafeInteger(end) && begin >= 0 && end >= begin && end <= dataBytes)) {
        arena.close();
        throw new TierSyncError(`${file}: tensor '${name}' data_offsets [${begin}, ${end}] are not a range within the ${dataBytes}-byte data section`, 'ERR_INVALID_ARGUMENT');
      }
      tensors.push({ name, dtype: t.dtype.toLowerCase(), shape: t.shape as number[], arena, offset: begin, length: end - begin });
    }
    if (tensors.length === 0) {
      arena.close();
      throw new TierSyncError(`${file}: no tensors`, 'ERR_INVALID_ARGUMENT');
    }
    return { arena, tensors };
  } finally {
    closeSync(fd);
  }
}

/**
 * `count` random bf16 tensors totalling about `bytes` (each a multiple of 4 KiB): a stand-in for a model's layer
 * weights. Random bytes, so no two chunks are equal (nothing deduplicates inside one version).
 */
export function generateTensors(bytes: number, count = 40): LoadedTensors {
  const each = Math.max(4096, Math.floor(bytes / count / 4096) * 4096);
  const arena = HostArena.create({ capacity: each * count });
  forEachView(arena, 0, each * count, (view) => randomFillSync(view));
  const tensors: TensorSource[] = Array.from({ length: count }, (_, i) => ({
    name: `layers.${i}.weight`,
    dtype: 'bf16',
    shape: [each / 2048, 1024],
    arena,
    offset: i * each,
    length: each,
  }));
  return { arena, tensors };
}

/**
 * One training step's change: rewrites whole tensors (every k-th, k = round(1 / fraction)) with fresh random
 * bytes, as when a step updates some layers and leaves frozen ones alone. Returns the bytes changed.
 */
export function changeTensors(set: LoadedTensors, fraction: number, seedStep = 0): number {
  let changed = 0;
  set.tensors.forEach((t, i) => {
    if (!changesTensor(i, fraction, seedStep)) return;
    forEachView(t.arena as HostArena, t.offset, t.length, (view) => randomFillSync(view));
    changed += t.length;
  });
  return changed;
}

/** Whether {@link changeTensors} rewrites tensor `i` at `seedStep` (every k-th tensor, k = round(1 / fraction)). */
export function changesTensor(i: number, fraction: number, seedStep = 0): boolean {
  return (i + seedStep) % Math.max(1, Math.round(1 / fraction)) === 0;
}

/**
 * The most chunks ({@link changeTensors} at any step) one step rewrites: what a step adds to a publisher's store.
 * It follows the tensors actually rewritten, not `fraction` (0.7 rewrites every tensor; 0.3 one in three).
 */
export function chunksChangedPerStep(set: LoadedTensors, fraction: number, chunkBytes: number): number {
  const every = Math.max(1, Math.round(1 / fraction));
  let most = 0;
  for (let step = 0; step < every; step++) {
    most = Math.max(most, set.tensors.reduce((n, t, i) => n + (changesTensor(i, fraction, step) ? Math.ceil(t.length / chunkBytes) : 0), 0));
  }
  return most;
}
