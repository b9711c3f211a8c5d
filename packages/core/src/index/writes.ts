/**
 * Write paths: storing pages (new segments, or a key's old slot), adopting pages found on a tier, and every change
 * of a copy's state. Each public operation validates all of its input first, then changes cached segments through
 * the transition table (copy-state.ts) and writes them back in one transaction.
 */
import { describeValue } from '@tiersync/native/errors';
import { STATE, allows, applyTransition, nextByte, type Transition } from './copy-state.js';
import type { IndexContext } from './context.js';
import { checkKey, firstDuplicate, invalid } from './key-batch.js';
import { type Located, locate } from './locate.js';
import { packSlot } from './pins.js';
import { ROOTS_POSITION, ROOTS_SEGMENT_PAGES, SEGMENT_PAGES } from './schema.js';
import type { Segment, TierCopies } from './segments.js';
import type { AdoptPage, AdoptResult, BeginStoreResult, CommitEntry, CommitResult, PageKey, RemoveResult, StorePage } from './types.js';

export function checkInt(value: unknown, name: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    throw invalid(`${name} must be an integer in [${min}, ${max}], got ${describeValue(value)}`);
  }
  return value;
}

function checkArray(value: unknown, name: string, what = 'an array'): asserts value is readonly unknown[] {
  if (!Array.isArray(value)) throw invalid(`${name} must be ${what}, got ${describeValue(value)}`);
}

/** Changes one copy byte through the transition table, and forgets the slot's cached lookup answer. */
function move(seg: Segment, t: TierCopies, s: number, transition: Transition, durable: boolean, now: number): void {
  const next = nextByte(t.states[s]!, transition, durable);
  // The message is built only for an illegal move (applyTransition throws it).
  t.states[s] = next >= 0 ? next : applyTransition(t.states[s]!, transition, durable, `page ${s} of segment ${seg.id}`);
  t.updated = now;
  t.dirty = true;
  seg.answers[s] = undefined;
}

/** Per-page data of a slot that is being (re)created: the page is new as of `now`. */
function resetPage(seg: Segment, s: number, length: number, crc: number | undefined, now: number): void {
  seg.lengths[s] = length;
  seg.crcs[s] = crc ?? 0;
  if (crc === undefined) {
    seg.crcKnown ??= new Uint8Array(seg.count).fill(1);
    seg.crcKnown[s] = 0;
  } else if (seg.crcKnown) seg.crcKnown[s] = 1;
  seg.created ??= new Float64Array(seg.count).fill(seg.createdMs);
  seg.access ??= Float64Array.from(seg.created);
  seg.hits ??= new Uint32Array(seg.count);
  seg.created[s] = now;
  seg.access[s] = now;
  seg.hits[s] = 0;
  seg.dataDirty = true;
}

interface NewPage {
  key: string;
  parent: string | null;
  position: number;
  length: number;
  crc32c?: number | undefined;
  location?: string | undefined;
  durable?: boolean | undefined;
}

/** Validates the fields of store/adopt pages other than keys (keys are checked as one batch by locate). */
function checkPages(pages: unknown, withLocation: boolean): asserts pages is readonly NewPage[] {
  checkArray(pages, 'pages');
  for (let i = 0; i < pages.length; i++) {
    const p = pages[i] as NewPage;
    if (p === null || typeof p !== 'object') throw invalid(`pages[${i}] must be an object, got ${describeValue(p)}`);
    if (typeof p.key !== 'string') checkKey(p.key, `pages[${i}].key`);
    // A chain's parent is usually the page just before it, whose key is checked with the batch.
    if (p.parent !== null && (i === 0 || p.parent !== (pages[i - 1] as NewPage).key)) checkKey(p.parent, () => `pages[${i}].parent`);
    if (!Number.isSafeInteger(p.position) || p.position < 0) checkInt(p.position, `pages[${i}].position`, 0);
    if (!Number.isSafeInteger(p.length) || p.length < 1 || p.length > 0xffffffff) checkInt(p.length, `pages[${i}].length`, 1, 0xffffffff);
    if (withLocation && (typeof p.location !== 'string' || p.location.length < 1 || p.location.length > 4096)) {
      throw invalid(`pages[${i}].location must be a string of 1..4096 characters, got ${describeValue(p.location)}`);
    }
    if (p.crc32c !== undefined && !(Number.isSafeInteger(p.crc32c) && p.crc32c >= 0 && p.crc32c <= 0xffffffff)) checkInt(p.crc32c, `pages[${i}].crc32c`, 0, 0xffffffff);
    if (!withLocation && p.crc32c === undefined) checkInt(p.crc32c, `pages[${i}].crc32c`, 0, 0xffffffff);
    if (!withLocation && typeof p.durable !== 'boolean') throw invalid(`pages[${i}].durable must be a boolean, got ${describeValue(p.durable)}`);
  }
}

