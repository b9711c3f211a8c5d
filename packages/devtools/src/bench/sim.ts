/**
 * `tiersync bench sim`: replay speed of the simulator's exact mode. The conversation trace's page references
 * (288,500 accesses, 182,790 distinct pages) are replayed in object-count mode through LRU and S3-FIFO, the policies
 * alternating (A B A B) and each figure the median of the repetitions, as accesses per second on one core (the
 * replay is single-threaded). The simulator's loop runs as `tiersync sim` does: the trace's ids are dense, so the
 * policies take the dense-key fast path (`denseKeys`). Each way of replaying is timed in its own phase. Also measured: the same loop with default
 * policies (no `denseKeys`: the integer ids go through the policies' own typed-array hash), the same loop on string keys (each id as 64 hex
 * digits, the form of the live hierarchy's page keys, which the policies keep in a `Map`), `@tiersync/policy`'s own `replay()` on the same accesses (the reference loop, with its per-request
 * checks, default policies) and the memory per resident page. Last, sim/live parity (bench/parity.ts): the same
 * hierarchy configs replayed live with real bytes and through the planner by counting, `parity: {cells, identical}`.
 */
import path from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import { replay, type EvictionPolicy, type PolicyKey, type TraceRequest } from '@tiersync/policy';
import { bundledTrace, denseKeyBound, makePolicy, missRatioCurves, type ObjectTrace, readMooncake, replayObjects } from '@tiersync/core/sim';
import { runParity } from '@tiersync/core';
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
  /**
   * Also check sim/live parity (bench/parity.ts): every built-in policy x 3 capacities x write-through/write-back on
   * this many requests of the conversation trace, live with real bytes and simulated. Default 60; 0 skips it.
   */
  parityRequests?: number;
}

/** One policy's figures. */
export interface SimBenchResult {
  policy: string;
  /** Median page accesses per second through the simulator's loop (dense-key policies, as `sim`), one core. */
  accessesPerSec: number;
  /**
   * Median accesses per second through the same loop with default policies (no `denseKeys`): the trace's integer
   * ids, which the policies map to slots through their typed-array hash (a `Map` before e070b77; the name stays).
   */
  mapAccessesPerSec: number;
  /** Median accesses per second with every id as a 64-hex-digit string (the live page key form): the `Map` path. */
  stringAccessesPerSec: number;
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
  /**
   * Bytes per resident page of an unbounded dense-key LRU holding every distinct page (policy state only): growth
   * of the V8 heap plus ArrayBuffer memory (the typed arrays live outside the heap).
   */
  bytesPerDistinctPage: number;
  /**
   * One-pass miss-ratio curves on the same accesses (median of the repetitions): the exact LRU curve from stack
   * distances, and SHARDS at 1% for S3-FIFO at the grid's 19 capacities of 2,000 objects and more (S3-FIFO needs 20 after scaling) in one pass, as trace accesses per second. Grid: 32 log-spaced capacities 128..131,072.
   */
  mrc: { lruStackDistanceAccessesPerSec: number; shardsS3fifoAccessesPerSec: number };
  /** Sim/live parity cells and how many had identical counters (absent when skipped); `differing` names the others. */
  parity?: { requests: number; cells: number; identical: number; differing: string[] };
}

export { bundledTrace };

