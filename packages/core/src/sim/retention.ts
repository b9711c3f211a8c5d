/**
 * Soft retention hints for a replay, derived from a request trace: what an agent server would tell the cache
 * (`session-aware` policies, wrappers/session-aware.ts of `@tiersync/policy`) when each turn's KV is stored.
 *
 * Sessions: a request continues an earlier one when it is the next request to reuse that request's deepest full
 * page (its last page but one: the last is often a partial page that the next turn rewrites), so a session is a
 * chain of requests, each extending the previous one's prompt (a conversation's turns, an agent's steps between
 * tool calls). A page is private to a session when only that session's requests reference it.
 *
 * The hint stored with request r is the session's next turn: `expectedReturnMs` = the next turn's arrival minus
 * r's, given for all of r's pages (the session needs its whole context back, a shared system prompt included), or
 * `finished` when the session has no next turn, given for its private pages only (an agent knows its own
 * conversation from the shared template, and must not declare the template finished). What the agent knows is the trace's own
 * future at session granularity, so the model has knobs to make it worse: `noise` (each expected wait times a
 * log-uniform factor in [1/(1+noise), 1+noise]) and `finishedOnly` (only the end of sessions is known).
 */
import type { RetentionHint } from '@tiersync/policy';
import { invalid } from './errors.js';

/** How hints are derived (all plain data, so a job can carry it to a worker). */
export interface RetentionModel {
  /** Error on each expected wait: a factor log-uniform in [1/(1+noise), 1+noise]. A number >= 0. Default 0. */
  noise?: number;
  /** Seed of the noise (xorshift32). Default 1. */
  seed?: number;
  /** Hint only that sessions finished, never when they come back. Default false. */
  finishedOnly?: boolean;
}

/** The hint of one request: which of its pages it covers, and what it says. */
export interface RequestRetention {
  /** Indices into the request's pages the hint covers: all of them, or the private ones for `finished`. */
  readonly pages: readonly number[];
  /** `undefined`: nothing to say (finishedOnly while the session goes on). */
  readonly hint: RetentionHint | undefined;
}

/**
 * The retention hint of every request of `pages` (a workload's page ids per request, sim/workload.ts) arriving at
 * `timesMs`.
 * @throws TierSyncError ERR_INVALID_ARGUMENT for a bad model
 */
export function retentionHints(pages: readonly Uint32Array[], timesMs: readonly number[], model: RetentionModel = {}): RequestRetention[] {
  const noise = model.noise ?? 0;
  if (typeof noise !== 'number' || !Number.isFinite(noise) || noise < 0) throw invalid(`retention.noise must be a number >= 0, got ${String(noise)}`);
  let seed = model.seed ?? 1;
  if (!Number.isSafeInteger(seed) || seed === 0) throw invalid(`retention.seed must be a non-zero integer, got ${String(seed)}`);
  seed = seed >>> 0 || 1;
  const n = pages.length;
  // next[r]: the request that next reuses r's deepest full page (its session's next turn), -1 for none.
  const next = new Int32Array(n).fill(-1);
  const lastUser = new Map<number, number>();
  for (let r = n - 1; r >= 0; r--) {
    const p = pages[r]!;
    if (p.length > 0) {
      const deep = p[Math.max(0, p.length - 2)]!;
      const later = lastUser.get(deep);
      if (later !== undefined) next[r] = later;
    }
    for (let j = 0; j < p.length; j++) lastUser.set(p[j]!, r);
  }
  // Sessions: r and next[r] share one (the first claim wins: a page reused by several later requests continues one).
  const session = new Int32Array(n).fill(-1);
  let sessions = 0;
  for (let r = 0; r < n; r++) {
    if (session[r] === -1) session[r] = sessions++;
    const s = next[r]!;
    if (s >= 0 && session[s] === -1) session[s] = session[r]!;
    else if (s >= 0 && session[s] !== session[r]) next[r] = -1;
  }
  // A page is private to the one session referencing it (-2 once a second session does).
  const owner = new Map<number, number>();
  for (let r = 0; r < n; r++) {
    for (const page of pages[r]!) {
      const o = owner.get(page);
      if (o === undefined) owner.set(page, session[r]!);
      else if (o !== session[r] && o !== -2) owner.set(page, -2);
    }
  }
  const out: RequestRetention[] = new Array(n);
  for (let r = 0; r < n; r++) {
    const p = pages[r]!;
    const mine: number[] = [];
    let hint: RetentionHint | undefined;
    if (next[r]! < 0) {
      hint = { finished: true };
      for (let j = 0; j < p.length; j++) if (owner.get(p[j]!) === session[r]) mine.push(j);
    } else if (!model.finishedOnly) {
      for (let j = 0; j < p.length; j++) mine.push(j);
      let wait = Math.max(0, timesMs[next[r]!]! - timesMs[r]!);
      if (noise > 0) {
        seed ^= seed << 13;
        seed ^= seed >>> 17;
        seed ^= seed << 5;
        seed >>>= 0;
        const u = seed / 2 ** 32;
        wait *= Math.exp((2 * u - 1) * Math.log(1 + noise));
      }
      hint = { expectedReturnMs: wait };
    }
    out[r] = { pages: mine, hint };
  }
  return out;
}

/** Checks a retention model. @throws TierSyncError ERR_INVALID_ARGUMENT */
export function checkRetentionModel(model: RetentionModel): RetentionModel {
  retentionHints([], [], model);
  return model;
}
