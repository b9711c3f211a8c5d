/** Seeded Zipf object traces for the MRC and streaming tests. */
import type { ObjectTrace } from '../trace/types.js';

/** A seeded Zipf(s) object trace: `n` requests over `objects` keys, sizes 1..64 KiB fixed per key. */
export function zipfTrace(n: number, objects: number, s = 0.9, seed = 7): ObjectTrace {
  const cdf = new Float64Array(objects);
  let sum = 0;
  for (let k = 0; k < objects; k++) cdf[k] = sum += 1 / (k + 1) ** s;
  let x = seed >>> 0 || 1;
  const rnd = () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 2 ** 32;
  };
  const keys = new Uint32Array(n);
  const sizes = new Float64Array(n);
  const ids = new Int32Array(objects).fill(-1);
  let distinct = 0;
  for (let i = 0; i < n; i++) {
    const u = rnd() * sum;
    let lo = 0;
    let hi = objects - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    if (ids[lo]! < 0) ids[lo] = distinct++;
    keys[i] = ids[lo]!;
    sizes[i] = 1 + ((lo * 2654435761) % 65536);
  }
  return { kind: 'object', source: `zipf(${n},${objects},${s})`, times: new Float64Array(n), keys, sizes, length: n, distinct };
}

