/**
 * libCacheSim `oracleGeneral` traces: packed little-endian 24-byte records
 * `{ u32 real_time; u64 obj_id; u32 obj_size; i64 next_access_vtime }` (libCacheSim
 * `traceReader/customizedReader/oracle/oracleGeneralBin.h`), and the same four fields as CSV
 * (`time,obj_id,obj_size,next_access_vtime`, the columns `tracePrint` prints; a header line is optional and the
 * fourth column may be absent). `next_access_vtime` is skipped: the oracle policies (opt, opt-size) get each
 * request's next access from the simulator's own backward pass over the loaded trace (sim/exact.ts).
 *
 * Both forms are read as streams ({@link oracleGeneralChunks}, {@link oracleCsvChunks}): plain, gzip or zstd files
 * of any length pass through a few MiB of buffers, so a replay that consumes the chunks runs in bounded memory.
 */
import os from 'node:os';
import { traceError } from '../errors.js';
import { fileLines, lines } from './read-file.js';
import { traceByteChunks } from './byte-stream.js';
import type { ObjectTrace } from './types.js';

/** Bytes per oracleGeneral record. */
export const ORACLE_RECORD_BYTES = 24;

/** Maps a trace's object ids (numbers, 64-bit ids as bigint, strings) to dense ids in first-seen order. */
export class Densifier {
  readonly #ids = new Map<number | bigint | string, number>();
  /** Distinct ids seen so far. */
  get size(): number {
    return this.#ids.size;
  }
  /** The dense id of `key`, allocating the next one for a new key. */
  id(key: number | bigint | string): number {
    let id = this.#ids.get(key);
    if (id === undefined) {
      id = this.#ids.size;
      this.#ids.set(key, id);
    }
    return id;
  }
}

/**
 * Dense ids for 64-bit object ids given as two 32-bit halves: an open-addressing hash table (linear probing, load
 * at most 1/2) in typed arrays, so a lookup allocates nothing and touches one or two cache lines. A `Map` keyed by
 * the id as a number boxes every id above 2^31 and costs several times more per record on large traces.
 */
export class U64Densifier {
  #lo = new Uint32Array(1 << 16);
  #hi = new Uint32Array(1 << 16);
  /** Dense id + 1 per slot (0 = empty). */
  #id = new Int32Array(1 << 16);
  #mask = (1 << 16) - 1;
  #size = 0;

  /** Distinct ids seen so far. */
  get size(): number {
    return this.#size;
  }

