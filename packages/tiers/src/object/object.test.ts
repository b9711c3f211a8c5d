/**
 * object tier tests against a real S3-compatible server (s3rver, started here on a loopback port), with a small
 * fault-injecting HTTP proxy in front of it for the retry, breaker and timeout tests. Never a mock.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { DeviceArena, HostArena, TierSyncError, TransferBatch, TransferEngine, crc32c } from '@tiersync/native';
// @ts-expect-error s3rver ships no types (test-only dev dependency)
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TierContext } from '../driver.js';
import { S3FaultProxy } from '../fault/s3-proxy.js';
import { testKey, tierConformance } from '../testing.js';
import { createS3Client } from './bucket.js';
import { GCS_ENDPOINT, ObjectTier, parseObjectUrl } from './index.js';
import { dataName, encodeFooter, footerBound, newObjectId } from './layout.js';
import { CircuitBreaker, RequestRunner, Limiter } from './resilience.js';

const PAGE = 64 * 1024;
const BUCKET = 'tiersync-test';
// s3rver accepts these keys; they reach the tier through the environment, never the URL.
process.env['S3RVER_ACCESS_KEY_ID'] = 'S3RVER';
process.env['S3RVER_SECRET_ACCESS_KEY'] = 'S3RVER';
const CREDS = 'credentials=env:S3RVER';

// ---------------------------------------------------------------------------------------------------------------
// A real s3rver on a random loopback port, and S3FaultProxy in front of it to fail, reset or stall requests.

interface Env {
  server: { close(): Promise<void> };
  dir: string;
  s3Port: number;
  proxy: S3FaultProxy;
  direct: string;
}

let envPromise: Promise<Env> | undefined;
function env(): Promise<Env> {
  envPromise ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tiersync-s3rver-'));
    const server = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: dir, configureBuckets: [{ name: BUCKET }] });
    const addr = (await server.run()) as AddressInfo;
    const proxy = new S3FaultProxy(addr.port);
    await proxy.start();
    return { server, dir, s3Port: addr.port, proxy, direct: `http://127.0.0.1:${addr.port}` };
  })();
  return envPromise;
}

afterAll(async () => {
  if (!envPromise) return;
  const e = await envPromise;
  await e.proxy.close();
  await e.server.close();
  rmSync(e.dir, { recursive: true, force: true });
});

let prefixes = 0;
const freshPrefix = (what: string) => `t${process.pid}/${what}-${++prefixes}`;

function urlOf(endpoint: string, prefix: string, extra = ''): string {
  return `s3://${BUCKET}/${prefix}?endpoint=${endpoint}&region=us-east-1&${CREDS}${extra ? `&${extra}` : ''}`;
}

// ---------------------------------------------------------------------------------------------------------------

tierConformance('object (s3rver)', async () => {
  const e = await env();
  let prefix = '';
  // 4 pages per object, so batches span several objects.
  const url = () => urlOf(e.direct, prefix, `capacity=${16 * PAGE}&object=${4 * PAGE}`);
  const client = createS3Client(parseObjectUrl(urlOf(e.direct, 'x')));
  return {
    pageBytes: PAGE,
    capacityPages: 16,
    async create(context) {
      prefix = freshPrefix('conformance');
      const t = new ObjectTier(url(), context);
      await t.open();
      return t;
    },
    async reopen(context) {
      const t = new ObjectTier(url(), context);
      await t.open();
      return t;
    },
    async corrupt(driver, key) {
      // Rewrite the stored object with one byte of the page flipped, through the SDK, behind the driver's back.
      const at = (driver as ObjectTier).locate(key)!;
      const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: at.name }));
      const bytes = await got.Body!.transformToByteArray();
      bytes[at.offset + Math.min(10, at.length - 1)]! ^= 0xff;
      await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: at.name, Body: bytes }));
    },
    async cleanup() {
      client.destroy();
    },
  };
});

describe('object tier', () => {
  let e: Env;
  let engine: TransferEngine;
  let context: TierContext;
  let src: HostArena;
  let dst: HostArena;
  const open: ObjectTier[] = [];
  const SLOTS = 128;

  beforeAll(async () => {
    e = await env();
    engine = new TransferEngine({ threads: 2 });
    context = { engine, pageBytes: PAGE, fingerprint: 'object-test/v1' };
    src = HostArena.create({ capacity: SLOTS * PAGE });
    dst = HostArena.create({ capacity: SLOTS * PAGE });
    const v = src.view(0, SLOTS * PAGE);
    for (let i = 0; i < v.length; i++) v[i] = (i * 31 + (i >>> 16) * 7) & 0xff;
  });
  afterAll(async () => {
    for (const t of open) await t.close();
    await engine.close();
    src.close();
    dst.close();
  });

  async function make(url: string, ctx: TierContext = context): Promise<ObjectTier> {
    const t = new ObjectTier(url, ctx);
    await t.open();
    open.push(t);
    return t;
  }
  const page = (i: number, length = PAGE) => ({ key: testKey(i, 7), source: { arena: src, offset: i * PAGE, length } });
  const into = (i: number, length = PAGE) => ({ key: testKey(i, 7), into: { arena: dst, offset: i * PAGE, length } });
  const same = (i: number, length = PAGE) => Buffer.compare(src.view(i * PAGE, length), dst.view(i * PAGE, length)) === 0;
  const gets = (from: number) => e.proxy.log.slice(from).filter((l) => l.method === 'GET');
  async function codeOf(p: Promise<unknown>): Promise<string> {
    try {
      await p;
    } catch (err) {
      expect(err).toBeInstanceOf(TierSyncError);
      return (err as TierSyncError).code;
    }
    return 'resolved';
  }

  it('reads single pages with ranged GETs of exactly their bytes, and adjacent pages with one GET', async () => {
    const t = await make(urlOf(e.proxy.endpoint, freshPrefix('ranged'), 'object=1MiB'));
    await t.write(Array.from({ length: 8 }, (_, i) => page(i)));
    expect(t.objectStats().objects).toBe(1);

    let mark = e.proxy.log.length;
    const one = await t.read([into(3)]);
    expect(one[0]!.status).toBe('hit');
    expect(same(3)).toBe(true);
    expect(gets(mark).map((l) => [l.range, l.status, l.bytes])).toEqual([[`bytes=${3 * PAGE}-${4 * PAGE - 1}`, 206, PAGE]]);

    mark = e.proxy.log.length;
    const run = await t.read([into(4), into(2), into(3)]);
    expect(run.map((o) => o.status)).toEqual(['hit', 'hit', 'hit']);
    expect(gets(mark).map((l) => [l.range, l.bytes])).toEqual([[`bytes=${2 * PAGE}-${5 * PAGE - 1}`, 3 * PAGE]]);

    mark = e.proxy.log.length;
    await t.read([into(1), into(6)]);
    expect(gets(mark).map((l) => l.bytes)).toEqual([PAGE, PAGE]);
    expect(same(1) && same(6)).toBe(true);
  });

  it('reads a range with one GET of just the chunks covering it, each checked; a damaged chunk fails only the ranges over it', async () => {
    // 16 KiB chunk CRCs: a 64 KiB page has 4.
    const prefix = freshPrefix('range');
    const url = urlOf(e.proxy.endpoint, prefix, 'object=1MiB&crcChunk=16KiB');
    const t = await make(url);
    expect(t.capabilities.rangeReads).toBe(true);
    await t.write(Array.from({ length: 4 }, (_, i) => page(i)));
    const K = 16 * 1024;
    const at = t.locate(testKey(2, 7))!;
    const ranged = (i: number, offset: number, length: number) => ({ key: testKey(i, 7), into: { arena: dst, offset: i * PAGE + offset, length }, range: { offset, length } });
    const sameAt = (i: number, offset: number, length: number) => Buffer.compare(src.view(i * PAGE + offset, length), dst.view(i * PAGE + offset, length)) === 0;
    dst.view(0, 4 * PAGE).fill(0);

    // Aligned: exactly chunk 1. Unaligned: bytes [20000, +20000) need chunks 1 and 2, read whole (32 KiB).
    let mark = e.proxy.log.length;
    const r = await t.read([ranged(2, K, K), ranged(1, 20_000, 20_000)]);
    expect(r).toEqual([
      { key: testKey(2, 7), status: 'hit', length: K, crc32c: expect.any(Number) },
      { key: testKey(1, 7), status: 'hit', length: 20_000, crc32c: expect.any(Number) },
    ]);
    expect(sameAt(2, K, K) && sameAt(1, 20_000, 20_000)).toBe(true);
    // Nothing outside the ranges was written.
    expect(dst.view(PAGE, 20_000).every((b) => b === 0)).toBe(true);
    expect(dst.view(PAGE + 40_000, PAGE - 40_000).every((b) => b === 0)).toBe(true);
    expect(gets(mark).map((l) => [l.range, l.bytes]).sort()).toEqual(
      [
        [`bytes=${at.offset + K}-${at.offset + 2 * K - 1}`, K],
        [`bytes=${PAGE + K}-${PAGE + 3 * K - 1}`, 2 * K],
      ].sort(),
    );

    // Damage chunk 2 of page 2 behind the tier's back: ranges over it fail with ERR_CHECKSUM, others still hit.
    const client = createS3Client(parseObjectUrl(url));
    const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: at.name }));
    const bytes = await got.Body!.transformToByteArray();
    bytes[at.offset + 2 * K + 5]! ^= 0x41;
    await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: at.name, Body: bytes }));
    client.destroy();
    const before = t.stats().checksumFailures;
    const after = await t.read([ranged(2, 0, 2 * K), ranged(2, 2 * K - 100, 200), ranged(2, 3 * K, K)]);
    expect(after.map((o) => o.status)).toEqual(['hit', 'error', 'hit']);
    expect(after[1]).toMatchObject({ error: { code: 'ERR_CHECKSUM', message: expect.stringMatching(/chunk 2/) } });
    expect(t.stats().checksumFailures).toBe(before + 1);
    // The whole page fails too; a reopened tier knows the chunk CRCs from the manifest alone.
    expect((await t.read([into(2)]))[0]).toMatchObject({ status: 'error', error: { code: 'ERR_CHECKSUM' } });
    await t.close();
    const again = await make(url);
    const reread = await again.read([ranged(2, 3 * K, K), ranged(2, 2 * K, 10), ranged(3, 0, PAGE)]);
    expect(reread.map((o) => (o.status === 'error' ? o.error.code : o.status))).toEqual(['hit', 'ERR_CHECKSUM', 'hit']);
    expect(sameAt(3, 0, PAGE)).toBe(true);
    // Ranges outside the page, or larger than their destination, are refused before any GET.
    await expect(again.read([ranged(3, PAGE - 10, 20)])).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
    await expect(again.read([{ ...ranged(3, 0, 100), into: { arena: dst, offset: 0, length: 50 } }])).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
  });

  it('reads a range of a page written without chunk CRCs (manifest format 2) by fetching and checking the whole page', async () => {
    const prefix = freshPrefix('range-v2');
    const url = urlOf(e.proxy.endpoint, prefix);
    await (await make(url)).close(); // writes the descriptor
    // An object as the previous format wrote it: one page, a 4-field manifest entry (no chunk CRCs).
    const body = new Uint8Array(PAGE + footerBound(1, context.fingerprint, 0));
    body.set(src.view(5 * PAGE, PAGE));
    const footer = encodeFooter({ format: 2, fingerprint: context.fingerprint, pageBytes: PAGE, pages: [{ key: testKey(5, 7), offset: 0, length: PAGE, crc32c: crc32c(src.view(5 * PAGE, PAGE)) }] }, PAGE, body.subarray(PAGE));
    const client = createS3Client(parseObjectUrl(url));
    await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: dataName(`${prefix}/`, newObjectId()), Body: body.subarray(0, PAGE + footer) }));
    client.destroy();
    const t = await make(url);
    const mark = e.proxy.log.length;
    dst.view(5 * PAGE, PAGE).fill(0);
    const r = await t.read([{ key: testKey(5, 7), into: { arena: dst, offset: 5 * PAGE + 1000, length: 500 }, range: { offset: 1000, length: 500 } }]);
    expect(r[0]).toMatchObject({ status: 'hit', length: 500 });
    expect(Buffer.compare(dst.view(5 * PAGE + 1000, 500), src.view(5 * PAGE + 1000, 500))).toBe(0);
    // Only the range landed, though the whole page was fetched to check it.
    expect(dst.view(5 * PAGE, 1000).every((b) => b === 0) && dst.view(5 * PAGE + 1500, PAGE - 1500).every((b) => b === 0)).toBe(true);
    expect(gets(mark).map((l) => l.bytes)).toEqual([PAGE]);
  });

  it('reads ranges into device arenas through staging, and ranges of compacted pages', async () => {
    const url = urlOf(e.direct, freshPrefix('range-device'), 'object=256KiB&compactBelow=0.9&crcChunk=8KiB');
    const t = await make(url);
    await t.write(Array.from({ length: 4 }, (_, i) => page(i)));
    // Deleting one page of four leaves 75% live, below 0.9: the rest is rewritten, chunk CRCs carried along.
    await t.delete([testKey(0, 7)]);
    await t.idle();
    expect(t.compactions).toBe(1);
    const device = DeviceArena.create({ backend: 'sim', capacity: PAGE });
    const back = HostArena.create({ capacity: PAGE });
    try {
      const r = await t.read([{ key: testKey(3, 7), into: { arena: device, offset: 100, length: 30_000 }, range: { offset: 5_000, length: 30_000 } }]);
      expect(r[0]).toMatchObject({ status: 'hit', length: 30_000 });
      const b = new TransferBatch();
      b.add(device, 100, back, 0, 30_000);
      await engine.submit(b);
      expect(Buffer.compare(back.view(0, 30_000), src.view(3 * PAGE + 5_000, 30_000))).toBe(0);
    } finally {
      device.close();
      back.close();
    }
  });

  it('rebuilds the index from footers and tombstones at open; deletes objects whose pages are all deleted', async () => {
    const prefix = freshPrefix('rebuild');
    const url = urlOf(e.direct, prefix, 'object=256KiB&compactBelow=0');
    const a = await make(url);
    await a.write(Array.from({ length: 6 }, (_, i) => page(i, PAGE - i))); // objects of 4 + 2 pages
    expect(a.objectStats().objects).toBe(2);
    await a.delete([testKey(0, 7), testKey(5, 7)]);
    await a.close();

    const b = await make(url);
    expect(b.attachNote).toMatch(/4 page\(s\) in 2 object\(s\) recovered/);
    const listed = new Map<string, number>();
    for await (const p of b.list()) listed.set(p.key, p.length);
    expect([...listed.keys()].sort()).toEqual([1, 2, 3, 4].map((i) => testKey(i, 7)).sort());
    expect(listed.get(testKey(2, 7))).toBe(PAGE - 2);
    const r = await b.read([1, 2, 3, 4].map((i) => into(i, PAGE)));
    expect(r.every((o) => o.status === 'hit')).toBe(true);
    expect([1, 2, 3, 4].every((i) => same(i, PAGE - i))).toBe(true);

    // Deleting the last live page of an object deletes the object and its tombstone.
    await b.delete([testKey(4, 7)]);
    expect(b.objectStats().objects).toBe(1);
    const client = createS3Client(parseObjectUrl(url));
    const names = (await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: `${prefix}/` }))).Contents!.map((o) => o.Key!.slice(prefix.length + 1));
    client.destroy();
    expect(names.filter((n) => n.startsWith('data/'))).toHaveLength(1);
    expect(names.filter((n) => n.startsWith('dead/'))).toHaveLength(1); // the first object still has 3 live pages
    expect(names).toContain('tiersync-object.json');
  });

  it('reads a manifest larger than the tail it first fetched with a second GET', async () => {
    const prefix = freshPrefix('big-manifest');
    const url = urlOf(e.proxy.endpoint, prefix);
    const a = await make(url);
    const longKey = (i: number) => testKey(i, 3).repeat(4); // 128 hex characters: ~170 manifest bytes a page
    const pages = Array.from({ length: 300 }, (_, i) => ({ key: longKey(i), source: { arena: src, offset: i * 100, length: 100 } }));
    await a.write(pages);
    await a.close();
    const mark = e.proxy.log.length;
    const b = await make(url);
    expect(b.stats()).toMatchObject({ pages: 300, usedBytes: 300 * 100 });
    expect(gets(mark).filter((l) => l.url.includes('/data/'))).toHaveLength(2);
    const r = await b.read([{ key: longKey(299), into: { arena: dst, offset: 0, length: 100 } }]);
    expect(r[0]!.status).toBe('hit');
    expect(Buffer.compare(dst.view(0, 100), src.view(29900, 100))).toBe(0);
  });

  it('compacts an object whose live pages fall below compactBelow, reading only the live pages', async () => {
    const prefix = freshPrefix('compact');
    const url = urlOf(e.proxy.endpoint, prefix, 'object=512KiB&compactBelow=0.5');
    const t = await make(url);
    await t.write(Array.from({ length: 8 }, (_, i) => page(i)));
    const before = t.objectStats().storedBytes;
    await t.delete([0, 1, 2].map((i) => testKey(i, 7)));
    await t.idle();
    expect(t.compactions).toBe(0); // 5 of 8 pages live: above the threshold
    const mark = e.proxy.log.length;
    await t.delete([5, 6].map((i) => testKey(i, 7)));
    await t.idle();
    expect(t.compactions).toBe(1);
    // Live pages 3-4 and 7 were fetched with one GET per adjacent run, nothing else.
    expect(gets(mark).map((l) => [l.range, l.bytes])).toEqual(
      expect.arrayContaining([
        [`bytes=${3 * PAGE}-${5 * PAGE - 1}`, 2 * PAGE],
        [`bytes=${7 * PAGE}-${8 * PAGE - 1}`, PAGE],
      ]),
    );
    expect(gets(mark)).toHaveLength(2);
    const s = t.objectStats();
    expect(s.objects).toBe(1);
    expect(s.storedBytes).toBeLessThan(before / 2);
    expect(t.stats()).toMatchObject({ pages: 3, usedBytes: 3 * PAGE });
    const r = await t.read([3, 4, 7].map((i) => into(i)));
    expect(r.map((o) => o.status)).toEqual(['hit', 'hit', 'hit']);
    expect([3, 4, 7].every((i) => same(i))).toBe(true);
    // The bucket holds the new object only: the old one and its tombstone are gone.
    const client = createS3Client(parseObjectUrl(url));
    const names = (await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: `${prefix}/` }))).Contents!.map((o) => o.Key!.slice(prefix.length + 1));
    client.destroy();
    expect(names.filter((n) => n.startsWith('data/'))).toHaveLength(1);
    expect(names.filter((n) => n.startsWith('dead/'))).toHaveLength(0);
    await t.close();
    const again = await make(url);
    expect(again.stats().pages).toBe(3);
    expect((await again.read([into(4)]))[0]!.status).toBe('hit');
  });

  it('keeps pages whose delete could not reach the bucket, and says so', async () => {
    const t = await make(urlOf(e.proxy.endpoint, freshPrefix('delete-fails'), 'retries=0&compactBelow=0'));
    await t.write([page(0), page(1)]);
    e.proxy.always = '503';
    await expect(t.delete([testKey(0, 7)])).rejects.toMatchObject({ code: 'ERR_IO', message: expect.stringMatching(/1 page\(s\) kept/) });
    e.proxy.heal();
    expect(await t.has([testKey(0, 7), testKey(1, 7)])).toEqual([true, true]);
    expect(t.stats()).toMatchObject({ pages: 2, usedBytes: 2 * PAGE });
    expect((await t.delete([testKey(0, 7)])).deleted).toEqual([testKey(0, 7)]);
    expect((await t.read([into(0), into(1)])).map((o) => o.status)).toEqual(['miss', 'hit']);
  });

  it('uploads large objects as parallel multipart uploads', async () => {
    const t = await make(urlOf(e.proxy.endpoint, freshPrefix('multipart'), 'object=8MiB&partSize=5MiB'));
    const mark = e.proxy.log.length;
    const pages = Array.from({ length: 100 }, (_, i) => page(i));
    await t.write(pages);
    const log = e.proxy.log.slice(mark);
    expect(log.filter((l) => l.method === 'POST' && l.url.includes('uploads'))).toHaveLength(1);
    expect(log.filter((l) => l.method === 'PUT' && /partNumber=\d/.test(l.url))).toHaveLength(2);
    expect(log.filter((l) => l.method === 'POST' && l.url.includes('uploadId'))).toHaveLength(1);
    const r = await t.read(pages.map((_, i) => into(i)));
    expect(r.every((o) => o.status === 'hit')).toBe(true);
    expect(pages.every((_, i) => same(i))).toBe(true);
  });

  it('retries transient 503s and connection resets, then succeeds', async () => {
    const t = await make(urlOf(e.proxy.endpoint, freshPrefix('retry'), 'backoffMs=5&retries=4'));
    e.proxy.next.push('503', '503');
    await t.write([page(0), page(1)]);
    expect(t.objectStats().retries).toBe(2);
    e.proxy.next.push('reset', '503', 'reset');
    const r = await t.read([into(0), into(1)]);
    expect(r.map((o) => o.status)).toEqual(['hit', 'hit']);
    expect(same(0) && same(1)).toBe(true);
    expect(t.objectStats().retries).toBe(5);
    expect(t.stats().errors).toBe(0);
    // Retries exhausted: the write fails as a whole and nothing becomes visible.
    e.proxy.next.push('503', '503', '503', '503', '503');
    expect(await codeOf(t.write([page(2)]))).toBe('ERR_IO');
    expect(await t.has([testKey(2, 7)])).toEqual([false]);
  });

  it('opens the circuit breaker after consecutive failures, fails fast while open, and recovers', async () => {
    const t = await make(urlOf(e.proxy.endpoint, freshPrefix('breaker'), 'retries=0&breakerThreshold=3&breakerCooldownMs=300'));
    await t.write([page(0)]);
    e.proxy.always = '503';
    for (let i = 0; i < 3; i++) expect(await codeOf(t.write([page(1)]))).toBe('ERR_IO');
    expect(t.objectStats().breaker).toBe('open');
    const mark = e.proxy.log.length;
    const started = Date.now();
    expect(await codeOf(t.write([page(1)]))).toBe('ERR_UNAVAILABLE');
    const r = await t.read([into(0)]);
    expect(r[0]).toMatchObject({ status: 'error', error: { code: 'ERR_UNAVAILABLE' } });
    expect(Date.now() - started).toBeLessThan(250);
    expect(e.proxy.log.length).toBe(mark); // nothing reached the endpoint

    // Half-open after the cool-down: the probe fails, so the breaker opens again.
    await new Promise((resolve) => setTimeout(resolve, 350));
    expect(t.objectStats().breaker).toBe('half-open');
    expect(await codeOf(t.write([page(1)]))).toBe('ERR_IO');
    expect(t.objectStats().breaker).toBe('open');
    expect(e.proxy.log.length).toBe(mark + 1);

    e.proxy.heal();
    await new Promise((resolve) => setTimeout(resolve, 350));
    await t.write([page(1)]);
    expect(t.objectStats().breaker).toBe('closed');
    const back = await t.read([into(0), into(1)]);
    expect(back.map((o) => o.status)).toEqual(['hit', 'hit']);
    expect(t.objectStats().breakerOpened).toBe(1);
  });

  it('times out a stalled request and retries it; gives ERR_TIMEOUT when every attempt stalls', async () => {
    const t = await make(urlOf(e.proxy.endpoint, freshPrefix('timeout'), 'timeoutMs=250&retries=1&backoffMs=1'));
    await t.write([page(0)]);
    e.proxy.next.push('stall');
    const started = Date.now();
    const r = await t.read([into(0)]);
    expect(r[0]!.status).toBe('hit');
    expect(Date.now() - started).toBeGreaterThanOrEqual(240);
    expect(t.objectStats().timeouts).toBe(1);

    e.proxy.next.push('stall', 'stall');
    const failed = await t.read([into(0)]);
    expect(failed[0]).toMatchObject({ status: 'error', error: { code: 'ERR_TIMEOUT' } });
    await t.write([page(1)]); // healthy again
    e.proxy.heal();
  });

  it("honours the caller's deadline and abort signal", async () => {
    const t = await make(urlOf(e.proxy.endpoint, freshPrefix('deadline'), 'timeoutMs=5000'));
    await t.write([page(0)]);
    e.proxy.always = 'stall';
    const started = Date.now();
    expect(await codeOf(t.read([into(0)], { timeoutMs: 200 }))).toBe('ERR_TIMEOUT');
    expect(Date.now() - started).toBeLessThan(2000);
    const ctrl = new AbortController();
    setTimeout(() => ctrl.abort(), 100);
    expect(await codeOf(t.write([page(1)], { signal: ctrl.signal }))).toBe('ERR_ABORTED');
    e.proxy.heal();
    expect(t.objectStats().breaker).toBe('closed'); // the caller's limits say nothing about the endpoint
    expect(await t.has([testKey(1, 7)])).toEqual([false]);
  });

  it('writes from and reads into device arenas through host staging', async () => {
    const t = await make(urlOf(e.direct, freshPrefix('device')));
    const dev = DeviceArena.create({ capacity: 4 * PAGE });
    const back = HostArena.create({ capacity: 4 * PAGE });
    await engine.submit(new TransferBatch().add(src, 0, dev, 0, 2 * PAGE));
    const w = await t.write([0, 1].map((i) => ({ key: testKey(i, 9), source: { arena: dev, offset: i * PAGE, length: PAGE } })));
    expect(w.crc32c).toEqual([0, 1].map((i) => crc32c(src.view(i * PAGE, PAGE))));
    const r = await t.read([0, 1].map((i) => ({ key: testKey(i, 9), into: { arena: dev, offset: (i + 2) * PAGE, length: PAGE } })));
    expect(r.map((o) => o.status)).toEqual(['hit', 'hit']);
    await engine.submit(new TransferBatch().add(dev, 2 * PAGE, back, 0, 2 * PAGE));
    expect(Buffer.compare(back.view(0, 2 * PAGE), src.view(0, 2 * PAGE))).toBe(0);
    dev.close();
    back.close();
  });

  it('refuses a prefix written under another fingerprint, a missing bucket, and objects smaller than a page', async () => {
    const prefix = freshPrefix('fingerprint');
    const a = await make(urlOf(e.direct, prefix));
    await a.write([page(0)]);
    await a.close();
    const other = new ObjectTier(urlOf(e.direct, prefix), { ...context, fingerprint: 'another-model' });
    await expect(other.open()).rejects.toThrow(/fingerprint is 'object-test\/v1', expected 'another-model'/);
    const missing = new ObjectTier(`s3://no-such-bucket/p?endpoint=${e.direct}&${CREDS}&retries=0`, context);
    await expect(missing.open()).rejects.toMatchObject({ code: 'ERR_CONFIG', message: expect.stringMatching(/no-such-bucket/) });
    const small = new ObjectTier(urlOf(e.direct, prefix, 'object=32KiB'), context);
    await expect(small.open()).rejects.toThrow(/option 'object' \(32768 bytes\) is smaller than one page/);
  });

  it('skips objects under data/ that are not its own, saying why', async () => {
    const prefix = freshPrefix('foreign');
    const url = urlOf(e.direct, prefix);
    const a = await make(url);
    await a.write([page(0)]);
    await a.close();
    const client = createS3Client(parseObjectUrl(url));
    await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: `${prefix}/data/0000000aa-00000000000000aa`, Body: new Uint8Array(100) }));
    await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: `${prefix}/data/notes.txt`, Body: 'hello' }));
    client.destroy();
    const b = await make(url);
    expect(b.attachNote).toMatch(/1 page\(s\) in 1 object\(s\) recovered/);
    expect(b.attachNote).toMatch(/0000000aa-00000000000000aa: no tiersync trailer/);
    expect(b.attachNote).toMatch(/notes\.txt: not a tiersync object name/);
  });

  it('signs upload payloads over http by default, and can skip the SHA-256 (the https default)', async () => {
    const signed = await make(urlOf(e.proxy.endpoint, freshPrefix('signed')));
    let mark = e.proxy.log.length;
    await signed.write([page(0)]);
    expect(e.proxy.log.slice(mark).find((l) => l.method === 'PUT')!.sha).toMatch(/^[0-9a-f]{64}$/);
    const unsigned = await make(urlOf(e.proxy.endpoint, freshPrefix('unsigned'), 'signPayload=false&object=8MiB&partSize=5MiB'));
    mark = e.proxy.log.length;
    await unsigned.write(Array.from({ length: 90 }, (_, i) => page(i))); // multipart: parts are unsigned too
    const puts = e.proxy.log.slice(mark).filter((l) => l.method === 'PUT');
    expect(puts.length).toBe(2);
    expect(puts.every((l) => l.sha === 'UNSIGNED-PAYLOAD' && l.status === 200)).toBe(true);
    expect((await unsigned.read([into(89)]))[0]!.status).toBe('hit');
    expect(same(89)).toBe(true);
  });

  it('takes its keys from the environment, never from its url', async () => {
    const t = new ObjectTier(urlOf(e.direct, 'p'), context);
    expect(t.url).toContain('credentials=env:S3RVER');
    expect(t.url).not.toMatch(/accessKeyId|secretAccessKey/);
  });
});

describe('object tier URLs', () => {
  it('maps gs:// to the GCS XML API endpoint', async () => {
    process.env['TEST_GCS_ACCESS_KEY_ID'] = 'GOOG1EXAMPLE';
    process.env['TEST_GCS_SECRET_ACCESS_KEY'] = 'abc';
    const c = parseObjectUrl('gs://my-bucket/kv/llama-3?credentials=env:TEST_GCS');
    expect(c).toMatchObject({ scheme: 'gs', bucket: 'my-bucket', prefix: 'kv/llama-3/', endpoint: GCS_ENDPOINT, region: 'auto', forcePathStyle: true, signPayload: false });
    expect(c.credentials).toEqual({ accessKeyId: 'GOOG1EXAMPLE', secretAccessKey: 'abc' });
    expect(c.redacted).not.toMatch(/abc|GOOG1EXAMPLE/);
    const client = createS3Client(c);
    const endpoint = await client.config.endpoint!();
    expect(`${endpoint.protocol}//${endpoint.hostname}`).toBe('https://storage.googleapis.com');
    client.destroy();
  });

  it('parses s3:// with defaults and options', () => {
    const aws = parseObjectUrl('s3://bucket.with.dots?region=eu-west-1');
    expect(aws).toMatchObject({ scheme: 's3', bucket: 'bucket.with.dots', prefix: '', endpoint: undefined, region: 'eu-west-1', forcePathStyle: false, credentials: undefined });
    expect(aws).toMatchObject({ objectBytes: 64 * 2 ** 20, partBytes: 16 * 2 ** 20, concurrency: 16, timeoutMs: 30000, retries: 4, breakerThreshold: 5, capacity: Number.MAX_SAFE_INTEGER });
    const minio = parseObjectUrl('s3://bk1/a/b/?endpoint=http://127.0.0.1:9000/&object=8MiB&partSize=5MiB&capacity=1TiB&concurrency=4&timeoutMs=100&retries=0&forcePathStyle=false');
    expect(minio).toMatchObject({ prefix: 'a/b/', endpoint: 'http://127.0.0.1:9000', objectBytes: 8 * 2 ** 20, capacity: 2 ** 40, concurrency: 4, retries: 0, forcePathStyle: false });
  });

  it('names the option or part that is wrong', () => {
    const bad: Array<[string, RegExp]> = [
      ['s3://bk1/p?timeoutMs=soon', /option 'timeoutMs' must be an integer/],
      ['s3://bk1/p?retries=99', /option 'retries'/],
      ['s3://bk1/p?colour=blue', /unknown option\(s\) colour/],
      ['s3://bk1/p?accessKeyId=AKIA', /option 'accessKeyId': credentials never go in a tier URL/],
      ['s3://bk1/p?secretAccessKey=x', /option 'secretAccessKey': credentials never go in a tier URL/],
      ['s3://bk1/p?credentials=AKIA', /option 'credentials' must be env:PREFIX/],
      ['s3://bk1/p?credentials=env:TIERSYNC_NO_SUCH_KEYS', /environment variable TIERSYNC_NO_SUCH_KEYS_ACCESS_KEY_ID is not set/],
      ['s3://bk1/p?endpoint=ftp://x', /option 'endpoint' must be an http/],
      ['s3://bk1/p?object=1KiB', /option 'object' must be between 4KiB and 512MiB/],
      ['s3://bk1/p?partSize=1MiB', /option 'partSize' must be between 5MiB/],
      ['s3://bk1/p?capacity=lots', /option 'capacity' must be a capacity/],
      ['s3://bk1/p?region=Mars%201', /option 'region'/],
      ['s3://bk1/p?forcePathStyle=maybe', /option 'forcePathStyle'/],
      ['s3://bk1/p?backoffMs=100&backoffMaxMs=10', /option 'backoffMaxMs'/],
      ['s3://B_/p', /bucket 'B_' is not a valid bucket name/],
      ['s3://bk1:9000/p', /not host:port/],
      ['s3://bk1/a/../etc', /prefix segment '\.\.'/],
      ['s3://bk1/a//b', /prefix segment ''/],
      ['s3://bk1/a%2Fb', /prefix segment 'a\/b'/],
      ['s3://bk1/a b', /prefix segment/],
      ['http://b1/p', /scheme must be s3:\/\/ or gs:\/\//],
    ];
    for (const [url, message] of bad) {
      let thrown: unknown;
      try {
        parseObjectUrl(url);
      } catch (err) {
        thrown = err;
      }
      expect(thrown, url).toBeInstanceOf(TierSyncError);
      expect((thrown as TierSyncError).code, url).toBe('ERR_CONFIG');
      expect((thrown as TierSyncError).message, url).toMatch(message);
    }
    // Secrets never appear in the error.
    expect(() => parseObjectUrl('s3://bk1/p?accessKeyId=AKIA&secretAccessKey=hunter2&retries=x')).toThrow(/secretAccessKey=\*\*\*/);
  });
});

describe('circuit breaker and retry policy', () => {
  it('walks closed -> open -> half-open -> closed, one probe at a time', () => {
    let now = 0;
    const b = new CircuitBreaker(2, 1000, 'test endpoint', () => now);
    expect(b.admit()).toBe(false);
    b.failure(new Error('boom'));
    expect(b.state).toBe('closed');
    b.failure(new Error('boom'));
    expect(b.state).toBe('open');
    expect(() => b.admit()).toThrow(/test endpoint is unavailable .*next probe in 1000 ms/);
    now = 1000;
    expect(b.state).toBe('half-open');
    expect(b.admit()).toBe(true);
    expect(() => b.admit()).toThrow(/a probe request is in flight/);
    b.success();
    expect(b.state).toBe('closed');
    expect(b.opened).toBe(1);
  });

  it('backs off with full jitter under a ceiling', () => {
    const r = new RequestRunner({ retries: 5, backoffMs: 100, backoffMaxMs: 1000, timeoutMs: 1000 }, new CircuitBreaker(5, 10, 'x'), new Limiter(1), () => 0.999);
    expect([0, 1, 2, 3, 4, 5].map((n) => r.backoff(n))).toEqual([99, 199, 399, 799, 999, 999]);
  });
});
