/**
 * Read paths: which tiers hold each key (prefix and exact lookups), every copy of a key, and page records.
 * Answers are computed from a segment's copy bytes once and kept on the segment (Segment.answers) until a copy of
 * that page changes, so a cached chain is answered by string comparisons and array reads.
 */
import { STATE, STATE_MASK, isHeld, stateName } from './copy-state.js';
import type { IndexContext } from './context.js';
import { hexOf, invalid } from './key-batch.js';
import { locate } from './locate.js';
import { ROOTS_POSITION } from './schema.js';
import type { Segment } from './segments.js';
import type { CopyRecord, PageHit, PageRecord } from './types.js';
import { describeValue } from '@tiersync/native/errors';

/** Keys located per step of a prefix lookup: a short hit costs a small decode; a long one few steps. */
const FIRST_STEP = 64;
const MAX_STEP = 4096;

/** The lookup answer of slot `s` (null: no tier holds a ready copy). `key` names it when first computed. */
export function answerOf(ctx: IndexContext, seg: Segment, s: number, key: string): PageHit | null {
  const cached = seg.answers[s];
  if (cached !== undefined) return cached;
  let mask = 0;
  for (let r = 0; r < seg.copies.length; r++) {
    const t = seg.copies[r];
    if (t && (t.states[s]! & STATE_MASK) === STATE.ready) mask |= 1 << r;
  }
  const hit = mask === 0 ? null : Object.freeze({ key, tiers: ctx.tiers.names(mask), length: seg.lengths[s]! });
  seg.answers[s] = hit;
  return hit;
}

const keysName = (i: number) => `keys[${i}]`;

function checkArray(keys: unknown, name: string): asserts keys is readonly unknown[] {
  if (!Array.isArray(keys)) throw invalid(`${name} must be an array of page keys, got ${describeValue(keys)}`);
}

/** See BlockIndex.lookupPrefix. */
export function lookupPrefix(ctx: IndexContext, keys: readonly string[]): PageHit[] {
  checkArray(keys, 'keys');
  const n = keys.length;
  // Sized once (a hit is usually the whole request; huge requests grow as they hit), cut to the hit at the end.
  const out: PageHit[] = n <= 65_536 ? new Array<PageHit>(n) : [];
  let hits = 0;
  let step = FIRST_STEP;
  for (let i = 0; i < n; ) {
    const to = Math.min(n, i + step);
    const loc = locate(ctx.store, keys, i, to, keysName);
    const decoded = loc.batch?.n ?? 0;
    ctx.counters.misses += decoded;
    ctx.counters.hits += to - i - decoded;
    for (let j = 0; j < to - i; j++) {
      const seg = loc.segs[j];
      const hit = seg && answerOf(ctx, seg, loc.slots[j]!, keys[i + j]!);
      if (!hit) {
        out.length = hits;
        return out;
      }
      out[hits++] = hit;
    }
    i = to;
    step = Math.min(step * 8, MAX_STEP);
  }
  out.length = hits;
  return out;
}

/** See BlockIndex.lookupExact. */
export function lookupExact(ctx: IndexContext, keys: readonly string[]): Array<PageHit | undefined> {
  checkArray(keys, 'keys');
  const loc = locate(ctx.store, keys, 0, keys.length, keysName);
  const decoded = loc.batch?.n ?? 0;
  ctx.counters.misses += decoded;
  ctx.counters.hits += keys.length - decoded;
  const out = new Array<PageHit | undefined>(keys.length);
  for (let j = 0; j < keys.length; j++) {
    const seg = loc.segs[j];
    out[j] = (seg && answerOf(ctx, seg, loc.slots[j]!, keys[j]!)) ?? undefined;
  }
  return out;
}

/** Every copy of each located key, fastest tier first. */
export function copiesAt(ctx: IndexContext, keys: readonly string[], segs: ReadonlyArray<Segment | undefined>, slots: Int32Array): CopyRecord[][] {
  const out: CopyRecord[][] = new Array(keys.length);
  for (let j = 0; j < keys.length; j++) {
    const list: CopyRecord[] = [];
    out[j] = list;
    const seg = segs[j];
    if (!seg) continue;
    const s = slots[j]!;
    seg.copies.forEach((t, rank) => {
      const b = t?.states[s] ?? 0;
      if (!t || !isHeld(b)) return;
      list.push({
        tier: ctx.tiers.list[rank]!.name,
        location: t.locations?.[s] ?? keys[j]!,
        state: stateName(b),
        durable: (b & 4) !== 0,
        verified: (b & 8) !== 0,
        updatedMs: t.updated,
      });
    });
  }
  return out;
}

/** See BlockIndex.copiesOf. */
export function copiesOf(ctx: IndexContext, keys: readonly string[]): CopyRecord[][] {
  checkArray(keys, 'keys');
  const loc = locate(ctx.store, keys, 0, keys.length, keysName);
  return copiesAt(ctx, keys, loc.segs, loc.slots);
}

/** See BlockIndex.pages. */
export function pages(ctx: IndexContext, keys: readonly string[], nsName: (id: number) => string): Array<PageRecord | undefined> {
  checkArray(keys, 'keys');
  const loc = locate(ctx.store, keys, 0, keys.length, keysName);
  return keys.map((key, j) => {
    const seg = loc.segs[j];
    const s = loc.slots[j]!;
    if (!seg || !ctx.store.held(seg, s)) return undefined;
    const created = seg.created?.[s] ?? seg.createdMs;
    return {
      key,
      namespace: nsName(seg.ns),
      parent: seg.position === ROOTS_POSITION ? null : s > 0 ? ctx.store.keyHex(seg, s - 1) : seg.parent ? hexOf(seg.parent, 0, seg.parent.length) : null,
      position: seg.position === ROOTS_POSITION ? 0 : seg.position + s,
      length: seg.lengths[s]!,
      crc32c: seg.crcKnown === null || seg.crcKnown[s] ? seg.crcs[s]! : null,
      createdMs: created,
      lastAccessMs: seg.access?.[s] ?? created,
      hits: seg.hits?.[s] ?? 0,
    };
  });
}
