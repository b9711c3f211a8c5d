/**
 * Segments in memory: the decoded rows of one stored chain (keys, per-page data, per-tier copy bytes), the cache of
 * recently used segments in front of SQLite, and writing changed segments back.
 *
 * The cache is write-through: every change is made to the cached segment and written by `flush` in the same
 * transaction; a rolled-back transaction clears the cache (and reloads the anchor directory). It is bounded by pages
 * held (an LRU of segments). The anchor directory (anchor-directory.ts) knows every segment's anchors, cached or
 * not, so a key's segment is found without SQL, and only segments not cached are read.
 * Lifetimes: a segment object stays valid while an operation uses it; eviction happens only in `trim`, between
 * operations, so one operation never sees two objects for one segment.
 */
import { AnchorDirectory } from './anchor-directory.js';
import type { Connection } from './connection.js';
import { STATE_MASK } from './copy-state.js';
import { hexOf } from './key-batch.js';
import { TIER_CODES, anchorsBlob } from './schema.js';
import type { TierTable } from './tiers.js';
import type { PageHit } from './types.js';

/** The copies of one segment on one tier. */
export interface TierCopies {
  /** One copy byte per page (copy-state.ts). */
  states: Uint8Array;
  /** Per-page locations; null entries (or a null list) mean the page's key. */
  locations: Array<string | null> | null;
  updated: number;
  /** The copies row exists in the database. */
  stored: boolean;
  /** A locations row exists in the database. */
  locStored: boolean;
  dirty: boolean;
  locDirty: boolean;
}

/** Copies read from the database: the locations row (JSON) is parsed when first read; lookups never read it. */
class StoredCopies implements TierCopies {
  private list: Array<string | null> | null | undefined = null;
  private raw: string | null = null;
  stored = true;
  locStored = false;
  dirty = false;
  locDirty = false;
  constructor(
    public states: Uint8Array,
    public updated: number,
  ) {}

  /** The JSON of the locations row. */
  setRaw(json: string): void {
    this.raw = json;
    this.list = undefined;
    this.locStored = true;
  }

  get locations(): Array<string | null> | null {
    if (this.list === undefined) this.list = JSON.parse(this.raw!) as Array<string | null>;
    return this.list;
  }

  set locations(list: Array<string | null> | null) {
    this.list = list;
  }
}

export interface Segment {
  readonly id: number;
  readonly ns: number;
  readonly count: number;
  /** Bytes per key. */
  readonly width: number;
  /** Position of the first page, or ROOTS_POSITION: every page is a root (no parent, position 0), see schema.ts. */
  readonly position: number;
  /** Parent key of the first page, or null. */
  readonly parent: Uint8Array | null;
  readonly keys: Uint8Array;
  /** The segment's `anchors` column (schema.ts anchorsBlob): its entries in the anchor directory. */
  readonly anchors: Uint8Array;
  readonly createdMs: number;
  lengths: Uint32Array;
  crcs: Uint32Array;
  /** One byte per page, 1 when crcs[s] is known; null: all known. */
  crcKnown: Uint8Array | null;
  /** Null until the first change: every page created at createdMs. */
  created: Float64Array | null;
  /** Null until the first touch: last access = created, no hits. */
  access: Float64Array | null;
  hits: Uint32Array | null;
  dataDirty: boolean;
  /** Copies per tier, by tier rank. */
  copies: Array<TierCopies | undefined>;
  /**
   * Key strings a caller passed for a slot and that were checked (decoded and found equal to the slot's bytes): a
   * later call passing an equal string is matched by string comparison, without decoding it again.
   */
  names: Array<string | undefined>;
  /** Lookup answers per slot: undefined not computed, null no ready copy. Cleared by every state change. */
  answers: Array<PageHit | null | undefined>;
}

/** A segment's row sets, as read from the database. */
const SEG_COLUMNS = 'id, ns, count, width, position, created_ms, parent, anchors, keys';

const u32view = (b: Buffer | null, count: number): Uint32Array => {
  const out = new Uint32Array(count);
  if (b && b.length) out.set(new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + count * 4)));
  return out;
};
const f64view = (b: Buffer, count: number): Float64Array | null => (b.length ? new Float64Array(b.buffer.slice(b.byteOffset, b.byteOffset + count * 8)) : null);
const blob = (a: ArrayBufferView | null): Buffer => (a ? Buffer.from(a.buffer, a.byteOffset, a.byteLength) : Buffer.alloc(0));

