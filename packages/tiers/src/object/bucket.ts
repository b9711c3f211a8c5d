/**
 * The S3 calls the object tier makes, each one run through the RequestRunner (limit, timeout, retries, breaker).
 * Bodies are Uint8Array views handed to the SDK without copying; downloads are copied once, from the socket's
 * buffers straight into their destination views.
 */
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { TierSyncError } from '@tiersync/native';
import type { ObjectTierConfig } from './config.js';
import { IncompleteBody, type CallScope, type RequestRunner } from './resilience.js';

/** Builds the SDK client for a config: SDK retries off, checksums only where S3 requires them (see README). */
export function createS3Client(config: ObjectTierConfig): S3Client {
  const agent = { keepAlive: true, maxSockets: config.concurrency };
  const client = new S3Client({
    region: config.region,
    ...(config.endpoint ? { endpoint: config.endpoint } : {}),
    forcePathStyle: config.forcePathStyle,
    ...(config.credentials ? { credentials: config.credentials } : {}),
    // Our RequestRunner is the only retry loop.
    maxAttempts: 1,
    // GCS and most S3-compatible servers reject the SDK's default aws-chunked CRC32 trailers; pages carry
    // their own CRC32C in the object footer and are verified on every read.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    // Bodies are sent at once; waiting for 100 Continue would only add a round trip.
    expectContinueHeader: false,
    requestHandler: {
      httpAgent: new HttpAgent(agent),
      httpsAgent: new HttpsAgent(agent),
      connectionTimeout: Math.min(config.timeoutMs, 10_000),
    },
  });
  if (!config.signPayload) {
    // SigV4 otherwise hashes every upload body with SHA-256 on the JS thread (~38 ms per 64 MiB here). With
    // TLS the bytes are already authenticated in transit, and pages carry CRC32C checked on every read.
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const request = args.request as { headers?: Record<string, string> } | undefined;
        if (request?.headers && UPLOADS.has(context.commandName ?? '')) request.headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
        return next(args);
      },
      { step: 'build', name: 'tiersyncUnsignedPayload' },
    );
  }
  return client;
}

const UPLOADS = new Set(['PutObjectCommand', 'UploadPartCommand']);

/** Bytes moved over the wire by this driver (payload only; for stats and the README's cost figures). */
export interface WireCounters {
  bytesUp: number;
  bytesDown: number;
}

/** One entry of a LIST. */
export interface ListedObject {
  name: string;
  size: number;
}

/** One bucket through one client; every call is a RequestRunner request (see resilience.ts). */
export class Bucket {
  readonly wire: WireCounters = { bytesUp: 0, bytesDown: 0 };

  constructor(
    readonly client: S3Client,
    readonly name: string,
    readonly runner: RequestRunner,
  ) {}

  /** One PUT of `body` (a zero-copy view is fine: it is not copied or kept after the call). */
  async put(key: string, body: Uint8Array, scope?: CallScope): Promise<void> {
    await this.runner.run(
      `PUT ${key}`,
      async (signal) => {
        await this.client.send(
          new PutObjectCommand({ Bucket: this.name, Key: key, Body: body, ContentLength: body.length, ContentType: 'application/octet-stream' }),
          { abortSignal: signal },
        );
        this.wire.bytesUp += body.length;
      },
      scope,
    );
  }

