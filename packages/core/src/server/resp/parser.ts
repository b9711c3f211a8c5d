/**
 * An incremental RESP parser (the Redis serialization protocol, as published at
 * redis.io/docs/latest/develop/reference/protocol-spec). Request mode reads what a server reads: arrays of bulk
 * strings, or Redis's inline commands (a plain line of space-separated words). Mode `any` reads every reply type
 * of RESP2 (simple strings `+`, errors `-`, integers `:`, bulk strings `$` (null `$-1`), arrays `*` (null `*-1`))
 * and of RESP3 (github.com/redis/redis-specifications/blob/master/protocol/RESP3.md: null `_`, booleans `#`,
 * doubles `,`, big numbers `(`, bulk errors `!`, verbatim strings `=`, maps `%`, sets `~`, pushes `>`), so tests
 * and tools can check what the door answers a RESP3 client. RESP3 attributes (`|`) and streamed strings (`$?`)
 * are refused with ERR_PROTOCOL: the door never sends them.
 *
 * Robust to any split of the input: it is a byte-at-a-time state machine over queued chunks, so a value cut
 * anywhere resumes where it stopped, and no byte is scanned twice. Every size is bounded (bulk length, array
 * length, line length, nesting, bytes held in JavaScript); exceeding a bound or malformed input throws a
 * TierSyncError with code ERR_PROTOCOL naming what was wrong, and nothing else is ever thrown. After such an
 * error the parser is poisoned (every later call throws the same error): the stream cannot be resynchronised.
 *
 * Bulk payloads can be written straight into caller memory (a host arena) through `bulkTarget`, so a value's bytes
 * are copied once, from the socket's buffer to their destination; a `BulkSink` takes a long string window by
 * window, so a 512 MiB value never needs 512 MiB of memory at once.
 */
import { TierSyncError } from '@tiersync/native/errors';

export interface RespLimits {
  /** Longest bulk string, bytes. Default 512 MiB (Redis's proto-max-bulk-len). */
  maxBulkBytes: number;
  /** Most elements of one array. Default 1,048,576. */
  maxArrayLength: number;
  /** Longest line: an inline command, a simple string, an error, a header. Default 64 KiB (Redis's inline limit). */
  maxInlineBytes: number;
  /**
   * Most bytes the parser holds in JavaScript at once: input pushed but not parsed yet, plus the bulk strings of
   * the value being parsed that it allocated itself (counted when their header arrives, before their bytes).
   * Bulk strings written into `bulkTarget` memory do not count. Default 64 MiB.
   */
  maxPendingBytes: number;
  /** Deepest nesting of arrays (any mode; requests are flat). Default 32. */
  maxDepth: number;
}

export const DEFAULT_RESP_LIMITS: Readonly<RespLimits> = Object.freeze({
  maxBulkBytes: 512 * 1024 * 1024,
  maxArrayLength: 1024 * 1024,
  maxInlineBytes: 64 * 1024,
  maxPendingBytes: 64 * 1024 * 1024,
  maxDepth: 32,
});

/** One RESP2 or RESP3 value as parsed (mode `any`) or as encoded by encodeValue(). */
export type RespValue =
  | { kind: 'simple'; value: string }
  | { kind: 'error'; value: string }
  | { kind: 'integer'; value: number }
  | { kind: 'bulk'; value: Uint8Array | null }
  | { kind: 'array'; value: RespValue[] | null }
  // RESP3 only
  | { kind: 'null'; value: null }
  | { kind: 'boolean'; value: boolean }
  | { kind: 'double'; value: number }
  /** A big number, as its decimal text. */
  | { kind: 'bignum'; value: string }
  | { kind: 'blobError'; value: string }
  /** A verbatim string: `format` is its three-letter type (`txt`, `mkd`). */
  | { kind: 'verbatim'; format: string; value: string }
  | { kind: 'map'; value: Array<[RespValue, RespValue]> }
  | { kind: 'set'; value: RespValue[] }
  | { kind: 'push'; value: RespValue[] };

/** Returned by next()/nextCommand() when `bulkTarget` asked to wait for memory; call again later. */
export const RESP_WAIT: unique symbol = Symbol('resp-wait');

