/**
 * Where keys are: the segment and slot of each key of a batch, in three passes that each do less than the next.
 *
 * 1. Trusted strings: a key string equal to one already checked for that slot (Segment.names) is that slot. The
 *    next key of a chain is tried at the next slot first, so a cached chain costs one string comparison per key.
 * 2. Bytes: the keys left are validated and decoded once as a batch (key-batch.ts), then matched by bytes: a key
 *    found in a segment is followed by as many of the next keys as continue it, compared in one memcmp; other keys
 *    are looked up in the anchor directory (anchor-directory.ts) among cached segments.
 * 3. Segments not cached that the directory names for the keys still left are read (a few queries, each segment
 *    one row of keys), and the keys matched as in 2. A key whose anchor the directory lacks is absent: no SQL.
 * A key is in at most one slot of the whole index (stores reuse a key's old slot), so the first match is the only one.
 */
import { entrySegment, entrySlot } from './anchor-directory.js';
import { type KeyBatch, ANCHOR_BYTES, anchorNumber, anchorNumberOfHex, bytesEqual, decodeKeys } from './key-batch.js';
import type { Segment, SegmentStore } from './segments.js';

/** Longest range of slots sharing one anchor in a chain (keys/page-keys.ts ANCHOR_SPAN). */
const ANCHOR_SPAN = 64;

export interface Located {
  /** Segment of key i (index in the located range), or undefined: in no segment. */
  segs: Array<Segment | undefined>;
  slots: Int32Array;
  /**
   * The keys that were decoded: those from range index `batchFrom` on (every key after the first one not matched
   * as a trusted string), so batch key b is range index batchFrom + b.
   */
  batch: KeyBatch | undefined;
  batchFrom: number;
}

function scanNames(seg: Segment, slot0: number, key: string): number {
  const end = Math.min(seg.count, slot0 + ANCHOR_SPAN);
  for (let s = slot0; s < end; s++) if (seg.names[s] === key) return s;
  return -1;
}

function scanBytes(seg: Segment, slot0: number, bytes: Uint8Array, o: number, w: number): number {
  if (seg.width !== w) return -1;
  for (let s = slot0; s < seg.count; s++) {
    const so = s * w;
    if (!bytesEqual(seg.keys, so, bytes, o, ANCHOR_BYTES)) break;
    if (bytesEqual(seg.keys, so, bytes, o, w)) return s;
  }
  return -1;
}

/** The slot findByName found (a second return value, so the hot loop allocates nothing). */
let foundSlot = -1;

/** The cached segment holding the key string `key` under a checked name (then at `foundSlot`), or undefined. */
function findByName(store: SegmentStore, key: string): Segment | undefined {
  const e = store.directory.get(anchorNumberOfHex(key));
  if (e === undefined) return undefined;
  const n = typeof e === 'number' ? 1 : e.length;
  for (let i = 0; i < n; i++) {
    const p = typeof e === 'number' ? e : e[i]!;
    const sg = store.peek(entrySegment(p));
    const s = sg === undefined ? -1 : scanNames(sg, entrySlot(p), key);
    if (s >= 0) {
      foundSlot = s;
      return sg;
    }
  }
  return undefined;
}

/**
 * Locates keys[from .. to).
 * @param name names key i (an index into `keys`) in an error message.
 * @param byName false to skip pass 1 (stores: their keys are mostly new, and are decoded anyway to be inserted).
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming the first malformed key among those not matched as trusted.
 */
