/**
 * `tiersync bench sim`: replay speed of the simulator's exact mode. The conversation trace's page references
 * (288,500 accesses, 182,790 distinct pages) are replayed in object-count mode through LRU and S3-FIFO, the policies
 * alternating (A B A B) and each figure the median of the repetitions, as accesses per second on one core (the
 * replay is single-threaded). Also measured: `@tiersync/policy`'s own `replay()` on the same accesses (the
 * reference loop, with its per-request checks) and the heap bytes per resident page.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import vm from 'node:vm';
import { replay, type TraceRequest } from '@tiersync/policy';
import { replayObjects } from '../sim/exact.js';
import { makePolicy } from '../sim/policies.js';
import { readMooncake } from '../sim/trace/mooncake.js';
import type { ObjectTrace } from '../sim/trace/types.js';
import { median, round } from './stats.js';

/** Options of {@link runSimBench}. */
export interface SimBenchOptions {
  /** Mooncake trace to replay. Default: the bundled conversation trace. */
  trace?: string;
  /** Policies to time. Default ['lru', 's3fifo']. */
  policies?: string[];
  /** Cache capacity, objects. Default 16384 (about 9% of the distinct pages). */
  capacityObjects?: number;
  /** Timed passes per policy. Default 7. */
  repetitions?: number;
  /** Progress lines (stderr in the CLI). */
  log?: (line: string) => void;
}

/** One policy's figures. */
export interface SimBenchResult {
  policy: string;
  /** Median page accesses per second through the simulator's loop, one core. */
  accessesPerSec: number;
  /** Median accesses per second through `@tiersync/policy`'s `replay()` (the checked reference loop). */
  replayAccessesPerSec: number;
  /** Miss ratio at the benchmark capacity (a sanity check that the work was done). */
  missRatio: number;
}

/** The report, as printed by `tiersync bench sim --json`. */
export interface SimBenchReport {
  suite: 'sim';
  trace: string;
  accesses: number;
  distinctPages: number;
  capacityObjects: number;
  repetitions: number;
  results: SimBenchResult[];
  /** Heap bytes per resident page of an unbounded LRU holding every distinct page (policy state only). */
  bytesPerDistinctPage: number;
}

/** The bundled conversation trace (packages/core/traces). */
export function bundledTrace(name = 'conversation_trace.jsonl.gz'): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  return path.resolve(here, '../../traces', name);
}

function gc(): void {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
}

/** Runs the benchmark. */
export async function runSimBench(options: SimBenchOptions = {}): Promise<SimBenchReport> {
  const file = options.trace ?? bundledTrace();
  const policies = options.policies ?? ['lru', 's3fifo'];
  const capacity = options.capacityObjects ?? 16384;
  const reps = options.repetitions ?? 7;
  const log = options.log ?? (() => {});
  const llm = readMooncake(file);
  const keys = new Uint32Array(llm.pageRefs);
  let i = 0;
  for (const r of llm.requests) for (const p of r.pages) keys[i++] = p;
  const trace: ObjectTrace = { kind: 'object', source: file, times: new Float64Array(keys.length), keys, sizes: new Float64Array(keys.length).fill(1), length: keys.length, distinct: llm.distinctPages };
  const requests: TraceRequest<number>[] = Array.from(keys, (key) => ({ key, size: 1 }));
  log(`sim bench: ${keys.length} accesses, ${llm.distinctPages} distinct pages, capacity ${capacity} objects, ${reps} repetitions`);

  const fast = new Map<string, number[]>(policies.map((p) => [p, []]));
  const ref = new Map<string, number[]>(policies.map((p) => [p, []]));
  const missRatio = new Map<string, number>();
  // Warm-up pass per policy (JIT, typed-array growth), untimed.
  for (const p of policies) replayObjects(makePolicy(p, capacity, 'objects'), trace);
  for (let rep = 0; rep < reps; rep++) {
    for (const p of policies) {
      const policy = makePolicy(p, capacity, 'objects');
      let t = process.hrtime.bigint();
      const r = replayObjects(policy, trace);
      fast.get(p)!.push(keys.length / (Number(process.hrtime.bigint() - t) / 1e9));
      missRatio.set(p, r.misses / keys.length);
      const policy2 = makePolicy(p, capacity, 'objects');
      t = process.hrtime.bigint();
      replay(policy2, requests);
      ref.get(p)!.push(keys.length / (Number(process.hrtime.bigint() - t) / 1e9));
    }
    log(`  repetition ${rep + 1}/${reps}: ${policies.map((p) => `${p} ${round(fast.get(p)!.at(-1)! / 1e6, 2)}M/s`).join(', ')}`);
    await new Promise((r) => setImmediate(r));
  }

  // Memory: heap growth of an unbounded LRU that ends up holding every distinct page.
  gc();
  const before = process.memoryUsage().heapUsed;
  const lru = makePolicy('lru', Infinity, 'objects');
  replayObjects(lru, trace);
  gc();
  const after = process.memoryUsage().heapUsed;
  const bytesPerDistinctPage = round((after - before) / lru.count, 1);

  return {
    suite: 'sim',
    trace: path.basename(file),
    accesses: keys.length,
    distinctPages: llm.distinctPages,
    capacityObjects: capacity,
    repetitions: reps,
    results: policies.map((p) => ({
      policy: p,
      accessesPerSec: Math.round(median(fast.get(p)!)),
      replayAccessesPerSec: Math.round(median(ref.get(p)!)),
      missRatio: round(missRatio.get(p)!, 4),
    })),
    bytesPerDistinctPage,
  };
}
