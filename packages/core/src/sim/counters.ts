/**
 * The counters a trace replay reports, the same for the live hierarchy (`tiersync demo --config`) and the
 * simulator (`tiersync sim --config`), so the two can be compared field by field. Printed as the last stdout line:
 * `{"counters":{"requests","lookupPages","prefixPageHits","tiers":[{"tier","hits","inserts","demotions",
 * "evictions","promotions"}]}}`.
 */

/** What happened on one tier during a replay, in pages. */
export interface TierCounters {
  /** Tier name (config `tiers[i].name`, default the URL scheme). */
  tier: string;
  /** Pages of a lookup's cached prefix whose fastest copy was on this tier (where the load reads them). */
  hits: number;
  /** Pages that landed on this tier: stores (first tier), demotions and promotions into it, write-through copies. */
  inserts: number;
  /** Pages this tier copied down to the next tier as it evicted them (counted on the tier they leave). */
  demotions: number;
  /** Pages freed on this tier by eviction (demoted first or not). */
  evictions: number;
  /** Pages copied up into this tier after a load found them lower down (counted on the tier they reach). */
  promotions: number;
}

/** Counters of one replay. */
export interface ReplayCounters {
  /** Requests replayed. */
  requests: number;
  /** Pages looked up (every full page of every prompt). */
  lookupPages: number;
  /** Pages in the cached prefixes lookups found. */
  prefixPageHits: number;
  /** Per tier, in config order. */
  tiers: TierCounters[];
}

/** Zeroed counters for tiers named `names`, in order. */
export function emptyCounters(names: readonly string[]): ReplayCounters {
  return { requests: 0, lookupPages: 0, prefixPageHits: 0, tiers: names.map((tier) => ({ tier, hits: 0, inserts: 0, demotions: 0, evictions: 0, promotions: 0 })) };
}

/** The counters as the one JSON line both commands print last. */
export function countersLine(counters: ReplayCounters): string {
  return JSON.stringify({ counters });
}

const TIER_FIELDS = ['hits', 'inserts', 'demotions', 'evictions', 'promotions'] as const;

/**
 * Every field where two replays differ, as `"tiers[1].evictions: 12 vs 13"` (empty when identical). Tiers are
 * compared by position and name.
 */
export function counterDifferences(a: ReplayCounters, b: ReplayCounters): string[] {
  const out: string[] = [];
  for (const f of ['requests', 'lookupPages', 'prefixPageHits'] as const) if (a[f] !== b[f]) out.push(`${f}: ${a[f]} vs ${b[f]}`);
  if (a.tiers.length !== b.tiers.length) out.push(`tiers: ${a.tiers.length} vs ${b.tiers.length}`);
  for (let i = 0; i < Math.min(a.tiers.length, b.tiers.length); i++) {
    const x = a.tiers[i]!;
    const y = b.tiers[i]!;
    if (x.tier !== y.tier) out.push(`tiers[${i}].tier: ${x.tier} vs ${y.tier}`);
    for (const f of TIER_FIELDS) if (x[f] !== y[f]) out.push(`tiers[${i}].${f} (${x.tier}): ${x[f]} vs ${y[f]}`);
  }
  return out;
}