export function locate(store: SegmentStore, keys: readonly unknown[], from: number, to: number, name: (i: number) => string, byName = true): Located {
  const n = to - from;
  const segs = new Array<Segment | undefined>(n);
  const slots = new Int32Array(n).fill(-1);
  let seg: Segment | undefined;
  let slot = -1;
  // Pass 1 ends at the first key not matched by name: that key and all after it go to the bytes pass, which
  // matches runs of keys with one memcmp (cheaper than looking each key up by its anchor characters here).
  let r0 = byName ? n : 0;
  for (let j = 0; j < r0; j++) {
    const k = keys[from + j];
    if (seg !== undefined && slot + 1 < seg.count && seg.names[slot + 1] === k) {
      segs[j] = seg;
      slots[j] = ++slot;
      continue;
    }
    // (No closure over the loop's variables here: V8 would allocate a context for every key.)
    seg = typeof k === 'string' ? findByName(store, k) : undefined;
    if (seg === undefined) {
      r0 = j;
      break;
    }
    slot = foundSlot;
    store.cached(seg.id);
    segs[j] = seg;
    slots[j] = slot;
  }
  if (r0 === n) return { segs, slots, batch: undefined, batchFrom: n };

  const batch = decodeKeys(keys, (b) => name(from + r0 + b), from + r0, to);
  const { bytes, off } = batch;
  const found = new Uint8Array(batch.n);

  /**
   * Key b is at (sg, s): records it, then as many of the next batch keys as continue it (the next slot, same
   * width), checked with one comparison of their bytes. Returns the last batch index matched.
   */
  const matchRun = (b: number, sg: Segment, s: number): number => {
    store.cached(sg.id);
    segs[r0 + b] = sg;
    slots[r0 + b] = s;
    found[b] = 1;
    const w = sg.width;
    let e = b + 1;
    while (e < batch.n && s + (e - b) < sg.count && off[e + 1]! - off[e]! === w && !found[e]) e++;
    if (e === b + 1) return b;
    const t0 = (s + 1) * w;
    const len = off[e]! - off[b + 1]!;
    if ((bytes as Buffer).compare(sg.keys, t0, t0 + len, off[b + 1]!, off[e]!) !== 0) return b;
    for (let i = b + 1; i < e; i++) {
      segs[r0 + i] = sg;
      slots[r0 + i] = s + (i - b);
      found[i] = 1;
    }
    return e - 1;
  };
  /**
   * Tries key b at the slot after the previous key, then in the cached segments the directory lists for its anchor.
   * Returns the last batch index matched (matchRun), -1 when no cached segment holds it.
   */
  const tryBytes = (b: number, entries: number | readonly number[]): number => {
    const j = r0 + b;
    const o = off[b]!;
    const w = off[b + 1]! - o;
    if (j > 0) {
      const ps = segs[j - 1];
      const pslot = slots[j - 1]! + 1;
      if (ps !== undefined && pslot < ps.count && ps.width === w && bytesEqual(ps.keys, pslot * w, bytes, o, w)) return matchRun(b, ps, pslot);
    }
    if (typeof entries === 'number') {
      const c = store.peek(entrySegment(entries));
      const s = c === undefined ? -1 : scanBytes(c, entrySlot(entries), bytes, o, w);
      return s < 0 ? -1 : matchRun(b, c!, s);
    }
    for (const p of entries) {
      const c = store.peek(entrySegment(p));
      const s = c === undefined ? -1 : scanBytes(c, entrySlot(p), bytes, o, w);
      if (s >= 0) return matchRun(b, c!, s);
    }
    return -1;
  };
  // Keys in cached segments are matched now; keys whose anchor the directory lacks are absent (a run of keys with
  // one anchor is skipped with 8-byte compares); the rest wait for the segments the directory names.
  const pending: number[] = [];
  const pendingEntries: Array<number | readonly number[]> = [];
  /** Pending keys not yet tried against the cached segments (taken by the shortcut below). */
  let untried = false;
  const need: number[] = [];
  for (let b = 0; b < batch.n; ) {
    if (found[b]) {
      b++;
      continue;
    }
    const o = off[b]!;
    const np = pending.length;
    // A key with the anchor of the pending key just before it: same directory entries, segments already asked for.
    if (np > 0 && pending[np - 1] === b - 1 && off[b + 1]! - o >= ANCHOR_BYTES && bytesEqual(bytes, off[b - 1]!, bytes, o, ANCHOR_BYTES)) {
      pending.push(b);
      pendingEntries.push(pendingEntries[np - 1]!);
      untried = true;
      b++;
      continue;
    }
    const entries = store.directory.get(anchorNumber(bytes, o));
    if (entries === undefined) {
      let e = b + 1;
      while (e < batch.n && !found[e] && off[e + 1]! - off[e]! >= ANCHOR_BYTES && bytesEqual(bytes, o, bytes, off[e]!, ANCHOR_BYTES)) e++;
      b = e;
      continue;
    }
    const last = tryBytes(b, entries);
    if (last >= 0) {
      b = last + 1;
      continue;
    }
    pending.push(b);
    pendingEntries.push(entries);
    const ne = typeof entries === 'number' ? 1 : entries.length;
    for (let i = 0; i < ne; i++) {
      const id = entrySegment(typeof entries === 'number' ? entries : entries[i]!);
      if (store.peek(id) === undefined && !need.includes(id)) need.push(id);
    }
    b++;
  }
  if (need.length || untried) {
    if (need.length) store.load(need);
    pending.forEach((b, i) => {
      if (!found[b]) tryBytes(b, pendingEntries[i]!);
    });
  }
  // Keys matched by bytes are now checked strings for their slot.
  for (let b = 0; b < batch.n; b++) {
    const j = r0 + b;
    const sg = segs[j];
    if (sg) sg.names[slots[j]!] = keys[from + j] as string;
  }
  return { segs, slots, batch, batchFrom: r0 };
}
