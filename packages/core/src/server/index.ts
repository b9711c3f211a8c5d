/**
 * The `tiersync serve` daemon: TierSyncServer (hierarchy + peer endpoint + HTTP control plane + dashboard), its
 * config (YAML/JSON, zod) and the Redis cluster registry.
 */
export { TierSyncServer, type ServerStartOptions, type ServerStats } from './server.js';
export { ClusterRegistry, type HolderAnswer, type NodeInfo, type RegistryOptions, type RegistryStats } from './registry.js';
export { defaultDataDir, defaultServerConfig, loadServerConfig, parseServerConfig, serverConfigSchema, isLoopback, type ResolvedServerConfig, type ServerConfig } from './config.js';
export { applyEnvOverrides, configJsonSchema, ENV_OVERRIDES } from './config.js';
export { ServerMetrics } from './metrics.js';
export { openApiDocument } from './openapi.js';
export { startDaemonProcess, type DaemonProcess } from './daemon-process.js';
// The schema only: the KV-events publisher itself (zeromq) is loaded by the server when the config turns it on.
export { kvEventsConfigSchema, type KvEventsConfig, type ResolvedKvEventsConfig } from './kv-events/config.js';
export { fuzzRespParser, type RespFuzzOptions, type RespFuzzReport } from './resp/index.js';