/** The `lengths` column: one u32le when every page has the same length (a store of one layout), else one per page. */
export function lengthsBlob(lengths: Uint32Array): Buffer {
  const n = lengths.length;
  const first = lengths[0];
  let same = n > 1;
  for (let i = 1; same && i < n; i++) same = lengths[i] === first;
  return same ? blob(lengths.subarray(0, 1)) : blob(lengths);
}

/** Decodes a `lengths` column (lengthsBlob) of a segment of `count` pages. */
export function lengthsOf(b: Buffer, count: number): Uint32Array {
  if (count > 1 && b.length === 4) return new Uint32Array(count).fill(b.readUInt32LE(0));
  return u32view(b, count);
}

export class SegmentStore {
  private readonly cache = new Map<number, Segment>();
  /** Every segment's anchors (cached or not). */
  readonly directory = new AnchorDirectory();
  private cachedPages = 0;
  /** Id of the next segment stored (ids only grow within a process). */
  private nextId: number;

  constructor(
    private readonly conn: Connection,
    private readonly tiers: TierTable,
    private readonly maxPages: number,
  ) {
    this.nextId = (conn.stmt('SELECT coalesce(max(id), 0) AS n FROM segments').get() as { n: number }).n + 1;
    this.loadDirectory();
  }

  /** Fills the anchor directory from every segment's anchors column (reads no keys). */
  private loadDirectory(): void {
    this.directory.clear();
    for (const [id, anchors] of this.conn.stmt('SELECT id, anchors FROM segments').raw().iterate() as IterableIterator<[number, Buffer]>) this.directory.addSegment(id, anchors);
  }

  get size(): number {
    return this.cachedPages;
  }

  get max(): number {
    return this.maxPages;
  }

  /** A cached segment (moved to the LRU's young end). */
  cached(id: number): Segment | undefined {
    const s = this.cache.get(id);
    if (s) {
      this.cache.delete(id);
      this.cache.set(id, s);
    }
    return s;
  }

  /** A cached segment, without touching the LRU order (for probing candidates). */
  peek(id: number): Segment | undefined {
    return this.cache.get(id);
  }

  private remember(seg: Segment): void {
    this.cache.set(seg.id, seg);
    this.cachedPages += seg.count;
  }

  private forget(seg: Segment): void {
    if (this.cache.get(seg.id) !== seg) return;
    this.cache.delete(seg.id);
    this.cachedPages -= seg.count;
  }

  /** Evicts the least recently used segments beyond the page budget. Call between operations only. */
  trim(): void {
    if (this.cachedPages <= this.maxPages) return;
    for (const seg of this.cache.values()) {
      if (this.cachedPages <= this.maxPages) break;
      this.forget(seg);
    }
  }

  /** Empties the cache (the directory stays: it describes the database, not the cache). */
  clear(): void {
    this.cache.clear();
    this.cachedPages = 0;
  }

  /** After a rollback: the cache and the directory may describe rows that were never committed; start over. */
  reset(): void {
    this.clear();
    this.loadDirectory();
  }

