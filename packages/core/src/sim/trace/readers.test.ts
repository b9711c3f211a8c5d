import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native/errors';
import { parseAzure, parseAzureTime } from './azure.js';
import { loadTrace, guessFormat, streamObjects } from './index.js';
import { parseMooncake } from './mooncake.js';
import { generateMultiRoundQa } from './multi-round-qa.js';
import { encodeOracleGeneral, parseOracleCsv, parseOracleGeneral, readOracleCsv, readOracleGeneral } from './oracle-general.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-sim-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

function expectTraceError(fn: () => unknown, pattern: RegExp): void {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(TierSyncError);
    expect((e as TierSyncError).code).toBe('ERR_INVALID_ARGUMENT');
    expect((e as Error).message).toMatch(pattern);
    return;
  }
  throw new Error('expected a TierSyncError');
}

describe('mooncake reader', () => {
  it('reads requests and densifies ids in first-seen order', () => {
    const t = parseMooncake(
      '{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [7, 9]}\n{"timestamp": 3, "input_length": 600, "output_length": 1, "hash_ids": [7, 11]}\n',
      'x.jsonl',
    );
    expect(t.requests.map((r) => [...r.pages])).toEqual([[0, 1], [0, 2]]);
    expect(t.distinctPages).toBe(3);
    expect(t.pageRefs).toBe(4);
    expect(t.requests[1]).toMatchObject({ timeMs: 3, inputTokens: 600, outputTokens: 1 });
  });

  it('names the file, line and reason of bad input', () => {
    expectTraceError(() => parseMooncake('{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[1]}\n{"timestamp": 1, "input_', 'a.jsonl'), /^a\.jsonl: line 2: not valid JSON/);
    expectTraceError(() => parseMooncake('{"timestamp":0,"input_length":-1,"output_length":1,"hash_ids":[]}', 'b.jsonl'), /b\.jsonl: line 1: "input_length"/);
    expectTraceError(() => parseMooncake('\n{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[1.5]}', 'c.jsonl'), /c\.jsonl: line 2: hash_ids\[0\]/);
    expectTraceError(() => parseMooncake('[1,2]', 'd.jsonl'), /line 1: expected a JSON object/);
  });

  it('reads the bundled gzipped conversation trace with its published counts', () => {
    const t = loadTrace({ file: path.resolve(__dirname, '../../../traces/conversation_trace.jsonl.gz'), format: 'mooncake' });
    expect(t.kind).toBe('llm');
    if (t.kind !== 'llm') return;
    expect(t.requests.length).toBe(12031);
    expect(t.pageRefs).toBe(288500);
    expect(t.distinctPages).toBe(182790);
  });
});

describe('oracleGeneral reader', () => {
  const records = [
    { time: 1, id: 10, size: 100 },
    { time: 2, id: 2n ** 60n + 1n, size: 200 },
    { time: 3, id: 10, size: 100 },
  ];

  it('reads packed 24-byte records, including 64-bit ids beyond 2^53', () => {
    const t = parseOracleGeneral(encodeOracleGeneral(records), 'x.bin');
    expect([...t.keys]).toEqual([0, 1, 0]);
    expect([...t.sizes]).toEqual([100, 200, 100]);
    expect([...t.times]).toEqual([1, 2, 3]);
    expect(t.distinct).toBe(2);
  });

  it('reports a truncated file with the record number and byte offset', () => {
    const file = path.join(tmp, 'trunc.oracleGeneral');
    fs.writeFileSync(file, encodeOracleGeneral(records).subarray(0, 60));
    expectTraceError(() => readOracleGeneral(file), /trunc\.oracleGeneral: record 2 \(byte 48\): truncated: 60 bytes/);
  });

  it('refuses size 0 naming the record', () => {
    expectTraceError(() => parseOracleGeneral(encodeOracleGeneral([{ time: 0, id: 1, size: 0 }]), 'z.bin'), /z\.bin: record 0 \(byte 0\): object size 0/);
  });

  it('reads .gz transparently', () => {
    const file = path.join(tmp, 't.oracleGeneral.gz');
    fs.writeFileSync(file, zlib.gzipSync(encodeOracleGeneral(records)));
    expect(readOracleGeneral(file).length).toBe(3);
  });

  it('reads the CSV form with or without a header and names bad lines', () => {
    const a = parseOracleCsv('time,obj_id,obj_size,next_access_vtime\n1,10,100,2\n2,abc,200,-1\n3,10,100,-1\n', 'a.csv');
    expect([...a.keys]).toEqual([0, 1, 0]);
    const b = parseOracleCsv('1\t10\t100\n', 'b.csv');
    expect(b.length).toBe(1);
    expectTraceError(() => parseOracleCsv('1,10,100\n2,11\n', 'c.csv'), /c\.csv: line 2: expected 3 or 4 fields/);
    expectTraceError(() => parseOracleCsv('1,10,-5\n', 'd.csv'), /d\.csv: line 1: obj_size must be a positive integer/);
  });

  it('guesses formats from names', () => {
    expect(guessFormat('a.jsonl.gz')).toBe('mooncake');
    expect(guessFormat('AzureLLMInferenceTrace_conv.csv')).toBe('azure');
    expect(guessFormat('w.csv')).toBe('csv');
    expect(guessFormat('w.oracleGeneral.zst')).toBe('oracleGeneral');
  });
});

