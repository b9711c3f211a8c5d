// Exact-mode replay speed of every built-in policy relative to LRU in the same run, objects and bytes mode, on a
// seeded skewed object trace (keys floor(200,000 x u^3), one size per key in [1, 100,000] bytes); median of 3.
//   node packages/devtools/scripts/policy-speed.mjs      (build first: npx tsc -b packages/core)
import { SeededRandom } from '@tiersync/policy';
import { runExact } from '@tiersync/core/sim';
const rng = new SeededRandom(3);
const n = 2_000_000, distinct = 200_000;
const keys = new Uint32Array(n), sizes = new Float64Array(n);
const sizeOf = new Float64Array(distinct).map(() => 1 + rng.nextInt(100_000));
for (let i = 0; i < n; i++) { const k = Math.floor(distinct * rng.next() ** 3); keys[i] = k; sizes[i] = sizeOf[k]; }
const trace = { kind: 'object', source: 'zipf', times: new Float64Array(n), keys, sizes, length: n, distinct };
const pols = ['lru','s3fifo','arc','mru','slru','lirs','2q','wtinylfu','lfuda','gdsf','opt','opt-size'];
for (const [unit, cap] of [['objects', 20_000], ['bytes', 1_000_000_000]]) {
  const rows = [];
  for (let rep = 0; rep < 3; rep++) for (const p of pols) {
    const t0 = performance.now(); const r = runExact(trace, { policy: p, unit, capacity: cap }); const s = (performance.now() - t0) / 1000;
    rows.push([p, rep, n / s, r.misses / n]);
  }
  const med = (p) => { const v = rows.filter((r) => r[0] === p).map((r) => r[2]).sort((a, b) => a - b); return v[1]; };
  const lru = med('lru');
  console.log(unit, cap);
  for (const p of pols) console.log(' ', p.padEnd(9), (med(p) / 1e6).toFixed(2).padStart(6), 'M acc/s', (med(p) / lru).toFixed(2).padStart(5), 'x LRU  miss', rows.find((r) => r[0] === p)[3].toFixed(4));
}