/**
 * Takes one bulk string window by window (a long value streams through bounded memory). The parser asks for a
 * window, fills it from the input, hands it back with filled(), and asks for the next until the string ends.
 */
export interface BulkSink {
  /**
   * Memory for the string's next bytes: a view of 1..`left` bytes, or RESP_WAIT when none is available now (the
   * parser stops and asks again on its next call). May throw (the error propagates; the stream is lost).
   */
  window(left: number): Uint8Array | typeof RESP_WAIT;
  /** The window returned last is full: its bytes are final. May throw, like window(). */
  filled(window: Uint8Array): void;
  /** What the command receives in place of the string (a token the caller recognises, e.g. an empty view). */
  readonly handle: Uint8Array;
}

/**
 * Decides where a bulk string's bytes go (request mode: only the elements of the top-level command array).
 * `index` is the element's position in the command, `args` the elements parsed before it. Return a view of
 * exactly `length` bytes to fill, a BulkSink to take it window by window, `undefined` to let the parser
 * allocate, or RESP_WAIT when memory is not available now (the parser stops and asks again on the next call).
 * May throw (the error propagates).
 */
export type BulkTarget = (length: number, index: number, args: readonly Uint8Array[]) => Uint8Array | BulkSink | undefined | typeof RESP_WAIT;

export interface RespParserOptions {
  /** `request`: what a server reads (arrays of bulk strings, or inline commands). `any`: every RESP2 and RESP3 reply type. */
  mode: 'request' | 'any';
  limits?: Partial<RespLimits>;
  bulkTarget?: BulkTarget;
}

const CR = 13;
const LF = 10;
const PHASE_TYPE = 0;
const PHASE_LINE = 1;
const PHASE_TARGET = 2;
const PHASE_BULK = 3;
const PHASE_CR = 4;
const PHASE_LF = 5;
const PHASE_WINDOW = 6;

/** Type bytes of mode `any`: RESP2 `+ - : $ *`, RESP3 `_ # , ( ! = % ~ >`. */
const REPLY_TYPES = new Set([0x2b, 0x2d, 0x3a, 0x24, 0x2a, 0x5f, 0x23, 0x2c, 0x28, 0x21, 0x3d, 0x25, 0x7e, 0x3e]);
/** A RESP3 double: decimal with optional fraction and exponent, or inf / -inf / nan. */
const DOUBLE = /^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?inf$|^nan$/i;

const EMPTY = new Uint8Array(0);

interface Frame {
  items: unknown[];
  remaining: number;
  /** Type byte of the aggregate: `*` array, `%` map (2 items per entry), `~` set, `>` push. */
  type: number;
}

function protocolError(message: string): TierSyncError {
  return new TierSyncError(`Protocol error: ${message}`, 'ERR_PROTOCOL');
}

/** Printable form of a byte for messages. */
function showByte(b: number): string {
  return b >= 0x20 && b < 0x7f ? `'${String.fromCharCode(b)}'` : `0x${b.toString(16).padStart(2, '0')}`;
}