/** The simulator's object loop (sim/exact.ts replayObjects, sizes 1) on keys of any type; returns the misses. */
function replayKeys<K extends PolicyKey>(policy: EvictionPolicy<K>, keys: readonly K[]): number {
  let misses = 0;
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    if (policy.access(key)) continue;
    misses++;
    if (policy.canAdmit(key, 1)) policy.insert(key, 1);
  }
  return misses;
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

  const dense = { denseKeyBound: denseKeyBound(trace) };
  const missRatio = new Map<string, number>();
  /**
   * Times one way of replaying: a warm-up pass per policy (JIT, typed-array growth), then `reps` timed passes, the
   * policies alternating, each on a policy created outside the timed region. The three ways run one after the
   * other, not interleaved, so each is measured with the JIT state of a process that replays only that way
   * (`tiersync sim` only ever takes the dense path on reader traces). Every way must count the same misses.
   */
  const phase = async <K extends PolicyKey>(
    label: string,
    make: (p: string) => EvictionPolicy<K>,
    run: (policy: EvictionPolicy<K>) => number,
  ): Promise<Map<string, number[]>> => {
    const rates = new Map<string, number[]>(policies.map((p) => [p, []]));
    for (const p of policies) run(make(p));
    for (let rep = 0; rep < reps; rep++) {
      for (const p of policies) {
        const policy = make(p);
        const t = process.hrtime.bigint();
        const misses = run(policy);
        rates.get(p)!.push(keys.length / (Number(process.hrtime.bigint() - t) / 1e9));
        const expected = missRatio.get(p);
        if (expected === undefined) missRatio.set(p, misses / keys.length);
        else if (expected !== misses / keys.length) throw new Error(`${p}: ${label} counts ${misses} misses, the dense path ${expected * keys.length}`);
      }
      log(`  ${label} ${rep + 1}/${reps}: ${policies.map((p) => `${p} ${round(rates.get(p)!.at(-1)! / 1e6, 2)}M/s`).join(', ')}`);
      await new Promise((r) => setImmediate(r));
    }
    return rates;
  };
  const fast = await phase('sim loop, dense keys', (p) => makePolicy(p, capacity, 'objects', dense), (policy) => replayObjects(policy, trace).misses);
  const viaMap = await phase('sim loop, Map keys', (p) => makePolicy(p, capacity, 'objects'), (policy) => replayObjects(policy, trace).misses);
  // Strings made once, outside the timed region (their hashes are then cached, as a live key's is after its first use).
  const strings = Array.from(keys, (key) => key.toString(16).padStart(64, '0'));
  const viaStrings = await phase('sim loop, string keys', (p) => makePolicy(p, capacity, 'objects') as EvictionPolicy<PolicyKey>, (policy) => replayKeys(policy, strings));
  const ref = await phase('replay()', (p) => makePolicy(p, capacity, 'objects'), (policy) => replay(policy, requests).misses);

  // Memory: heap and ArrayBuffer growth of an unbounded LRU that ends up holding every distinct page.
  const footprint = (): number => {
    const m = process.memoryUsage();
    return m.heapUsed + m.arrayBuffers;
  };
  // ArrayBuffer memory is returned by a background sweeper after a GC: collect, let it run, collect again.
  const settle = async (): Promise<void> => {
    for (let k = 0; k < 3; k++) {
      gc();
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  await settle();
  const before = footprint();
  const lru = makePolicy('lru', Infinity, 'objects', dense);
  replayObjects(lru, trace);
  await settle();
  const after = footprint();
  const bytesPerDistinctPage = round((after - before) / lru.count, 1);

  // One-pass curves: whole-trace passes, timed like the replays.
  const chunks = () => [{ keys, sizes: trace.sizes, length: keys.length }];
  const timeCurves = (opts: Parameters<typeof missRatioCurves>[1]): number[] => {
    missRatioCurves(chunks, opts);
    const out: number[] = [];
    for (let rep = 0; rep < reps; rep++) {
      const t = process.hrtime.bigint();
      missRatioCurves(chunks, opts);
      out.push(keys.length / (Number(process.hrtime.bigint() - t) / 1e9));
    }
    return out;
  };
  const grid = Array.from({ length: 32 }, (_, k) => Math.round(2 ** (7 + (k * 10) / 31)));
  const sdRates = timeCurves({ policies: ['lru'], unit: 'objects', capacities: grid });
  const shardsRates = timeCurves({ policies: ['s3fifo'], unit: 'objects', capacities: grid.filter((c) => c * 0.01 >= 20), sampleRate: 0.01 });
  log(`  mrc: LRU stack distances ${round(median(sdRates) / 1e6, 2)}M/s, SHARDS 1% s3fifo ${round(median(shardsRates) / 1e6, 2)}M/s`);

  const parityRequests = options.parityRequests ?? 60;
  const parity = parityRequests > 0 ? await runParity({ requests: parityRequests, log }) : undefined;

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
      mapAccessesPerSec: Math.round(median(viaMap.get(p)!)),
      stringAccessesPerSec: Math.round(median(viaStrings.get(p)!)),
      replayAccessesPerSec: Math.round(median(ref.get(p)!)),
      missRatio: round(missRatio.get(p)!, 4),
    })),
    bytesPerDistinctPage,
    mrc: { lruStackDistanceAccessesPerSec: Math.round(median(sdRates)), shardsS3fifoAccessesPerSec: Math.round(median(shardsRates)) },
    ...(parity
      ? { parity: { requests: parity.requests, cells: parity.cells, identical: parity.identical, differing: parity.results.filter((c) => !c.identical).map((c) => `${c.policy}/${c.capacity}/${c.writeMode}`) } }
      : {}),
  };
}
