/**
 * Mooncake trace reader (FAST'25 release, JSON Lines): one request per line,
 * `{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [block ids]}` with 512-token
 * blocks. Ids are densified in first-seen order (they already are in the published traces).
 */
import { traceError } from '../errors.js';
import { fileLines, lines } from './read-file.js';
import type { LlmRequest, LlmTrace } from './types.js';

/** Options of {@link readMooncake}. */
export interface MooncakeOptions {
  /** Tokens per hash block. Default 512 (the Mooncake release). */
  blockTokens?: number;
}

function nonNegativeInt(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/**
 * Parses Mooncake JSONL text. Blank lines are skipped.
 * @param source named in errors (a path)
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming `source`, the line and the reason
 */
export function parseMooncake(text: string, source: string, options: MooncakeOptions = {}): LlmTrace {
  return parseMooncakeLines(lines(text), source, options);
}

/** Parses numbered lines of Mooncake JSONL (from text or streamed from a file). @throws TierSyncError as {@link parseMooncake} */
export function parseMooncakeLines(input: Iterable<[string, number]>, source: string, options: MooncakeOptions = {}): LlmTrace {
  const blockTokens = options.blockTokens ?? 512;
  const ids = new Map<number, number>();
  const requests: LlmRequest[] = [];
  let pageRefs = 0;
  for (const [line, n] of input) {
    if (line.trim() === '') continue;
    let rec: Record<string, unknown>;
    try {
      rec = JSON.parse(line) as Record<string, unknown>;
    } catch (e) {
      throw traceError(source, `line ${n}`, `not valid JSON (${(e as Error).message}); truncated file?`, e);
    }
    if (typeof rec !== 'object' || rec === null || Array.isArray(rec)) throw traceError(source, `line ${n}`, 'expected a JSON object');
    const { timestamp, input_length: input, output_length: output, hash_ids: hashes } = rec;
    if (typeof timestamp !== 'number' || !Number.isFinite(timestamp) || timestamp < 0) {
      throw traceError(source, `line ${n}`, `"timestamp" must be a non-negative number of milliseconds, got ${JSON.stringify(timestamp)}`);
    }
    if (!nonNegativeInt(input)) throw traceError(source, `line ${n}`, `"input_length" must be a non-negative integer, got ${JSON.stringify(input)}`);
    if (!nonNegativeInt(output)) throw traceError(source, `line ${n}`, `"output_length" must be a non-negative integer, got ${JSON.stringify(output)}`);
    if (!Array.isArray(hashes)) throw traceError(source, `line ${n}`, `"hash_ids" must be an array of block ids`);
    const pages = new Uint32Array(hashes.length);
    for (let i = 0; i < hashes.length; i++) {
      const h: unknown = hashes[i];
      if (!nonNegativeInt(h)) throw traceError(source, `line ${n}`, `hash_ids[${i}] must be a non-negative integer, got ${JSON.stringify(h)}`);
      let id = ids.get(h);
      if (id === undefined) {
        id = ids.size;
        ids.set(h, id);
      }
      pages[i] = id;
    }
    pageRefs += pages.length;
    requests.push({ timeMs: timestamp, inputTokens: input, outputTokens: output, pages });
  }
  return { kind: 'llm', source, blockTokens, requests, distinctPages: ids.size, pageRefs };
}

/** Reads a Mooncake JSONL file (optionally `.gz` / `.zst`), streamed line by line. @throws TierSyncError ERR_INVALID_ARGUMENT */
export function readMooncake(file: string, options: MooncakeOptions = {}): LlmTrace {
  return parseMooncakeLines(fileLines(file), file, options);
}
