/**
 * The ZeroMQ side of the KV event stream: a PUB socket carrying every batch as `[topic, seq, payload]`, a ring of
 * the last batches, and a ROUTER socket answering replay requests, as vLLM's ZmqEventPublisher does
 * (vllm/distributed/kv_events.py), plus two things vLLM's lacks:
 * - a replay from a sequence older than the ring (or a request for sequence 2^64-1, i.e. -1) is answered with a
 *   snapshot: one batch `[AllBlocksCleared, BlockStored...]` holding the current state, sent under the sequence
 *   number of the last batch it includes, so a subscriber that applies it and carries on from there ends with the
 *   same view as one that never left;
 * - the next sequence number is kept in a small file (written after every batch), so numbers continue across a
 *   daemon restart instead of starting again at 0.
 *
 * Sequence numbers are assigned when a batch is published, one per batch, with no gaps; the ring and the file are
 * updated in the same synchronous step, so replay and snapshots never disagree with what the PUB socket sent.
 * Sends are queued and run one at a time (a zeromq.js socket takes one send in flight).
 */
import { closeSync, existsSync, openSync, readSync, writeSync } from 'node:fs';
import { TierSyncError } from '@tiersync/native';
import type { Logger } from 'pino';
import { Publisher, Router } from 'zeromq';
import { END_SEQ, seqFrame, type KvEvent, type KvEventEncoder } from './wire.js';

/** The request sequence (2^64-1, -1 as signed) that asks for a snapshot instead of a replay. */
export const SNAPSHOT_REQUEST = 0xffffffffffffffffn;

export interface PublisherOptions {
  endpoint: string;
  replayEndpoint?: string | undefined;
  topic: string;
  replayBatches: number;
  sendHighWaterMark: number;
  /** File keeping the next sequence number across restarts; undefined: numbers start at 0. */
  sequenceFile?: string | undefined;
  encoder: KvEventEncoder;
  /** Publishes whatever is pending, so a replay or snapshot answer covers every change made so far. */
  flushPending: () => void;
  /** The current state as events (AllBlocksCleared first), after flushPending. */
  snapshot: () => KvEvent[];
  log: Logger;
}

/** Counters of the stream (KvEvents.stats()). */
export interface PublisherStats {
  /** Sequence number of the last batch published; -1 before the first. */
  lastSeq: number;
  /** Oldest sequence number replay can still answer from the ring. */
  oldestReplayable: number;
  batches: number;
  replays: number;
  snapshots: number;
  sendErrors: number;
}

export class KvEventPublisher {
  readonly #o: PublisherOptions;
  readonly #pub: Publisher;
  readonly #router: Router | undefined;
  readonly #topic: Buffer;
  readonly #ring: Array<Buffer | undefined>;
  readonly #firstSeq: number;
  #next: number;
  #fd: number | undefined;
  #sendQueue: Buffer[][] = [];
  #sending: Promise<void> | undefined;
  #serving: Promise<void> | undefined;
  #closed = false;
  readonly #stats = { batches: 0, replays: 0, snapshots: 0, sendErrors: 0 };

  private constructor(o: PublisherOptions, pub: Publisher, router: Router | undefined, firstSeq: number, fd: number | undefined) {
    this.#o = o;
    this.#pub = pub;
    this.#router = router;
    this.#topic = Buffer.from(o.topic, 'utf8');
    this.#ring = new Array<Buffer | undefined>(o.replayBatches);
    this.#firstSeq = firstSeq;
    this.#next = firstSeq;
    this.#fd = fd;
  }

  /**
   * Binds the sockets and reads the sequence file.
   * @throws TierSyncError ERR_UNAVAILABLE when an endpoint cannot be bound, ERR_IO when the sequence file cannot be opened
   */
  static async open(o: PublisherOptions): Promise<KvEventPublisher> {
    let fd: number | undefined;
    let first = 0;
    if (o.sequenceFile) {
      try {
        // r+ (not a+): the number is rewritten in place at offset 0, which O_APPEND would not allow.
        fd = openSync(o.sequenceFile, existsSync(o.sequenceFile) ? 'r+' : 'w+');
        const b = Buffer.alloc(8);
        if (readSync(fd, b, 0, 8, 0) === 8) first = Number(b.readBigUInt64BE(0));
        if (!Number.isSafeInteger(first)) first = 0;
      } catch (e) {
        if (fd !== undefined) closeSync(fd);
        throw new TierSyncError(`kvEvents.sequenceFile: cannot open '${o.sequenceFile}': ${(e as Error).message}`, 'ERR_IO', { cause: e });
      }
    }
    const pub = new Publisher({ sendHighWaterMark: o.sendHighWaterMark, linger: 1000 });
    let router: Router | undefined;
    try {
      await bind(pub, o.endpoint, 'kvEvents.endpoint');
      if (o.replayEndpoint) {
        router = new Router({ linger: 1000 });
        await bind(router, o.replayEndpoint, 'kvEvents.replayEndpoint');
      }
    } catch (e) {
      pub.close();
      router?.close();
      if (fd !== undefined) closeSync(fd);
      throw e;
    }
    const p = new KvEventPublisher(o, pub, router, first, fd);
    if (router) p.#serving = p.#serveReplay(router);
    return p;
  }

