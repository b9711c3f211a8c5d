/**
 * A self-contained fuzz driver for the RESP parser (no test framework needed, so the reliability suite can run
 * it at any number of cases). Each case, from a seeded generator:
 * - round trip: a random RESP2 or RESP3 value (or command) is encoded, cut into random pieces, parsed: the same value;
 * - mutation: a valid stream with bytes flipped, inserted, dropped or truncated, parsed under two different
 *   splits: both give the same values and the same outcome, and the only error ever thrown is ERR_PROTOCOL;
 * - noise: random bytes, likewise.
 */
import { TierSyncError } from '@tiersync/native/errors';
import { encodeCommand, encodeValue } from './encoder.js';
import { RESP_WAIT, RespParser, type RespLimits, type RespValue } from './parser.js';

export interface RespFuzzOptions {
  /** Number of cases. Default 10,000. */
  cases?: number;
  /** Seed of the generator, so a failure can be replayed. Default 1. */
  seed?: number;
}

export interface RespFuzzReport {
  cases: number;
  seed: number;
  /** Values and commands that round-tripped. */
  roundTrips: number;
  /** Damaged or random streams the parser refused with ERR_PROTOCOL. */
  refused: number;
  /** Damaged or random streams that still parsed (into values or nothing). */
  accepted: number;
}

/** mulberry32: a small, fast 32-bit PRNG, good enough to drive a fuzzer reproducibly. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FUZZ_LIMITS: Partial<RespLimits> = { maxBulkBytes: 4096, maxArrayLength: 64, maxInlineBytes: 256, maxPendingBytes: 1 << 16, maxDepth: 8 };

function randomBytes(r: () => number, n: number, printable = false): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = printable ? 0x20 + Math.floor(r() * 95) : Math.floor(r() * 256);
  // Bias towards protocol bytes so damaged streams reach deep states.
  if (!printable) for (let i = 0; i < n; i++) if (r() < 0.2) out[i] = [13, 10, 0x24, 0x2a, 0x3a, 0x2b, 0x2d, 0x30, 0x31][Math.floor(r() * 9)]!;
  return out;
}

function randomValue(r: () => number, depth: number): RespValue {
  // 0..7 scalars (RESP2, then RESP3's), 8..10 aggregates (array, RESP3 map and set) while not too deep.
  const k = Math.floor(r() * (depth > 3 ? 8 : 11));
  const word = () => String.fromCharCode(...randomBytes(r, Math.floor(r() * 20), true));
  switch (k) {
    case 0:
      return { kind: 'simple', value: String.fromCharCode(...randomBytes(r, Math.floor(r() * 20), true)) };
    case 1:
      return { kind: 'error', value: `ERR ${String.fromCharCode(...randomBytes(r, Math.floor(r() * 20), true))}` };
    case 2:
      return { kind: 'integer', value: Math.floor((r() - 0.5) * 2 ** (r() * 53)) };
    case 3:
      return { kind: 'bulk', value: r() < 0.1 ? null : randomBytes(r, Math.floor(r() * (r() < 0.1 ? 2000 : 40))) };
    case 4:
      return { kind: 'null', value: null };
    case 5:
      return { kind: 'boolean', value: r() < 0.5 };
    case 6:
      return { kind: 'double', value: r() < 0.1 ? Infinity : (r() - 0.5) * 10 ** Math.floor(r() * 30 - 10) };
    case 7:
      return { kind: 'verbatim', format: 'txt', value: word() };
    case 9:
      return { kind: 'map', value: Array.from({ length: Math.floor(r() * 4) }, () => [randomValue(r, depth + 1), randomValue(r, depth + 1)] as [RespValue, RespValue]) };
    case 10:
      return { kind: 'set', value: Array.from({ length: Math.floor(r() * 5) }, () => randomValue(r, depth + 1)) };
    default:
      return { kind: 'array', value: r() < 0.1 ? null : Array.from({ length: Math.floor(r() * 6) }, () => randomValue(r, depth + 1)) };
  }
}

/** Cuts `bytes` into random pieces (sometimes single bytes, sometimes whole). */
export function randomSplit(r: () => number, bytes: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  const mode = r();
  let i = 0;
  while (i < bytes.length) {
    const n = mode < 0.2 ? 1 : mode < 0.3 ? bytes.length : 1 + Math.floor(r() * 16);
    out.push(bytes.slice(i, i + n));
    i += n;
  }
  return out;
}

