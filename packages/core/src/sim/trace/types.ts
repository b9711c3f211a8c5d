/**
 * The two shapes of trace the simulator replays.
 *
 * - An {@link LlmTrace} is a list of inference requests, each with its prompt split into fixed-size token blocks
 *   (KV pages) identified by prefix-chained ids: equal id at the same position = reusable KV. Mooncake traces,
 *   the Azure trace with the synthetic prefix model, and the multi-round QA generator produce it.
 * - An {@link ObjectTrace} is a generic cache trace (libCacheSim `oracleGeneral` and its CSV form): one object
 *   request per record, with a size in bytes.
 */

/** One inference request. */
export interface LlmRequest {
  /** Arrival time in milliseconds from the start of the trace. */
  readonly timeMs: number;
  /** Prompt tokens. */
  readonly inputTokens: number;
  /** Generated tokens. */
  readonly outputTokens: number;
  /** KV page ids of the prompt, in order (page j holds tokens [j*blockTokens, (j+1)*blockTokens)). */
  readonly pages: Uint32Array;
}

/** A request-level trace with prefix-chained page ids. */
export interface LlmTrace {
  readonly kind: 'llm';
  /** Where it came from (a path, or a generator description). */
  readonly source: string;
  /** Tokens per page (Mooncake: 512). */
  readonly blockTokens: number;
  readonly requests: readonly LlmRequest[];
  /** Number of distinct page ids; ids are in [0, distinctPages) when the reader densified them. */
  readonly distinctPages: number;
  /** Total page references (sum of `pages.length`). */
  readonly pageRefs: number;
}

/** A generic object trace, one request per index, in columnar typed arrays. */
export interface ObjectTrace {
  readonly kind: 'object';
  readonly source: string;
  /** Timestamps as recorded (oracleGeneral: seconds). */
  readonly times: Float64Array;
  /** Object ids, densified to [0, distinct) in first-seen order (the original ids may exceed 2^53). */
  readonly keys: Uint32Array;
  /** Object sizes in bytes (positive). */
  readonly sizes: Float64Array;
  /** Number of requests. */
  readonly length: number;
  /** Number of distinct objects. */
  readonly distinct: number;
}

/** Either trace. */
export type SimTrace = LlmTrace | ObjectTrace;

/** Trace formats the readers understand. */
export type TraceFormat = 'mooncake' | 'azure' | 'oracleGeneral' | 'csv';

/** Every format name, for option checking. */
export const TRACE_FORMATS: readonly TraceFormat[] = ['mooncake', 'azure', 'oracleGeneral', 'csv'];
