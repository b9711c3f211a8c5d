/**
 * Where keys are: the segment and slot of each key of a batch, in three passes that each do less than the next.
 *
 * 1. Trusted strings: a key string equal to one already checked for that slot (Segment.names) is that slot. The
 *    next key of a chain is tried at the next slot first, so a cached chain costs one string comparison per key.
 * 2. Bytes: the keys left are validated and decoded once as a batch (key-batch.ts), then matched by bytes against
 *    the next slot and the cached segments holding their anchor.
 * 3. SQL: the anchors of the keys still left are read in one IN query, their segments loaded (a few queries, each
 *    segment one row of keys), and the keys matched as in 2.
 * A key is in at most one slot of the whole index (stores reuse a key's old slot), so the first match is the only one.
 */
import { type KeyBatch, ANCHOR_BYTES, anchorNumber, anchorNumberOfHex, bytesEqual, decodeKeys } from './key-batch.js';
import type { Segment, SegmentStore } from './segments.js';

/** Longest range of slots sharing one anchor in a chain (keys/page-keys.ts ANCHOR_SPAN). */
const ANCHOR_SPAN = 64;

export interface Located {
  /** Segment of key i (index in the located range), or undefined: in no segment. */
  segs: Array<Segment | undefined>;
  slots: Int32Array;
  /** The keys that were decoded (all those not matched as trusted strings), and which range index each is. */
  batch: KeyBatch | undefined;
  batchIndex: Int32Array | undefined;
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

/**
 * Locates keys[from .. to).
 * @param name names key i (an index into `keys`) in an error message.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming the first malformed key among those not matched as trusted.
 */
export function locate(store: SegmentStore, keys: readonly unknown[], from: number, to: number, name: (i: number) => string): Located {
  const n = to - from;
  const segs = new Array<Segment | undefined>(n);
  const slots = new Int32Array(n).fill(-1);
  const rest: number[] = [];
  let seg: Segment | undefined;
  let slot = -1;
  let missAnchor = '';
  for (let j = 0; j < n; j++) {
    const k = keys[from + j];
    if (seg !== undefined && slot + 1 < seg.count && seg.names[slot + 1] === k) {
      segs[j] = seg;
      slots[j] = ++slot;
      continue;
    }
    seg = undefined;
    if (typeof k !== 'string' || (missAnchor !== '' && k.startsWith(missAnchor))) {
      rest.push(j);
      continue;
    }
    const cands = store.cachedAnchor(anchorNumberOfHex(k));
    if (cands) {
      for (const c of cands) {
        const s = scanNames(c.seg, c.slot, k);
        if (s >= 0) {
          seg = c.seg;
          slot = s;
          break;
        }
      }
    }
    if (seg === undefined) {
      missAnchor = k.substring(0, 16);
      rest.push(j);
      continue;
    }
    missAnchor = '';
    store.cached(seg.id);
    segs[j] = seg;
    slots[j] = slot;
  }
  if (!rest.length) return { segs, slots, batch: undefined, batchIndex: undefined };

  const batch = decodeKeys(
    rest.map((j) => keys[from + j]),
    (b) => name(from + rest[b]!),
  );
  const batchIndex = Int32Array.from(rest);
  const { bytes, off } = batch;
  const pending: number[] = [];
  const tryBytes = (b: number, prev: number): boolean => {
    const j = rest[b]!;
    const o = off[b]!;
    const w = off[b + 1]! - o;
    // The next slot after the previous key (located by any pass).
    if (prev >= 0) {
      const ps = segs[prev];
      const pslot = slots[prev]! + 1;
      if (ps !== undefined && pslot < ps.count && ps.width === w && bytesEqual(ps.keys, pslot * w, bytes, o, w)) {
        segs[j] = ps;
        slots[j] = pslot;
        return true;
      }
    }
    const cands = store.cachedAnchor(anchorNumber(bytes, o));
    if (cands) {
      for (const c of cands) {
        const s = scanBytes(c.seg, c.slot, bytes, o, w);
        if (s >= 0) {
          segs[j] = c.seg;
          slots[j] = s;
          return true;
        }
      }
    }
    return false;
  };
  for (let b = 0; b < batch.n; b++) if (!tryBytes(b, rest[b]! - 1)) pending.push(b);

  if (pending.length) {
    // Distinct anchors of the keys left (a chain repeats its anchor up to 64 times in a row).
    const anchors: Uint8Array[] = [];
    let last = -1;
    for (const b of pending) {
      const o = off[b]!;
      if (last >= 0 && bytesEqual(bytes, off[last]!, bytes, o, ANCHOR_BYTES)) continue;
      last = b;
      anchors.push(bytes.subarray(o, o + ANCHOR_BYTES));
    }
    const rows = store.anchorRows(anchors);
    if (rows.length) {
      const loaded = store.load(rows.map((r) => r.seg));
      for (const b of pending) {
        if (tryBytes(b, rest[b]! - 1)) continue;
        const o = off[b]!;
        const w = off[b + 1]! - o;
        const j = rest[b]!;
        for (const r of rows) {
          const sg = loaded.get(r.seg);
          if (!sg) continue;
          const s = scanBytes(sg, r.slot, bytes, o, w);
          if (s >= 0) {
            segs[j] = sg;
            slots[j] = s;
            break;
          }
        }
      }
    }
  }
  // Keys matched by bytes are now checked strings for their slot.
  for (let b = 0; b < batch.n; b++) {
    const j = rest[b]!;
    const sg = segs[j];
    if (sg) sg.names[slots[j]!] = keys[from + j] as string;
  }
  return { segs, slots, batch, batchIndex };
}