  /** The endpoints bound (a `*` port resolved). */
  get endpoints(): { pub: string; replay: string | undefined } {
    return { pub: this.#pub.lastEndpoint ?? this.#o.endpoint, replay: this.#router ? (this.#router.lastEndpoint ?? this.#o.replayEndpoint) : undefined };
  }

  /** Sequence number the next batch gets. */
  get nextSeq(): number {
    return this.#next;
  }

  stats(): PublisherStats {
    return { lastSeq: this.#next - 1, oldestReplayable: this.#oldest(), ...this.#stats };
  }

  /** Publishes one batch now; returns its sequence number. */
  publish(events: readonly KvEvent[]): number {
    if (this.#closed) throw new TierSyncError('the KV event publisher is closed', 'ERR_CLOSED');
    const seq = this.#next++;
    const payload = this.#o.encoder.encodeBatch(Date.now() / 1000, events);
    this.#ring[seq % this.#ring.length] = payload;
    // After the ring, before the send: a restarted daemon never reuses a number a subscriber may have seen.
    if (this.#fd !== undefined) writeSync(this.#fd, seqFrame(this.#next), 0, 8, 0);
    this.#stats.batches++;
    this.#send([this.#topic, seqFrame(seq), payload]);
    return seq;
  }

  /** Stops replying, sends what is queued, closes the sockets and the sequence file. Safe to call twice. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    while (this.#sending) await this.#sending;
    this.#router?.close();
    await this.#serving?.catch(() => undefined);
    this.#pub.close();
    if (this.#fd !== undefined) closeSync(this.#fd);
    this.#fd = undefined;
  }

  #oldest(): number {
    return Math.max(this.#firstSeq, this.#next - this.#ring.length);
  }

  #send(frames: Buffer[]): void {
    this.#sendQueue.push(frames);
    this.#sending ??= (async () => {
      for (let f = this.#sendQueue.shift(); f; f = this.#sendQueue.shift()) {
        try {
          await this.#pub.send(f);
        } catch (e) {
          // PUB drops for slow subscribers by itself; an error here is the socket failing: the batch stays replayable.
          this.#stats.sendErrors++;
          this.#o.log.warn({ err: e }, 'KV event batch not sent');
        }
      }
    })().finally(() => (this.#sending = undefined));
  }

  async #serveReplay(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        try {
          await this.#answer(router, frames);
        } catch (e) {
          if (this.#closed) return;
          this.#o.log.warn({ err: e }, 'KV event replay request failed');
        }
      }
    } catch (e) {
      if (!this.#closed) this.#o.log.error({ err: e }, 'KV event replay socket failed');
    }
  }

  /** One request: `[identity, "", seq(8)]` (REQ, or DEALER with an empty delimiter) or `[identity, seq(8)]` (bare DEALER). */
  async #answer(router: Router, frames: Buffer[]): Promise<void> {
    const id = frames[0]!;
    const delimited = frames.length === 3 && frames[1]!.length === 0;
    const seqBytes = delimited ? frames[2]! : frames.length === 2 ? frames[1]! : undefined;
    if (!seqBytes || seqBytes.length !== 8) {
      this.#o.log.warn({ frames: frames.length }, 'invalid KV event replay request (want [identity, "", 8-byte sequence])');
      return;
    }
    const reply = (seq: Buffer, payload: Buffer) => router.send(delimited ? [id, Buffer.alloc(0), seq, payload] : [id, seq, payload]);
    this.#o.flushPending();
    const start = seqBytes.readBigUInt64BE(0);
    const last = this.#next - 1;
    if (start === SNAPSHOT_REQUEST || start < BigInt(this.#oldest())) {
      // Older than the ring (or asked for): the state itself, under the number of the last batch it includes.
      this.#stats.snapshots++;
      await reply(seqFrame(last), this.#o.encoder.encodeBatch(Date.now() / 1000, this.#o.snapshot()));
    } else {
      this.#stats.replays++;
      // Taken from the ring now: batches published while the replies go out may overwrite its oldest entries.
      const batches: Array<[Buffer, Buffer]> = [];
      for (let s = Number(start); s <= last; s++) batches.push([seqFrame(s), this.#ring[s % this.#ring.length]!]);
      for (const [seq, payload] of batches) await reply(seq, payload);
    }
    await reply(END_SEQ, Buffer.alloc(0));
  }
}

async function bind(socket: Publisher | Router, endpoint: string, field: string): Promise<void> {
  try {
    await socket.bind(endpoint);
  } catch (e) {
    throw new TierSyncError(`${field}: cannot bind ${endpoint}: ${(e as Error).message}`, 'ERR_UNAVAILABLE', { cause: e });
  }
}