/** Locates the pages' keys and refuses a key given twice. */
function locatePages(ctx: IndexContext, pages: readonly NewPage[]): Located {
  const keys = pages.map((p) => p.key);
  const loc = locate(ctx.store, keys, 0, keys.length, (i) => `pages[${i}].key`, false);
  if (loc.batch) {
    const d = firstDuplicate(loc.batch);
    if (d >= 0) {
      const i = loc.batchFrom + d;
      throw invalid(`pages[${i}].key ${keys[i]} appears twice in the batch`);
    }
  }
  return loc;
}

/** A page that starts no chain of its own: no parent, position 0. */
const isRoot = (p: NewPage): boolean => p.parent === null && p.position === 0;

/**
 * Creates segments for the pages no segment holds, in batch order: runs of pages that continue each other (parent =
 * the previous page, next position, same key width), up to SEGMENT_PAGES each; and runs of roots that start no chain
 * in the batch (single-page values), up to ROOTS_SEGMENT_PAGES each, as one roots segment. `stateOf(i)` is page i's
 * byte.
 */
function insertNew(ctx: IndexContext, ns: number, rank: number, pages: readonly NewPage[], loc: Located, now: number, stateOf: (i: number) => number, withLocation: boolean): void {
  const batch = loc.batch;
  if (!batch) return;
  const idx0 = loc.batchFrom;
  const { bytes, off } = batch;
  /** Batch page e is in no segment yet and its key is `width` bytes long. */
  const fresh = (e: number, width: number): boolean => loc.segs[idx0 + e] === undefined && off[e + 1]! - off[e]! === width;
  /** Batch page e continues batch page e - 1's chain. */
  const continues = (e: number): boolean => {
    const p = pages[idx0 + e]!;
    const prev = pages[idx0 + e - 1]!;
    return p.parent === prev.key && p.position === prev.position + 1;
  };
  /** Batch page e is a root whose next page does not continue it (a chain's first page stays with its chain). */
  const loneRoot = (e: number): boolean => isRoot(pages[idx0 + e]!) && !(e + 1 < batch.n && loc.segs[idx0 + e + 1] === undefined && continues(e + 1));
  for (let b = 0; b < batch.n; ) {
    if (loc.segs[(idx0 + b)] !== undefined) {
      b++;
      continue;
    }
    const first = pages[(idx0 + b)]!;
    const width = off[b + 1]! - off[b]!;
    let e = b + 1;
    const roots = loneRoot(b) && e < batch.n && fresh(e, width) && loneRoot(e);
    if (roots) while (e < batch.n && e - b < ROOTS_SEGMENT_PAGES && fresh(e, width) && loneRoot(e)) e++;
    else while (e < batch.n && e - b < SEGMENT_PAGES && fresh(e, width) && continues(e)) e++;
    const count = e - b;
    const lengths = new Uint32Array(count);
    const crcs = new Uint32Array(count);
    const states = new Uint8Array(count);
    let crcKnown: Uint8Array | null = null;
    let locations: Array<string | null> | null = null;
    const names = new Array<string | undefined>(count);
    for (let s = 0; s < count; s++) {
      const i = (idx0 + b + s);
      const p = pages[i]!;
      lengths[s] = p.length;
      if (p.crc32c === undefined) (crcKnown ??= new Uint8Array(count).fill(1))[s] = 0;
      else crcs[s] = p.crc32c;
      states[s] = stateOf(i);
      names[s] = p.key;
      if (withLocation && p.location !== p.key) (locations ??= new Array<string | null>(count).fill(null))[s] = p.location!;
    }
    let parent: Uint8Array | null = null;
    if (first.parent !== null) {
      const pi = (idx0 + b) - 1;
      const pb = b - 1;
      // The parent is usually the previous key of the batch, already decoded.
      parent = pb >= 0 && idx0 + pb === pi && pages[pi]!.key === first.parent ? bytes.subarray(off[pb]!, off[pb + 1]!) : Buffer.from(first.parent, 'hex');
    }
    ctx.store.insert({ ns, width, position: roots ? ROOTS_POSITION : first.position, parent, keys: bytes.subarray(off[b]!, off[e]!), lengths, crcs, crcKnown, now, rank, states, locations, names });
    b = e;
  }
}

