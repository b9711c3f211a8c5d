/**
 * Pins: pages that no tier may evict or remove while held.
 *
 * - Durable pins (TTL and user pins: `pin`, `unpin`, `expire`) must survive a restart, so they are rows of the
 *   pins table (key bytes, owner, expiry).
 * - Load pins (`beginLoad` .. `endLoad`) only protect a read in flight, which a restart ends anyway, so they live
 *   in memory: a count per segment slot and, per owner, the slots it holds. No SQL on the load path. (The planner
 *   takes load pins over once the hierarchy uses it; this keeps the index's load API working meanwhile.)
 */
import type { Connection } from './connection.js';

export class DurablePins {
  constructor(private readonly conn: Connection) {}

  /** Pins each key for `owner` until `expires` (re-pinning sets the new expiry). */
  pin(keys: readonly Uint8Array[], owner: string, expires: number): void {
    const st = this.conn.stmt('INSERT INTO pins(key, owner, expires_ms) VALUES (?, ?, ?) ON CONFLICT(key, owner) DO UPDATE SET expires_ms = excluded.expires_ms');
    for (const k of keys) st.run(k, owner, expires);
  }

  /** Removes `owner`'s pins on `keys` (every owner's when undefined). Returns pins removed. */
  unpin(keys: readonly Uint8Array[], owner: string | undefined): number {
    const st = owner === undefined ? this.conn.stmt('DELETE FROM pins WHERE key = ?') : this.conn.stmt('DELETE FROM pins WHERE key = ? AND owner = ?');
    let n = 0;
    for (const k of keys) n += (owner === undefined ? st.run(k) : st.run(k, owner)).changes;
    return n;
  }

  /** Whether any unexpired pin exists (lets hot paths skip per-key checks when none does). */
  any(now: number): boolean {
    return this.conn.stmt('SELECT 1 FROM pins WHERE expires_ms > ? LIMIT 1').get(now) !== undefined;
  }

  /** Whether `key` holds an unexpired pin. */
  held(key: Uint8Array, now: number): boolean {
    return this.conn.stmt('SELECT 1 FROM pins WHERE key = ? AND expires_ms > ? LIMIT 1').get(key, now) !== undefined;
  }

  /** Deletes pins expired at `now`; returns the keys released, each once, as hex. */
  expire(now: number): string[] {
    const rows = this.conn.stmt('DELETE FROM pins WHERE expires_ms <= ? RETURNING lower(hex(key)) AS key').all(now) as Array<{ key: string }>;
    return [...new Set(rows.map((r) => r.key))];
  }

  /** Every unexpired pin, as hex keys (a reopened hierarchy hands them back to its planner). */
  active(now: number): Array<{ key: string; owner: string; expiresAt: number }> {
    return this.conn.stmt('SELECT lower(hex(key)) AS key, owner, expires_ms AS expiresAt FROM pins WHERE expires_ms > ? ORDER BY expires_ms, owner').all(now) as Array<{ key: string; owner: string; expiresAt: number }>;
  }

  count(now: number): number {
    return (this.conn.stmt('SELECT count(*) AS n FROM pins WHERE expires_ms > ?').get(now) as { n: number }).n;
  }
}

/** A slot of a segment packed in one number (segment ids stay below 2^40). */
export const packSlot = (seg: number, slot: number): number => seg * 8192 + slot;

export class LoadPins {
  /** Pin count per slot, per segment id. */
  private readonly counts = new Map<number, Uint16Array>();
  /** Per owner: the packed slots it pinned (in pin order) and when they expire. */
  private readonly owners = new Map<string, { slots: number[]; expires: number }>();

  private add(packed: number, by: number): void {
    const seg = Math.floor(packed / 8192);
    let c = this.counts.get(seg);
    if (!c) {
      if (by < 0) return;
      this.counts.set(seg, (c = new Uint16Array(8192)));
    }
    const s = packed % 8192;
    c[s] = Math.max(0, c[s]! + by);
  }

  /** Drops the pins of owners whose time ran out (a load that never ended). */
  sweep(now: number): void {
    for (const [owner, r] of this.owners) {
      if (r.expires > now) continue;
      for (const p of r.slots) this.add(p, -1);
      this.owners.delete(owner);
    }
  }

  pin(owner: string, slots: readonly number[], expires: number): void {
    let r = this.owners.get(owner);
    if (!r) this.owners.set(owner, (r = { slots: [], expires }));
    r.expires = expires;
    for (const p of slots) {
      r.slots.push(p);
      this.add(p, 1);
    }
  }

  /** Releases `owner`'s pins on `slots`; returns how many were held. */
  unpin(owner: string, slots: readonly number[]): number {
    const r = this.owners.get(owner);
    if (!r) return 0;
    // The usual call releases exactly what was pinned, in the same order: compare, then release all.
    let same = r.slots.length === slots.length;
    for (let i = 0; same && i < slots.length; i++) same = r.slots[i] === slots[i];
    let released: number[];
    const kept: number[] = [];
    if (same) released = r.slots;
    else {
      const want = Float64Array.from(slots).sort();
      const have = Float64Array.from(r.slots).sort();
      released = [];
      let i = 0;
      for (const p of have) {
        while (i < want.length && want[i]! < p) i++;
        if (i < want.length && want[i] === p) {
          released.push(p);
          i++;
        } else kept.push(p);
      }
    }
    for (const p of released) this.add(p, -1);
    if (kept.length) r.slots = kept;
    else this.owners.delete(owner);
    return released.length;
  }

  held(seg: number, slot: number): boolean {
    const c = this.counts.get(seg);
    return c !== undefined && c[slot]! > 0;
  }

  get active(): boolean {
    return this.owners.size > 0;
  }
}
