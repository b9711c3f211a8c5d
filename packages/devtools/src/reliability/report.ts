/**
 * One row of the reliability report: a scenario, how often it ran, how many faults it injected, and the three
 * counts that must be zero (acknowledged-durable pages lost, corrupt pages served, hangs).
 */
export interface ScenarioResult {
  name: string;
  /** Runs of the scenario (kill cycles, fault trials, fuzz cases, sessions). */
  runs: number;
  /** Faults injected (kills, failed I/Os, refused requests, malformed inputs). */
  faults: number;
  /** Pages acknowledged durable that could not be read back byte-exact afterwards. Must be 0. */
  lostDurablePages: number;
  /** Pages delivered as data whose bytes were not the page's. Must be 0. */
  corruptPagesServed: number;
  /** Operations that passed their deadline without settling. Must be 0. */
  hangs: number;
  /** Unexpected outcomes (an untyped error, a crash, a wrong typed error): each named in `notes`. Must be 0. */
  failures: number;
  /** Scenario-specific figures (acknowledged pages, leaked slots, latency percentiles, ...). */
  details: Record<string, number | string>;
  /** Human-readable findings, one line each (empty when all went as expected). */
  notes: string[];
  /** The command that reproduces the row. */
  command: string;
}

export interface ReliabilityReport {
  suite: 'reliability';
  scenarios: ScenarioResult[];
}

/** A fresh result with every count at zero. */
export function scenario(name: string, command: string): ScenarioResult {
  return { name, runs: 0, faults: 0, lostDurablePages: 0, corruptPagesServed: 0, hangs: 0, failures: 0, details: {}, notes: [], command };
}

/** True when the scenario met its contract. */
export function passed(r: ScenarioResult): boolean {
  return r.lostDurablePages === 0 && r.corruptPagesServed === 0 && r.hangs === 0 && r.failures === 0;
}

export class Deadline extends Error {
  constructor(what: string, ms: number) {
    super(`${what} did not settle within ${ms} ms`);
  }
}

/**
 * Settles like `p`, or rejects with Deadline after `ms`. The timer keeps the process alive on purpose: a call
 * that hangs with nothing pending (no I/O, no timer) would otherwise let Node exit as if all had gone well.
 */
export function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Deadline(what, ms)), ms);
  });
  return Promise.race([p, expired]).finally(() => clearTimeout(timer));
}
