import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native/errors';
import { encodeCommand, encodeValue } from './encoder.js';
import { fuzzRespParser, sameValue } from './fuzz.js';
import { RESP_WAIT, RespParser, type RespLimits, type RespValue } from './parser.js';

const bytes = (s: string) => Buffer.from(s, 'latin1');

/** Parses `pieces` in order and returns every value, or the error message once one is thrown. */
function parse(mode: 'request' | 'any', pieces: Uint8Array[], limits: Partial<RespLimits> = {}): { values: unknown[]; error?: TierSyncError } {
  const p = new RespParser({ mode, limits });
  const values: unknown[] = [];
  try {
    for (const piece of pieces) {
      p.push(piece);
      for (let v = mode === 'any' ? p.next() : p.nextCommand(); v !== undefined; v = mode === 'any' ? p.next() : p.nextCommand()) values.push(v);
    }
  } catch (e) {
    return { values, error: e as TierSyncError };
  }
  return { values };
}

/** Splits `data` at the given cut points. */
function cut(data: Uint8Array, points: number[]): Uint8Array[] {
  const at = [...new Set(points.map((p) => p % (data.length + 1)))].sort((a, b) => a - b);
  const out: Uint8Array[] = [];
  let prev = 0;
  for (const p of [...at, data.length]) {
    if (p > prev) out.push(data.subarray(prev, p));
    prev = p;
  }
  return out;
}

