/**
 * Wrappers: policies that add what the caller knows of its pages (their chains, their sessions) to any policy's
 * victim order. Each is an {@link EvictionPolicy} over an inner one, so they nest and plug in wherever a policy
 * does; by name as `prefix-aware:<policy>`, `prefix-hold:<policy>` and `session-aware:<policy>` (registry.ts).
 */
export { PrefixAwarePolicy } from './prefix-aware.js';
export { PrefixHoldPolicy } from './prefix-hold.js';
export { SessionAwarePolicy, type SessionAwareOptions } from './session-aware.js';
export { evictFrom } from './evict-from.js';
