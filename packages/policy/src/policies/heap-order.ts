/**
 * The first slots of a binary heap in pop order, without sorting the whole heap.
 */
import type { SlotHeap } from '../internal/slot-heap.js';
import type { SlotId } from '../internal/list.js';

/**
 * Calls `take` with the first `limit` slots of `heap` in the order `pop` would return them (the heap is unchanged).
 * A best-first walk of the heap's tree: the next slot is the first of a frontier of at most `limit + 1` slots, so a
 * short peek (what eviction planning and the chain-aware wrappers ask for) costs O(limit^2), not a sort of the heap.
 */
export function heapFirst(heap: SlotHeap, limit: number, take: (slot: SlotId) => void): void {
  const items = heap.items;
  const keys = heap.keys;
  if (items.length === 0 || limit <= 0) return;
  // Frontier of heap indices whose parents were taken.
  const frontier: number[] = [0];
  for (let n = 0; n < limit && frontier.length > 0; n++) {
    let best = 0;
    for (let i = 1; i < frontier.length; i++) if (keys.before(items[frontier[i]!]!, items[frontier[best]!]!)) best = i;
    const at = frontier[best]!;
    frontier[best] = frontier[frontier.length - 1]!;
    frontier.pop();
    take(items[at]! as SlotId);
    const left = 2 * at + 1;
    if (left < items.length) frontier.push(left);
    if (left + 1 < items.length) frontier.push(left + 1);
  }
}
