/**
 * A small seeded pseudo-random generator, so that anything random in a policy (sampling, hashing seeds, tests)
 * is reproducible: the same seed gives the same sequence on every platform.
 *
 * xoshiro128** 1.1 (Blackman and Vigna, "Scrambled linear pseudorandom number generators", ACM TOMS 2021), its
 * 128-bit state filled from the seed by SplitMix32. Not for cryptography.
 */
import { checkInteger } from './internal/validate.js';

/** Deterministic random numbers from a 32-bit seed. */
export class SeededRandom {
  readonly #s = new Uint32Array(4);

  /** @param seed an integer in [0, 2^32) @throws RangeError otherwise */
  constructor(seed: number) {
    checkInteger(seed, 'seed', 0, 0xffff_ffff);
    let x = seed >>> 0;
    for (let i = 0; i < 4; i++) {
      // SplitMix32 (the 32-bit variant of Steele, Lea and Flood's SplitMix, with MurmurHash3's finaliser).
      x = (x + 0x9e37_79b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85eb_ca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2_ae35);
      this.#s[i] = (z ^ (z >>> 16)) >>> 0;
    }
    if ((this.#s[0]! | this.#s[1]! | this.#s[2]! | this.#s[3]!) === 0) this.#s[0] = 1; // the all-zero state is stuck
  }

  /** The next integer in [0, 2^32). */
  nextUint32(): number {
    const s = this.#s;
    const result = Math.imul(rotl(Math.imul(s[1]!, 5), 7), 9) >>> 0;
    const t = s[1]! << 9;
    s[2] = s[2]! ^ s[0]!;
    s[3] = s[3]! ^ s[1]!;
    s[1] = s[1]! ^ s[2]!;
    s[0] = s[0]! ^ s[3]!;
    s[2] = s[2]! ^ t;
    s[3] = rotl(s[3]!, 11);
    return result;
  }

  /** The next number in [0, 1), with 32 bits of randomness. */
  next(): number {
    return this.nextUint32() / 0x1_0000_0000;
  }

  /**
   * An integer in [0, bound), uniformly (rejection sampling, no modulo bias).
   * @throws RangeError unless `bound` is an integer in [1, 2^32]
   */
  nextInt(bound: number): number {
    checkInteger(bound, 'bound', 1, 0x1_0000_0000);
    const limit = 0x1_0000_0000 - (0x1_0000_0000 % bound);
    for (;;) {
      const x = this.nextUint32();
      if (x < limit) return x % bound;
    }
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