/** Splits an inline command the way Redis's sdssplitargs does: spaces separate words; "..." and '...' quote. */
export function splitInline(line: Uint8Array): Uint8Array[] {
  const args: Uint8Array[] = [];
  let i = 0;
  const n = line.length;
  const isSpace = (b: number) => b === 0x20 || b === 0x09 || b === 0x0b || b === 0x0c || b === CR || b === LF;
  const hex = (b: number) => (b >= 0x30 && b <= 0x39 ? b - 0x30 : b >= 0x61 && b <= 0x66 ? b - 0x57 : b >= 0x41 && b <= 0x46 ? b - 0x37 : -1);
  while (i < n) {
    while (i < n && isSpace(line[i]!)) i++;
    if (i >= n) break;
    const word: number[] = [];
    const q = line[i]!;
    if (q === 0x22 /* " */ || q === 0x27 /* ' */) {
      i++;
      let closed = false;
      while (i < n) {
        const b = line[i]!;
        if (b === 0x5c /* \ */ && i + 1 < n) {
          const e = line[i + 1]!;
          if (q === 0x22 && e === 0x78 /* x */ && i + 3 < n && hex(line[i + 2]!) >= 0 && hex(line[i + 3]!) >= 0) {
            word.push(hex(line[i + 2]!) * 16 + hex(line[i + 3]!));
            i += 4;
            continue;
          }
          if (q === 0x22) {
            const map: Record<number, number> = { 0x6e: LF, 0x72: CR, 0x74: 0x09, 0x62: 0x08, 0x61: 0x07 };
            word.push(map[e] ?? e);
            i += 2;
            continue;
          }
          if (e === 0x27) {
            word.push(0x27);
            i += 2;
            continue;
          }
        }
        if (b === q) {
          // A closing quote must be followed by a space or the end.
          if (i + 1 < n && !isSpace(line[i + 1]!)) throw protocolError('closing quote must be followed by a space in inline request');
          i++;
          closed = true;
          break;
        }
        word.push(b);
        i++;
      }
      if (!closed) throw protocolError('unbalanced quotes in inline request');
    } else {
      while (i < n && !isSpace(line[i]!)) word.push(line[i++]!);
    }
    args.push(Uint8Array.from(word));
  }
  return args;
}

export class RespParser {
  readonly mode: 'request' | 'any';
  #limits: RespLimits;
  readonly #target: BulkTarget | undefined;
  readonly #chunks: Uint8Array[] = [];
  #head = 0;
  #pending = 0;
  #phase = PHASE_TYPE;
  #type = 0;
  #line: Uint8Array = new Uint8Array(64);
  #lineLength = 0;
  #inline = false;
  #stack: Frame[] = [];
  #bulk: Uint8Array = EMPTY;
  #bulkFill = 0;
  #bulkLength = 0;
  /** End of the current window of #bulk (the whole string unless a sink takes it in windows). */
  #windowEnd = 0;
  #sink: BulkSink | undefined;
  /** Bytes of the string the sink has not received yet (window being filled included). */
  #sinkLeft = 0;
  /** Bytes of bulk strings the parser allocated for the value in progress. */
  #owned = 0;
  #failed: TierSyncError | undefined;

  constructor(options: RespParserOptions) {
    if (options.mode !== 'request' && options.mode !== 'any') throw new TierSyncError(`mode must be 'request' or 'any', got ${String(options.mode)}`, 'ERR_INVALID_ARGUMENT');
    this.mode = options.mode;
    this.#limits = { ...DEFAULT_RESP_LIMITS };
    this.setLimits(options.limits ?? {});
    this.#target = options.bulkTarget;
  }

  /** Changes the bounds (e.g. a server relaxes them once a client authenticates). Applies to values not yet begun. */
  setLimits(limits: Partial<RespLimits>): void {
    for (const [name, v] of Object.entries(limits)) {
      if (!(name in DEFAULT_RESP_LIMITS)) throw new TierSyncError(`unknown RESP limit '${name}'`, 'ERR_INVALID_ARGUMENT');
      if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw new TierSyncError(`RESP limit ${name} must be a positive integer, got ${String(v)}`, 'ERR_INVALID_ARGUMENT');
    }
    this.#limits = { ...this.#limits, ...limits };
  }

  get limits(): Readonly<RespLimits> {
    return this.#limits;
  }

  /** Input pushed but not parsed yet, bytes. */
  get pendingBytes(): number {
    return this.#pending;
  }

  /** True while a value has begun but not completed (bytes of it have been consumed). */
  get midValue(): boolean {
    return this.#phase !== PHASE_TYPE || this.#stack.length > 0;
  }

