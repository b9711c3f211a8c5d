import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { decode } from '@msgpack/msgpack';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { Dealer, Subscriber } from 'zeromq';
import { KvEventPublisher } from './publisher.js';
import { KvEventEncoder, type KvEvent } from './wire.js';

const log = pino({ level: 'silent' });
const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-kv-pub-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A publisher whose "state" is one stored block per batch published so far. */
async function open(o: { replayBatches?: number; sequenceFile?: string } = {}): Promise<{ p: KvEventPublisher; state: string[] }> {
  const state: string[] = [];
  const p = await KvEventPublisher.open({
    endpoint: 'tcp://127.0.0.1:*',
    replayEndpoint: 'tcp://127.0.0.1:*',
    topic: 'kv',
    replayBatches: o.replayBatches ?? 100,
    sendHighWaterMark: 1000,
    sequenceFile: o.sequenceFile,
    encoder: new KvEventEncoder('int64'),
    flushPending: () => undefined,
    snapshot: () => [{ type: 'AllBlocksCleared' }, ...state.map((k): KvEvent => ({ type: 'BlockStored', blockHashes: [k], parentBlockHash: null, tokenIds: [], blockSize: 16, medium: 'CPU' }))],
    log,
  });
  return { p, state };
}

function publishStored(p: KvEventPublisher, state: string[], key: string): number {
  state.push(key);
  return p.publish([{ type: 'BlockStored', blockHashes: [key], parentBlockHash: null, tokenIds: [], blockSize: 16, medium: 'CPU' }]);
}

/** Sends a replay request as vLLM's subscriber does (through REQ: an empty delimiter, then 8 bytes), collects the answer. */
async function request(endpoint: string, start: bigint): Promise<Array<{ seq: bigint; events: unknown[][] }>> {
  const d = new Dealer({ receiveTimeout: 5000, linger: 0 });
  d.connect(endpoint);
  try {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(BigInt.asUintN(64, start));
    await d.send([Buffer.alloc(0), b]);
    const out: Array<{ seq: bigint; events: unknown[][] }> = [];
    for (;;) {
      const [delim, seq, payload] = await d.receive();
      expect(delim!.length).toBe(0);
      const s = seq!.readBigInt64BE(0);
      if (s === -1n) {
        expect(payload!.length).toBe(0);
        return out;
      }
      const [ts, events] = decode(payload!) as [number, unknown[][]];
      expect(typeof ts).toBe('number');
      out.push({ seq: s, events });
    }
  } finally {
    d.close();
  }
}

describe('KvEventPublisher', () => {
  it('publishes [topic, seq, payload] with gap-free sequence numbers and replays from any buffered sequence', async () => {
    const { p, state } = await open();
    const sub = new Subscriber({ receiveTimeout: 5000, linger: 0 });
    try {
      sub.connect(p.endpoints.pub);
      sub.subscribe('kv');
      // PUB drops until the subscription has reached it: publish probes (hashes 0xf000 + i) until one arrives.
      // One receive stays pending across probes (a socket allows one at a time); a probe sent before the first
      // one arrived may still follow it, so probes are skipped below.
      const isProbe = (payload: Buffer): boolean => ((decode(payload) as [number, unknown[][]])[1][0]![1] as number[])[0]! >= 0xf000;
      let pending = sub.receive();
      let first: Buffer[] | undefined;
      for (let i = 0; !first && i < 100; i++) {
        publishStored(p, state, `f${i.toString(16).padStart(3, '0')}`);
        first = await Promise.race([pending, new Promise<undefined>((r) => setTimeout(r, 50))]);
      }
      expect(first).toBeDefined();
      let lastSeq = first![1]!.readBigUInt64BE(0);
      for (let i = 0; i < 5; i++) publishStored(p, state, `1${i}`);
      const seqs: bigint[] = [];
      while (seqs.length < 5) {
        pending = sub.receive();
        const [topic, seq, payload] = await pending;
        expect(topic!.toString()).toBe('kv');
        const s = seq!.readBigUInt64BE(0);
        expect(s).toBe(lastSeq + 1n); // gap-free, probes included
        lastSeq = s;
        if (isProbe(payload!)) continue;
        expect((decode(payload!) as [number, unknown[][]])[1][0]).toEqual(['BlockStored', [0x10 + seqs.length], null, [], 16, null, 'CPU', null]);
        seqs.push(s);
      }
      expect(seqs.map((s) => Number(s - seqs[0]!))).toEqual([0, 1, 2, 3, 4]);
      const last = BigInt(p.stats().lastSeq);
      const replayed = await request(p.endpoints.replay!, last - 2n);
      expect(replayed.map((r) => r.seq)).toEqual([last - 2n, last - 1n, last]);
      expect(replayed.map((r) => r.events[0]![1])).toEqual([[0x12], [0x13], [0x14]]);
      // Nothing after the last batch: just the end marker.
      expect(await request(p.endpoints.replay!, last + 1n)).toEqual([]);
    } finally {
      sub.close();
      await p.close();
    }
  });

  it('answers a replay older than its ring, and a snapshot request (-1), with the state under the last sequence number', async () => {
    const { p, state } = await open({ replayBatches: 3 });
    try {
      for (let i = 0; i < 6; i++) publishStored(p, state, `a${i}`);
      expect(p.stats()).toMatchObject({ lastSeq: 5, oldestReplayable: 3 });
      for (const start of [0n, 2n, -1n]) {
        const answer = await request(p.endpoints.replay!, start);
        expect(answer).toHaveLength(1);
        expect(answer[0]!.seq).toBe(5n);
        expect(answer[0]!.events).toEqual([['AllBlocksCleared'], ...[0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5].map((h) => ['BlockStored', [h], null, [], 16, null, 'CPU', null])]);
      }
      // Within the ring: the batches themselves.
      expect((await request(p.endpoints.replay!, 3n)).map((r) => r.seq)).toEqual([3n, 4n, 5n]);
      expect(p.stats()).toMatchObject({ snapshots: 3, replays: 1 });
    } finally {
      await p.close();
    }
  });

  it('continues its sequence numbers across a restart through the sequence file', async () => {
    const file = path.join(dir, 'seq');
    let { p, state } = await open({ sequenceFile: file });
    expect(p.nextSeq).toBe(0);
    for (let i = 0; i < 4; i++) publishStored(p, state, `b${i}`);
    await p.close();
    ({ p, state } = await open({ sequenceFile: file }));
    try {
      expect(p.nextSeq).toBe(4);
      expect(publishStored(p, state, 'c0')).toBe(4);
      // Numbers before this run are not replayable here: a request for them gets the snapshot.
      expect((await request(p.endpoints.replay!, 2n))[0]!.events[0]).toEqual(['AllBlocksCleared']);
    } finally {
      await p.close();
    }
  });
});
