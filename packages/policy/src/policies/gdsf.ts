/**
 * GDSF: Greedy-Dual-Size-Frequency.
 *
 * Cherkasova, "Improving WWW proxies performance with Greedy-Dual-Size-Frequency caching policy", HP Labs
 * HPL-98-69, 1998 (after Cao and Irani's GreedyDual-Size, USITS'97). Each object has a priority
 * `H = L + frequency x cost / size`; the victim has the lowest H and the clock `L` becomes the victim's H, so objects
 * not requested for a while age out. Semantics match libCacheSim `GDSF.cpp` (cost 1e6, the constant it uses):
 *
 * - insert: frequency 1, `H = L + 1e6 / size`; a hit: frequency + 1, `H = L + frequency x 1e6 / size` with the
 *   current L (the same double arithmetic);
 * - the victim has the lowest H; ties go to the object inserted or hit longest ago (libCacheSim orders equal
 *   priorities by the request time of their last update);
 * - `size` is the object's cost: bytes, or 1 in objects mode (libCacheSim `ignore_obj_size`), where GDSF ranks
 *   by `L + frequency`.
 *
 * Pinned objects leave the ranking while pinned and come back with the priority they had.
 */
import { AgedHeapPolicy } from './aged-heap.js';
import type { PolicyKey, PolicyOptions } from '../types.js';

/** The cost libCacheSim's GDSF gives every object. */
const COST = 1.0e6;

/** Greedy-Dual-Size-Frequency. O(log n) per request. */
export class GdsfPolicy<K extends PolicyKey = PolicyKey> extends AgedHeapPolicy<K> {
  override readonly name = 'gdsf';

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: PolicyOptions) {
    super(options);
  }

  /** Priority H of a resident object, `undefined` when absent. */
  priorityOf(key: K): number | undefined {
    return this.priorityAt(key);
  }

  protected override worth(freq: number, cost: number): number {
    return (freq * COST) / cost;
  }
}