describe('azure reader and prefix model', () => {
  const csv = 'TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:17:03.9799600,2048,10\r\n2023-11-16 18:17:04.0799600,3000,20\r\n2023-11-16 18:17:05.0000000,100,1';

  it('parses timestamps relative to the first request', () => {
    expect(parseAzureTime('2023-11-16 18:17:04.5000000') - parseAzureTime('2023-11-16 18:17:03.9799600')).toBeCloseTo(520.04, 2);
    const t = parseAzure(csv, 'a.csv', { seed: 1 });
    expect(t.requests.map((r) => Math.round(r.timeMs))).toEqual([0, 100, 1020]);
    expect(t.requests.map((r) => r.inputTokens)).toEqual([2048, 3000, 100]);
  });

  it('is deterministic for a seed and shares system-prompt pages', () => {
    const a = parseAzure(csv, 'a.csv', { seed: 7, systemPrompts: 1, followUpProbability: 0 });
    const b = parseAzure(csv, 'a.csv', { seed: 7, systemPrompts: 1, followUpProbability: 0 });
    expect(a.requests.map((r) => [...r.pages])).toEqual(b.requests.map((r) => [...r.pages]));
    // 1024 system tokens = pages 0 and 1 shared by the first two requests; the rest is new.
    expect(a.requests[1]!.pages[0]).toBe(a.requests[0]!.pages[0]);
    expect(a.requests[1]!.pages[1]).toBe(a.requests[0]!.pages[1]);
    expect(a.requests[1]!.pages[2]).not.toBe(a.requests[0]!.pages[2]);
  });

  it('continues conversations: a follow-up shares every full page of the earlier prompt', () => {
    const t = parseAzure(csv, 'a.csv', { seed: 3, followUpProbability: 1 });
    const [r0, r1] = t.requests;
    expect([...r1!.pages.subarray(0, 4)]).toEqual([...r0!.pages.subarray(0, 4)]);
  });

  it('names bad lines', () => {
    expectTraceError(() => parseAzure('TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,12', 'z.csv'), /z\.csv: line 2: expected 3 fields/);
    expectTraceError(() => parseAzure('time,a,b\n', 'h.csv'), /h\.csv: line 1: expected the header/);
    expectTraceError(() => parseAzure('TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2', 'y.csv'), /y\.csv: line 2: TIMESTAMP must look like/);
  });

  it('reads the bundled Azure conversation trace', () => {
    const t = loadTrace({ file: path.resolve(__dirname, '../../../traces/AzureLLMInferenceTrace_conv.csv.gz'), format: 'azure' });
    expect(t.kind === 'llm' && t.requests.length).toBe(19366);
  });
});

describe('multi-round QA generator', () => {
  it('builds growing prompts that share the system prompt and each user history', () => {
    const t = generateMultiRoundQa({ users: 2, rounds: 2, qps: 2, systemPromptTokens: 1024, historyTokens: 1024, questionTokens: 512, answerTokens: 512, blockTokens: 512 });
    expect(t.requests.map((r) => r.inputTokens)).toEqual([2560, 2560, 3584, 3584]);
    expect(t.requests.map((r) => r.timeMs)).toEqual([0, 500, 1000, 1500]);
    const [u0r0, u1r0, u0r1] = t.requests.map((r) => [...r.pages]);
    expect(u1r0!.slice(0, 2)).toEqual(u0r0!.slice(0, 2)); // system prompt
    expect(u1r0![2]).not.toBe(u0r0![2]); // histories differ
    expect(u0r1!.slice(0, 5)).toEqual(u0r0!.slice(0, 5)); // round 2 extends round 1
  });

  it('checks its options', () => {
    expect(() => generateMultiRoundQa({ users: 0 })).toThrow(TierSyncError);
    expect(() => generateMultiRoundQa({ qps: 0 })).toThrow(/qps/);
  });
});

