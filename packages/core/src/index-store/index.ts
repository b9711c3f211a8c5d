/** The block index: pages, copies, pins and namespaces in SQLite, with an LRU in front of lookups. */
export { BlockIndex } from './block-index.js';
export { SCHEMA_VERSION } from './schema.js';
export type * from './types.js';
