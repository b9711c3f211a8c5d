/**
 * The tiers an index was opened with: rank (fastest first, the order lookups list them in), persistence, and the
 * small integer code each tier name has in the file (tier_names), which keys its copies rows.
 */
import type { Connection } from './connection.js';
import { invalid } from './key-batch.js';
import { TIER_CODES } from './schema.js';
import { describeValue } from '@tiersync/native/errors';
import type { IndexTier } from './types.js';

export class TierTable {
  readonly list: readonly Required<IndexTier>[];
  private readonly rank = new Map<string, number>();
  private readonly codes: number[] = [];
  private readonly byCode = new Map<number, number>();
  /** Frozen tier-name lists by bit mask of ranks: the `tiers` of lookup answers, shared. */
  private readonly sets: Array<readonly string[] | undefined> = [];

  constructor(list: readonly Required<IndexTier>[]) {
    this.list = list;
    list.forEach((t, i) => this.rank.set(t.name, i));
  }

  get count(): number {
    return this.list.length;
  }

  /** Gives each tier its code in the file (new names get new codes). Call once, inside the open transaction. */
  bind(conn: Connection): Map<number, string> {
    const known = new Map<number, string>();
    for (const r of conn.db.prepare('SELECT code, name FROM tier_names').all() as Array<{ code: number; name: string }>) known.set(r.code, r.name);
    const byName = new Map([...known].map(([c, n]) => [n, c]));
    let next = Math.max(0, ...known.keys()) + 1;
    this.list.forEach((t, rank) => {
      let code = byName.get(t.name);
      if (code === undefined) {
        // Codes of names no longer configured are reused once their rows are gone (recovery drops them).
        while (known.has(next % TIER_CODES) || next % TIER_CODES === 0) next++;
        code = next % TIER_CODES;
        next++;
        known.set(code, t.name);
        conn.db.prepare('INSERT OR REPLACE INTO tier_names(code, name) VALUES (?, ?)').run(code, t.name);
      }
      this.codes[rank] = code;
      this.byCode.set(code, rank);
    });
    return known;
  }

  code(rank: number): number {
    return this.codes[rank]!;
  }

  rankOfCode(code: number): number | undefined {
    return this.byCode.get(code);
  }

  /** Rank of a configured tier name, or undefined. */
  rankOf(name: string): number | undefined {
    return this.rank.get(name);
  }

  /** @throws TierSyncError ERR_INVALID_ARGUMENT unless `tier` is one of the index's tiers. */
  check(tier: unknown, name: string): number {
    const r = typeof tier === 'string' ? this.rank.get(tier) : undefined;
    if (r === undefined) throw invalid(`${name} must be one of the index's tiers (${[...this.rank.keys()].join(', ')}), got ${describeValue(tier)}`);
    return r;
  }

  /** The shared frozen list of the tiers in `mask` (bit r = rank r), fastest first. */
  names(mask: number): readonly string[] {
    let s = this.sets[mask];
    if (!s) this.sets[mask] = s = Object.freeze(this.list.filter((_, r) => mask & (1 << r)).map((t) => t.name));
    return s;
  }
}
