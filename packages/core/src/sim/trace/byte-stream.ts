/**
 * A trace file's bytes as a stream of chunks, decompressed on the fly: `*.gz` (gzip, multi-member too) and
 * `*.zst` / `*.zstd` (Zstandard, the format libCacheSim distributes its oracleGeneral traces in). Memory stays
 * bounded by the read chunk plus the decompressor's window, whatever the file's size.
 *
 * The readers are synchronous (a sweep worker replays jobs synchronously), so the decompressors are the
 * synchronous push decoders of fflate (gzip) and fzstd (Zstandard), both pure JavaScript: they run the same on
 * Node 20, 22 and 24. Node's own zstd (`zlib.createZstdDecompress`, Node >= 22.15) exists only as an asynchronous
 * stream and not at all on Node 20. fzstd refuses frames whose window exceeds 32 MiB (zstd `--ultra` levels 20-22
 * on large inputs); the message says so.
 */
import fs from 'node:fs';
import { Gunzip } from 'fflate';
import { Decompress } from 'fzstd';
import { invalid, traceError } from '../errors.js';

/** Compressed bytes read per step. */
const READ_BYTES = 4 << 20;

/** The compression a file name implies. */
export function compressionOf(file: string): 'gzip' | 'zstd' | 'none' {
  if (file.endsWith('.gz')) return 'gzip';
  if (file.endsWith('.zst') || file.endsWith('.zstd')) return 'zstd';
  return 'none';
}

/** The file name without its compression suffix. */
export function stripCompression(file: string): string {
  return file.replace(/\.(gz|zst|zstd)$/, '');
}

/**
 * Yields the file's (decompressed) bytes chunk by chunk. A chunk is valid only until the next one is asked for
 * (the read buffer is reused): copy what must outlive it.
 * @throws TierSyncError ERR_INVALID_ARGUMENT when the file cannot be read or is corrupt gzip / zstd
 */
export function* traceByteChunks(file: string): Generator<Uint8Array, void, undefined> {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    throw invalid(`cannot read trace ${file}: ${(e as Error).message}`);
  }
  const kind = compressionOf(file);
  try {
    const buf = Buffer.allocUnsafe(READ_BYTES);
    const read = (): number => {
      try {
        return fs.readSync(fd, buf, 0, READ_BYTES, null);
      } catch (e) {
        throw invalid(`cannot read trace ${file}: ${(e as Error).message}`);
      }
    };
    if (kind === 'none') {
      for (let n = read(); n > 0; n = read()) yield buf.subarray(0, n);
      return;
    }
    // The push decoders call back synchronously during push(); collect, then yield.
    let out: Uint8Array[] = [];
    const sink = (data: Uint8Array) => {
      if (data.length > 0) out.push(data);
    };
    const decoder = kind === 'gzip' ? new Gunzip(sink) : new Decompress(sink);
    let total = 0;
    for (;;) {
      const n = read();
      // The decoders keep references to pushed input: give them a copy of the reused buffer (Buffer#slice would
      // not copy).
      try {
        decoder.push(n > 0 ? Uint8Array.prototype.slice.call(buf, 0, n) : new Uint8Array(0), n === 0);
      } catch (e) {
        const what = kind === 'gzip' ? 'not a valid gzip file' : 'not a valid zstd file (fzstd supports windows up to 32 MiB: levels below --ultra 20)';
        throw traceError(file, kind, `${what} (${(e as Error).message})`, e);
      }
      total += n;
      const ready = out;
      out = [];
      for (const chunk of ready) yield chunk;
      if (n === 0) break;
    }
    if (total === 0) throw traceError(file, kind, `empty ${kind} file`);
  } finally {
    fs.closeSync(fd);
  }
}

/** The whole (decompressed) file, for small inputs and tests. @throws TierSyncError as {@link traceByteChunks} */
export function readTraceBytes(file: string): Buffer {
  const parts: Buffer[] = [];
  for (const c of traceByteChunks(file)) parts.push(Buffer.from(c));
  return Buffer.concat(parts);
}

/**
 * Yields the lines of a text trace file with 1-based numbers, LF or CRLF, decoding UTF-8 across chunk borders.
 * A final empty line is skipped, as in {@link lines}.
 */
export function* fileLines(file: string): Generator<[line: string, number: number], void, undefined> {
  const decoder = new TextDecoder('utf-8');
  let carry = '';
  let n = 0;
  const emit = function* (text: string, final: boolean): Generator<[string, number], void, undefined> {
    let start = 0;
    for (;;) {
      const end = text.indexOf('\n', start);
      if (end < 0) break;
      let line = text.slice(start, end);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      yield [line, ++n];
      start = end + 1;
    }
    carry = text.slice(start);
    if (final && carry !== '') {
      yield [carry.endsWith('\r') ? carry.slice(0, -1) : carry, ++n];
      carry = '';
    }
  };
  for (const chunk of traceByteChunks(file)) yield* emit(carry + decoder.decode(chunk, { stream: true }), false);
  yield* emit(carry + decoder.decode(), true);
}