  /**
   * Queues input. The chunk is kept by reference until parsed: do not reuse its memory.
   * @throws TierSyncError ERR_PROTOCOL when the bytes held would exceed maxPendingBytes
   */
  push(chunk: Uint8Array): void {
    if (this.#failed) throw this.#failed;
    if (chunk.length === 0) return;
    if (this.#pending + chunk.length + this.#owned > this.#limits.maxPendingBytes) {
      throw this.#fail(`more than ${this.#limits.maxPendingBytes} bytes pending from this client`);
    }
    this.#chunks.push(chunk);
    this.#pending += chunk.length;
  }

  /**
   * The next complete value (mode `any`), undefined when more input is needed, or RESP_WAIT.
   * @throws TierSyncError ERR_PROTOCOL on malformed input or an exceeded bound
   */
  next(): RespValue | undefined | typeof RESP_WAIT {
    if (this.mode !== 'any') throw new TierSyncError("next() needs mode 'any'; use nextCommand() in request mode", 'ERR_INVALID_ARGUMENT');
    return this.#run() as RespValue | undefined | typeof RESP_WAIT;
  }

  /**
   * The next complete command as its arguments (mode `request`), undefined when more input is needed, or RESP_WAIT.
   * Empty commands (`*0`, `*-1`, blank inline lines) are skipped, as Redis does.
   * @throws TierSyncError ERR_PROTOCOL on malformed input or an exceeded bound
   */
  nextCommand(): Uint8Array[] | undefined | typeof RESP_WAIT {
    if (this.mode !== 'request') throw new TierSyncError("nextCommand() needs mode 'request'; use next() in mode 'any'", 'ERR_INVALID_ARGUMENT');
    return this.#run() as Uint8Array[] | undefined | typeof RESP_WAIT;
  }

  #fail(message: string): TierSyncError {
    this.#failed = protocolError(message);
    return this.#failed;
  }

  #run(): unknown {
    if (this.#failed) throw this.#failed;
    try {
      return this.#step();
    } catch (e) {
      if (e instanceof TierSyncError && e.code === 'ERR_PROTOCOL') {
        this.#failed = e;
        throw e;
      }
      // Anything else comes from bulkTarget (the caller's own error): pass it on, but the stream is lost.
      this.#failed = protocolError(`stream abandoned after: ${(e as Error).message}`);
      throw e;
    }
  }

