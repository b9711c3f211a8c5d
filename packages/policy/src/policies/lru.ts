/**
 * LRU: Least Recently Used.
 *
 * The textbook policy (e.g. Mattson et al., "Evaluation techniques for storage hierarchies", IBM Systems Journal
 * 9(2), 1970, where LRU's stack property is introduced). Semantics match libCacheSim `LRU.c`: a hit moves the
 * object to the head; new objects enter at the head; the victim is the tail (least recently used).
 * Pinned objects are passed over in place: the victim is the least recently used unpinned object.
 */
import { RecencyListPolicy } from './recency-list.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** Least Recently Used. O(1) access and insert; eviction O(1) plus the pinned objects it passes. */
export class LruPolicy<K extends PolicyKey = PolicyKey> extends RecencyListPolicy<K> {
  override readonly name = 'lru';

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options, 'tail');
  }
}
