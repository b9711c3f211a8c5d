/**
 * Admission filters: whether a missed object is worth storing at all. A filter sees every lookup
 * (`recordLookup`) and answers `admit` on a miss; a refused object is served without being cached.
 *
 * - {@link AlwaysAdmit}: store everything (the default).
 * - {@link LookupCountAdmission}: store a key only once it has been looked up at least k times, counted in a
 *   bounded count-min sketch (Cormode and Muthukrishnan, J. Algorithms 55(1), 2005) with conservative update and
 *   TinyLFU-style halving (Einziger, Friedman, Manes, "TinyLFU", ACM TOS 13(4), 2017). Its hashes are seeded, so
 *   the same trace and seed give the same decisions.
 */
import { SeededRandom } from './random.js';
import { checkInteger, checkKey, checkOptions, checkSize, describe } from './internal/validate.js';
import type { PolicyKey } from './types.js';

/** Decides whether a missed object is stored. */
export interface AdmissionFilter<K extends PolicyKey = PolicyKey> {
  /** Registry-style name (`'always'`, `'lookups'`). */
  readonly name: string;
  /** Records one lookup of `key`, hit or miss. Call it for every request, before `admit`. */
  recordLookup(key: K): void;
  /** Whether a missed object of `size` bytes should be stored. Never changes state. */
  admit(key: K, size: number): boolean;
  /** Forgets everything recorded. */
  reset(): void;
}

/** Admits everything. */
export class AlwaysAdmit<K extends PolicyKey = PolicyKey> implements AdmissionFilter<K> {
  readonly name = 'always';

  recordLookup(key: K): void {
    checkKey(key);
  }

  admit(key: K, size: number): boolean {
    checkKey(key);
    checkSize(size);
    return true;
  }

  reset(): void {}
}

/** Options of {@link LookupCountAdmission}. */
export interface LookupCountOptions {
  /** Lookups of a key (the current one included) before it is admitted: an integer in [1, 255]. Required. */
  lookups: number;
  /**
   * Counters per sketch row, rounded up to a power of two, in [16, 2^26]. Size it to the number of distinct keys
   * looked up between two halvings; collisions can only make admission earlier, never later. Default 4096.
   */
  width?: number;
  /** Sketch rows (independent hashes), in [1, 16]. Default 4. */
  depth?: number;
  /** Seed of the row hashes, an integer in [0, 2^32). Default 0. */
  seed?: number;
  /**
   * Halve every counter after this many recorded lookups, so old popularity fades; 0 never halves.
   * Default 10 * width (TinyLFU's sample size).
   */
  halveEvery?: number;
}

/** Admits a key once it has been looked up `lookups` times, counted in a seeded count-min sketch of 8-bit counters. */
export class LookupCountAdmission<K extends PolicyKey = PolicyKey> implements AdmissionFilter<K> {
  readonly name = 'lookups';
  /** Lookups needed for admission. */
  readonly lookups: number;
  /** Counters per row (a power of two). */
  readonly width: number;
  /** Rows. */
  readonly depth: number;
  /** Recorded lookups between halvings (0: never). */
  readonly halveEvery: number;

  readonly #counters: Uint8Array;
  readonly #mask: number;
  readonly #seedA: number;
  readonly #seedB: number;
  readonly #index: Uint32Array;
  #sinceHalving = 0;

  /** @throws TypeError / RangeError naming a bad option */
  constructor(options: LookupCountOptions) {
    checkOptions(options);
    this.lookups = checkInteger(options.lookups, 'options.lookups', 1, 255);
    const width = checkInteger(options.width ?? 4096, 'options.width', 16, 1 << 26);
    this.width = 2 ** Math.ceil(Math.log2(width));
    this.depth = checkInteger(options.depth ?? 4, 'options.depth', 1, 16);
    this.halveEvery = checkInteger(options.halveEvery ?? 10 * this.width, 'options.halveEvery', 0);
    const random = new SeededRandom(checkInteger(options.seed ?? 0, 'options.seed', 0, 0xffff_ffff));
    this.#seedA = random.nextUint32();
    this.#seedB = random.nextUint32();
    this.#mask = this.width - 1;
    this.#counters = new Uint8Array(this.width * this.depth);
    this.#index = new Uint32Array(this.depth);
  }

  recordLookup(key: K): void {
    checkKey(key);
    const min = this.#locate(key);
    // Conservative update: raise only the counters at the minimum, which keeps over-estimates smaller.
    if (min < 255) {
      for (let row = 0; row < this.depth; row++) {
        const i = this.#index[row]!;
        if (this.#counters[i] === min) this.#counters[i] = min + 1;
      }
    }
    if (this.halveEvery > 0 && ++this.#sinceHalving >= this.halveEvery) {
      for (let i = 0; i < this.#counters.length; i++) this.#counters[i] = this.#counters[i]! >> 1;
      this.#sinceHalving = 0;
    }
  }

  admit(key: K, size: number): boolean {
    checkKey(key);
    checkSize(size);
    return this.#locate(key) >= this.lookups;
  }

  /** The sketch's estimate of `key`'s lookups since the last halving: exact or above, never below. */
  estimate(key: K): number {
    checkKey(key);
    return this.#locate(key);
  }

  reset(): void {
    this.#counters.fill(0);
    this.#sinceHalving = 0;
  }

  /** Fills `#index` with the key's counter in each row and returns their minimum. */
  #locate(key: K): number {
    const h1 = hashKey(key, this.#seedA);
    const h2 = hashKey(key, this.#seedB) | 1; // odd, so the rows' probes differ (Kirsch-Mitzenmacher double hashing)
    let min = 255;
    for (let row = 0; row < this.depth; row++) {
      const i = row * this.width + ((h1 + Math.imul(row, h2)) & this.#mask);
      this.#index[row] = i;
      min = Math.min(min, this.#counters[i]!);
    }
    return min;
  }
}

/** A filter described by plain data (for config files). */
export type AdmissionConfig = { kind: 'always' } | ({ kind: 'lookups' } & LookupCountOptions);

/**
 * Builds the filter a config describes.
 * @throws TypeError / RangeError for an unknown `kind` or a bad option
 */
export function createAdmissionFilter<K extends PolicyKey = PolicyKey>(config: AdmissionConfig): AdmissionFilter<K> {
  checkOptions(config, 'config');
  switch (config.kind) {
    case 'always':
      return new AlwaysAdmit<K>();
    case 'lookups':
      return new LookupCountAdmission<K>(config);
    default:
      throw new RangeError(`config.kind must be 'always' or 'lookups', got ${describe((config as { kind: unknown }).kind)}`);
  }
}

const scratch = new Float64Array(1);
const scratchWords = new Uint32Array(scratch.buffer);

/** A seeded 32-bit hash of a key: FNV-1a over UTF-16 units for strings, over the IEEE-754 words for numbers. */
function hashKey(key: PolicyKey, seed: number): number {
  let h = (0x811c_9dc5 ^ seed) >>> 0;
  if (typeof key === 'string') {
    for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x0100_0193);
  } else {
    scratch[0] = key === 0 ? 0 : key; // -0 and 0 are the same Map key
    h = Math.imul(h ^ scratchWords[0]!, 0x0100_0193);
    h = Math.imul(h ^ scratchWords[1]!, 0x0100_0193);
    h ^= 0x5bd1_e995; // keep numbers and their decimal strings apart
  }
  // MurmurHash3's finaliser: FNV alone mixes the high bits poorly and the low bits pick the counter.
  h = Math.imul(h ^ (h >>> 16), 0x85eb_ca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2_ae35);
  return (h ^ (h >>> 16)) >>> 0;
}
