/**
 * The wire format of the KV event stream: vLLM's `kv_events` schema, so consumers written for vLLM (llm-d's KV-cache
 * indexer, Dynamo's KV router, vLLM's own examples/online_serving/kv_events_subscriber.py) parse it unchanged.
 *
 * The schema, as vLLM defines it in vllm/distributed/kv_events.py (msgspec structs, msgpack-encoded):
 *
 *   class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
 *       ts: float; events: list[Any]; data_parallel_rank: int | None = None
 *   class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True)
 *   class BlockStored(KVCacheEvent):
 *       block_hashes: list[ExternalBlockHash]; parent_block_hash: ExternalBlockHash | None; token_ids: list[int]
 *       block_size: int; lora_id: int | None; medium: str | None; lora_name: str | None
 *   class BlockRemoved(KVCacheEvent): block_hashes: list[ExternalBlockHash]; medium: str | None
 *   class AllBlocksCleared(KVCacheEvent): pass
 *   class KVEventBatch(EventBatch): events: list[BlockStored | BlockRemoved | AllBlocksCleared]
 *
 * (ExternalBlockHash = bytes | int.) `array_like` makes every struct a msgpack array of its fields in declaration
 * order; `tag=True` puts the class name first. So on the wire:
 *
 *   KVEventBatch     [ts: float64, [event, ...]]                     (data_parallel_rank omitted: its default)
 *   BlockStored      ["BlockStored", [hash, ...], parent | nil, [token, ...], block_size, lora_id | nil, medium, lora_name | nil]
 *   BlockRemoved     ["BlockRemoved", [hash, ...], medium]
 *   AllBlocksCleared ["AllBlocksCleared"]
 *
 * msgspec reads an array_like struct with extra trailing elements by ignoring them and a shorter one by filling
 * defaults, so this layout is read by the releases before `medium` (which ignore medium and lora_name), by those
 * with medium and lora_name, and by later ones whose added fields (extra_keys, group_idx, ...) all have defaults.
 *
 * Each message on the PUB socket is three frames: topic, the batch's sequence number (8 bytes, big-endian), the
 * msgpack payload. Replay (ROUTER) answers `[identity, "", seq(8)]` with `[identity, "", seq(8), payload]` per
 * buffered batch from seq on, then `[identity, "", -1 (8 bytes), ""]`, as vLLM's ZmqEventPublisher does.
 *
 * Integers use msgpack's smallest form and floats float64, as msgspec writes them.
 */
import { Encoder } from '@msgpack/msgpack';
import type { PageKey } from '@tiersync/tiers';

/** How page keys become vLLM block hashes. */
export type HashForm =
  /** The low 64 bits of the key (its last 16 hex digits) as an unsigned integer: vLLM's default form (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1). */
  | 'int64'
  /** The whole key as msgpack bin (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 sends its 32-byte digests so). */
  | 'bytes';

/** A block hash as encoded: a number (safe integer), a bigint (above 2^53) or bytes. */
export type WireHash = number | bigint | Uint8Array;

export interface BlockStoredEvent {
  type: 'BlockStored';
  blockHashes: PageKey[];
  parentBlockHash: PageKey | null;
  /** Token ids of the blocks; tiersync pages record keys, not tokens, so the daemon sends none (documented). */
  tokenIds: readonly number[];
  blockSize: number;
  medium: string;
}

export interface BlockRemovedEvent {
  type: 'BlockRemoved';
  blockHashes: PageKey[];
  medium: string;
}

export interface AllBlocksClearedEvent {
  type: 'AllBlocksCleared';
}

export type KvEvent = BlockStoredEvent | BlockRemovedEvent | AllBlocksClearedEvent;

/** The end-of-replay marker's sequence frame: -1 as a signed 64-bit big-endian integer (vLLM's END_SEQ). */
export const END_SEQ = Buffer.alloc(8, 0xff);

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** A page key (hex) in the chosen hash form. */
export function wireHash(key: PageKey, form: HashForm): WireHash {
  if (form === 'bytes') return Buffer.from(key, 'hex');
  const low = BigInt(`0x${key.length > 16 ? key.slice(-16) : key}`);
  // Numbers get msgpack's smallest integer form, as msgspec writes Python ints; bigints are always 64-bit.
  return low <= MAX_SAFE ? Number(low) : low;
}

/** Sequence number frame: 8 bytes, big-endian. */
export function seqFrame(seq: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(seq));
  return b;
}

/** Encodes KVEventBatch payloads. One instance per publisher (it reuses its buffer). */
export class KvEventEncoder {
  readonly #form: HashForm;
  readonly #encoder = new Encoder({ useBigInt64: true });

  constructor(form: HashForm) {
    this.#form = form;
  }

  /** The msgpack payload of one batch: `[ts, [events]]`, ts in seconds since the epoch. */
  encodeBatch(ts: number, events: readonly KvEvent[]): Buffer {
    const head = Buffer.alloc(10);
    head[0] = 0x92; // fixarray of 2: ts, events
    // ts is a float field: always float64, even when the value is whole (msgpack would otherwise pick an int).
    head[1] = 0xcb;
    head.writeDoubleBE(ts, 2);
    const body = this.#encoder.encode(events.map((e) => this.#event(e)));
    return Buffer.concat([head, body]);
  }

  #event(e: KvEvent): unknown[] {
    const h = (k: PageKey) => wireHash(k, this.#form);
    switch (e.type) {
      case 'BlockStored':
        // lora_id and lora_name: tiersync pages carry no LoRA adapter (the namespace covers the model).
        return ['BlockStored', e.blockHashes.map(h), e.parentBlockHash === null ? null : h(e.parentBlockHash), [...e.tokenIds], e.blockSize, null, e.medium, null];
      case 'BlockRemoved':
        return ['BlockRemoved', e.blockHashes.map(h), e.medium];
      case 'AllBlocksCleared':
        return ['AllBlocksCleared'];
    }
  }
}
