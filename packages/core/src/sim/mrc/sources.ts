/** Access chunks from the simulator's traces, for the one-pass curves and the streamed replay. */
import { invalid } from '../errors.js';
import { isObjectSource, loadTrace, streamObjects, type TraceSource } from '../trace/index.js';
import type { LlmTrace, SimTrace } from '../trace/types.js';
import type { AccessChunk } from './curves.js';

const BLOCK = 1 << 16;

/** An LLM trace's page references as blocks of accesses, each page `pageBytes` bytes. */
export function* llmChunks(trace: LlmTrace, pageBytes: number): Generator<AccessChunk, void, undefined> {
  if (!(pageBytes >= 1)) throw invalid(`page bytes must be positive, got ${pageBytes}`);
  const keys = new Uint32Array(BLOCK);
  const sizes = new Float64Array(BLOCK).fill(pageBytes);
  let length = 0;
  for (const r of trace.requests) {
    const pages = r.pages;
    for (let j = 0; j < pages.length; j++) {
      keys[length++] = pages[j]!;
      if (length === BLOCK) {
        yield { keys, sizes, length };
        length = 0;
      }
    }
  }
  if (length > 0) yield { keys, sizes, length };
}

/** A loaded trace as blocks of accesses (object traces by their own sizes, LLM traces page by page). */
export function* traceChunks(trace: SimTrace, pageBytes: number): Generator<AccessChunk, void, undefined> {
  if (trace.kind === 'llm') {
    yield* llmChunks(trace, pageBytes);
    return;
  }
  for (let at = 0; at < trace.length; at += BLOCK) {
    const end = Math.min(trace.length, at + BLOCK);
    yield { keys: trace.keys.subarray(at, end), sizes: trace.sizes.subarray(at, end), length: end - at };
  }
}

/**
 * A function that opens the source's accesses from the start: object files are streamed from disk at each call
 * (bounded memory), other traces are loaded once and walked.
 */
export function chunkOpener(source: TraceSource, pageBytes: number): () => Iterable<AccessChunk> {
  if (isObjectSource(source)) return () => streamObjects(source).chunks;
  let trace: SimTrace | undefined;
  return () => traceChunks((trace ??= loadTrace(source)), pageBytes);
}
