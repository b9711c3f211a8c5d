/** Reads a trace file whole, gunzipping `*.gz` transparently (the bundled traces are gzipped). */
import fs from 'node:fs';
import zlib from 'node:zlib';
import { invalid, traceError } from '../errors.js';

/**
 * The file's bytes (decompressed when the name ends in `.gz`).
 * @throws TierSyncError ERR_INVALID_ARGUMENT when it cannot be read or is corrupt gzip
 */
export function readTraceBytes(file: string): Buffer {
  let raw: Buffer;
  try {
    raw = fs.readFileSync(file);
  } catch (e) {
    throw invalid(`cannot read trace ${file}: ${(e as Error).message}`);
  }
  if (!file.endsWith('.gz')) return raw;
  try {
    return zlib.gunzipSync(raw);
  } catch (e) {
    throw traceError(file, 'gzip', `not a valid gzip file (${(e as Error).message})`, e);
  }
}

/** Iterates the lines of a text buffer with 1-based numbers, accepting LF or CRLF; skips a final empty line. */
export function* lines(text: string): Generator<[line: string, number: number]> {
  let start = 0;
  let n = 0;
  while (start < text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    n++;
    let line = text.slice(start, end);
    if (line.endsWith('\r')) line = line.slice(0, -1);
    yield [line, n];
    start = end + 1;
  }
}
