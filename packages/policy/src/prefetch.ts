/**
 * Prefix prefetch: once a lookup has found a prefix of a request's pages, which of the next pages to start moving
 * into a fast tier before the engine asks for them. A KV prefix is usable only up to its first missing page, so
 * the plan never reaches past one.
 */
import { checkInteger, checkOptions, describe } from './internal/validate.js';

/** Options of {@link prefetchPlan}. */
export interface PrefetchOptions {
  /** How many pages from `position` on are considered: a safe integer >= 0. Default 4. */
  lookahead?: number;
  /** The tier prefetched into (0 = fastest); only pages whose fastest copy is slower are chosen. Default 0. */
  targetTier?: number;
}

/**
 * The page indices to prefetch, ascending.
 * @param tiers for each page of the request's key chain, in order, the tier of its fastest copy (0 = fastest),
 *   or `undefined` where no tier holds it
 * @param position index of the first page the engine has not loaded yet (0 <= position <= tiers.length)
 * @throws TypeError / RangeError naming a malformed argument
 */
export function prefetchPlan(
  tiers: readonly (number | undefined)[],
  position: number,
  options: PrefetchOptions = {},
): number[] {
  if (!Array.isArray(tiers)) throw new TypeError(`tiers must be an array, got ${describe(tiers)}`);
  checkInteger(position, 'position', 0, tiers.length);
  checkOptions(options);
  const lookahead = checkInteger(options.lookahead ?? 4, 'options.lookahead', 0);
  const target = checkInteger(options.targetTier ?? 0, 'options.targetTier', 0);
  const plan: number[] = [];
  const end = Math.min(tiers.length, position + lookahead);
  for (let i = position; i < end; i++) {
    const tier = tiers[i];
    if (tier === undefined) break;
    checkInteger(tier, `tiers[${i}]`, 0);
    if (tier > target) plan.push(i);
  }
  return plan;
}
