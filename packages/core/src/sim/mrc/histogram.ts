/**
 * Histogram of stack distances, read back as a miss-ratio curve. Object distances up to 2^22 are counted
 * exactly (the array grows with the largest distance seen); larger ones and every byte distance in 1/64-octave
 * bins, so the curve costs at most 32 MiB whatever the trace. Capacities given up front are also counted exactly (one bucket per capacity).
 */
import type { CapacityUnit } from '@tiersync/policy';

const EXACT = 1 << 22;
const PER_OCTAVE = 64;
const BINS = 64 * PER_OCTAVE;

/** Stack-distance histogram; `record` distances, then read `missRatio` at any capacity. */
export class DistanceHistogram {
  #exact: Float64Array;
  readonly #bins = new Float64Array(BINS);
  readonly #caps: readonly number[];
  /** Hits counted per given capacity (distance <= capacity). */
  readonly #capHits: Float64Array;
  #cold = 0;
  #accesses = 0;

  /**
   * @param unit objects: distances are integers and the first 65,536 are exact; bytes: all binned
   * @param capacities capacities (ascending) whose hit counts are kept exactly
   */
  constructor(
    readonly unit: CapacityUnit,
    capacities: readonly number[] = [],
  ) {
    this.#exact = new Float64Array(unit === 'objects' ? 1024 : 0);
    this.#caps = [...capacities].sort((a, b) => a - b);
    this.#capHits = new Float64Array(this.#caps.length + 1);
  }

  /** Accesses recorded (the adjustment of {@link adjust} included). */
  get accesses(): number {
    return this.#accesses;
  }

  /** Records one access of stack distance `d` (Infinity = first access). */
  record(d: number): void {
    this.#accesses++;
    if (d === Number.POSITIVE_INFINITY) {
      this.#cold++;
      return;
    }
    this.#count(d, 1);
  }

  /**
   * SHARDS-adj (FAST'15 section 3.3): the sample held `sampled` accesses where `expected` (trace accesses x rate)
   * were due; the difference is added to (or taken from) the smallest distance, which corrects the bias of a
   * sample that caught a few very hot keys more or fewer.
   */
  adjust(expected: number): void {
    const diff = expected - this.#accesses;
    this.#count(1, diff);
    this.#accesses += diff;
  }

  #count(d: number, n: number): void {
    if (this.unit === 'objects' && d <= EXACT) {
      const i = Math.max(1, Math.ceil(d));
      if (i >= this.#exact.length) {
        let len = this.#exact.length;
        while (len <= i) len *= 2;
        const grown = new Float64Array(Math.min(len, EXACT + 1));
        grown.set(this.#exact);
        this.#exact = grown;
      }
      this.#exact[i]! += n;
    } else this.#bins[binOf(d)]! += n;
    // First given capacity >= d: hits at it and every larger one.
    const caps = this.#caps;
    let lo = 0;
    let hi = caps.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (caps[mid]! < d) lo = mid + 1;
      else hi = mid;
    }
    this.#capHits[lo]! += n;
  }

  /**
   * Miss ratio of LRU at `capacity`: exact at given capacities and for object capacities up to 2^22, else to
   * within one 1/64-octave bin.
   */
  missRatio(capacity: number): number {
    if (this.#accesses <= 0) return 0;
    const at = this.#caps.indexOf(capacity);
    let hits = 0;
    if (at >= 0) {
      for (let i = 0; i <= at; i++) hits += this.#capHits[i]!;
    } else {
      const exact = this.#exact;
      const top = Math.min(exact.length - 1, Math.floor(capacity));
      for (let d = 1; d <= top; d++) hits += exact[d]!;
      const bins = this.#bins;
      for (let k = 0; k < BINS; k++) {
        if (edgeOf(k) > capacity * (1 + 1e-12)) break;
        hits += bins[k]!;
      }
    }
    return Math.min(1, Math.max(0, 1 - hits / this.#accesses));
  }
}

/** Bin of a distance: the smallest k with 2^(k/64) >= d. */
function binOf(d: number): number {
  return Math.min(BINS - 1, Math.max(0, Math.ceil(PER_OCTAVE * Math.log2(d) - 1e-9)));
}

function edgeOf(k: number): number {
  return 2 ** (k / PER_OCTAVE);
}