type Outcome = { values: unknown[]; error: string | null };

/** Parses the pieces in order; values out, and the protocol error if one was thrown. Any other error propagates. */
function parseAll(mode: 'request' | 'any', pieces: Uint8Array[], limits: Partial<RespLimits> = FUZZ_LIMITS): Outcome {
  const p = new RespParser({ mode, limits });
  const values: unknown[] = [];
  try {
    for (const piece of pieces) {
      p.push(piece);
      for (;;) {
        const v = mode === 'any' ? p.next() : p.nextCommand();
        if (v === undefined) break;
        if (v === RESP_WAIT) throw new Error('parser returned RESP_WAIT without a bulkTarget');
        values.push(v);
      }
    }
  } catch (e) {
    if (e instanceof TierSyncError && e.code === 'ERR_PROTOCOL') return { values, error: e.message };
    throw e;
  }
  return { values, error: null };
}

/** Structural equality of parsed values (Uint8Arrays by content). */
export function sameValue(a: unknown, b: unknown): boolean {
  if (a instanceof Uint8Array && b instanceof Uint8Array) return Buffer.compare(a, b) === 0;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => sameValue(x, b[i]));
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    const ka = Object.keys(a);
    const kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
  }
  return a === b;
}

function mutate(r: () => number, bytes: Uint8Array): Uint8Array {
  const out = Array.from(bytes);
  const edits = 1 + Math.floor(r() * 4);
  for (let e = 0; e < edits; e++) {
    const at = Math.floor(r() * (out.length + 1));
    const op = r();
    if (op < 0.4 && out.length) out[Math.min(at, out.length - 1)] = Math.floor(r() * 256);
    else if (op < 0.7) out.splice(at, 0, ...randomBytes(r, 1 + Math.floor(r() * 4)));
    else if (op < 0.9) out.splice(at, 1 + Math.floor(r() * 4));
    else out.length = at;
  }
  return Uint8Array.from(out);
}

/**
 * Runs `cases` fuzz cases; throws an Error naming the seed and case when a property fails.
 * @returns counts of what happened
 */
export function fuzzRespParser(options: RespFuzzOptions | number = {}): RespFuzzReport {
  const o = typeof options === 'number' ? { cases: options } : options;
  const cases = o.cases ?? 10_000;
  const seed = o.seed ?? 1;
  const r = rng(seed);
  const report: RespFuzzReport = { cases, seed, roundTrips: 0, refused: 0, accepted: 0 };
  const fail = (i: number, what: string) => {
    throw new Error(`fuzzRespParser(seed ${seed}) case ${i}: ${what}`);
  };
  for (let i = 0; i < cases; i++) {
    const kind = r();
    if (kind < 0.4) {
      // Round trip of a few values (mode any) or commands (mode request) in one stream.
      const asCommands = r() < 0.5;
      const items = Array.from({ length: 1 + Math.floor(r() * 3) }, () =>
        asCommands ? Array.from({ length: 1 + Math.floor(r() * 5) }, () => randomBytes(r, Math.floor(r() * 30))) : randomValue(r, 0),
      );
      const stream = Buffer.concat(items.map((v) => (asCommands ? encodeCommand(v as Uint8Array[]) : encodeValue(v as RespValue))));
      const out = parseAll(asCommands ? 'request' : 'any', randomSplit(r, stream), { maxPendingBytes: 1 << 20 });
      if (out.error) fail(i, `a valid stream was refused: ${out.error}`);
      if (!sameValue(out.values, items)) fail(i, 'round trip changed the values');
      report.roundTrips++;
      continue;
    }
    const base = kind < 0.8 ? (r() < 0.5 ? encodeCommand([randomBytes(r, 3), randomBytes(r, Math.floor(r() * 50))]) : encodeValue(randomValue(r, 0))) : randomBytes(r, Math.floor(r() * 200));
    const bytes = kind < 0.8 ? mutate(r, base) : base;
    const mode = r() < 0.5 ? 'request' : 'any';
    const a = parseAll(mode, randomSplit(r, bytes));
    const b = parseAll(mode, [bytes]);
    if (!sameValue(a.values, b.values) || (a.error === null) !== (b.error === null)) fail(i, `two splits of the same bytes parsed differently (${a.error} / ${b.error})`);
    if (a.error) report.refused++;
    else report.accepted++;
  }
  return report;
}