  /** The segments of `ids` (cached, or read in a few queries). Ids with no segment are left out. */
  load(ids: readonly number[]): Map<number, Segment> {
    const out = new Map<number, Segment>();
    const need: number[] = [];
    for (const id of ids) {
      if (out.has(id)) continue;
      const s = this.cached(id);
      if (s) out.set(id, s);
      else if (!need.includes(id)) need.push(id);
    }
    if (!need.length) return out;
    const fresh = new Map<number, Segment>();
    const c = this.conn;
    for (const rows of c.inList(need, (l) => `SELECT ${SEG_COLUMNS} FROM segments WHERE id IN (${l})`, (st, p) => st.all(...p) as Array<Record<string, unknown>>)) {
      for (const r of rows) {
        if (fresh.has(r.id as number)) continue;
        const count = r.count as number;
        const keys = r.keys as Buffer;
        fresh.set(r.id as number, {
          id: r.id as number,
          ns: r.ns as number,
          count,
          width: r.width as number,
          position: r.position as number,
          parent: (r.parent as Buffer | null) ?? null,
          keys,
          anchors: r.anchors as Buffer,
          createdMs: r.created_ms as number,
          lengths: new Uint32Array(count),
          crcs: new Uint32Array(count),
          crcKnown: null,
          created: null,
          access: null,
          hits: null,
          dataDirty: false,
          copies: new Array(this.tiers.count),
          names: new Array(count),
          answers: new Array(count),
        });
      }
    }
    const got = [...fresh.keys()];
    if (got.length) {
      for (const rows of c.inList(got, (l) => `SELECT * FROM pagedata WHERE seg IN (${l})`, (st, p) => st.all(...p) as Array<Record<string, unknown>>)) {
        for (const r of rows) {
          const s = fresh.get(r.seg as number)!;
          s.lengths = lengthsOf(r.lengths as Buffer, s.count);
          s.crcs = u32view(r.crcs as Buffer, s.count);
          const known = r.crc_known as Buffer;
          s.crcKnown = known.length ? new Uint8Array(known) : null;
          s.created = f64view(r.created as Buffer, s.count);
          s.access = f64view(r.access as Buffer, s.count);
          s.hits = (r.hits as Buffer).length ? u32view(r.hits as Buffer, s.count) : null;
        }
      }
      // Copies of one segment are adjacent rowids (segment * TIER_CODES + tier code): one range read per segment.
      const copiesOf = c.stmt(`SELECT id, states, updated_ms FROM copies WHERE id BETWEEN ? AND ?`);
      const locationsOf = c.stmt('SELECT id, list FROM locations WHERE id BETWEEN ? AND ?');
      for (const s of fresh.values()) {
        const lo = s.id * TIER_CODES;
        for (const r of copiesOf.all(lo, lo + TIER_CODES - 1) as Array<{ id: number; states: Buffer; updated_ms: number }>) {
          const rank = this.tiers.rankOfCode(r.id - lo);
          if (rank === undefined) continue;
          s.copies[rank] = new StoredCopies(new Uint8Array(r.states), r.updated_ms);
        }
        for (const r of locationsOf.all(lo, lo + TIER_CODES - 1) as Array<{ id: number; list: string }>) {
          const rank = this.tiers.rankOfCode(r.id - lo);
          const t = rank === undefined ? undefined : s.copies[rank];
          if (t instanceof StoredCopies) t.setRaw(r.list);
        }
      }
    }
    for (const s of fresh.values()) {
      this.remember(s);
      out.set(s.id, s);
    }
    return out;
  }

  /** Inserts a new segment with pending (or, for adoption, ready) copies on one tier, and caches it. */
  insert(init: {
    ns: number;
    width: number;
    position: number;
    parent: Uint8Array | null;
    keys: Uint8Array;
    lengths: Uint32Array;
    crcs: Uint32Array;
    crcKnown: Uint8Array | null;
    now: number;
    rank: number;
    states: Uint8Array;
    locations: Array<string | null> | null;
    names: Array<string | undefined>;
  }): Segment {
    const count = init.lengths.length;
    const id = this.nextId++;
    const c = this.conn;
    const keys = Buffer.from(init.keys.buffer, init.keys.byteOffset, init.keys.byteLength);
    const anchors = anchorsBlob(init.keys, init.width, count);
    c.stmt('INSERT INTO segments(id, ns, count, width, position, created_ms, parent, anchors, keys) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)').run(
      id,
      init.ns,
      count,
      init.width,
      init.position,
      init.now,
      init.parent ? Buffer.from(init.parent.buffer, init.parent.byteOffset, init.parent.byteLength) : null,
      anchors,
      keys,
    );
    c.stmt("INSERT INTO pagedata(seg, lengths, crcs, crc_known, created, access, hits) VALUES (?, ?, ?, ?, X'', X'', X'')").run(id, lengthsBlob(init.lengths), blob(init.crcs), blob(init.crcKnown));
    const rowid = id * TIER_CODES + this.tiers.code(init.rank);
    c.stmt('INSERT INTO copies(id, states, updated_ms) VALUES (?, ?, ?)').run(rowid, blob(init.states), init.now);
    if (init.locations) c.stmt('INSERT INTO locations(id, list) VALUES (?, ?)').run(rowid, JSON.stringify(init.locations));
    const seg: Segment = {
      id,
      ns: init.ns,
      count,
      width: init.width,
      position: init.position,
      parent: init.parent,
      keys: keys,
      anchors,
      createdMs: init.now,
      lengths: init.lengths,
      crcs: init.crcs,
      crcKnown: init.crcKnown,
      created: null,
      access: null,
      hits: null,
      dataDirty: false,
      copies: new Array(this.tiers.count),
      names: init.names,
      answers: new Array(count),
    };
    seg.copies[init.rank] = { states: init.states, locations: init.locations, updated: init.now, stored: true, locStored: init.locations !== null, dirty: false, locDirty: false };
    this.remember(seg);
    this.directory.addSegment(id, anchors);
    return seg;
  }

