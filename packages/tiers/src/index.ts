/**
 * @tiersync/tiers: tier drivers behind one TierDriver interface, chosen by URL scheme.
 */
export * from './driver.js';
export { createTier, tierSchemes } from './registry.js';
export { parseSize } from './url.js';
export { HbmTier, parseHbmUrl, type HbmTierConfig } from './hbm/index.js';
export { HostTier, parseHostUrl, shmHugePages, type HostTierConfig, type ShmHugePages } from './host/index.js';
export { PeerTier, parsePeerUrl, type PeerTierConfig } from './peer/index.js';
export { servePeer, type PeerServeOptions } from './peer/server.js';
export { FsTier, parseFsUrl, type FsTierConfig, type FsRecoveryReport } from './fs/index.js';
export { ObjectTier, parseObjectUrl, GCS_ENDPOINT, type ObjectTierConfig, type ObjectTierStats } from './object/index.js';
export { FaultTier, faultUrl, parseFaultUrl, type FaultPlan, type FaultCounts, type FaultTierConfig } from './fault/index.js';
export { S3FaultProxy, type S3Fault, type S3FaultRates, type S3ProxyLogEntry } from './fault/s3-proxy.js';
