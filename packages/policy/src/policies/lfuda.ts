/**
 * LFUDA: LFU with Dynamic Aging.
 *
 * Arlitt, Cherkasova, Dilley, Friedrich, Jin, "Evaluating content management techniques for Web proxy caches",
 * ACM SIGMETRICS Performance Evaluation Review 27(4), 2000 (the policy of Squid's `heap LFUDA`). Written from the
 * paper: each object has a key `K = F + L`, where F counts its requests since it entered the cache (1 on insert, +1
 * per hit, K recomputed with the current L) and L is the cache age, the key of the last victim (0 at start); the
 * victim has the lowest K, ties going to the object inserted or hit longest ago. Aging lets once-popular objects
 * leave, which plain LFU never does. Sizes do not enter the key (GDSF is the size-aware sibling; in objects mode
 * the two rank alike).
 *
 * libCacheSim's `LFUDA.c` differs on a hit (`K = K + L` instead of `F + 1 + L`) and moves its bucket cursor L only
 * upwards past the object being hit, which can leave objects below L that it then never evicts; its asserted
 * counts (test_evictionAlgo.c `test_LFUDA`) are therefore not claimed here.
 *
 * Pinned objects leave the ranking while pinned and come back with the key they had.
 */
import { AgedHeapPolicy } from './aged-heap.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** LFU with dynamic aging. O(log n) per request. */
export class LfudaPolicy<K extends PolicyKey = PolicyKey> extends AgedHeapPolicy<K> {
  override readonly name = 'lfuda';

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
  }

  /** Key K of a resident object, `undefined` when absent. */
  keyValueOf(key: K): number | undefined {
    return this.priorityAt(key);
  }

  protected override worth(freq: number): number {
    return freq;
  }
}