const text = fc.string({ unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789 :$*+-'.split('')), maxLength: 20 });
const valueArb: fc.Arbitrary<RespValue> = fc.letrec<{ v: RespValue }>((tie) => ({
  v: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    text.map((value) => ({ kind: 'simple' as const, value })),
    text.map((value) => ({ kind: 'error' as const, value: `ERR ${value}` })),
    fc.maxSafeInteger().map((value) => ({ kind: 'integer' as const, value })),
    fc.option(fc.uint8Array({ maxLength: 300 }), { nil: null }).map((value) => ({ kind: 'bulk' as const, value })),
    fc.option(fc.array(tie('v'), { maxLength: 5 }), { nil: null }).map((value) => ({ kind: 'array' as const, value })),
    // RESP3
    fc.constant({ kind: 'null' as const, value: null }),
    fc.boolean().map((value) => ({ kind: 'boolean' as const, value })),
    fc.double({ noNaN: true }).map((value) => ({ kind: 'double' as const, value: Object.is(value, -0) ? 0 : value })),
    fc.bigInt({ min: -(10n ** 40n), max: 10n ** 40n }).map((value) => ({ kind: 'bignum' as const, value: String(value) })),
    text.map((value) => ({ kind: 'blobError' as const, value: `SYNTAX ${value}\r\n` })),
    fc.tuple(fc.constantFrom('txt', 'mkd'), text).map(([format, value]) => ({ kind: 'verbatim' as const, format, value })),
    fc.array(fc.tuple(tie('v'), tie('v')), { maxLength: 3 }).map((value) => ({ kind: 'map' as const, value })),
    fc.array(tie('v'), { maxLength: 4 }).map((value) => ({ kind: 'set' as const, value })),
    fc.array(tie('v'), { maxLength: 4 }).map((value) => ({ kind: 'push' as const, value })),
  ),
})).v;

describe('RespParser', () => {
  it('parses every RESP2 type', () => {
    const { values, error } = parse('any', [bytes('+OK\r\n-ERR bad\r\n:-42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n*0\r\n*-1\r\n$0\r\n\r\n')]);
    expect(error).toBeUndefined();
    expect(values).toEqual([
      { kind: 'simple', value: 'OK' },
      { kind: 'error', value: 'ERR bad' },
      { kind: 'integer', value: -42 },
      { kind: 'bulk', value: bytes('abc') },
      { kind: 'bulk', value: null },
      { kind: 'array', value: [{ kind: 'integer', value: 1 }, { kind: 'array', value: [] }] },
      { kind: 'array', value: null },
      { kind: 'bulk', value: new Uint8Array(0) },
    ]);
  });

  it('parses every RESP3 type (redis-specifications RESP3.md examples)', () => {
    const { values, error } = parse('any', [
      bytes('_\r\n#t\r\n#f\r\n,1.23\r\n,-inf\r\n,inf\r\n,10\r\n(3492890328409238509324850943850943825024385\r\n'),
      bytes('!21\r\nSYNTAX invalid syntax\r\n=15\r\ntxt:Some string\r\n%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n~2\r\n+orange\r\n+apple\r\n>2\r\n+message\r\n:7\r\n%0\r\n'),
    ]);
    expect(error).toBeUndefined();
    expect(values).toEqual([
      { kind: 'null', value: null },
      { kind: 'boolean', value: true },
      { kind: 'boolean', value: false },
      { kind: 'double', value: 1.23 },
      { kind: 'double', value: -Infinity },
      { kind: 'double', value: Infinity },
      { kind: 'double', value: 10 },
      { kind: 'bignum', value: '3492890328409238509324850943850943825024385' },
      { kind: 'blobError', value: 'SYNTAX invalid syntax' },
      { kind: 'verbatim', format: 'txt', value: 'Some string' },
      { kind: 'map', value: [[{ kind: 'simple', value: 'first' }, { kind: 'integer', value: 1 }], [{ kind: 'simple', value: 'second' }, { kind: 'integer', value: 2 }]] },
      { kind: 'set', value: [{ kind: 'simple', value: 'orange' }, { kind: 'simple', value: 'apple' }] },
      { kind: 'push', value: [{ kind: 'simple', value: 'message' }, { kind: 'integer', value: 7 }] },
      { kind: 'map', value: [] },
    ]);
    const nan = parse('any', [bytes(',nan\r\n')]).values[0] as { value: number };
    expect(Number.isNaN(nan.value)).toBe(true);
  });

  it('hands a long bulk string to a BulkSink window by window, waiting when it says so', () => {
    const windows: string[] = [];
    let lend = true;
    let offered = 0;
    const handle = new Uint8Array(0);
    const sink = {
      handle,
      window: (left: number) => {
        if (!lend) return RESP_WAIT;
        offered++;
        return new Uint8Array(Math.min(4, left));
      },
      filled: (w: Uint8Array) => {
        windows.push(Buffer.from(w).toString());
        // Every second window, make the parser wait for memory.
        lend = windows.length % 2 === 1 ? false : true;
      },
    };
    const p = new RespParser({ mode: 'request', bulkTarget: (_len, index) => (index === 2 ? sink : undefined) });
    const stream = encodeCommand(['SET', 'k', 'abcdefghijklmnopq']);
    for (const piece of cut(stream, [3, 17, 20, 26, 31])) p.push(piece);
    const out: unknown[] = [];
    for (let i = 0; i < 20 && out.length === 0; i++) {
      const v = p.nextCommand();
      if (v === RESP_WAIT) lend = true;
      else if (v !== undefined) out.push(v);
    }
    expect(windows).toEqual(['abcd', 'efgh', 'ijkl', 'mnop', 'q']);
    expect(offered).toBe(5);
    const cmd = out[0] as Uint8Array[];
    expect(Buffer.from(cmd[0]!).toString()).toBe('SET');
    expect(cmd[2]).toBe(handle);
  });

  it('parses commands and inline commands, skipping empty ones', () => {
    const { values } = parse('request', [bytes('*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*0\r\n\r\nPING\r\nSET "a b" \'c\' "\\x41\\n"\nECHO x\r\n')]);
    expect(values.map((v) => (v as Uint8Array[]).map((a) => Buffer.from(a).toString('latin1')))).toEqual([['GET', 'k'], ['PING'], ['SET', 'a b', 'c', 'A\n'], ['ECHO', 'x']]);
  });

  it('refuses malformed input with ERR_PROTOCOL naming the fault, then stays failed', () => {
    const cases: Array<[string, 'request' | 'any', RegExp]> = [
      ['*1\r\n:5\r\n', 'request', /expected '\$', got ':'/],
      ['*1\r\n$-1\r\n', 'request', /invalid bulk length -1/],
      ['*x\r\n', 'request', /invalid multibulk length/],
      ['$3\r\nabcd\r\n', 'any', /expected CRLF after a bulk string/],
      ['?oops\r\n', 'any', /unknown type byte '\?'/],
      ['|1\r\n', 'any', /attributes are not supported/],
      ['#x\r\n', 'any', /invalid boolean 'x'/],
      [',1.2.3\r\n', 'any', /invalid double/],
      ['=2\r\nab\r\n', 'any', /shorter than its 'fmt:' prefix/],
      [':12\n', 'any', /bare LF/],
      ['SET "abc\r\n', 'request', /unbalanced quotes/],
      [':99999999999999999999\r\n', 'any', /invalid integer/],
      // Lengths as Redis reads them: no leading zero, no -0.
      ['*1\r\n$04\r\nPING\r\n', 'request', /invalid bulk length '04'/],
      ['*01\r\n$4\r\nPING\r\n', 'request', /invalid multibulk length '01'/],
      [':-0\r\n', 'any', /invalid integer '-0'/],
    ];
    for (const [input, mode, message] of cases) {
      const p = new RespParser({ mode });
      p.push(bytes(input));
      const next = () => (mode === 'any' ? p.next() : p.nextCommand());
      expect(next, input).toThrow(message);
      try {
        next();
      } catch (e) {
        expect(e).toBeInstanceOf(TierSyncError);
        expect((e as TierSyncError).code).toBe('ERR_PROTOCOL');
      }
    }
  });

  it('bounds bulk, array, line and pending sizes before allocating', () => {
    const limits = { maxBulkBytes: 100, maxArrayLength: 4, maxInlineBytes: 32, maxPendingBytes: 1000, maxDepth: 2 };
    expect(parse('request', [bytes('*1\r\n$101\r\n')], limits).error?.message).toMatch(/bulk length 101 over the limit of 100/);
    expect(parse('request', [bytes('*5\r\n')], limits).error?.message).toMatch(/array of 5 elements over the limit of 4/);
    expect(parse('request', [bytes('x'.repeat(40))], limits).error?.message).toMatch(/inline request longer than 32/);
    expect(parse('any', [bytes(`+${'y'.repeat(40)}`)], limits).error?.message).toMatch(/line longer than 32/);
    expect(parse('any', [bytes('*1\r\n*1\r\n*1\r\n')], limits).error?.message).toMatch(/nested deeper than 2/);
    // Declared bulks count against the pending bound when their header arrives, before any payload.
    expect(parse('request', [bytes('*4\r\n$100\r\n'), bytes('a'.repeat(100)), bytes('\r\n$100\r\n'), bytes('b'.repeat(100)), bytes('\r\n')], { ...limits, maxPendingBytes: 150 }).error?.message).toMatch(/more than 150 bytes pending/);
    const p = new RespParser({ mode: 'request', limits });
    expect(() => p.push(new Uint8Array(1001))).toThrow(/more than 1000 bytes pending/);
  });

  it('writes bulk payloads into bulkTarget memory, and waits when it says so', () => {
    const arena = new Uint8Array(64);
    let wait = true;
    const p = new RespParser({
      mode: 'request',
      bulkTarget: (length, index, args) => {
        if (index !== 2 || Buffer.from(args[0]!).toString() !== 'SET') return undefined;
        if (wait) return RESP_WAIT;
        return arena.subarray(10, 10 + length);
      },
    });
    p.push(encodeCommand(['SET', 'k', 'hello']));
    expect(p.nextCommand()).toBe(RESP_WAIT);
    expect(p.nextCommand()).toBe(RESP_WAIT);
    wait = false;
    const cmd = p.nextCommand() as Uint8Array[];
    expect(Buffer.from(cmd[2]!).toString()).toBe('hello');
    expect(cmd[2]!.buffer).toBe(arena.buffer);
    expect(Buffer.from(arena.subarray(10, 15)).toString()).toBe('hello');
  });

  it('property: any split of a valid stream parses to the values encoded (round trip)', () => {
    fc.assert(
      fc.property(fc.array(valueArb, { minLength: 1, maxLength: 4 }), fc.array(fc.nat(), { maxLength: 20 }), (values, points) => {
        const stream = Buffer.concat(values.map(encodeValue));
        const out = parse('any', cut(stream, points));
        return out.error === undefined && sameValue(out.values, values);
      }),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(fc.array(fc.array(fc.uint8Array({ maxLength: 64 }), { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 4 }), fc.array(fc.nat(), { maxLength: 20 }), (commands, points) => {
        const out = parse('request', cut(Buffer.concat(commands.map(encodeCommand)), points));
        return out.error === undefined && sameValue(out.values, commands);
      }),
      { numRuns: 300 },
    );
  });

  it('property: random bytes never throw anything but ERR_PROTOCOL, whatever the split', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.array(fc.nat(), { maxLength: 10 }), fc.constantFrom('request' as const, 'any' as const), (data, points, mode) => {
        const limits = { maxBulkBytes: 1000, maxArrayLength: 100, maxInlineBytes: 100 };
        const a = parse(mode, cut(data, points), limits);
        const b = parse(mode, [data], limits);
        for (const e of [a.error, b.error]) if (e && !(e instanceof TierSyncError && e.code === 'ERR_PROTOCOL')) return false;
        return sameValue(a.values, b.values) && (a.error === undefined) === (b.error === undefined);
      }),
      { numRuns: 500 },
    );
  });

  it('fuzzRespParser runs its properties', () => {
    const r = fuzzRespParser({ cases: 3000, seed: 7 });
    expect(r.roundTrips + r.refused + r.accepted).toBe(3000);
    expect(r.roundTrips).toBeGreaterThan(500);
    expect(r.refused).toBeGreaterThan(200);
  });
});
