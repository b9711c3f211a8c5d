/**
 * RESP2 encoding (redis.io/docs/latest/develop/reference/protocol-spec). Small replies are built as Buffers;
 * a bulk string's payload can be passed on by reference (bulkParts), so a value read into arena memory reaches
 * the socket without another copy.
 */
import { TierSyncError } from '@tiersync/native/errors';
import type { RespValue } from './parser.js';

const CRLF = Buffer.from('\r\n');
export const OK = Buffer.from('+OK\r\n');
export const PONG = Buffer.from('+PONG\r\n');
export const NULL_BULK = Buffer.from('$-1\r\n');
export const NULL_ARRAY = Buffer.from('*-1\r\n');
export const EMPTY_ARRAY = Buffer.from('*0\r\n');

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

/** Any RESP2 value. @throws TierSyncError ERR_INVALID_ARGUMENT for a simple string or error holding CR/LF */
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
    }
  };
  walk(value);
  return Buffer.concat(parts);
}