  /** Whether any tier holds slot `s` of `seg` in any state. */
  held(seg: Segment, s: number): boolean {
    for (const t of seg.copies) if (t && t.states[s]! & STATE_MASK) return true;
    return false;
  }

  /** The copies of `seg` on tier `rank`, created empty when absent. */
  copiesOn(seg: Segment, rank: number, now: number): TierCopies {
    let t = seg.copies[rank];
    if (!t) seg.copies[rank] = t = { states: new Uint8Array(seg.count), locations: null, updated: now, stored: false, locStored: false, dirty: true, locDirty: false };
    return t;
  }

  /** Sets where slot `s` of `t` is (null: at its key). */
  setLocation(seg: Segment, t: TierCopies, s: number, location: string | null): void {
    if (location === null) {
      if (t.locations && t.locations[s] !== null) {
        t.locations[s] = null;
        t.locDirty = true;
      }
      return;
    }
    t.locations ??= new Array<string | null>(seg.count).fill(null);
    t.locations[s] = location;
    t.locDirty = true;
  }

  /** Writes back what changed in `segs`; deletes rows left without any copy, and segments left without any page. */
  flush(segs: Iterable<Segment>): void {
    const c = this.conn;
    for (const seg of segs) {
      let any = false;
      seg.copies.forEach((t, rank) => {
        if (!t) return;
        let held = false;
        for (let s = 0; s < seg.count; s++) {
          if (t.states[s]! & STATE_MASK) {
            held = true;
            break;
          }
        }
        any ||= held;
        const rowid = seg.id * TIER_CODES + this.tiers.code(rank);
        if (!held) {
          if (t.stored) c.stmt('DELETE FROM copies WHERE id = ?').run(rowid);
          if (t.locStored) c.stmt('DELETE FROM locations WHERE id = ?').run(rowid);
          seg.copies[rank] = undefined;
          return;
        }
        if (t.dirty) {
          if (t.stored) c.stmt('UPDATE copies SET states = ?, updated_ms = ? WHERE id = ?').run(blob(t.states), t.updated, rowid);
          else c.stmt('INSERT INTO copies(id, states, updated_ms) VALUES (?, ?, ?)').run(rowid, blob(t.states), t.updated);
          t.stored = true;
          t.dirty = false;
        }
        if (t.locDirty) {
          const custom = t.locations !== null && t.locations.some((l) => l !== null);
          if (!custom) t.locations = null;
          if (custom) c.stmt('INSERT INTO locations(id, list) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET list = excluded.list').run(rowid, JSON.stringify(t.locations));
          else if (t.locStored) c.stmt('DELETE FROM locations WHERE id = ?').run(rowid);
          t.locStored = custom;
          t.locDirty = false;
        }
      });
      if (!any) {
        this.deleteRows(seg);
        this.forget(seg);
        continue;
      }
      if (seg.dataDirty) {
        c.stmt('UPDATE pagedata SET lengths = ?, crcs = ?, crc_known = ?, created = ?, access = ?, hits = ? WHERE seg = ?').run(
          lengthsBlob(seg.lengths),
          blob(seg.crcs),
          blob(seg.crcKnown),
          blob(seg.created),
          blob(seg.access),
          blob(seg.hits),
          seg.id,
        );
        seg.dataDirty = false;
      }
    }
  }

  /** Deletes every row of a segment. */
  deleteRows(seg: Segment): void {
    const c = this.conn;
    c.stmt('DELETE FROM segments WHERE id = ?').run(seg.id);
    c.stmt('DELETE FROM pagedata WHERE seg = ?').run(seg.id);
    c.stmt(`DELETE FROM copies WHERE id BETWEEN ? * ${TIER_CODES} AND ? * ${TIER_CODES} + ${TIER_CODES - 1}`).run(seg.id, seg.id);
    c.stmt(`DELETE FROM locations WHERE id BETWEEN ? * ${TIER_CODES} AND ? * ${TIER_CODES} + ${TIER_CODES - 1}`).run(seg.id, seg.id);
    this.directory.removeSegment(seg.id, seg.anchors);
  }

  /** Drops a segment from the cache (its rows were deleted by the caller). */
  evict(seg: Segment): void {
    this.forget(seg);
  }

  /** Hex of the key at slot `s` (the caller's string when known). */
  keyHex(seg: Segment, s: number): string {
    return seg.names[s] ?? hexOf(seg.keys, s * seg.width, seg.width);
  }
}
