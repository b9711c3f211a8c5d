/** The block index: pages, copies, pins and namespaces in SQLite, with a cache of segments in front of lookups. */
export { BlockIndex } from './block-index.js';
export { SCHEMA_VERSION } from './schema.js';
export { IllegalTransitionError, TRANSITIONS, type Transition } from './copy-state.js';
export type * from './types.js';
