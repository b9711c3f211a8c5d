/**
 * What copying through JavaScript costs the object tier (figures quoted in README.md). Skipped unless
 * TIERSYNC_BENCH=1:
 *   TIERSYNC_BENCH=1 npx vitest run packages/tiers/src/object/copy-cost
 * A plain HTTP server in a child process stands in for the bucket (it serves 64 MiB from memory and discards
 * uploads), so the figures are the client's costs, not a storage server's. A/B alternated, medians of 5.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { HostArena, TransferBatch, TransferEngine, crc32c } from '@tiersync/native';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Bucket, createS3Client } from './bucket.js';
import { parseObjectUrl } from './config.js';
import { CircuitBreaker, Limiter, RequestRunner } from './resilience.js';

const SIZE = 64 * 2 ** 20;
const ROUNDS = 5;

const SERVER = `
const http = require('http');
const buf = Buffer.alloc(${SIZE}, 7);
http.createServer((req, res) => {
  if (req.method === 'GET') {
    const m = /bytes=(\\d+)-(\\d+)/.exec(req.headers.range || '');
    const s = m ? +m[1] : 0, e = m ? +m[2] : buf.length - 1;
    res.writeHead(m ? 206 : 200, { 'content-length': e - s + 1, etag: '"x"', ...(m ? { 'content-range': 'bytes ' + s + '-' + e + '/' + buf.length } : {}) });
    res.end(buf.subarray(s, e + 1));
  } else {
    req.resume();
    req.on('end', () => { res.writeHead(200, { etag: '"x"', 'content-length': 0 }); res.end(); });
  }
}).listen(0, '127.0.0.1', function () { console.log(this.address().port); });
`;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const gib = (bytes: number, ms: number) => bytes / 2 ** 30 / (ms / 1000);
async function time(fn: () => Promise<unknown> | unknown): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

describe.skipIf(!process.env['TIERSYNC_BENCH'])('object tier: cost of the JavaScript copy', () => {
  let server: ChildProcess;
  let endpoint = '';
  let engine: TransferEngine;

  beforeAll(async () => {
    server = spawn(process.execPath, ['-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
    const port = await new Promise<string>((resolve) => server.stdout!.once('data', (d: Buffer) => resolve(d.toString().trim())));
    endpoint = `http://127.0.0.1:${port}`;
    engine = new TransferEngine({ threads: 2 });
  });
  afterAll(async () => {
    server.kill();
    await engine.close();
  });

  function bucketFor(extra: string): Bucket {
    process.env['COPYCOST_ACCESS_KEY_ID'] = 'a';
    process.env['COPYCOST_SECRET_ACCESS_KEY'] = 'b';
    const config = parseObjectUrl(`s3://bench/p?endpoint=${endpoint}&credentials=env:COPYCOST&${extra}`);
    const runner = new RequestRunner({ retries: 0, backoffMs: 1, backoffMaxMs: 1, timeoutMs: 60_000 }, new CircuitBreaker(5, 1000, 'bench'), new Limiter(4));
    return new Bucket(createS3Client(config), 'bench', runner);
  }

  it('measures read, verify and upload costs', async () => {
    const bucket = bucketFor('');
    const dst = HostArena.create({ capacity: SIZE });
    const src = HostArena.create({ capacity: SIZE });
    const staging = HostArena.create({ capacity: SIZE });
    src.view(0, SIZE).fill(3);
    dst.view(0, SIZE).fill(1); // fault the pages in before timing
    staging.view(0, SIZE).fill(1);
    const intoArena = () => bucket.getInto('k', 0, [dst.view(0, SIZE)]);
    const discard = async () => {
      const r = await bucket.client.send(new GetObjectCommand({ Bucket: 'bench', Key: 'k', Range: `bytes=0-${SIZE - 1}` }));
      for await (const _ of r.Body as unknown as Readable) void _;
    };
    await intoArena();
    await discard();
    const a: number[] = [];
    const b: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      a.push(await time(intoArena));
      b.push(await time(discard));
    }
    const crc: number[] = [];
    const copy: number[] = [];
    const chunks = Array.from({ length: SIZE / 65536 }, () => Buffer.alloc(65536, 5));
    for (let i = 0; i < ROUNDS; i++) {
      crc.push(await time(() => crc32c(dst.view(0, SIZE))));
      copy.push(
        await time(() => {
          const v = dst.view(0, SIZE);
          chunks.forEach((c, j) => v.set(c, j * 65536));
        }),
      );
    }
    // Upload: the native gather into staging, then PUT of a zero-copy view, signed (SHA-256 on the JS thread) or not.
    const unsignedBucket = bucketFor('signPayload=false');
    const signedBucket = bucketFor('signPayload=true');
    const gather: number[] = [];
    const sha: number[] = [];
    const putUnsigned: number[] = [];
    const putSigned: number[] = [];
    const batch = new TransferBatch();
    for (let off = 0; off < SIZE; off += 65536) batch.add(src, off, staging, off, 65536);
    await unsignedBucket.put('k', staging.view(0, SIZE));
    await signedBucket.put('k', staging.view(0, SIZE));
    for (let i = 0; i < ROUNDS; i++) {
      gather.push(await time(() => engine.submit(batch, { checksums: true })));
      sha.push(await time(() => createHash('sha256').update(staging.view(0, SIZE)).digest()));
      putUnsigned.push(await time(() => unsignedBucket.put('k', staging.view(0, SIZE))));
      putSigned.push(await time(() => signedBucket.put('k', staging.view(0, SIZE))));
    }
    const report = {
      'GET 64 MiB into an arena view (driver path)': `${median(a).toFixed(1)} ms, ${gib(SIZE, median(a)).toFixed(2)} GiB/s`,
      'GET 64 MiB, body discarded (baseline)': `${median(b).toFixed(1)} ms, ${gib(SIZE, median(b)).toFixed(2)} GiB/s`,
      'copy share of the GET': `${(((median(a) - median(b)) / median(a)) * 100).toFixed(0)}%`,
      'JS copy alone, 64 KiB chunks into a view': `${median(copy).toFixed(1)} ms, ${gib(SIZE, median(copy)).toFixed(2)} GiB/s`,
      'CRC32C verify on the JS thread': `${median(crc).toFixed(1)} ms, ${gib(SIZE, median(crc)).toFixed(2)} GiB/s`,
      'native gather + CRC32C into staging (engine)': `${median(gather).toFixed(1)} ms, ${gib(SIZE, median(gather)).toFixed(2)} GiB/s`,
      'SHA-256 of the body (SigV4 payload signing)': `${median(sha).toFixed(1)} ms, ${gib(SIZE, median(sha)).toFixed(2)} GiB/s`,
      'PUT 64 MiB, unsigned payload': `${median(putUnsigned).toFixed(1)} ms, ${gib(SIZE, median(putUnsigned)).toFixed(2)} GiB/s`,
      'PUT 64 MiB, signed payload': `${median(putSigned).toFixed(1)} ms, ${gib(SIZE, median(putSigned)).toFixed(2)} GiB/s`,
    };
    console.log(JSON.stringify(report, null, 2));
    expect(median(a)).toBeGreaterThan(0);
    for (const x of [bucket, unsignedBucket, signedBucket]) x.destroy();
    dst.close();
    src.close();
    staging.close();
  });
});
