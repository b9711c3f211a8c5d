/**
 * RESP2 and RESP3 encoding (redis.io/docs/latest/develop/reference/protocol-spec; RESP3's types as specified in
 * github.com/redis/redis-specifications/blob/master/protocol/RESP3.md). Small replies are built as Buffers;
 * a bulk string's payload can be passed on by reference (bulkParts), so a value read into arena memory reaches
 * the socket without another copy.
 *
 * The `Reply*` helpers take the connection's protocol version and write what Redis 7 writes in it: a RESP3 type
 * to a RESP3 client, its RESP2 downgrade otherwise (null -> `$-1`, map -> flat array of 2n, set -> array,
 * verbatim -> bulk string, boolean -> integer 1/0, double -> bulk string).
 */
import { TierSyncError } from '@tiersync/native/errors';
import type { RespValue } from './parser.js';

const CRLF = Buffer.from('\r\n');
export const OK = Buffer.from('+OK\r\n');
export const PONG = Buffer.from('+PONG\r\n');
export const NULL_BULK = Buffer.from('$-1\r\n');
export const NULL_ARRAY = Buffer.from('*-1\r\n');
export const EMPTY_ARRAY = Buffer.from('*0\r\n');
/** RESP3 null. */
export const NULL3 = Buffer.from('_\r\n');

/** RESP protocol version of a connection (HELLO switches it). */
export type RespProtocol = 2 | 3;

/** The null reply of a missing value: `$-1` (RESP2) or `_` (RESP3). */
export function replyNull(proto: RespProtocol): Buffer {
  return proto === 3 ? NULL3 : NULL_BULK;
}

/** Header of a map of `n` entries: `%n` (RESP3) or an array of 2n elements (RESP2). */
export function replyMapHeader(proto: RespProtocol, n: number): Buffer {
  if (proto === 2) return encodeArrayHeader(n * 2);
  if (!Number.isSafeInteger(n) || n < 0) throw new TierSyncError(`a RESP map length must be an integer >= 0, got ${n}`, 'ERR_INVALID_ARGUMENT');
  return Buffer.from(`%${n}\r\n`, 'latin1');
}

/** Header of a set of `n` elements: `~n` (RESP3) or an array (RESP2). */
export function replySetHeader(proto: RespProtocol, n: number): Buffer {
  if (proto === 2) return encodeArrayHeader(n);
  if (!Number.isSafeInteger(n) || n < 0) throw new TierSyncError(`a RESP set length must be an integer >= 0, got ${n}`, 'ERR_INVALID_ARGUMENT');
  return Buffer.from(`~${n}\r\n`, 'latin1');
}

/** A verbatim string (`=len\r\nfmt:text`, RESP3) or a bulk string of the text (RESP2). `format`: 3 letters, e.g. txt. */
export function replyVerbatim(proto: RespProtocol, format: string, text: string): Buffer {
  if (proto === 2) return encodeBulk(Buffer.from(text, 'latin1'));
  return encodeVerbatim(format, text);
}

/** A boolean: `#t`/`#f` (RESP3) or the integer 1/0 (RESP2). */
export function replyBoolean(proto: RespProtocol, b: boolean): Buffer {
  return proto === 3 ? encodeBoolean(b) : encodeInteger(b ? 1 : 0);
}

/** A double: `,x` (RESP3) or a bulk string of the same text (RESP2), as Redis 7's addReplyDouble. */
export function replyDouble(proto: RespProtocol, x: number): Buffer {
  return proto === 3 ? encodeDouble(x) : encodeBulk(doubleText(x));
}

export function encodeBoolean(b: boolean): Buffer {
  return Buffer.from(b ? '#t\r\n' : '#f\r\n', 'latin1');
}

/** Text of a double as RESP3 writes it: inf, -inf, nan, or the shortest decimal that reads back the same. */
function doubleText(x: number): string {
  if (Number.isNaN(x)) return 'nan';
  if (x === Infinity) return 'inf';
  if (x === -Infinity) return '-inf';
  return String(x);
}

export function encodeDouble(x: number): Buffer {
  if (typeof x !== 'number') throw new TierSyncError(`a RESP double must be a number, got ${typeof x}`, 'ERR_INVALID_ARGUMENT');
  return Buffer.from(`,${doubleText(x)}\r\n`, 'latin1');
}

export function encodeVerbatim(format: string, text: string): Buffer {
  if (!/^[A-Za-z]{3}$/.test(format)) throw new TierSyncError(`a verbatim string's format is 3 letters, got '${format}'`, 'ERR_INVALID_ARGUMENT');
  const body = Buffer.from(`${format}:${text}`, 'latin1');
  return Buffer.concat([Buffer.from(`=${body.length}\r\n`, 'latin1'), body, CRLF]);
}

