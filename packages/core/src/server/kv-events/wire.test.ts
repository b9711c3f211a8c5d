import { decode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { KvEventEncoder, seqFrame, wireHash, END_SEQ } from './wire.js';

const hex = (s: string) => Buffer.from(s, 'utf8').toString('hex');

describe('the KV event encoder against vLLM\'s wire layout', () => {
  // The bytes msgspec writes for vLLM's KVEventBatch(ts=1.5, events=[...]) with array_like, tagged structs
  // (vllm/distributed/kv_events.py): arrays of fields in declaration order, the class name first, trailing defaults
  // (data_parallel_rank) omitted, smallest integer forms, float64 for ts.
  it('encodes a batch of BlockStored, BlockRemoved and AllBlocksCleared byte for byte', () => {
    const enc = new KvEventEncoder('int64');
    const key255 = '00000000000000ff';
    const keyBig = 'ab'.repeat(32); // low 64 bits 0xabab...ab > 2^53: uint64
    const payload = enc.encodeBatch(1.5, [
      { type: 'BlockStored', blockHashes: [key255, '0001'], parentBlockHash: null, tokenIds: [], blockSize: 16, medium: 'CPU' },
      { type: 'BlockStored', blockHashes: ['02'], parentBlockHash: key255, tokenIds: [1, 300], blockSize: 16, medium: 'DISK' },
      { type: 'BlockRemoved', blockHashes: [keyBig], medium: 'DISK' },
      { type: 'AllBlocksCleared' },
    ]);
    const expected = [
      '92', 'cb3ff8000000000000', // [ts=1.5 (float64),
      '94', //  [4 events:
      // ["BlockStored", [255, 1], nil, [], 16, nil, "CPU", nil]
      '98', `ab${hex('BlockStored')}`, '92', 'ccff', '01', 'c0', '90', '10', 'c0', `a3${hex('CPU')}`, 'c0',
      // ["BlockStored", [2], 255, [1, 300], 16, nil, "DISK", nil]
      '98', `ab${hex('BlockStored')}`, '91', '02', 'ccff', '92', '01', 'cd012c', '10', 'c0', `a4${hex('DISK')}`, 'c0',
      // ["BlockRemoved", [0xabab...ab], "DISK"]
      '93', `ac${hex('BlockRemoved')}`, '91', `cf${'ab'.repeat(8)}`, `a4${hex('DISK')}`,
      // ["AllBlocksCleared"]
      '91', `b0${hex('AllBlocksCleared')}`,
    ].join('');
    expect(payload.toString('hex')).toBe(expected);
  });

  it('writes ts as float64 even when it is a whole number', () => {
    const p = new KvEventEncoder('int64').encodeBatch(1700000000, []);
    expect(p.toString('hex')).toBe(`92cb${Buffer.from(new Float64Array([1700000000]).buffer).reverse().toString('hex')}90`);
  });

  it('bytes form: the whole key as msgpack bin, as vLLM sends its digests with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0', () => {
    const key = '0f'.repeat(32);
    const p = new KvEventEncoder('bytes').encodeBatch(0.25, [{ type: 'BlockRemoved', blockHashes: [key], medium: 'GPU' }]);
    expect(p.toString('hex')).toBe(`92cb3fd0000000000000` + `91` + `93ac${hex('BlockRemoved')}91c420${key}a3${hex('GPU')}`);
    const [, events] = decode(p) as [number, unknown[][]];
    const hashes = events[0]![1] as Uint8Array[];
    expect(Buffer.from(hashes[0]!).toString('hex')).toBe(key);
  });

  it('int64 form: the key\'s last 16 hex digits, unsigned', () => {
    expect(wireHash('ffffffffffffffff', 'int64')).toBe(0xffffffffffffffffn);
    expect(wireHash('00'.repeat(24) + '0000000000000001', 'int64')).toBe(1);
    expect(wireHash('1234', 'int64')).toBe(0x1234);
  });

  it('sequence frames are 8 bytes big-endian; the end-of-replay marker is -1', () => {
    expect(seqFrame(258).toString('hex')).toBe('0000000000000102');
    expect(END_SEQ.readBigInt64BE(0)).toBe(-1n);
  });
});
