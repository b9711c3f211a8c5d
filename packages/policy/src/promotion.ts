/**
 * Promotion on hit: after a page is served from a slower tier, which faster tier (if any) should receive a copy.
 * Tiers are numbered from the fastest, 0 (e.g. 0 `hbm`, 1 `host`, 2 `fs`, 3 `object`).
 */
import { checkInteger, checkOptions, describe } from './internal/validate.js';

/** When and where a hit page is promoted. */
export type PromotionRule =
  | { readonly kind: 'never' }
  | {
      /** `'to-top'`: into the fastest allowed tier; `'one-up'`: into the tier just above the one that served it. */
      readonly kind: 'to-top' | 'one-up';
      /** Hits (this one included) a page needs before it is promoted: a safe integer >= 1. Default 1. */
      readonly minHits?: number;
      /** The fastest tier promotion may fill: a safe integer >= 0. Default 0. */
      readonly ceiling?: number;
    };

/**
 * The tier to promote a hit page into, or `undefined` to leave it where it is.
 * @param tier the tier that served the hit (0 = fastest)
 * @param hits hits of the page on that tier, this one included (>= 1)
 * @throws TypeError / RangeError naming a malformed argument
 */
export function promotionTarget(rule: PromotionRule, tier: number, hits: number): number | undefined {
  checkPromotionRule(rule);
  checkInteger(tier, 'tier', 0);
  checkInteger(hits, 'hits', 1);
  if (rule.kind === 'never' || hits < (rule.minHits ?? 1)) return undefined;
  const ceiling = rule.ceiling ?? 0;
  const target = rule.kind === 'to-top' ? ceiling : Math.max(tier - 1, ceiling);
  return target < tier ? target : undefined;
}

/**
 * Validates a promotion rule (for config loading).
 * @throws TypeError / RangeError naming the bad field
 */
export function checkPromotionRule(rule: PromotionRule): PromotionRule {
  checkOptions(rule, 'rule');
  if (rule.kind === 'never') return rule;
  if (rule.kind !== 'to-top' && rule.kind !== 'one-up') {
    throw new TypeError(`rule.kind must be 'never', 'to-top' or 'one-up', got ${describe((rule as { kind: unknown }).kind)}`);
  }
  if (rule.minHits !== undefined) checkInteger(rule.minHits, 'rule.minHits', 1);
  if (rule.ceiling !== undefined) checkInteger(rule.ceiling, 'rule.ceiling', 0);
  return rule;
}
