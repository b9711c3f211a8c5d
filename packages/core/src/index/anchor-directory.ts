/**
 * Where every key anchor of every segment starts, in memory: anchor number (key-batch.ts anchorNumber) -> the
 * segments and slots whose range of keys with that anchor starts there. Finding the segment of a key is one map
 * read, cached or not, and storing a segment adds entries here instead of writing index rows at random places in
 * a B-tree (schema v6). Built at open from the segments' `anchors` column; kept in step by the segment store's
 * inserts and deletes.
 *
 * Size: one entry per 64 pages of a chain (keys/page-keys.ts ANCHOR_SPAN), plus one per segment that starts inside
 * a range: about 16k entries for a million pages stored as 2,048-page chains.
 */
import { anchorNumber } from './key-batch.js';
import { ANCHOR_ENTRY, SEGMENT_PAGES } from './schema.js';

/** Packs a (segment id, slot) of the directory into one number (exact up to 2^53 / SEGMENT_PAGES segments). */
export const packEntry = (seg: number, slot: number): number => seg * SEGMENT_PAGES + slot;
export const entrySegment = (packed: number): number => Math.floor(packed / SEGMENT_PAGES);
export const entrySlot = (packed: number): number => packed % SEGMENT_PAGES;

export class AnchorDirectory {
  /** One packed entry, or several (anchors shared by consecutive segments of a chain, or equal 6-byte prefixes). */
  private readonly map = new Map<number, number | number[]>();

  get size(): number {
    return this.map.size;
  }

  /** The packed entries of `anchor`: a number, an array of them, or undefined. Do not modify the array. */
  get(anchor: number): number | readonly number[] | undefined {
    return this.map.get(anchor);
  }

  private add(anchor: number, packed: number): void {
    const cur = this.map.get(anchor);
    if (cur === undefined) this.map.set(anchor, packed);
    else if (typeof cur === 'number') this.map.set(anchor, [cur, packed]);
    else cur.push(packed);
  }

  private remove(anchor: number, packed: number): void {
    const cur = this.map.get(anchor);
    if (cur === undefined) return;
    if (typeof cur === 'number') {
      if (cur === packed) this.map.delete(anchor);
      return;
    }
    const kept = cur.filter((p) => p !== packed);
    this.map.set(anchor, kept.length === 1 ? kept[0]! : kept);
    if (kept.length === 0) this.map.delete(anchor);
  }

  /** Adds the entries of segment `seg` from its `anchors` column (schema.ts anchorsBlob). */
  addSegment(seg: number, anchors: Uint8Array): void {
    for (let o = 0; o + ANCHOR_ENTRY <= anchors.length; o += ANCHOR_ENTRY) this.add(anchorNumber(anchors, o), packEntry(seg, readU32(anchors, o + 8)));
  }

  /** Removes the entries of segment `seg`. */
  removeSegment(seg: number, anchors: Uint8Array): void {
    for (let o = 0; o + ANCHOR_ENTRY <= anchors.length; o += ANCHOR_ENTRY) this.remove(anchorNumber(anchors, o), packEntry(seg, readU32(anchors, o + 8)));
  }

  clear(): void {
    this.map.clear();
  }
}

const readU32 = (b: Uint8Array, o: number): number => (b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16)) + b[o + 3]! * 2 ** 24;
