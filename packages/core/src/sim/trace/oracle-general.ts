/**
 * libCacheSim `oracleGeneral` traces: packed little-endian 24-byte records
 * `{ u32 real_time; u64 obj_id; u32 obj_size; i64 next_access_vtime }` (libCacheSim
 * `traceReader/customizedReader/oracle/oracleGeneralBin.h`), and the same four fields as CSV
 * (`time,obj_id,obj_size,next_access_vtime`, the columns `tracePrint` prints; a header line is optional and the
 * fourth column may be absent). `next_access_vtime` is read for validation but not used: no built-in policy needs
 * the future.
 */
import { traceError } from '../errors.js';
import { lines, readTraceBytes } from './read-file.js';
import type { ObjectTrace } from './types.js';

/** Bytes per oracleGeneral record. */
export const ORACLE_RECORD_BYTES = 24;

class Densifier {
  readonly #ids = new Map<number | bigint | string, number>();
  get size(): number {
    return this.#ids.size;
  }
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
 * Parses oracleGeneral binary bytes.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming `source`, the record (and its byte offset) and the reason
 */
export function parseOracleGeneral(bytes: Uint8Array, source: string): ObjectTrace {
  const count = Math.floor(bytes.length / ORACLE_RECORD_BYTES);
  if (bytes.length % ORACLE_RECORD_BYTES !== 0) {
    throw traceError(
      source,
      `record ${count} (byte ${count * ORACLE_RECORD_BYTES})`,
      `truncated: ${bytes.length} bytes is not a multiple of the ${ORACLE_RECORD_BYTES}-byte record`,
    );
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const times = new Float64Array(count);
  const keys = new Uint32Array(count);
  const sizes = new Float64Array(count);
  const ids = new Densifier();
  for (let i = 0, o = 0; i < count; i++, o += ORACLE_RECORD_BYTES) {
    times[i] = view.getUint32(o, true);
    const lo = view.getUint32(o + 4, true);
    const hi = view.getUint32(o + 8, true);
    // Ids below 2^53 stay numbers (fast Map keys); larger ones are exact as bigint.
    const key = hi < 0x20_0000 ? hi * 0x1_0000_0000 + lo : (BigInt(hi) << 32n) | BigInt(lo);
    const size = view.getUint32(o + 12, true);
    if (size === 0) throw traceError(source, `record ${i} (byte ${o})`, 'object size 0: sizes must be positive');
    keys[i] = ids.id(key);
    sizes[i] = size;
  }
  return { kind: 'object', source, times, keys, sizes, length: count, distinct: ids.size };
}

/** Reads an oracleGeneral binary file (optionally `.gz`). @throws TierSyncError ERR_INVALID_ARGUMENT */
export function readOracleGeneral(file: string): ObjectTrace {
  return parseOracleGeneral(readTraceBytes(file), file);
}

/**
 * Parses the CSV form: `time,obj_id,obj_size[,next_access_vtime]`, one request per line, `,` or tab separated,
 * an optional header line (recognised by a non-numeric first field). Object ids may be any token (numbers or
 * strings); sizes must be positive integers.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming `source`, the line and the reason
 */
export function parseOracleCsv(text: string, source: string): ObjectTrace {
  const times: number[] = [];
  const keys: number[] = [];
  const sizes: number[] = [];
  const ids = new Densifier();
  for (const [line, n] of lines(text)) {
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
    times.push(time);
    keys.push(ids.id(numeric));
    sizes.push(size);
  }
  return {
    kind: 'object',
    source,
    times: Float64Array.from(times),
    keys: Uint32Array.from(keys),
    sizes: Float64Array.from(sizes),
    length: keys.length,
    distinct: ids.size,
  };
}

/** Reads the CSV form (optionally `.gz`). @throws TierSyncError ERR_INVALID_ARGUMENT */
export function readOracleCsv(file: string): ObjectTrace {
  return parseOracleCsv(readTraceBytes(file).toString('utf8'), file);
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