/** See BlockIndex.beginStore. */
export function beginStore(ctx: IndexContext, ns: number, rank: number, pages: readonly StorePage[]): BeginStoreResult {
  checkPages(pages, true);
  const n = pages.length;
  if (n === 0) return { fresh: [], existing: [] };
  const loc = locatePages(ctx, pages);
  const now = ctx.now();
  const fresh: PageKey[] = [];
  const existing: PageKey[] = [];
  const pendingByte = applyTransition(STATE.absent, 'begin');
  ctx.conn.tx('beginStore', () => {
    const touched = new Set<Segment>();
    for (let i = 0; i < n; i++) {
      const seg = loc.segs[i];
      if (!seg) continue;
      const s = loc.slots[i]!;
      if (ctx.store.held(seg, s)) continue;
      // A hole (the page was stored once, then removed everywhere): store it in its old slot.
      const p = pages[i]!;
      const t = ctx.store.copiesOn(seg, rank, now);
      move(seg, t, s, 'begin', false, now);
      ctx.store.setLocation(seg, t, s, p.location === p.key ? null : p.location);
      resetPage(seg, s, p.length, p.crc32c, now);
      touched.add(seg);
      loc.slots[i] = -2; // fresh, in an old slot
    }
    ctx.store.flush(touched);
    insertNew(ctx, ns, rank, pages, loc, now, () => pendingByte, true);
  }, false); // pending copies: recovery drops them, so the commit that makes them ready is the durable one
  for (let i = 0; i < n; i++) (loc.segs[i] === undefined || loc.slots[i] === -2 ? fresh : existing).push(pages[i]!.key);
  ctx.store.trim();
  return { fresh, existing };
}

/** See BlockIndex.adoptPages. */
export function adoptPages(ctx: IndexContext, ns: number, rank: number, pages: readonly AdoptPage[]): AdoptResult {
  checkPages(pages, false);
  const n = pages.length;
  if (n === 0) return { adopted: [], existing: [] };
  const loc = locatePages(ctx, pages);
  const now = ctx.now();
  const adopted: PageKey[] = [];
  const existing: PageKey[] = [];
  ctx.conn.tx('adoptPages', () => {
    const touched = new Set<Segment>();
    for (let i = 0; i < n; i++) {
      const seg = loc.segs[i];
      if (!seg) continue;
      const s = loc.slots[i]!;
      const p = pages[i]!;
      const t = ctx.store.copiesOn(seg, rank, now);
      if (!allows(t.states[s]!, 'adopt')) {
        loc.slots[i] = -3; // already on this tier
        continue;
      }
      const hole = !ctx.store.held(seg, s);
      move(seg, t, s, 'adopt', p.durable, now);
      ctx.store.setLocation(seg, t, s, null);
      if (hole) resetPage(seg, s, p.length, p.crc32c, now);
      else if (seg.crcKnown && !seg.crcKnown[s] && p.crc32c !== undefined) {
        seg.crcs[s] = p.crc32c;
        seg.crcKnown[s] = 1;
        seg.dataDirty = true;
      }
      touched.add(seg);
    }
    ctx.store.flush(touched);
    insertNew(ctx, ns, rank, pages, loc, now, (i) => applyTransition(STATE.absent, 'adopt', pages[i]!.durable), false);
  });
  for (let i = 0; i < n; i++) (loc.slots[i] === -3 ? existing : adopted).push(pages[i]!.key);
  ctx.store.trim();
  return { adopted, existing };
}

/**
 * Locates `keys` and applies `change` to the copy of each on tier `rank`, in one transaction; returns per key
 * whether it changed. Keys given twice change once (the second is neither changed nor missing).
 */
function eachCopy(
  ctx: IndexContext,
  what: string,
  keys: readonly unknown[],
  name: (i: number) => string,
  skip: Uint8Array | null,
  change: (seg: Segment, s: number, j: number) => boolean,
  located?: Located,
  durable = true,
): { changed: Uint8Array; loc: Located } {
  const loc = located ?? locate(ctx.store, keys, 0, keys.length, name);
  const changed = new Uint8Array(keys.length);
  ctx.conn.tx(what, () => {
    const touched = new Set<Segment>();
    let seen: Set<number> | undefined;
    for (let j = 0; j < keys.length; j++) {
      const seg = loc.segs[j];
      if (!seg || skip?.[j]) continue;
      const s = loc.slots[j]!;
      const packed = packSlot(seg.id, s);
      if ((seen ??= new Set()).has(packed)) {
        changed[j] = 2;
        continue;
      }
      seen.add(packed);
      if (change(seg, s, j)) {
        changed[j] = 1;
        touched.add(seg);
      }
    }
    ctx.store.flush(touched);
  }, durable);
  ctx.store.trim();
  return { changed, loc };
}

