/**
 * Intrusive doubly linked lists over dense slot ids, with the links in two shared Uint32Arrays (a slot is on at
 * most one list at a time, so several lists share one pair of arrays).
 *
 * Orientation follows libCacheSim: new entries go to the head; `next` points towards the tail (older), `prev`
 * towards the head (newer). Eviction scans start at the tail and walk `prev`.
 */

/** Index of a slot in a policy's typed arrays. */
export type SlotId = number & { readonly __brand: 'SlotId' };

/** The null link. Slot ids stay below it. */
export const NIL = 0xffff_ffff as SlotId;

/** Head, tail and length of one list. */
export interface List {
  head: SlotId;
  tail: SlotId;
  length: number;
}

export function emptyList(): List {
  return { head: NIL, tail: NIL, length: 0 };
}

export function clearList(list: List): void {
  list.head = NIL;
  list.tail = NIL;
  list.length = 0;
}

/** Returns a copy of `array` with length `size` (contents kept, the rest filled with `fill`). */
export function resizeUint32(array: Uint32Array, size: number, fill = 0): Uint32Array {
  const out = new Uint32Array(size);
  out.set(array.subarray(0, Math.min(array.length, size)));
  if (fill !== 0 && size > array.length) out.fill(fill, array.length);
  return out;
}

export function resizeUint8(array: Uint8Array, size: number): Uint8Array {
  const out = new Uint8Array(size);
  out.set(array.subarray(0, Math.min(array.length, size)));
  return out;
}

export function resizeFloat64(array: Float64Array, size: number): Float64Array {
  const out = new Float64Array(size);
  out.set(array.subarray(0, Math.min(array.length, size)));
  return out;
}

/** The shared link arrays. */
export class Links {
  next: Uint32Array;
  prev: Uint32Array;

  constructor(slots: number) {
    this.next = new Uint32Array(slots).fill(NIL);
    this.prev = new Uint32Array(slots).fill(NIL);
  }

  grow(slots: number): void {
    this.next = resizeUint32(this.next, slots, NIL);
    this.prev = resizeUint32(this.prev, slots, NIL);
  }

  /** The neighbour towards the head (newer), or NIL. */
  newer(slot: SlotId): SlotId {
    return this.prev[slot] as SlotId;
  }

  /** The neighbour towards the tail (older), or NIL. */
  older(slot: SlotId): SlotId {
    return this.next[slot] as SlotId;
  }

  pushHead(list: List, slot: SlotId): void {
    this.prev[slot] = NIL;
    this.next[slot] = list.head;
    if (list.head === NIL) list.tail = slot;
    else this.prev[list.head] = slot;
    list.head = slot;
    list.length++;
  }

  unlink(list: List, slot: SlotId): void {
    const newer = this.prev[slot] as SlotId;
    const older = this.next[slot] as SlotId;
    if (newer === NIL) list.head = older;
    else this.next[newer] = older;
    if (older === NIL) list.tail = newer;
    else this.prev[older] = newer;
    this.prev[slot] = NIL;
    this.next[slot] = NIL;
    list.length--;
  }

  moveToHead(list: List, slot: SlotId): void {
    if (list.head === slot) return;
    this.unlink(list, slot);
    this.pushHead(list, slot);
  }
}
