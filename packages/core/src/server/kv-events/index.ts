/**
 * The daemon's KV event stream: every page reaching or leaving any tier, published on ZeroMQ in vLLM's kv_events
 * schema (msgpack), with gap-free sequence numbers, replay and snapshots. See docs/SERVE.md, KV events.
 */
export { KvEvents, DEFAULT_MEDIA, type KvEventsStats, type KvEventsStartOptions } from './kv-events.js';
export { kvEventsConfigSchema, type KvEventsConfig, type ResolvedKvEventsConfig } from './config.js';
export { KvEventEncoder, wireHash, seqFrame, END_SEQ, type HashForm, type KvEvent, type BlockStoredEvent, type BlockRemovedEvent, type AllBlocksClearedEvent, type WireHash } from './wire.js';
export { SNAPSHOT_REQUEST, type PublisherStats } from './publisher.js';
