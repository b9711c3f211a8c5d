/**
 * SHARDS spatial sampling (Waldspurger, Park, Garthwaite & Ahmad, "Efficient MRC Construction with SHARDS",
 * FAST'15), fixed-rate form: a key is in the sample when hash(key) mod P < T, with rate R = T / P. Every access
 * of a sampled key is kept, so the sample is a trace of R times the keys with their full reuse pattern: LRU stack
 * distances measured on it, scaled by 1/R, estimate the full trace's; any policy replayed on it with its capacity
 * scaled by R estimates the full trace's miss ratio at the unscaled capacity.
 */
import { invalid } from '../errors.js';

/** P: hashes are 32-bit. */
const MODULUS = 2 ** 32;

/** murmur3's 32-bit finaliser: a bijective mix, so dense keys spread uniformly over [0, 2^32). */
export function hash32(key: number): number {
  let h = key ^ 0x9e37_79b9;
  h = Math.imul(h ^ (h >>> 16), 0x85eb_ca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2_ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The threshold T of sampling rate `rate` in (0, 1]. @throws TierSyncError ERR_INVALID_ARGUMENT */
export function shardsThreshold(rate: number): number {
  if (!(rate > 0 && rate <= 1)) throw invalid(`sampling rate must be in (0, 1], got ${rate}`);
  return Math.round(rate * MODULUS);
}

/** Whether `key` is in the sample of threshold `threshold` (see {@link shardsThreshold}). */
export function inSample(key: number, threshold: number): boolean {
  return hash32(key) < threshold;
}
