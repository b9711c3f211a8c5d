import { describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native/errors';
import { DURABLE, IllegalTransitionError, STATE, TRANSITIONS, VERIFIED, allows, applyTransition, stateName } from './copy-state.js';

describe('copy state: the transition table', () => {
  it('walks a copy through its life: begin, commit, evict, remove', () => {
    let b = applyTransition(STATE.absent, 'begin');
    expect(stateName(b)).toBe('pending');
    b = applyTransition(b, 'commit', true);
    expect(b).toBe(STATE.ready | DURABLE | VERIFIED);
    b = applyTransition(b, 'restart');
    expect(b).toBe(STATE.ready | DURABLE);
    b = applyTransition(b, 'verify');
    expect(b & VERIFIED).toBe(VERIFIED);
    b = applyTransition(b, 'evict');
    expect(stateName(b)).toBe('evicting');
    expect(applyTransition(b, 'remove')).toBe(STATE.absent);
    expect(applyTransition(STATE.absent, 'adopt', false)).toBe(STATE.ready);
    expect(applyTransition(applyTransition(STATE.absent, 'begin'), 'abort')).toBe(STATE.absent);
  });

  it('refuses illegal transitions with a typed error naming the move and the state', () => {
    const ready = applyTransition(applyTransition(STATE.absent, 'begin'), 'commit');
    for (const [byte, t] of [
      [STATE.absent, 'commit'],
      [STATE.absent, 'evict'],
      [STATE.absent, 'remove'],
      [ready, 'begin'],
      [ready, 'commit'],
      [ready, 'abort'],
      [ready, 'adopt'],
      [STATE.pending, 'evict'],
      [STATE.pending, 'verify'],
      [STATE.evicting, 'commit'],
    ] as const) {
      expect(allows(byte, t)).toBe(false);
      let err: unknown;
      try {
        applyTransition(byte, t, false, 'page 3 on host');
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(IllegalTransitionError);
      expect(err).toBeInstanceOf(TierSyncError);
      expect((err as IllegalTransitionError).transition).toBe(t);
      expect((err as Error).message).toMatch(new RegExp(`cannot ${t} page 3 on host: it is ${stateName(byte)}`));
    }
  });

  it('keeps exactly one state per copy for every allowed move', () => {
    for (const t of Object.keys(TRANSITIONS) as Array<keyof typeof TRANSITIONS>) {
      for (let byte = 0; byte < 16; byte++) {
        for (const durable of [false, true]) {
          if (!allows(byte, t)) continue;
          const next = applyTransition(byte, t, durable);
          expect(next).toBeGreaterThanOrEqual(0);
          expect(next).toBeLessThan(16);
          // An absent copy carries no flags.
          if ((next & 3) === STATE.absent) expect(next).toBe(0);
          expect(stateName(next)).toBe(TRANSITIONS[t].to === 'absent' ? 'absent' : TRANSITIONS[t].to);
        }
      }
    }
  });
});