  /**
   * Uploads `body` as one object in parts of `partBytes`, the parts in parallel (bounded by the runner's
   * limiter). The object appears only when CompleteMultipartUpload succeeds; on failure the upload is aborted.
   */
  async putMultipart(key: string, body: Uint8Array, partBytes: number, scope?: CallScope): Promise<void> {
    const created = await this.runner.run(
      `POST ${key}?uploads`,
      (signal) => this.client.send(new CreateMultipartUploadCommand({ Bucket: this.name, Key: key, ContentType: 'application/octet-stream' }), { abortSignal: signal }),
      scope,
    );
    const uploadId = created.UploadId;
    if (!uploadId) throw new TierSyncError(`object tier: CreateMultipartUpload for ${key} returned no UploadId`, 'ERR_IO', { tier: 'object' });
    try {
      const count = Math.ceil(body.length / partBytes);
      const settled = await Promise.allSettled(
        Array.from({ length: count }, (_, i) => {
          const part = body.subarray(i * partBytes, Math.min(body.length, (i + 1) * partBytes));
          return this.runner.run(
            `PUT ${key} part ${i + 1}/${count}`,
            async (signal) => {
              const r = await this.client.send(
                new UploadPartCommand({ Bucket: this.name, Key: key, UploadId: uploadId, PartNumber: i + 1, Body: part, ContentLength: part.length }),
                { abortSignal: signal },
              );
              if (!r.ETag) throw new IncompleteBody(`UploadPart ${i + 1} of ${key} returned no ETag`);
              this.wire.bytesUp += part.length;
              return { PartNumber: i + 1, ETag: r.ETag };
            },
            scope,
          );
        }),
      );
      const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failed) throw failed.reason;
      const parts = settled.map((s) => (s as PromiseFulfilledResult<{ PartNumber: number; ETag: string }>).value);
      await this.runner.run(
        `POST ${key}?uploadId`,
        (signal) =>
          this.client.send(new CompleteMultipartUploadCommand({ Bucket: this.name, Key: key, UploadId: uploadId, MultipartUpload: { Parts: parts } }), {
            abortSignal: signal,
          }),
        scope,
      );
    } catch (e) {
      // Best effort: an upload left behind costs storage until the bucket's lifecycle rule removes it.
      await this.runner
        .run(`DELETE ${key}?uploadId`, (signal) => this.client.send(new AbortMultipartUploadCommand({ Bucket: this.name, Key: key, UploadId: uploadId }), { abortSignal: signal }))
        .catch(() => undefined);
      throw e;
    }
  }

  /** Reads [start, start+length) of an object into a new buffer (small things: footers, tombstones). */
  async getBytes(key: string, start: number, length: number, scope?: CallScope): Promise<Uint8Array> {
    const out = new Uint8Array(length);
    await this.getInto(key, start, [out], scope);
    return out;
  }

  /** Reads a whole small object. */
  async getAll(key: string, scope?: CallScope): Promise<Uint8Array> {
    return this.runner.run(
      `GET ${key}`,
      async (signal) => {
        const r = await this.client.send(new GetObjectCommand({ Bucket: this.name, Key: key }), { abortSignal: signal });
        const bytes = await r.Body!.transformToByteArray();
        this.wire.bytesDown += bytes.length;
        return bytes;
      },
      scope,
    );
  }

  /**
   * One ranged GET of [start, start + total length of `targets`), its bytes copied in order into `targets`
   * (views of arena memory, filled back to back). This copy, from the HTTP parser's buffers into the views, is
   * the one JavaScript copy on the read path.
   */
  async getInto(key: string, start: number, targets: readonly Uint8Array[], scope?: CallScope): Promise<void> {
    const length = targets.reduce((n, t) => n + t.length, 0);
    await this.runner.run(
      `GET ${key} bytes=${start}-${start + length - 1}`,
      async (signal) => {
        const r = await this.client.send(new GetObjectCommand({ Bucket: this.name, Key: key, Range: `bytes=${start}-${start + length - 1}` }), {
          abortSignal: signal,
        });
        const body = r.Body as unknown as Readable;
        // A server that ignores Range answers 200 with the whole object; one that honours it says where it starts.
        const m = r.ContentRange ? /^bytes (\d+)-(\d+)\//.exec(r.ContentRange) : null;
        const from = m ? Number(m[1]) : 0;
        if (from > start) {
          body.destroy();
          throw new IncompleteBody(`GET ${key}: asked for bytes from ${start}, the response starts at ${from}`);
        }
        await this.#drainInto(body, start - from, targets, length, key, signal);
      },
      scope,
    );
  }

  async #drainInto(body: Readable, skip: number, targets: readonly Uint8Array[], length: number, key: string, signal: AbortSignal): Promise<void> {
    const onAbort = () => body.destroy(new Error('request cut off while reading the body'));
    if (signal.aborted) onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    let got = 0;
    let ti = 0;
    let to = 0;
    try {
      for await (const chunk of body) {
        let c = chunk as Uint8Array;
        if (skip > 0) {
          if (c.length <= skip) {
            skip -= c.length;
            continue;
          }
          c = c.subarray(skip);
          skip = 0;
        }
        while (c.length > 0 && ti < targets.length) {
          const t = targets[ti]!;
          const n = Math.min(c.length, t.length - to);
          t.set(c.subarray(0, n), to);
          to += n;
          got += n;
          c = c.subarray(n);
          if (to === t.length) {
            ti++;
            to = 0;
          }
        }
        // More than asked for (a server that ignored the range end): stop reading; this drops the connection.
        if (c.length > 0) break;
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      this.wire.bytesDown += got;
    }
    if (got < length) throw new IncompleteBody(`GET ${key}: the response ended after ${got} of ${length} bytes`);
  }

  /** Deletes an object (deleting a missing object succeeds, as in S3). */
  async delete(key: string, scope?: CallScope): Promise<void> {
    await this.runner.run(`DELETE ${key}`, (signal) => this.client.send(new DeleteObjectCommand({ Bucket: this.name, Key: key }), { abortSignal: signal }), scope);
  }

  /** Every object whose name starts with `prefix`, page by page. */
  async *list(prefix: string, scope?: CallScope): AsyncGenerator<ListedObject> {
    let token: string | undefined;
    do {
      const r = await this.runner.run(
        `LIST ${prefix}`,
        (signal) =>
          this.client.send(new ListObjectsV2Command({ Bucket: this.name, Prefix: prefix, ...(token ? { ContinuationToken: token } : {}) }), {
            abortSignal: signal,
          }),
        scope,
      );
      for (const o of r.Contents ?? []) if (o.Key !== undefined) yield { name: o.Key, size: o.Size ?? 0 };
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
  }

  /** Closes the client's sockets. */
  destroy(): void {
    this.client.destroy();
  }
}
