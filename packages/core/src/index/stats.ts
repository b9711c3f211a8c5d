/** Counts over the whole index (a scan of the copies rows and page lengths: for reports, not hot paths). */
import { DURABLE, STATE, STATE_MASK, VERIFIED } from './copy-state.js';
import type { IndexContext } from './context.js';
import { TIER_CODES } from './schema.js';
import { lengthsOf } from './segments.js';
import type { IndexStats, TierStats } from './types.js';

export function stats(ctx: IndexContext, fileBytes: number): Omit<IndexStats, 'cache'> {
  const db = ctx.conn.db;
  const tiers: Record<string, TierStats> = {};
  for (const t of ctx.tiers.list) tiers[t.name] = { pending: 0, ready: 0, evicting: 0, durable: 0, unverified: 0, readyBytes: 0 };
  const lengths = new Map<number, Uint32Array>();
  for (const r of db.prepare('SELECT p.seg, s.count, p.lengths FROM pagedata p JOIN segments s ON s.id = p.seg').all() as Array<{ seg: number; count: number; lengths: Buffer }>) {
    lengths.set(r.seg, lengthsOf(r.lengths, r.count));
  }
  const held = new Map<number, Uint8Array>();
  for (const r of db.prepare('SELECT id, states FROM copies').all() as Array<{ id: number; states: Buffer }>) {
    const seg = Math.floor(r.id / TIER_CODES);
    const rank = ctx.tiers.rankOfCode(r.id % TIER_CODES);
    if (rank === undefined) continue;
    const t = tiers[ctx.tiers.list[rank]!.name]!;
    const len = lengths.get(seg);
    let h = held.get(seg);
    if (!h) held.set(seg, (h = new Uint8Array(r.states.length)));
    for (let s = 0; s < r.states.length; s++) {
      const b = r.states[s]!;
      const state = b & STATE_MASK;
      if (state === STATE.absent) continue;
      h[s] = 1;
      if (b & DURABLE) t.durable++;
      if (state === STATE.pending) t.pending++;
      else if (state === STATE.evicting) t.evicting++;
      else {
        t.ready++;
        if (!(b & VERIFIED)) t.unverified++;
        t.readyBytes += len?.[s] ?? 0;
      }
    }
  }
  let pages = 0;
  let pageBytes = 0;
  for (const [seg, h] of held) {
    const len = lengths.get(seg);
    for (let s = 0; s < h.length; s++) {
      if (!h[s]) continue;
      pages++;
      pageBytes += len?.[s] ?? 0;
    }
  }
  return {
    namespaces: (db.prepare('SELECT count(*) AS n FROM namespaces').get() as { n: number }).n,
    pages,
    pageBytes,
    tiers,
    pins: ctx.pins.count(ctx.now()),
    fileBytes,
  };
}