function checkLine(text: string, what: string): void {
  if (/[\r\n]/.test(text)) throw new TierSyncError(`a RESP ${what} may not contain CR or LF`, 'ERR_INVALID_ARGUMENT');
}

export function encodeSimple(text: string): Buffer {
  checkLine(text, 'simple string');
  return Buffer.from(`+${text}\r\n`, 'latin1');
}

/** An error reply. CR/LF in the message become spaces (Redis does the same), so any message is safe to send. */
export function encodeError(message: string): Buffer {
  return Buffer.from(`-${message.replace(/[\r\n]+/g, ' ')}\r\n`, 'latin1');
}

export function encodeInteger(n: number): Buffer {
  if (!Number.isSafeInteger(n)) throw new TierSyncError(`a RESP integer must be a safe integer, got ${n}`, 'ERR_INVALID_ARGUMENT');
  return Buffer.from(`:${n}\r\n`, 'latin1');
}

export function encodeArrayHeader(n: number): Buffer {
  if (!Number.isSafeInteger(n) || n < -1) throw new TierSyncError(`a RESP array length must be an integer >= -1, got ${n}`, 'ERR_INVALID_ARGUMENT');
  return Buffer.from(`*${n}\r\n`, 'latin1');
}

/** The line ending of RESP (shared, never written to). */
export const RESP_CRLF: Buffer = CRLF;

/** The header of a bulk string of `length` bytes (`$length\r\n`), for a payload sent in parts. */
export function bulkHeader(length: number): Buffer {
  return Buffer.from(`$${length}\r\n`, 'latin1');
}

/** The pieces of a bulk string reply: header, the payload itself (not copied), CRLF. */
export function bulkParts(payload: Uint8Array): [Buffer, Uint8Array, Buffer] {
  return [Buffer.from(`$${payload.length}\r\n`, 'latin1'), payload, CRLF];
}

/** A bulk string as one Buffer (copies the payload; for small values). */
export function encodeBulk(payload: Uint8Array | string | null): Buffer {
  if (payload === null) return NULL_BULK;
  const bytes = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  const head = `$${bytes.length}\r\n`;
  const out = Buffer.allocUnsafe(head.length + bytes.length + 2);
  out.write(head, 0, 'latin1');
  out.set(bytes, head.length);
  out[out.length - 2] = 13;
  out[out.length - 1] = 10;
  return out;
}

/** A command as clients send it: an array of bulk strings. */
export function encodeCommand(args: ReadonlyArray<string | Uint8Array>): Buffer {
  return Buffer.concat([encodeArrayHeader(args.length), ...args.map((a) => encodeBulk(a))]);
}

/** Any RESP2 or RESP3 value. @throws TierSyncError ERR_INVALID_ARGUMENT for a simple string or error holding CR/LF */
export function encodeValue(value: RespValue): Buffer {
  const parts: Buffer[] = [];
  const walk = (v: RespValue): void => {
    switch (v.kind) {
      case 'simple':
        parts.push(encodeSimple(v.value));
        return;
      case 'error':
        checkLine(v.value, 'error');
        parts.push(Buffer.from(`-${v.value}\r\n`, 'latin1'));
        return;
      case 'integer':
        parts.push(encodeInteger(v.value));
        return;
      case 'bulk':
        parts.push(encodeBulk(v.value));
        return;
      case 'array':
        if (v.value === null) {
          parts.push(NULL_ARRAY);
          return;
        }
        parts.push(encodeArrayHeader(v.value.length));
        for (const item of v.value) walk(item);
        return;
      case 'null':
        parts.push(NULL3);
        return;
      case 'boolean':
        parts.push(encodeBoolean(v.value));
        return;
      case 'double':
        parts.push(encodeDouble(v.value));
        return;
      case 'bignum':
        if (!/^-?\d+$/.test(v.value)) throw new TierSyncError(`a RESP big number is decimal digits, got '${v.value.slice(0, 24)}'`, 'ERR_INVALID_ARGUMENT');
        parts.push(Buffer.from(`(${v.value}\r\n`, 'latin1'));
        return;
      case 'blobError': {
        const body = Buffer.from(v.value, 'latin1');
        parts.push(Buffer.from(`!${body.length}\r\n`, 'latin1'), body, CRLF);
        return;
      }
      case 'verbatim':
        parts.push(encodeVerbatim(v.format, v.value));
        return;
      case 'map':
        parts.push(replyMapHeader(3, v.value.length));
        for (const [k, x] of v.value) {
          walk(k);
          walk(x);
        }
        return;
      case 'set':
      case 'push':
        parts.push(Buffer.from(`${v.kind === 'set' ? '~' : '>'}${v.value.length}\r\n`, 'latin1'));
        for (const item of v.value) walk(item);
        return;
    }
  };
  walk(value);
  return Buffer.concat(parts);
}
