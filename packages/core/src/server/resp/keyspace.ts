/**
 * The RESP door's catalog: for each tenant, its Redis keys and where each value lives (its page keys in the tier
 * hierarchy, its length, its expiry). Tenants never share a catalog, so a key is only ever resolved inside the
 * tenant that the connection authenticated as: another tenant's key is simply absent.
 *
 * The catalog is held here in memory; with a durable catalog (resp.catalog) each entry is also written as a
 * manifest page through the hierarchy (manifest.ts), from which a restarted door rebuilds it.
 * SCAN walks keys in insertion order by a per-key sequence number, so a key present for a whole scan is returned
 * at least once, as Redis guarantees, however keys come and go meanwhile.
 */
import type { PageKey } from '@tiersync/tiers';

export interface ValueEntry {
  /** Value length, bytes. */
  readonly length: number;
  /** The value's pages in order; every page but the last is full (the hierarchy's page size). */
  readonly pages: readonly PageKey[];
  /** The pages of the value's manifest (durable catalog, manifest.ts); undefined with a catalog in memory. */
  readonly manifest?: readonly PageKey[] | undefined;
  /** Unix ms after which the key is gone; 0: never. */
  expiresAt: number;
  /** Loads reading this entry's pages right now; its pages are deleted only once this is 0. */
  readers: number;
  /** Replaced or deleted: its pages go once no reader is left. */
  dead: boolean;
  /** Position in the tenant's scan order. */
  seq: number;
  /**
   * Set while the native door may answer GETs of this entry from its mirror (native-engine.ts): its tenant id and
   * the key's bytes there, the id the door thread reports it by when it served a GET of it, and each page's slot
   * and that slot's version when it was put (a later version: the door thread has let it go). The entry's death
   * drops it from the mirror first.
   */
  mirror: { tenant: number; key: Uint8Array; id: number; slots: Uint32Array; versions: Uint32Array } | undefined;
}

/** Matches `text` against a Redis glob (`*`, `?`, `[abc]`, `[^a-z]`, `\x`), byte by byte (both latin1 strings). */
export function globMatch(pattern: string, text: string): boolean {
  // Iterative with one backtrack point for '*' (linear-ish, no recursion, no regex built from client input).
  let p = 0;
  let t = 0;
  let starP = -1;
  let starT = 0;
  const classMatch = (at: number, c: string): [boolean, number] => {
    let i = at + 1;
    let negate = false;
    if (pattern[i] === '^') {
      negate = true;
      i++;
    }
    let hit = false;
    for (; i < pattern.length && pattern[i] !== ']'; i++) {
      if (pattern[i] === '\\' && i + 1 < pattern.length) {
        i++;
        if (pattern[i] === c) hit = true;
      } else if (pattern[i + 1] === '-' && i + 2 < pattern.length && pattern[i + 2] !== ']') {
        let lo = pattern[i]!;
        let hi = pattern[i + 2]!;
        if (lo > hi) [lo, hi] = [hi, lo];
        if (c >= lo && c <= hi) hit = true;
        i += 2;
      } else if (pattern[i] === c) hit = true;
    }
    return [negate ? !hit : hit, i < pattern.length ? i + 1 : i];
  };
  while (t < text.length) {
    const pc = pattern[p];
    if (pc === '*') {
      starP = p++;
      starT = t;
      continue;
    }
    let ok = false;
    let nextP = p + 1;
    if (pc === '?') ok = true;
    else if (pc === '[') [ok, nextP] = classMatch(p, text[t]!);
    else if (pc === '\\' && p + 1 < pattern.length) {
      ok = pattern[p + 1] === text[t];
      nextP = p + 2;
    } else ok = pc !== undefined && pc === text[t];
    if (ok) {
      p = nextP;
      t++;
    } else if (starP >= 0) {
      p = starP + 1;
      t = ++starT;
    } else return false;
  }
  while (pattern[p] === '*') p++;
  return p === pattern.length;
}

export class TenantKeyspace {
  readonly #entries = new Map<string, ValueEntry>();
  /** Scan order: seqs ascending; a deleted key leaves a null in #orderKeys until compaction. */
  #orderSeqs: number[] = [];
  #orderKeys: Array<string | null> = [];
  #holes = 0;
  #seq = 0;
  /** Bytes of the values, and of the key names, held. */
  bytes = 0;
  keyBytes = 0;