  /** Drops the consumed prefix of the first chunk. */
  #consume(n: number): void {
    this.#head += n;
    this.#pending -= n;
    if (this.#head === this.#chunks[0]!.length) {
      this.#chunks.shift();
      this.#head = 0;
    }
  }

  #step(): unknown {
    for (;;) {
      const chunk = this.#chunks[0];
      switch (this.#phase) {
        case PHASE_TYPE: {
          if (!chunk) return undefined;
          const b = chunk[this.#head]!;
          const depth = this.#stack.length;
          if (this.mode === 'request') {
            if (depth === 0 && b !== 0x2a /* * */) {
              // Inline command: the whole line is the command.
              this.#inline = true;
              this.#phase = PHASE_LINE;
              this.#lineLength = 0;
              continue;
            }
            if (depth > 0 && b !== 0x24 /* $ */) throw this.#fail(`expected '$', got ${showByte(b)}`);
          } else if (!REPLY_TYPES.has(b)) {
            if (b === 0x7c /* | */) throw this.#fail('RESP3 attributes are not supported');
            throw this.#fail(`unknown type byte ${showByte(b)}`);
          }
          this.#type = b;
          this.#inline = false;
          this.#consume(1);
          this.#phase = PHASE_LINE;
          this.#lineLength = 0;
          continue;
        }
        case PHASE_LINE: {
          if (!chunk) return undefined;
          const line = this.#readLine(chunk);
          if (line === undefined) continue;
          const r = this.#onLine(line);
          if (r !== undefined) return r;
          continue;
        }
        case PHASE_TARGET: {
          const r = this.#allocateBulk();
          if (r === RESP_WAIT) return RESP_WAIT;
          continue;
        }
        case PHASE_WINDOW: {
          const w = this.#sink!.window(this.#sinkLeft);
          if (w === RESP_WAIT) return RESP_WAIT;
          if (!(w instanceof Uint8Array) || w.length < 1 || w.length > this.#sinkLeft) {
            throw new TierSyncError(`BulkSink.window must return a Uint8Array of 1..${this.#sinkLeft} bytes`, 'ERR_INVALID_ARGUMENT');
          }
          this.#bulk = w;
          this.#bulkFill = 0;
          this.#windowEnd = w.length;
          this.#phase = PHASE_BULK;
          continue;
        }
        case PHASE_BULK: {
          if (this.#bulkFill === this.#windowEnd) {
            if (this.#sink) {
              this.#sinkLeft -= this.#windowEnd;
              const full = this.#bulk;
              this.#bulk = EMPTY;
              this.#sink.filled(full);
              if (this.#sinkLeft > 0) {
                this.#phase = PHASE_WINDOW;
                continue;
              }
            }
            this.#phase = PHASE_CR;
            continue;
          }
          if (!chunk) return undefined;
          const take = Math.min(chunk.length - this.#head, this.#windowEnd - this.#bulkFill);
          this.#bulk.set(chunk.subarray(this.#head, this.#head + take), this.#bulkFill);
          this.#bulkFill += take;
          this.#consume(take);
          continue;
        }
        case PHASE_CR:
        case PHASE_LF: {
          if (!chunk) return undefined;
          const b = chunk[this.#head]!;
          const want = this.#phase === PHASE_CR ? CR : LF;
          if (b !== want) throw this.#fail(`expected CRLF after a bulk string of ${this.#bulkLength} bytes, got ${showByte(b)}`);
          this.#consume(1);
          if (this.#phase === PHASE_CR) {
            this.#phase = PHASE_LF;
            continue;
          }
          this.#phase = PHASE_TYPE;
          const bulk = this.#sink ? this.#sink.handle : this.#bulk;
          this.#bulk = EMPTY;
          this.#sink = undefined;
          const r = this.#complete(this.mode === 'request' ? bulk : this.#blobValue(bulk));
          if (r !== undefined) return r;
          continue;
        }
      }
    }
  }

  /**
   * Accumulates the current line from `chunk`; returns it (without CRLF) once its LF has arrived. A line is
   * copied into the parser's own buffer, at most maxInlineBytes, so a line split across chunks costs nothing extra.
   */
  #readLine(chunk: Uint8Array): Uint8Array | undefined {
    const start = this.#head;
    const max = this.#limits.maxInlineBytes + 1; // + CR
    let lf = chunk.indexOf(LF, start);
    const end = lf < 0 ? chunk.length : lf;
    const add = end - start;
    if (this.#lineLength + add > max) {
      throw this.#fail(this.#inline ? `inline request longer than ${this.#limits.maxInlineBytes} bytes` : `line longer than ${this.#limits.maxInlineBytes} bytes`);
    }
    if (this.#line.length < this.#lineLength + add) {
      const grown = new Uint8Array(Math.min(Math.max(this.#line.length * 2, this.#lineLength + add), max));
      grown.set(this.#line.subarray(0, this.#lineLength));
      this.#line = grown;
    }
    this.#line.set(chunk.subarray(start, end), this.#lineLength);
    this.#lineLength += add;
    this.#consume(add + (lf < 0 ? 0 : 1));
    if (lf < 0) return undefined;
    let length = this.#lineLength;
    if (length > 0 && this.#line[length - 1] === CR) length--;
    else if (!this.#inline) throw this.#fail('expected CRLF at the end of a line, got a bare LF');
    const line = this.#line.subarray(0, length);
    if (!this.#inline && line.includes(CR)) throw this.#fail('CR inside a line');
    return line;
  }

  /** Strict RESP integer: optional '-', 1..19 digits, nothing else; within +-2^53. */
  #integer(line: Uint8Array, what: string): number {
    let i = 0;
    let negative = false;
    if (line[0] === 0x2d) {
      negative = true;
      i = 1;
    }
    // As Redis reads numbers (string2ll): no leading zero, no "-0".
    if (i >= line.length || line.length - i > 19 || (line[i] === 0x30 && (line.length - i > 1 || negative))) throw this.#fail(`invalid ${what} '${latin1(line, 24)}'`);
    let v = 0;
    for (; i < line.length; i++) {
      const d = line[i]! - 0x30;
      if (d < 0 || d > 9) throw this.#fail(`invalid ${what} '${latin1(line, 24)}'`);
      v = v * 10 + d;
    }
    if (!Number.isSafeInteger(v)) throw this.#fail(`${what} out of range '${latin1(line, 24)}'`);
    return negative ? -v : v;
  }

  #onLine(line: Uint8Array): unknown {
    this.#phase = PHASE_TYPE;
    if (this.#inline) {
      // A blank line is ignored, as Redis does.
      const args = splitInline(line);
      if (args.length > this.#limits.maxArrayLength) throw this.#fail(`inline request with more than ${this.#limits.maxArrayLength} arguments`);
      this.#owned = 0;
      return args.length ? args : undefined;
    }
    switch (this.#type) {
      case 0x2b: // +
        return this.#complete({ kind: 'simple', value: latin1(line) });
      case 0x2d: // -
        return this.#complete({ kind: 'error', value: latin1(line) });
      case 0x3a: // :
        return this.#complete({ kind: 'integer', value: this.#integer(line, 'integer') });
      case 0x5f: // _ (RESP3 null)
        if (line.length) throw this.#fail(`invalid null '${latin1(line, 24)}'`);
        return this.#complete({ kind: 'null', value: null });
      case 0x23: {
        // # (RESP3 boolean)
        const t = latin1(line);
        if (t !== 't' && t !== 'f') throw this.#fail(`invalid boolean '${latin1(line, 24)}'`);
        return this.#complete({ kind: 'boolean', value: t === 't' });
      }
      case 0x2c: {
        // , (RESP3 double)
        const t = latin1(line);
        if (!DOUBLE.test(t)) throw this.#fail(`invalid double '${latin1(line, 24)}'`);
        const lower = t.toLowerCase();
        const value = lower.endsWith('inf') ? (lower.startsWith('-') ? -Infinity : Infinity) : lower === 'nan' ? NaN : Number(t);
        return this.#complete({ kind: 'double', value });
      }
      case 0x28: {
        // ( (RESP3 big number)
        const t = latin1(line);
        if (!/^-?\d{1,4096}$/.test(t)) throw this.#fail(`invalid big number '${latin1(line, 24)}'`);
        return this.#complete({ kind: 'bignum', value: t });
      }
      case 0x24: // $
      case 0x21: // ! (RESP3 bulk error)
      case 0x3d: {
        // = (RESP3 verbatim string)
        if (line.length === 1 && line[0] === 0x3f) throw this.#fail('RESP3 streamed strings are not supported');
        const n = this.#integer(line, 'bulk length');
        if (n === -1 && this.mode === 'any' && this.#type === 0x24) return this.#complete({ kind: 'bulk', value: null });
        if (n < 0) throw this.#fail(`invalid bulk length ${n}`);
        if (this.#type === 0x3d && n < 4) throw this.#fail(`verbatim string of ${n} bytes is shorter than its 'fmt:' prefix`);
        if (n > this.#limits.maxBulkBytes) throw this.#fail(`bulk length ${n} over the limit of ${this.#limits.maxBulkBytes} bytes`);
        this.#bulkLength = n;
        this.#phase = PHASE_TARGET;
        return undefined;
      }
      case 0x2a: {
        // *
        const n = this.#integer(line, 'multibulk length');
        if (n > this.#limits.maxArrayLength) throw this.#fail(`array of ${n} elements over the limit of ${this.#limits.maxArrayLength}`);
        if (n < -1) throw this.#fail(`invalid multibulk length ${n}`);
        if (this.mode === 'request') {
          if (n <= 0) return undefined; // empty command: skipped
          this.#stack.push({ items: [], remaining: n, type: 0x2a });
          return undefined;
        }
        if (n === -1) return this.#complete({ kind: 'array', value: null });
        return this.#open(n, 0x2a);
      }
      case 0x25: // % (RESP3 map)
      case 0x7e: // ~ (RESP3 set)
      case 0x3e: {
        // > (RESP3 push)
        const n = this.#integer(line, 'aggregate length');
        if (n < 0) throw this.#fail(`invalid aggregate length ${n}`);
        const items = this.#type === 0x25 ? n * 2 : n;
        if (items > this.#limits.maxArrayLength) throw this.#fail(`aggregate of ${items} elements over the limit of ${this.#limits.maxArrayLength}`);
        return this.#open(items, this.#type);
      }
      default:
        throw this.#fail('internal: unknown type');
    }
  }

  /** Finds memory for the bulk string whose header was just read. */
  #allocateBulk(): unknown {
    const n = this.#bulkLength;
    const top = this.#stack[this.#stack.length - 1];
    let target: Uint8Array | undefined;
    if (this.#target && this.mode === 'request' && top && n > 0) {
      const given = this.#target(n, top.items.length, top.items as Uint8Array[]);
      if (given === RESP_WAIT) return RESP_WAIT;
      if (given !== undefined && !(given instanceof Uint8Array)) {
        if (typeof given !== 'object' || typeof given.window !== 'function' || typeof given.filled !== 'function' || !(given.handle instanceof Uint8Array)) {
          throw new TierSyncError('bulkTarget must return a Uint8Array, a BulkSink, undefined or RESP_WAIT', 'ERR_INVALID_ARGUMENT');
        }
        this.#sink = given;
        this.#sinkLeft = n;
        this.#bulk = EMPTY;
        this.#bulkFill = 0;
        this.#windowEnd = 0;
        this.#phase = PHASE_WINDOW;
        return undefined;
      }
      target = given;
      if (target !== undefined && target.length !== n) {
        throw new TierSyncError(`bulkTarget must return a Uint8Array of exactly ${n} bytes`, 'ERR_INVALID_ARGUMENT');
      }
    }
    if (target === undefined) {
      if (this.#pending + this.#owned + n > this.#limits.maxPendingBytes) throw this.#fail(`more than ${this.#limits.maxPendingBytes} bytes pending from this client`);
      this.#owned += n;
      target = n === 0 ? new Uint8Array(0) : Buffer.allocUnsafe(n);
    }
    this.#bulk = target;
    this.#bulkFill = 0;
    this.#windowEnd = n;
    this.#phase = PHASE_BULK;
    return undefined;
  }

  /** Opens an aggregate of `items` elements (an empty one completes at once). */
  #open(items: number, type: number): unknown {
    if (items === 0) return this.#complete(this.#aggregate(type, []));
    if (this.#stack.length >= this.#limits.maxDepth) throw this.#fail(`arrays nested deeper than ${this.#limits.maxDepth}`);
    this.#stack.push({ items: [], remaining: items, type });
    return undefined;
  }

  #aggregate(type: number, items: unknown[]): RespValue {
    const values = items as RespValue[];
    switch (type) {
      case 0x25: {
        const pairs: Array<[RespValue, RespValue]> = [];
        for (let i = 0; i < values.length; i += 2) pairs.push([values[i]!, values[i + 1]!]);
        return { kind: 'map', value: pairs };
      }
      case 0x7e:
        return { kind: 'set', value: values };
      case 0x3e:
        return { kind: 'push', value: values };
      default:
        return { kind: 'array', value: values };
    }
  }

  /** A completed `$`, `!` or `=` payload as its value (mode `any`). */
  #blobValue(bytes: Uint8Array): RespValue {
    if (this.#type === 0x21) return { kind: 'blobError', value: latin1(bytes) };
    if (this.#type === 0x3d) {
      if (bytes[3] !== 0x3a) throw this.#fail("verbatim string without its 'fmt:' prefix");
      return { kind: 'verbatim', format: latin1(bytes.subarray(0, 3)), value: latin1(bytes.subarray(4)) };
    }
    return { kind: 'bulk', value: bytes };
  }

  /** A value finished: add it to the open array, or return it (and every array it completes). */
  #complete(value: unknown): unknown {
    let v = value;
    for (;;) {
      const top = this.#stack[this.#stack.length - 1];
      if (!top) {
        this.#owned = 0;
        return v;
      }
      top.items.push(v);
      if (--top.remaining > 0) return undefined;
      this.#stack.pop();
      v = this.mode === 'request' ? top.items : this.#aggregate(top.type, top.items);
    }
  }
}

/** Bytes as a latin1 string (one char per byte), at most `max` bytes. */
export function latin1(bytes: Uint8Array, max = Infinity): string {
  const b = bytes.length > max ? bytes.subarray(0, max) : bytes;
  return Buffer.from(b.buffer, b.byteOffset, b.length).toString('latin1');
}
