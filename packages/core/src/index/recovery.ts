/**
 * What opening an index repairs: copies on tiers no longer configured or not persistent are dropped, copies that
 * were being written or evicted when the last process stopped are dropped, ready copies never written durably are
 * dropped, and durable ready copies are kept unverified (transition `restart`) until a read checks their checksum.
 * Segments left without any copy are deleted. One pass over the copies rows, in the open transaction.
 */
import { STATE, STATE_MASK, DURABLE, applyTransition } from './copy-state.js';
import type { Connection } from './connection.js';
import { TIER_CODES } from './schema.js';
import type { TierTable } from './tiers.js';
import type { RecoveryReport } from './types.js';

export function recover(conn: Connection, tiers: TierTable, names: ReadonlyMap<number, string>, now: number, from: number, schemaVersion: number): RecoveryReport {
  const report: RecoveryReport = {
    migratedFrom: from,
    schemaVersion,
    droppedVolatile: {},
    droppedUnknownTier: {},
    droppedPending: 0,
    droppedEvicting: 0,
    droppedNotDurable: 0,
    unverified: 0,
    orphanPages: 0,
    expiredPins: 0,
  };
  const db = conn.db;
  const before = new Map<number, Uint8Array>();
  const after = new Map<number, Uint8Array>();
  const mark = (m: Map<number, Uint8Array>, seg: number, states: Uint8Array) => {
    let a = m.get(seg);
    if (!a) m.set(seg, (a = new Uint8Array(states.length)));
    for (let s = 0; s < states.length; s++) if (states[s]! & STATE_MASK) a[s] = 1;
  };
  const drop = db.prepare('DELETE FROM copies WHERE id = ?');
  const update = db.prepare('UPDATE copies SET states = ? WHERE id = ?');
  for (const r of db.prepare('SELECT id, states FROM copies').all() as Array<{ id: number; states: Buffer }>) {
    const seg = Math.floor(r.id / TIER_CODES);
    const code = r.id % TIER_CODES;
    const states = new Uint8Array(r.states);
    mark(before, seg, states);
    const rank = tiers.rankOfCode(code);
    const tier = rank === undefined ? undefined : tiers.list[rank]!;
    if (!tier || !tier.persistent) {
      let held = 0;
      for (const b of states) if (b & STATE_MASK) held++;
      const name = tier?.name ?? names.get(code) ?? `tier#${code}`;
      const into = tier ? report.droppedVolatile : report.droppedUnknownTier;
      into[name] = (into[name] ?? 0) + held;
      drop.run(r.id);
      continue;
    }
    let changed = false;
    let kept = false;
    for (let s = 0; s < states.length; s++) {
      const b = states[s]!;
      const state = b & STATE_MASK;
      if (state === STATE.absent) continue;
      let next = 0;
      if (state === STATE.pending) report.droppedPending++;
      else if (state === STATE.evicting) report.droppedEvicting++;
      else if (!(b & DURABLE)) report.droppedNotDurable++;
      else {
        next = applyTransition(b, 'restart');
        report.unverified++;
        kept = true;
      }
      if (next !== b) {
        states[s] = next;
        changed = true;
      }
    }
    if (!kept) drop.run(r.id);
    else {
      if (changed) update.run(Buffer.from(states.buffer, states.byteOffset, states.length), r.id);
      mark(after, seg, states);
    }
  }
  for (const [seg, held] of before) {
    const left = after.get(seg);
    for (let s = 0; s < held.length; s++) if (held[s] && !left?.[s]) report.orphanPages++;
  }
  // Segments with no copy left on any tier, then the rows that hang off them.
  db.exec(`
    DELETE FROM segments WHERE NOT EXISTS (SELECT 1 FROM copies c WHERE c.id BETWEEN segments.id * ${TIER_CODES} AND segments.id * ${TIER_CODES} + ${TIER_CODES - 1});
    DELETE FROM pagedata WHERE seg NOT IN (SELECT id FROM segments);
    DELETE FROM locations WHERE id NOT IN (SELECT id FROM copies);
  `);
  const configured = tiers.list.map((_, r) => tiers.code(r));
  db.prepare(`DELETE FROM tier_names WHERE code NOT IN (${configured.map(() => '?').join(', ')})`).run(...configured);
  report.expiredPins = db.prepare('DELETE FROM pins WHERE expires_ms <= ?').run(now).changes;
  return report;
}
