/**
 * Write modes: when a page stored on a tier also gets a copy on the tier below. One pure decision function,
 * {@link decideWrite}, called at three moments of a page's life on a tier:
 *
 * | mode | `stored` | `hit` | `evicting` |
 * |---|---|---|---|
 * | `write-through` | copy down | copy down if still missing | copy down if still missing |
 * | `write-back` | nothing | nothing | copy down (demote) if missing |
 * | `selective` (minHits n) | copy down if hits >= n | copy down once hits >= n | copy down if hits >= n, or if `coldOnEvict` is `'demote'`; else drop |
 *
 * "If missing" means `copiedBelow` is false (a copy below exists or is already queued). A page evicted without a
 * copy below is dropped: the data is gone from the hierarchy and will be recomputed if needed again.
 */
import { checkInteger, checkOptions, describe } from './internal/validate.js';

/** How copies reach the tier below. */
export type WriteMode =
  | { readonly kind: 'write-through' }
  | { readonly kind: 'write-back' }
  | {
      readonly kind: 'selective';
      /** Hits on this tier a page needs before it is copied down: a safe integer >= 0 (0 behaves like write-through). */
      readonly minHits: number;
      /** What happens to a page evicted before reaching `minHits`. Default `'drop'`. */
      readonly coldOnEvict?: 'demote' | 'drop';
    };

/** The moment of the decision: the page was just stored, just hit, or is about to be evicted from the tier. */
export type WriteEvent = 'stored' | 'hit' | 'evicting';

/** What is known of the page on this tier. */
export interface WriteState {
  /** Hits on this tier since the page was stored (count the current hit on `hit`): a safe integer >= 0. */
  readonly hits: number;
  /** Whether a copy exists, or is queued, on a lower tier. */
  readonly copiedBelow: boolean;
}

/** `'copy-down'`: queue a copy to the tier below (on `evicting`: demote before freeing). `'none'`: do nothing more. */
export type WriteAction = 'copy-down' | 'none';

/**
 * Decides whether the page gets (or keeps) a copy on the tier below at `event`.
 * @throws TypeError / RangeError naming a malformed `mode`, `event` or `state`
 */
export function decideWrite(mode: WriteMode, event: WriteEvent, state: WriteState): WriteAction {
  checkWriteMode(mode);
  if (event !== 'stored' && event !== 'hit' && event !== 'evicting') {
    throw new TypeError(`event must be 'stored', 'hit' or 'evicting', got ${describe(event)}`);
  }
  checkOptions(state, 'state');
  const hits = checkInteger(state.hits, 'state.hits', 0);
  if (typeof state.copiedBelow !== 'boolean') {
    throw new TypeError(`state.copiedBelow must be a boolean, got ${describe(state.copiedBelow)}`);
  }
  if (state.copiedBelow) return 'none';
  switch (mode.kind) {
    case 'write-through':
      return 'copy-down';
    case 'write-back':
      return event === 'evicting' ? 'copy-down' : 'none';
    case 'selective': {
      const hot = hits >= mode.minHits;
      if (event === 'evicting') return hot || mode.coldOnEvict === 'demote' ? 'copy-down' : 'none';
      return hot ? 'copy-down' : 'none';
    }
  }
}

/**
 * Validates a write mode (for config loading).
 * @throws TypeError / RangeError naming the bad field
 */
export function checkWriteMode(mode: WriteMode): WriteMode {
  checkOptions(mode, 'mode');
  switch (mode.kind) {
    case 'write-through':
    case 'write-back':
      return mode;
    case 'selective':
      checkInteger(mode.minHits, 'mode.minHits', 0);
      if (mode.coldOnEvict !== undefined && mode.coldOnEvict !== 'demote' && mode.coldOnEvict !== 'drop') {
        throw new TypeError(`mode.coldOnEvict must be 'demote' or 'drop', got ${describe(mode.coldOnEvict)}`);
      }
      return mode;
    default:
      throw new TypeError(
        `mode.kind must be 'write-through', 'write-back' or 'selective', got ${describe((mode as { kind: unknown }).kind)}`,
      );
  }
}
