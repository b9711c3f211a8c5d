/**
 * @tiersync/core/client: store, look up and load KV pages through a `tiersync serve` daemon in another process,
 * through shared memory on the same host (no page bytes over a socket) or over the peer protocol from elsewhere.
 */
export { TierSyncClient, type ClientOptions, type ClientStoreResult, type ClientLookupResult, type ClientLoadResult, type Hello, type PageLocation } from './client.js';
