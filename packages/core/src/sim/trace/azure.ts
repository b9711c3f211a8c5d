/**
 * Azure LLM inference trace (2023, Splitwise; CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, CRLF) with a
 * seeded model of prefix sharing, since the trace has arrivals and token counts only.
 *
 * The prefix model (documented in docs/SIMULATION.md), per request of N prompt tokens, in trace order:
 * 1. With probability `followUpProbability`, pick uniformly one of the `window` most recently active
 *    conversations. If its context (previous prompt + answer) is shorter than N, this request is its next turn:
 *    the prompt extends that conversation's token stream, so its full pages are shared with the earlier turns.
 * 2. Otherwise (or when the picked context is not shorter) start a new conversation whose stream begins with one
 *    of `systemPrompts` shared system prompts, picked with Zipf(`zipf`) popularity, of
 *    min(`systemPromptTokens`, N) tokens.
 * Page ids then follow {@link promptPages}. The same seed and trace give the same ids.
 */
import { SeededRandom } from '@tiersync/policy';
import { invalid, traceError } from '../errors.js';
import { PageIds, promptPages, type PromptStream } from './page-keys.js';
import { fileLines, lines } from './read-file.js';
import type { LlmRequest, LlmTrace } from './types.js';

/** Options of the Azure prefix-sharing model. */
export interface AzurePrefixOptions {
  /** Seed of the model's random choices, an integer in [0, 2^32). Default 42. */
  seed?: number;
  /** Tokens per page. Default 512 (as Mooncake, so results compare). */
  blockTokens?: number;
  /** Number of distinct shared system prompts. Default 16. */
  systemPrompts?: number;
  /** Tokens of each system prompt. Default 1024. */
  systemPromptTokens?: number;
  /** Zipf exponent of system-prompt popularity (0 = uniform). Default 1. */
  zipf?: number;
  /** Probability in [0, 1] that a request continues a recent conversation. Default 0.5. */
  followUpProbability?: number;
  /** How many recent conversations a follow-up may continue. Default 64. */
  window?: number;
}

const TIME = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?$/;

/** Milliseconds since the epoch (UTC) of an Azure `TIMESTAMP`, or NaN. */
export function parseAzureTime(text: string): number {
  const m = TIME.exec(text);
  if (!m) return Number.NaN;
  const [, y, mo, d, h, mi, s, frac] = m;
  const base = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s));
  return base + (frac ? Number(`0.${frac}`) * 1000 : 0);
}

function checkOptions(o: AzurePrefixOptions): Required<AzurePrefixOptions> {
  const r = {
    seed: o.seed ?? 42,
    blockTokens: o.blockTokens ?? 512,
    systemPrompts: o.systemPrompts ?? 16,
    systemPromptTokens: o.systemPromptTokens ?? 1024,
    zipf: o.zipf ?? 1,
    followUpProbability: o.followUpProbability ?? 0.5,
    window: o.window ?? 64,
  };
  const int = (v: number, name: string, min: number) => {
    if (!Number.isSafeInteger(v) || v < min) throw invalid(`azure.${name} must be an integer >= ${min}, got ${v}`);
  };
  int(r.seed, 'seed', 0);
  if (r.seed > 0xffff_ffff) throw invalid(`azure.seed must be below 2^32, got ${r.seed}`);
  int(r.blockTokens, 'blockTokens', 1);
  int(r.systemPrompts, 'systemPrompts', 1);
  int(r.systemPromptTokens, 'systemPromptTokens', 0);
  int(r.window, 'window', 1);
  if (!(r.zipf >= 0) || !Number.isFinite(r.zipf)) throw invalid(`azure.zipf must be a number >= 0, got ${r.zipf}`);
  if (!(r.followUpProbability >= 0 && r.followUpProbability <= 1)) {
    throw invalid(`azure.followUpProbability must be in [0, 1], got ${r.followUpProbability}`);
  }
  return r;
}

/** Cumulative Zipf weights over `n` ranks, normalised to end at 1. */
function zipfCdf(n: number, s: number): Float64Array {
  const cdf = new Float64Array(n);
  let sum = 0;
  for (let k = 0; k < n; k++) cdf[k] = sum += 1 / (k + 1) ** s;
  for (let k = 0; k < n; k++) cdf[k]! /= sum;
  return cdf;
}