/** See BlockIndex.beginCopies. */
export function beginCopies(ctx: IndexContext, rank: number, entries: ReadonlyArray<{ key: PageKey; location: string }>): { added: PageKey[]; existing: PageKey[]; missing: PageKey[] } {
  checkArray(entries, 'entries');
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    if (e === null || typeof e !== 'object') throw invalid(`entries[${i}] must be an object, got ${describeValue(e)}`);
    if (typeof e.location !== 'string' || e.location.length < 1 || e.location.length > 4096) {
      throw invalid(`entries[${i}].location must be a string of 1..4096 characters, got ${describeValue(e.location)}`);
    }
  }
  const now = ctx.now();
  const result = { added: [] as PageKey[], existing: [] as PageKey[], missing: [] as PageKey[] };
  const state = new Uint8Array(entries.length); // 1 added, 2 existing
  eachCopy(ctx, 'beginCopies', entries.map((e) => e.key), (i) => `entries[${i}].key`, null, (seg, s, j) => {
    if (!ctx.store.held(seg, s)) return false;
    const t = ctx.store.copiesOn(seg, rank, now);
    if (!allows(t.states[s]!, 'begin')) {
      state[j] = 2;
      return false;
    }
    move(seg, t, s, 'begin', false, now);
    const e = entries[j]!;
    ctx.store.setLocation(seg, t, s, e.location === e.key ? null : e.location);
    state[j] = 1;
    return true;
  }, undefined, false);
  entries.forEach((e, j) => (state[j] === 1 ? result.added : state[j] === 2 ? result.existing : result.missing).push(e.key));
  return result;
}

/** See BlockIndex.commitCopies. */
export function commitCopies(ctx: IndexContext, batch: readonly CommitEntry[]): CommitResult {
  checkArray(batch, 'batch');
  const ranks = new Int32Array(batch.length);
  let lastTier: unknown;
  let lastRank = -1;
  for (let i = 0; i < batch.length; i++) {
    const e = batch[i] as CommitEntry;
    if (e === null || typeof e !== 'object') throw invalid(`batch[${i}] must be an object, got ${describeValue(e)}`);
    if (e.tier !== lastTier || lastRank < 0) {
      lastRank = ctx.tiers.check(e.tier, `batch[${i}].tier`);
      lastTier = e.tier;
    }
    ranks[i] = lastRank;
    if (e.durable !== undefined && typeof e.durable !== 'boolean') throw invalid(`batch[${i}].durable must be a boolean, got ${describeValue(e.durable)}`);
    if (e.crc32c !== undefined && !(Number.isSafeInteger(e.crc32c) && e.crc32c >= 0 && e.crc32c <= 0xffffffff)) checkInt(e.crc32c, `batch[${i}].crc32c`, 0, 0xffffffff);
  }
  if (batch.length === 0) return { committed: 0, missing: [] };
  const now = ctx.now();
  const keys = batch.map((e) => e.key);
  const loc = locate(ctx.store, keys, 0, keys.length, (i) => `batch[${i}].key`);
  const missing: PageKey[] = [];
  let committed = 0;
  ctx.conn.tx('commitCopies', () => {
    const touched = new Set<Segment>();
    let last: Segment | undefined;
    for (let j = 0; j < batch.length; j++) {
      const seg = loc.segs[j];
      const s = loc.slots[j]!;
      const t = seg?.copies[ranks[j]!];
      const e = batch[j]!;
      // The table's answer both decides (an entry whose pending copy is gone is missing) and is the new byte.
      const next = t === undefined ? -1 : nextByte(t.states[s]!, 'commit', e.durable === true);
      if (next < 0) {
        missing.push(e.key);
        continue;
      }
      t!.states[s] = next;
      t!.updated = now;
      t!.dirty = true;
      seg!.answers[s] = undefined;
      if (e.crc32c !== undefined) {
        seg!.crcs[s] = e.crc32c;
        if (seg!.crcKnown) seg!.crcKnown[s] = 1;
        seg!.dataDirty = true;
      }
      committed++;
      if (seg !== last) touched.add((last = seg!));
    }
    ctx.store.flush(touched);
  });
  ctx.store.trim();
  return { committed, missing };
}

/** See BlockIndex.abortCopies. */
export function abortCopies(ctx: IndexContext, rank: number, keys: readonly PageKey[]): number {
  checkArray(keys, 'keys', 'an array of page keys');
  let n = 0;
  eachCopy(ctx, 'abortCopies', keys, (i) => `keys[${i}]`, null, (seg, s) => {
    const t = seg.copies[rank];
    if (!t || !allows(t.states[s]!, 'abort')) return false;
    move(seg, t, s, 'abort', false, ctx.now());
    ctx.store.setLocation(seg, t, s, null);
    n++;
    return true;
  }, undefined, false);
  return n;
}

