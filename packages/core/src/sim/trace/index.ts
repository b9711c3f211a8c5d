/**
 * One entry point for every trace: a serialisable {@link TraceSource} (so sweep workers can load the trace
 * themselves) and {@link loadTrace}.
 */
import { invalid } from '../errors.js';
import { readAzure, type AzurePrefixOptions } from './azure.js';
import { readMooncake } from './mooncake.js';
import { generateMultiRoundQa, type MultiRoundQaOptions } from './multi-round-qa.js';
import { Densifier, oracleCsvChunks, oracleGeneralChunks, readOracleCsv, readOracleGeneral, U64Densifier, type IdCount, type ObjectChunk } from './oracle-general.js';
import { stripCompression } from './byte-stream.js';
import { fileLines } from './read-file.js';
import { TRACE_FORMATS, type SimTrace, type TraceFormat } from './types.js';

/** Where a trace comes from: a file in a format, or the multi-round QA generator. Plain data. */
export type TraceSource =
  | {
      readonly file: string;
      readonly format: TraceFormat;
      /** Tokens per page (mooncake, azure). Default 512. */
      readonly blockTokens?: number;
      /** The prefix model of Azure traces. */
      readonly azure?: AzurePrefixOptions;
      /** Keep only the first this many requests. Default all. */
      readonly requests?: number;
    }
  | { readonly generator: 'multi-round-qa'; readonly options?: MultiRoundQaOptions; readonly requests?: number };

/**
 * Guesses a file's format from its name: `*.jsonl` mooncake, `*.csv` with `Azure` in the name azure, other
 * `*.csv` csv, anything else oracleGeneral (a `.gz`, `.zst` or `.zstd` suffix is looked through).
 */
export function guessFormat(file: string): TraceFormat {
  const name = stripCompression(file);
  if (name.endsWith('.jsonl') || name.endsWith('.json')) return 'mooncake';
  if (name.endsWith('.csv')) return /azure/i.test(name) ? 'azure' : 'csv';
  return 'oracleGeneral';
}

/** Checks a `--format` value. @throws TierSyncError ERR_INVALID_ARGUMENT */
export function checkFormat(format: string): TraceFormat {
  if (!(TRACE_FORMATS as readonly string[]).includes(format)) {
    throw invalid(`--format must be one of ${TRACE_FORMATS.join(', ')}, got '${format}'`);
  }
  return format as TraceFormat;
}

/** Loads (or generates) a trace. @throws TierSyncError ERR_INVALID_ARGUMENT for unreadable or malformed input */
export function loadTrace(source: TraceSource): SimTrace {
  const whole = readWhole(source);
  return source.requests === undefined ? whole : firstRequests(whole, source.requests);
}

/** The first `n` requests of a trace (the distinct-id bound is kept, so ids stay in range). */
export function firstRequests<T extends SimTrace>(trace: T, n: number): T {
  if (!Number.isSafeInteger(n) || n < 1) throw invalid(`--requests must be a positive integer, got ${n}`);
  if (trace.kind === 'llm') {
    if (n >= trace.requests.length) return trace;
    const requests = trace.requests.slice(0, n);
    return { ...trace, requests, pageRefs: requests.reduce((s, r) => s + r.pages.length, 0) } as T;
  }
  if (n >= trace.length) return trace;
  return { ...trace, times: trace.times.subarray(0, n), keys: trace.keys.subarray(0, n), sizes: trace.sizes.subarray(0, n), length: n } as T;
}

function readWhole(source: TraceSource): SimTrace {
  if ('generator' in source) return generateMultiRoundQa(source.options);
  const blockTokens = source.blockTokens ?? 512;
  switch (source.format) {
    case 'mooncake':
      return readMooncake(source.file, { blockTokens });
    case 'azure':
      return readAzure(source.file, { ...source.azure, blockTokens });
    case 'oracleGeneral':
      return readOracleGeneral(source.file);
    case 'csv':
      return readOracleCsv(source.file);
  }
}

/** An object trace being streamed: its chunks, and its densifier (whose `size` is the distinct count so far). */
export interface ObjectStream {
  readonly source: string;
  readonly chunks: Iterable<ObjectChunk>;
  readonly ids: IdCount;
}

/** Whether {@link streamObjects} can stream `source` (an oracleGeneral or CSV file). */
export function isObjectSource(source: TraceSource): boolean {
  return 'file' in source && (source.format === 'oracleGeneral' || source.format === 'csv');
}

/**
 * Streams an object trace (oracleGeneral or its CSV form; plain, gzip or zstd) chunk by chunk, honouring
 * `requests`. The chunks' arrays are reused: consume each before asking for the next.
 * @throws TierSyncError ERR_INVALID_ARGUMENT for other sources, unreadable or malformed input
 */
export function streamObjects(source: TraceSource): ObjectStream {
  if (!('file' in source) || !isObjectSource(source)) throw invalid('streaming needs an object trace file (oracleGeneral or csv)');
  let ids: IdCount;
  let raw: Iterable<ObjectChunk>;
  if (source.format === 'oracleGeneral') {
    const u64 = new U64Densifier();
    [ids, raw] = [u64, oracleGeneralChunks(source.file, u64)];
  } else {
    const map = new Densifier();
    [ids, raw] = [map, oracleCsvChunks(fileLines(source.file), source.file, map)];
  }
  const limit = source.requests;
  if (limit !== undefined && (!Number.isSafeInteger(limit) || limit < 1)) throw invalid(`--requests must be a positive integer, got ${limit}`);
  const chunks = limit === undefined ? raw : (function* () {
    let left = limit;
    for (const c of raw) {
      if (c.length >= left) {
        yield { ...c, length: left };
        return;
      }
      left -= c.length;
      yield c;
    }
  })();
  return { source: source.file, chunks, ids };
}

export type { ObjectChunk } from './oracle-general.js';
export type { SimTrace, LlmTrace, ObjectTrace, LlmRequest, TraceFormat } from './types.js';
export type { AzurePrefixOptions } from './azure.js';
export type { MultiRoundQaOptions } from './multi-round-qa.js';
