/**
 * Helpers shared by this package's tests (excluded from the build by tsconfig's `src/test-*.ts`).
 */
import { replay, type TraceRequest } from './replay.js';
import type { EvictionPolicy } from './types.js';

/** Parses `'A B:4 C'` into requests; a size defaults to 1. */
export function trace(spec: string): TraceRequest<string>[] {
  return spec
    .trim()
    .split(/\s+/)
    .map((token) => {
      const [key, size] = token.split(':');
      return { key: key!, size: size === undefined ? 1 : Number(size) };
    });
}

/**
 * Replays `spec` and returns the outcomes as a string, one letter per request: `H` hit, `M` miss inserted,
 * `R` miss the policy refused (canAdmit false); plus the victims in order.
 */
export function run(policy: EvictionPolicy<string>, spec: string): { outcomes: string; victims: string[] } {
  let outcomes = '';
  const victims: string[] = [];
  for (const request of trace(spec)) {
    const step = replay(policy, [request], { record: true });
    outcomes += step.hits === 1 ? 'H' : step.rejected === 1 ? 'R' : 'M';
    victims.push(...step.victims!);
  }
  return { outcomes, victims };
}