/**
 * Parses Azure CSV text and applies the prefix model.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming `source`, the line and the reason, or a bad option
 */
export function parseAzure(text: string, source: string, options: AzurePrefixOptions = {}): LlmTrace {
  return parseAzureLines(lines(text), source, options);
}

/** Parses numbered lines of Azure CSV (from text or streamed from a file). @throws TierSyncError as {@link parseAzure} */
export function parseAzureLines(input: Iterable<[string, number]>, source: string, options: AzurePrefixOptions = {}): LlmTrace {
  const o = checkOptions(options);
  const rng = new SeededRandom(o.seed);
  const cdf = zipfCdf(o.systemPrompts, o.zipf);
  const ids = new PageIds();
  const requests: LlmRequest[] = [];
  // Recent conversations: stream + context tokens, a ring of `window` entries.
  const recent: Array<{ stream: PromptStream; context: number }> = [];
  let nextRecent = 0;
  let conversations = 0;
  let t0 = Number.NaN;
  let pageRefs = 0;
  let header = '';
  for (const [line, n] of input) {
    if (n === 1) header = line;
    if (n === 1) {
      if (line.replace(/^\uFEFF/, '').trim() !== 'TIMESTAMP,ContextTokens,GeneratedTokens') {
        throw traceError(source, 'line 1', `expected the header TIMESTAMP,ContextTokens,GeneratedTokens, got '${line.slice(0, 80)}'`);
      }
      continue;
    }
    if (line.trim() === '') continue;
    const f = line.split(',');
    if (f.length !== 3) throw traceError(source, `line ${n}`, `expected 3 fields, got ${f.length}; truncated file?`);
    const time = parseAzureTime(f[0]!.trim());
    if (Number.isNaN(time)) throw traceError(source, `line ${n}`, `TIMESTAMP must look like 2023-11-16 18:17:03.9799600, got '${f[0]}'`);
    const input = Number(f[1]);
    const output = Number(f[2]);
    if (!/^\s*\d+\s*$/.test(f[1]!)) throw traceError(source, `line ${n}`, `ContextTokens must be a non-negative integer, got '${f[1]}'`);
    if (!/^\s*\d+\s*$/.test(f[2]!)) throw traceError(source, `line ${n}`, `GeneratedTokens must be a non-negative integer, got '${f[2]}'`);
    if (Number.isNaN(t0)) t0 = time;
    let stream: PromptStream | undefined;
    let slot = -1;
    if (recent.length > 0 && rng.next() < o.followUpProbability) {
      slot = rng.nextInt(recent.length);
      const c = recent[slot]!;
      if (c.context < input) {
        stream = c.stream;
        c.context = input + output;
      } else slot = -1;
    }
    if (stream === undefined) {
      const u = rng.next();
      let k = 0;
      while (k < o.systemPrompts - 1 && cdf[k]! <= u) k++;
      stream = { systemPrompt: k, systemTokens: Math.min(o.systemPromptTokens, input), conversation: conversations++ };
      const entry = { stream, context: input + output };
      if (recent.length < o.window) recent.push(entry);
      else recent[nextRecent] = entry;
      nextRecent = (nextRecent + 1) % o.window;
    }
    const pages = promptPages(stream, input, o.blockTokens, ids);
    pageRefs += pages.length;
    requests.push({ timeMs: time - t0, inputTokens: input, outputTokens: output, pages });
  }
  if (requests.length === 0 && !header.replace(/^\uFEFF/, '').startsWith('TIMESTAMP')) throw traceError(source, 'line 1', 'empty file');
  return { kind: 'llm', source, blockTokens: o.blockTokens, requests, distinctPages: ids.size, pageRefs };
}

/** Reads an Azure CSV file (optionally `.gz` / `.zst`), streamed line by line, and applies the prefix model. @throws TierSyncError */
export function readAzure(file: string, options: AzurePrefixOptions = {}): LlmTrace {
  return parseAzureLines(fileLines(file), file, options);
}