describe('streamed readers', () => {
  /** The records the zstd fixture holds (written by zstd -19; see testdata/README.md). */
  const fixture = Array.from({ length: 5000 }, (_, i) => ({ time: i, id: i % 3 === 0 ? (1n << 60n) + BigInt((i * 7) % 97) : (i * 13) % 211, size: 1 + (i % 50) }));
  const zst = path.resolve(__dirname, 'testdata/small.oracleGeneral.zst');

  it('reads zstd-compressed oracleGeneral (libCacheSim distribution format)', () => {
    const t = readOracleGeneral(zst);
    const want = parseOracleGeneral(encodeOracleGeneral(fixture), 'x');
    expect(t.length).toBe(5000);
    expect([...t.keys]).toEqual([...want.keys]);
    expect([...t.sizes]).toEqual([...want.sizes]);
    expect(t.distinct).toBe(want.distinct);
    expect(guessFormat(zst)).toBe('oracleGeneral');
    expect(guessFormat('a/b.jsonl.zst')).toBe('mooncake');
  });

  it('decodes records split across read chunks and unaligned offsets identically', () => {
    // 200,000 records = 4.8 MB: the 4 MiB read chunk ends inside a record.
    const records = Array.from({ length: 200_000 }, (_, i) => ({ time: i, id: (i * 7919) % 50_021, size: 1 + (i % 4000) }));
    const bytes = encodeOracleGeneral(records);
    const file = path.join(tmp, 'big.oracleGeneral');
    fs.writeFileSync(file, bytes);
    fs.writeFileSync(`${file}.gz`, zlib.gzipSync(bytes));
    const whole = parseOracleGeneral(bytes, 'x');
    const unaligned = parseOracleGeneral(Buffer.concat([Buffer.alloc(1), bytes]).subarray(1), 'x');
    for (const t of [readOracleGeneral(file), readOracleGeneral(`${file}.gz`), unaligned]) {
      expect(t.length).toBe(200_000);
      expect(Buffer.from(t.keys.buffer, t.keys.byteOffset, t.keys.byteLength).equals(Buffer.from(whole.keys.buffer, whole.keys.byteOffset, whole.keys.byteLength))).toBe(true);
      expect(t.sizes[123_457]).toBe(records[123_457]!.size);
    }
    // Streamed chunk by chunk with a request limit: the first N requests, counted across chunks.
    const s = streamObjects({ file, format: 'oracleGeneral', requests: 180_000 });
    let n = 0;
    for (const c of s.chunks) n += c.length;
    expect(n).toBe(180_000);
  });

  it('decodes compressed files longer than one read chunk', () => {
    // Random ids and sizes barely compress: the gzip file spans several 4 MiB reads.
    let x = 99;
    const rnd = () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0);
    const records = Array.from({ length: 600_000 }, (_, i) => ({ time: i, id: rnd() % 1_000_000, size: 1 + (rnd() % 100_000) }));
    const bytes = encodeOracleGeneral(records);
    const file = path.join(tmp, 'multi.oracleGeneral.gz');
    fs.writeFileSync(file, zlib.gzipSync(bytes, { level: 1 }));
    expect(fs.statSync(file).size).toBeGreaterThan(4 << 20);
    const whole = parseOracleGeneral(bytes, 'x');
    const t = readOracleGeneral(file);
    expect(Buffer.from(t.keys.buffer, t.keys.byteOffset, t.keys.byteLength).equals(Buffer.from(whole.keys.buffer, whole.keys.byteOffset, whole.keys.byteLength))).toBe(true);
    expect([...t.sizes.subarray(0, 1000)]).toEqual([...whole.sizes.subarray(0, 1000)]);
  });

  it('names a corrupt zstd or gzip file', () => {
    const bad = path.join(tmp, 'bad.oracleGeneral.zst');
    fs.writeFileSync(bad, fs.readFileSync(zst).subarray(0, 200));
    expectTraceError(() => readOracleGeneral(bad), /bad\.oracleGeneral\.zst: zstd: not a valid zstd file/);
    const badGz = path.join(tmp, 'bad.oracleGeneral.gz');
    fs.writeFileSync(badGz, Buffer.from('not gzip at all'));
    expectTraceError(() => readOracleGeneral(badGz), /bad\.oracleGeneral\.gz: gzip: not a valid gzip file/);
  });

  it('streams text traces line by line (CRLF, UTF-8 across chunk borders)', () => {
    const file = path.join(tmp, 'lines.csv');
    const text = Array.from({ length: 300_000 }, (_, i) => `${i},é${i % 1000},${1 + (i % 9)}`).join('\r\n');
    fs.writeFileSync(file, text);
    const t = readOracleCsv(file);
    expect(t.length).toBe(300_000);
    expect(t.distinct).toBe(1000);
    expect(t.sizes[299_999]).toBe(1 + (299_999 % 9));
  });
});
