/**
 * The client protocol framed on a stream, for the daemon's Unix socket: the same ops, request and response bodies
 * as over HTTP (client.ts), without HTTP's request line, headers and parser on each round trip. Same host only.
 *
 * A session: the client writes the 4 bytes `TSF1`, then frames; each frame is a 32-bit little-endian length and
 * that many bytes of UTF-8 JSON. The first frame is `{ "token": "<bearer token>" }` (or `{}`); the daemon answers it
 * as `hello` (id 0) and thereafter answers each `{ "id", "op", "body"? }` with `{ "id", "status", "body" }`, where
 * `status` is the HTTP status the same request would get and `body` the op's response or the error body. Requests
 * may be pipelined; answers carry the request's id. A socket whose first bytes are not `TSF1` is plain HTTP.
 */
import { z } from 'zod';

/** The 4 bytes that open a framed session. */
export const FRAME_MAGIC = Buffer.from('TSF1', 'latin1');

/** Bytes of the length prefix of each frame. */
export const FRAME_HEADER = 4;

export const frameAuthSchema = z.object({ token: z.string().max(4096).optional() }).strict();
export const frameRequestSchema = z.object({ id: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER), op: z.string().max(64), body: z.unknown().optional() }).strict();
export const frameReplySchema = z.object({ id: z.number().int().min(0), status: z.number().int(), body: z.unknown() });
export type FrameRequest = z.infer<typeof frameRequestSchema>;
export type FrameReply = z.infer<typeof frameReplySchema>;

/** One frame: the length prefix and the JSON of `value`. */
export function encodeFrame(value: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(value), 'utf8');
  const out = Buffer.allocUnsafe(FRAME_HEADER + json.length);
  out.writeUInt32LE(json.length, 0);
  json.copy(out, FRAME_HEADER);
  return out;
}

/**
 * Splits a byte stream into frames: feed it chunks, it calls `onFrame` with each frame's parsed JSON. A frame over
 * `maxBytes` or one that is not JSON calls `onError` (the caller closes the stream) and stops the reader.
 */
export class FrameReader {
  readonly #maxBytes: number;
  readonly #onFrame: (value: unknown) => void;
  readonly #onError: (message: string) => void;
  #buf: Buffer = Buffer.alloc(0);
  #failed = false;

  constructor(maxBytes: number, onFrame: (value: unknown) => void, onError: (message: string) => void) {
    this.#maxBytes = maxBytes;
    this.#onFrame = onFrame;
    this.#onError = onError;
  }

  push(chunk: Buffer): void {
    if (this.#failed) return;
    this.#buf = this.#buf.length ? Buffer.concat([this.#buf, chunk]) : chunk;
    while (this.#buf.length >= FRAME_HEADER) {
      const n = this.#buf.readUInt32LE(0);
      if (n > this.#maxBytes) return this.#fail(`frame of ${n} bytes over the ${this.#maxBytes}-byte limit`);
      if (this.#buf.length < FRAME_HEADER + n) return;
      const text = this.#buf.toString('utf8', FRAME_HEADER, FRAME_HEADER + n);
      this.#buf = this.#buf.subarray(FRAME_HEADER + n);
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch {
        return this.#fail('frame is not valid JSON');
      }
      this.#onFrame(value);
      if (this.#failed) return;
    }
  }

  #fail(message: string): void {
    this.#failed = true;
    this.#buf = Buffer.alloc(0);
    this.#onError(message);
  }
}
