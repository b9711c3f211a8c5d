/**
 * MRU: Most Recently Used.
 *
 * Chou and DeWitt, "An evaluation of buffer management strategies for relational database systems", VLDB'85,
 * where MRU is the right policy for repeated sequential scans larger than the cache (LRU then misses on every
 * access). Semantics match libCacheSim `MRU.c`: one recency list, new objects and hits go to the head, the victim
 * is the head (the object requested last). Pinned objects are passed over in place: the victim is the most
 * recently used unpinned object.
 */
import { RecencyListPolicy } from './recency-list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Most Recently Used. O(1) access and insert; eviction O(1) plus the pinned objects it passes. */
export class MruPolicy<K extends PolicyKey = PolicyKey> extends RecencyListPolicy<K> {
  override readonly name = 'mru';

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options, 'head');
  }
}