/** Which of the located keys an unexpired pin holds (durable pins by key bytes, load pins by slot). */
function pinnedMask(ctx: IndexContext, loc: Located, n: number, now: number): Uint8Array {
  const out = new Uint8Array(n);
  ctx.loadPins.sweep(now);
  const durable = ctx.pins.any(now);
  if (!durable && !ctx.loadPins.active) return out;
  const inBatch = new Int32Array(n).fill(-1);
  if (loc.batch) for (let b = 0; b < loc.batch.n; b++) inBatch[loc.batchFrom + b] = b;
  for (let j = 0; j < n; j++) {
    const seg = loc.segs[j];
    const s = loc.slots[j]!;
    if (seg && ctx.loadPins.held(seg.id, s)) {
      out[j] = 1;
      continue;
    }
    if (!durable) continue;
    let key: Uint8Array;
    if (seg) key = seg.keys.subarray(s * seg.width, (s + 1) * seg.width);
    else {
      const b = inBatch[j]!;
      if (b < 0) continue;
      key = loc.batch!.bytes.subarray(loc.batch!.off[b]!, loc.batch!.off[b + 1]!);
    }
    if (ctx.pins.held(key, now)) out[j] = 1;
  }
  return out;
}

/** Whether each key is pinned (durable or load pin). */
export function pinnedKeys(ctx: IndexContext, keys: readonly PageKey[], now: number): boolean[] {
  checkArray(keys, 'keys', 'an array of page keys');
  const loc = locate(ctx.store, keys, 0, keys.length, (i) => `keys[${i}]`);
  return Array.from(pinnedMask(ctx, loc, keys.length, now), (b) => b === 1);
}

/** markEvicting and removeCopies: pinned keys are skipped unless `force`. */
export function evictOrRemove(ctx: IndexContext, rank: number, keys: readonly PageKey[], transition: 'evict' | 'remove', force: boolean): { done: PageKey[]; pinned: PageKey[]; missing: PageKey[] } {
  checkArray(keys, 'keys', 'an array of page keys');
  const now = ctx.now();
  const loc = locate(ctx.store, keys, 0, keys.length, (i) => `keys[${i}]`);
  const pinnedAt = force ? null : pinnedMask(ctx, loc, keys.length, now);
  const { changed } = eachCopy(
    ctx,
    transition === 'evict' ? 'markEvicting' : 'removeCopies',
    keys,
    (i) => `keys[${i}]`,
    pinnedAt,
    (seg, s) => {
      const t = seg.copies[rank];
      if (!t || !allows(t.states[s]!, transition)) return false;
      move(seg, t, s, transition, false, now);
      if (transition === 'remove') ctx.store.setLocation(seg, t, s, null);
      return true;
    },
    loc,
  );
  const out = { done: [] as PageKey[], pinned: [] as PageKey[], missing: [] as PageKey[] };
  keys.forEach((k, j) => {
    if (changed[j] === 2) return;
    (changed[j] === 1 ? out.done : pinnedAt?.[j] ? out.pinned : out.missing).push(k);
  });
  return out;
}

/** See BlockIndex.markVerified. */
export function markVerified(ctx: IndexContext, rank: number, keys: readonly PageKey[]): number {
  checkArray(keys, 'keys', 'an array of page keys');
  const now = ctx.now();
  const { changed } = eachCopy(ctx, 'markVerified', keys, (i) => `keys[${i}]`, null, (seg, s) => {
    const t = seg.copies[rank];
    if (!t || !allows(t.states[s]!, 'verify')) return false;
    move(seg, t, s, 'verify', false, now);
    return true;
  });
  let n = 0;
  for (const c of changed) if (c === 1) n++;
  return n;
}

/** Records an access to each held page (in the caller's transaction). */
export function touchLocated(ctx: IndexContext, loc: Located, n: number, now: number): void {
  const touched = new Set<Segment>();
  for (let j = 0; j < n; j++) {
    const seg = loc.segs[j];
    const s = loc.slots[j]!;
    if (!seg || !ctx.store.held(seg, s)) continue;
    seg.created ??= new Float64Array(seg.count).fill(seg.createdMs);
    seg.access ??= Float64Array.from(seg.created);
    seg.hits ??= new Uint32Array(seg.count);
    seg.access[s] = now;
    seg.hits[s] = seg.hits[s]! + 1;
    seg.dataDirty = true;
    touched.add(seg);
  }
  ctx.store.flush(touched);
}