  get size(): number {
    return this.#entries.size;
  }

  /** The live entry of `key` (expired entries are removed and reported through `onDead`). */
  get(key: string, now: number, onDead: (e: ValueEntry) => void): ValueEntry | undefined {
    const e = this.#entries.get(key);
    if (!e) return undefined;
    if (e.expiresAt && e.expiresAt <= now) {
      this.delete(key, onDead);
      return undefined;
    }
    return e;
  }

  /** Installs `entry` for `key`; a replaced entry keeps its scan position and goes to `onDead`. */
  set(key: string, entry: Omit<ValueEntry, 'seq' | 'readers' | 'dead' | 'mirror'>, onDead: (e: ValueEntry) => void): ValueEntry {
    const old = this.#entries.get(key);
    // One object shape for every entry (no spread): this runs once per SET.
    const e: ValueEntry = { length: entry.length, pages: entry.pages, manifest: entry.manifest, expiresAt: entry.expiresAt, readers: 0, dead: false, seq: old ? old.seq : ++this.#seq, mirror: undefined };
    this.#entries.set(key, e);
    this.bytes += e.length - (old?.length ?? 0);
    if (old) onDead(old);
    else {
      this.keyBytes += key.length;
      this.#orderSeqs.push(e.seq);
      this.#orderKeys.push(key);
    }
    return e;
  }

  delete(key: string, onDead: (e: ValueEntry) => void): boolean {
    const e = this.#entries.get(key);
    if (!e) return false;
    this.#entries.delete(key);
    this.bytes -= e.length;
    this.keyBytes -= key.length;
    const i = this.#find(e.seq);
    if (i < this.#orderSeqs.length && this.#orderSeqs[i] === e.seq) {
      this.#orderKeys[i] = null;
      this.#holes++;
    }
    if (this.#holes > 1024 && this.#holes * 2 > this.#orderKeys.length) this.#compact();
    onDead(e);
    return true;
  }

  /** Index of the first order slot whose seq is >= `seq`. */
  #find(seq: number): number {
    let lo = 0;
    let hi = this.#orderSeqs.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#orderSeqs[mid]! < seq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  #compact(): void {
    const seqs: number[] = [];
    const keys: string[] = [];
    for (let i = 0; i < this.#orderKeys.length; i++) {
      const k = this.#orderKeys[i];
      if (k !== null && k !== undefined) {
        seqs.push(this.#orderSeqs[i]!);
        keys.push(k);
      }
    }
    this.#orderSeqs = seqs;
    this.#orderKeys = keys;
    this.#holes = 0;
  }

  /**
   * One SCAN step: up to `count` order slots after `cursor` are visited; the keys among them that are live and
   * match are returned with the cursor to continue from (0: done).
   */
  scan(cursor: number, count: number, match: string | undefined, now: number, onDead: (e: ValueEntry) => void): { cursor: number; keys: string[] } {
    const keys: string[] = [];
    let i = this.#find(cursor + 1);
    let visited = 0;
    let last = cursor;
    const expired: string[] = [];
    while (i < this.#orderSeqs.length && visited < count) {
      const k = this.#orderKeys[i];
      last = this.#orderSeqs[i]!;
      i++;
      if (k === null || k === undefined) continue;
      visited++;
      const e = this.#entries.get(k);
      if (!e) continue;
      if (e.expiresAt && e.expiresAt <= now) {
        expired.push(k);
        continue;
      }
      if (match === undefined || globMatch(match, k)) keys.push(k);
    }
    for (const k of expired) this.delete(k, onDead);
    return { cursor: i >= this.#orderSeqs.length ? 0 : last, keys };
  }

  /** Every entry (for FLUSHDB and shutdown). */
  entries(): IterableIterator<[string, ValueEntry]> {
    return this.#entries.entries();
  }

  clear(onDead: (e: ValueEntry) => void): number {
    const all = [...this.#entries.keys()];
    for (const k of all) this.delete(k, onDead);
    return all.length;
  }
}