  /** The dense id of the 64-bit id (hi, lo), allocating the next one for a new id. */
  id(lo: number, hi: number): number {
    const mask = this.#mask;
    let h = Math.imul(lo ^ Math.imul(hi, 0x9e37_79b1), 0x85eb_ca6b);
    h = (h ^ (h >>> 15)) & mask;
    const ids = this.#id;
    for (;;) {
      const v = ids[h]!;
      if (v === 0) break;
      if (this.#lo[h] === lo && this.#hi[h] === hi) return v - 1;
      h = (h + 1) & mask;
    }
    const id = this.#size++;
    this.#lo[h] = lo;
    this.#hi[h] = hi;
    ids[h] = id + 1;
    if (this.#size * 2 > mask) this.#grow();
    return id;
  }

  #grow(): void {
    const [lo, hi, id] = [this.#lo, this.#hi, this.#id];
    const n = id.length * 2;
    this.#lo = new Uint32Array(n);
    this.#hi = new Uint32Array(n);
    this.#id = new Int32Array(n);
    this.#mask = n - 1;
    const size = this.#size;
    for (let s = 0; s < id.length; s++) {
      if (id[s] === 0) continue;
      let h = Math.imul(lo[s]! ^ Math.imul(hi[s]!, 0x9e37_79b1), 0x85eb_ca6b);
      h = (h ^ (h >>> 15)) & this.#mask;
      while (this.#id[h] !== 0) h = (h + 1) & this.#mask;
      this.#lo[h] = lo[s]!;
      this.#hi[h] = hi[s]!;
      this.#id[h] = id[s]!;
    }
    this.#size = size;
  }
}

/** What a streamed reader densifies with: its `size` is the distinct count so far. */
export interface IdCount {
  readonly size: number;
}

/**
 * A block of consecutive object requests. Streamed readers reuse the arrays: a chunk is valid only until the
 * next one is asked for.
 */
export interface ObjectChunk {
  /** Dense object ids. */
  readonly keys: Uint32Array;
  /** Sizes in bytes. */
  readonly sizes: Float64Array;
  /** Timestamps as recorded. */
  readonly times: Float64Array;
  /** Requests in this chunk (the arrays may be longer). */
  readonly length: number;
}

const LITTLE_ENDIAN = os.endianness() === 'LE';

/**
 * Incremental oracleGeneral decoder: push byte chunks in any split, get record blocks; records cut by a chunk
 * border are carried over. Ids are densified by `ids`, shared across pushes.
 */
class OracleDecoder {
  readonly #carry = new Uint8Array(ORACLE_RECORD_BYTES);
  #carried = 0;
  #records = 0;
  #bytes = 0;
  #keys = new Uint32Array(0);
  #sizes = new Float64Array(0);
  #times = new Float64Array(0);
  #aligned = new Uint32Array(0);

  constructor(
    readonly source: string,
    readonly ids: U64Densifier,
  ) {}

  /** Records decoded so far. */
  get records(): number {
    return this.#records;
  }

  /** Decodes `bytes`; the returned chunk holds the records completed by them. */
  push(bytes: Uint8Array): ObjectChunk {
    this.#bytes += bytes.length;
    const most = Math.floor((this.#carried + bytes.length) / ORACLE_RECORD_BYTES);
    if (this.#keys.length < most) {
      this.#keys = new Uint32Array(most);
      this.#sizes = new Float64Array(most);
      this.#times = new Float64Array(most);
    }
    let n = 0;
    let off = 0;
    if (this.#carried > 0) {
      const take = Math.min(ORACLE_RECORD_BYTES - this.#carried, bytes.length);
      this.#carry.set(bytes.subarray(0, take), this.#carried);
      this.#carried += take;
      off = take;
      if (this.#carried < ORACLE_RECORD_BYTES) return this.#chunk(0);
      const view = new DataView(this.#carry.buffer);
      const words = new Uint32Array(6);
      for (let w = 0; w < 6; w++) words[w] = view.getUint32(w * 4, true);
      this.#decode(words, 1, 0);
      this.#carried = 0;
      n = 1;
    }
    const whole = Math.floor((bytes.length - off) / ORACLE_RECORD_BYTES);
    if (whole > 0) {
      const at = bytes.byteOffset + off;
      let words: Uint32Array;
      if (LITTLE_ENDIAN && at % 4 === 0) words = new Uint32Array(bytes.buffer, at, whole * 6);
      else {
        // Unaligned (or big-endian host): copy into an aligned buffer, swapping bytes when needed.
        if (this.#aligned.length < whole * 6) this.#aligned = new Uint32Array(whole * 6);
        words = this.#aligned;
        const view = new DataView(bytes.buffer, at, whole * ORACLE_RECORD_BYTES);
        for (let w = 0; w < whole * 6; w++) words[w] = view.getUint32(w * 4, true);
      }
      this.#decode(words, whole, n);
      n += whole;
      off += whole * ORACLE_RECORD_BYTES;
    }
    const rest = bytes.length - off;
    if (rest > 0) {
      this.#carry.set(bytes.subarray(off), 0);
      this.#carried = rest;
    }
    return this.#chunk(n);
  }

  /** Checks that no partial record is left. @throws TierSyncError naming the truncated record */
  end(): void {
    if (this.#carried === 0) return;
    const count = this.#records;
    throw traceError(
      this.source,
      `record ${count} (byte ${count * ORACLE_RECORD_BYTES})`,
      `truncated: ${this.#bytes} bytes is not a multiple of the ${ORACLE_RECORD_BYTES}-byte record`,
    );
  }

  #chunk(length: number): ObjectChunk {
    return { keys: this.#keys, sizes: this.#sizes, times: this.#times, length };
  }

  /** Decodes `count` records from 32-bit words (6 per record) into the output arrays from index `at`. */
  #decode(words: Uint32Array, count: number, at: number): void {
    const keys = this.#keys;
    const sizes = this.#sizes;
    const times = this.#times;
    const ids = this.ids;
    for (let i = 0, w = 0; i < count; i++, w += 6) {
      const lo = words[w + 1]!;
      const hi = words[w + 2]!;
      const size = words[w + 3]!;
      if (size === 0) {
        const r = this.#records + i;
        throw traceError(this.source, `record ${r} (byte ${r * ORACLE_RECORD_BYTES})`, 'object size 0: sizes must be positive');
      }
      keys[at + i] = ids.id(lo, hi);
      sizes[at + i] = size;
      times[at + i] = words[w]!;
    }
    this.#records += count;
  }
}

/**
 * Streams an oracleGeneral file (plain, `.gz` or `.zst`) as blocks of densified requests, in bounded memory.
 * @param ids densifier to use (pass one to read its `size`, the distinct objects, afterwards)
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming the file, the record (and its byte offset) and the reason
 */
export function* oracleGeneralChunks(file: string, ids = new U64Densifier()): Generator<ObjectChunk, void, undefined> {
  const decoder = new OracleDecoder(file, ids);
  for (const bytes of traceByteChunks(file)) {
    const chunk = decoder.push(bytes);
    if (chunk.length > 0) yield chunk;
  }
  decoder.end();
}

/** Collects streamed chunks into one columnar trace. */
function collect(source: string, chunks: Iterable<ObjectChunk>, ids: IdCount): ObjectTrace {
  let keys = new Uint32Array(1 << 16);
  let sizes = new Float64Array(1 << 16);
  let times = new Float64Array(1 << 16);
  let length = 0;
  for (const c of chunks) {
    if (length + c.length > keys.length) {
      const cap = Math.max(keys.length * 2, length + c.length);
      const k = new Uint32Array(cap);
      const s = new Float64Array(cap);
      const t = new Float64Array(cap);
      k.set(keys.subarray(0, length));
      s.set(sizes.subarray(0, length));
      t.set(times.subarray(0, length));
      [keys, sizes, times] = [k, s, t];
    }
    keys.set(c.keys.subarray(0, c.length), length);
    sizes.set(c.sizes.subarray(0, c.length), length);
    times.set(c.times.subarray(0, c.length), length);
    length += c.length;
  }
  return { kind: 'object', source, times: times.slice(0, length), keys: keys.slice(0, length), sizes: sizes.slice(0, length), length, distinct: ids.size };
}

/**
 * Parses oracleGeneral binary bytes.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming `source`, the record (and its byte offset) and the reason
 */
export function parseOracleGeneral(bytes: Uint8Array, source: string): ObjectTrace {
  const ids = new U64Densifier();
  const decoder = new OracleDecoder(source, ids);
  const chunk = decoder.push(bytes);
  decoder.end();
  return collect(source, [chunk], ids);
}

/** Reads a whole oracleGeneral binary file (plain, `.gz` or `.zst`). @throws TierSyncError ERR_INVALID_ARGUMENT */
export function readOracleGeneral(file: string): ObjectTrace {
  const ids = new U64Densifier();
  return collect(file, oracleGeneralChunks(file, ids), ids);
}

/**
 * Streams the CSV form, `time,obj_id,obj_size[,next_access_vtime]`, one request per line, `,` or tab separated,
 * an optional header line (recognised by a non-numeric first field), as blocks of up to 65,536 densified requests
 * (arrays reused between blocks). Object ids may be any token (numbers or strings); sizes must be positive
 * integers.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming `source`, the line and the reason
 */
export function* oracleCsvChunks(input: Iterable<[string, number]>, source: string, ids = new Densifier()): Generator<ObjectChunk, void, undefined> {
  const BLOCK = 1 << 16;
  const keys = new Uint32Array(BLOCK);
  const sizes = new Float64Array(BLOCK);
  const times = new Float64Array(BLOCK);
  let length = 0;
  for (const [line, n] of input) {
    if (line.trim() === '' || line.startsWith('#')) continue;
    const f = line.split(line.includes('\t') ? '\t' : ',').map((s) => s.trim());
    if (n === 1 && f[0] !== undefined && !/^-?\d+(\.\d+)?$/.test(f[0])) continue; // header
    if (f.length < 3 || f.length > 4) {
      throw traceError(source, `line ${n}`, `expected 3 or 4 fields (time,obj_id,obj_size[,next_access_vtime]), got ${f.length}`);
    }
    const [t, id, s, next] = f as [string, string, string, string | undefined];
    const time = Number(t);
    if (t === '' || !Number.isFinite(time)) throw traceError(source, `line ${n}`, `time must be a number, got '${t}'`);
    if (id === '') throw traceError(source, `line ${n}`, 'obj_id is empty');
    const size = Number(s);
    if (!/^\d+$/.test(s) || !Number.isSafeInteger(size) || size <= 0) {
      throw traceError(source, `line ${n}`, `obj_size must be a positive integer, got '${s}'`);
    }
    if (next !== undefined && !/^-?\d+$/.test(next)) {
      throw traceError(source, `line ${n}`, `next_access_vtime must be an integer, got '${next}'`);
    }
    const numeric = /^\d{1,15}$/.test(id) ? Number(id) : id;
    times[length] = time;
    keys[length] = ids.id(numeric);
    sizes[length] = size;
    if (++length === BLOCK) {
      yield { keys, sizes, times, length };
      length = 0;
    }
  }
  if (length > 0) yield { keys, sizes, times, length };
}

/** Parses the CSV form from text (see {@link oracleCsvChunks}). @throws TierSyncError ERR_INVALID_ARGUMENT */
export function parseOracleCsv(text: string, source: string): ObjectTrace {
  const ids = new Densifier();
  return collect(source, oracleCsvChunks(lines(text), source, ids), ids);
}

/** Reads the CSV form (plain, `.gz` or `.zst`), streamed line by line. @throws TierSyncError ERR_INVALID_ARGUMENT */
export function readOracleCsv(file: string): ObjectTrace {
  const ids = new Densifier();
  return collect(file, oracleCsvChunks(fileLines(file), file, ids), ids);
}

/**
 * Encodes records as oracleGeneral bytes (for tests and for exporting generated traces).
 * `nextAccess` defaults to -1 (no future access known).
 */
export function encodeOracleGeneral(records: ReadonlyArray<{ time: number; id: number | bigint; size: number; nextAccess?: number }>): Buffer {
  const out = Buffer.alloc(records.length * ORACLE_RECORD_BYTES);
  records.forEach((r, i) => {
    const o = i * ORACLE_RECORD_BYTES;
    out.writeUInt32LE(r.time, o);
    out.writeBigUInt64LE(BigInt(r.id), o + 4);
    out.writeUInt32LE(r.size, o + 12);
    out.writeBigInt64LE(BigInt(r.nextAccess ?? -1), o + 16);
  });
  return out;
}
