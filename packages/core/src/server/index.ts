/**
 * The `tiersync serve` daemon: TierSyncServer (hierarchy + peer endpoint + HTTP control plane + dashboard), its
 * config (YAML/JSON, zod) and the Redis cluster registry.
 */
export { TierSyncServer, type ServerStartOptions, type ServerStats } from './server.js';
export { ClusterRegistry, type HolderAnswer, type NodeInfo, type RegistryOptions, type RegistryStats } from './registry.js';
export { defaultDataDir, defaultServerConfig, loadServerConfig, parseServerConfig, serverConfigSchema, isLoopback, type ResolvedServerConfig, type ServerConfig } from './config.js';
export { ServerMetrics } from './metrics.js';
