/**
 * @tiersync/core/client: store, look up and load KV pages through a `tiersync serve` daemon in another process,
 * through shared memory on the same host (no page bytes over a socket) or over the peer protocol from elsewhere.
 */
export { TierSyncClient, type ClientOptions, type ClientStoreResult, type ClientStoreOptions, type ClientLookupResult, type ClientLoadResult, type Hello, type PageLocation } from './client.js';
// The protocol the client speaks (shared with the daemon): its schemas, for validation or code generation elsewhere,
// and the error type a refused request is rethrown as (`code`, `field`).
export { CLIENT_FEATURES, CLIENT_PROTOCOL_VERSION, ProtocolError, clientOps, clientProtocolJsonSchema, type ClientOp, type ClientRequest, type ClientResponse, type ErrorBody } from '../protocol/index.js';
