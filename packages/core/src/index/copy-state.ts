/**
 * The state of one copy (a page on one tier) as one byte, and the only table of moves between states.
 *
 * A copy byte holds exactly one state in its low two bits (so "one state per copy" holds by construction) and two
 * flags: `durable` (written with fdatasync or equivalent) and `verified` (bytes matched the page CRC32C since the
 * last open, or written by this process). Every change of a copy goes through `applyTransition`, which looks the
 * move up in a precomputed table and refuses a move the table does not allow with an IllegalTransitionError;
 * callers that report rather than fail (a commit of a copy that was aborted meanwhile is "missing", not an error)
 * ask `allows` first.
 */
import { TierSyncError } from '@tiersync/native/errors';
import type { CopyState } from './types.js';

/** States, in the low two bits of a copy byte. `absent`: no copy on that tier (a hole). */
export const STATE = { absent: 0, pending: 1, ready: 2, evicting: 3 } as const;
export type StateCode = (typeof STATE)[keyof typeof STATE];
export const STATE_MASK = 3;
/** Flag: the copy was written durably. */
export const DURABLE = 4;
/** Flag: the copy's bytes matched the page CRC32C since the last open. */
export const VERIFIED = 8;

const STATE_NAMES = ['absent', 'pending', 'ready', 'evicting'] as const;

/**
 * The moves. `from`: states the move applies to; `to`: the state after; `flags`: how the flags change
 * ('keep', 'clear', or set from the argument: durable as given, verified set).
 */
export const TRANSITIONS = {
  /** A store or a copy to another tier starts writing: invisible to lookups until committed. */
  begin: { from: ['absent'], to: 'pending', flags: 'clear' },
  /** The bytes are written: visible to lookups; durable as the writer says; verified (written by this process). */
  commit: { from: ['pending'], to: 'ready', flags: 'written' },
  /** The write failed or was abandoned. */
  abort: { from: ['pending'], to: 'absent', flags: 'clear' },
  /** The copy is chosen as a victim: invisible to lookups from now on, freed by the caller, then removed. */
  evict: { from: ['ready'], to: 'evicting', flags: 'keep' },
  /** The copy is gone (freed, lost, or its tier dropped it). */
  remove: { from: ['pending', 'ready', 'evicting'], to: 'absent', flags: 'clear' },
  /** A read matched the page CRC32C. */
  verify: { from: ['ready'], to: 'ready', flags: 'verified' },
  /** A page found on a tier (rebuilding the index from the tiers) is recorded as ready, unverified until read. */
  adopt: { from: ['absent'], to: 'ready', flags: 'adopted' },
  /** At open: a durable ready copy on a persistent tier survives the restart, unverified until read. */
  restart: { from: ['ready'], to: 'ready', flags: 'unverified' },
} as const satisfies Record<string, { from: readonly string[]; to: string; flags: string }>;

export type Transition = keyof typeof TRANSITIONS;
const NAMES = Object.keys(TRANSITIONS) as Transition[];
const INDEX = Object.fromEntries(NAMES.map((n, i) => [n, i])) as Record<Transition, number>;

/**
 * table[(transition * 2 + durableArgument) * 16 + byte] = the byte after the move, or -1 when the move is illegal
 * from that byte. Built once from TRANSITIONS; a move is one array read on the hot path.
 */
const TABLE = (() => {
  const t = new Int16Array(NAMES.length * 2 * 16).fill(-1);
  NAMES.forEach((name, ti) => {
    const m = TRANSITIONS[name];
    const to = STATE[m.to as keyof typeof STATE];
    for (let durable = 0; durable < 2; durable++) {
      for (let byte = 0; byte < 16; byte++) {
        const state = STATE_NAMES[byte & STATE_MASK]!;
        if (!(m.from as readonly string[]).includes(state)) continue;
        // A byte whose flags are set on an absent copy is not a valid byte: refuse it as a source.
        if (state === 'absent' && byte !== 0) continue;
        let flags = byte & (DURABLE | VERIFIED);
        if (m.flags === 'clear') flags = 0;
        else if (m.flags === 'written') flags = (durable ? DURABLE : 0) | VERIFIED;
        else if (m.flags === 'verified') flags |= VERIFIED;
        else if (m.flags === 'adopted') flags = durable ? DURABLE : 0;
        else if (m.flags === 'unverified') flags &= ~VERIFIED;
        t[(ti * 2 + durable) * 16 + byte] = to === STATE.absent ? 0 : to | flags;
      }
    }
  });
  return t;
})();

/** Thrown when a move is asked of a copy in a state the transition table does not allow it from. */
export class IllegalTransitionError extends TierSyncError {
  readonly transition: Transition;
  readonly from: 'absent' | CopyState;
  constructor(transition: Transition, byte: number, what: string) {
    const from = STATE_NAMES[byte & STATE_MASK]!;
    const allowed = (TRANSITIONS[transition].from as readonly string[]).join(' or ');
    super(`copy state: cannot ${transition} ${what}: it is ${from}, and ${transition} applies to ${allowed} copies`, 'ERR_INVALID_ARGUMENT');
    this.transition = transition;
    this.from = from;
  }
}

/** Whether `transition` may be applied to a copy in state `byte`. */
export function allows(byte: number, transition: Transition): boolean {
  return TABLE[INDEX[transition] * 2 * 16 + byte]! >= 0;
}

/** The copy byte after `transition` (as applyTransition), or -1 when the table does not allow it: no throw. */
export function nextByte(byte: number, transition: Transition, durable: boolean): number {
  return TABLE[(INDEX[transition] * 2 + (durable ? 1 : 0)) * 16 + byte]!;
}

/**
 * The copy byte after `transition`; `durable` is the argument of commit and adopt (ignored by the others).
 * @throws IllegalTransitionError when the table does not allow the move; `what` names the copy in the message.
 */
export function applyTransition(byte: number, transition: Transition, durable = false, what: string | (() => string) = 'the copy'): number {
  const next = TABLE[(INDEX[transition] * 2 + (durable ? 1 : 0)) * 16 + byte]!;
  if (next < 0) throw new IllegalTransitionError(transition, byte, typeof what === 'function' ? what() : what);
  return next;
}

export const stateOf = (byte: number): StateCode => (byte & STATE_MASK) as StateCode;
/** The public name of a held copy's state. */
export const stateName = (byte: number): CopyState => STATE_NAMES[byte & STATE_MASK] as CopyState;
export const isHeld = (byte: number): boolean => (byte & STATE_MASK) !== STATE.absent;
export const isReady = (byte: number): boolean => (byte & STATE_MASK) === STATE.ready;
