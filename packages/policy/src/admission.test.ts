import { describe, expect, it } from 'vitest';
import { AlwaysAdmit, createAdmissionFilter, LookupCountAdmission } from './admission.js';

describe('admission filters', () => {
  it('AlwaysAdmit admits everything', () => {
    const always = new AlwaysAdmit<number>();
    always.recordLookup(1);
    expect(always.admit(1, 10)).toBe(true);
    expect(() => always.admit(1, 0)).toThrow(/size/);
  });

  it('LookupCountAdmission admits a key from its k-th lookup on', () => {
    const filter = new LookupCountAdmission<string>({ lookups: 3 });
    for (let i = 1; i <= 4; i++) {
      filter.recordLookup('page');
      expect(filter.admit('page', 4096)).toBe(i >= 3);
    }
    expect(filter.admit('other', 4096)).toBe(false);
    filter.reset();
    expect(filter.estimate('page')).toBe(0);
  });

  it('never underestimates, and is exact for few keys in a wide sketch', () => {
    const filter = new LookupCountAdmission<number>({ lookups: 2, width: 1 << 12, seed: 7, halveEvery: 0 });
    const truth = new Map<number, number>();
    for (let i = 0; i < 5000; i++) {
      const key = (i * 2654435761) % 300;
      filter.recordLookup(key);
      truth.set(key, (truth.get(key) ?? 0) + 1);
    }
    let exact = 0;
    for (const [key, count] of truth) {
      expect(filter.estimate(key)).toBeGreaterThanOrEqual(Math.min(count, 255));
      if (filter.estimate(key) === Math.min(count, 255)) exact++;
    }
    expect(exact).toBeGreaterThan(truth.size * 0.95);
  });

  it('halves its counters so old popularity fades', () => {
    const filter = new LookupCountAdmission<string>({ lookups: 2, width: 16, halveEvery: 4 });
    filter.recordLookup('a');
    filter.recordLookup('a');
    filter.recordLookup('a');
    expect(filter.estimate('a')).toBe(3);
    filter.recordLookup('b'); // the 4th lookup halves everything
    expect(filter.estimate('a')).toBe(1);
    expect(filter.admit('a', 1)).toBe(false);
  });

  it('gives the same decisions for the same seed, distinguishing numbers from their strings', () => {
    const run = (seed: number): number[] => {
      const filter = new LookupCountAdmission<number | string>({ lookups: 2, width: 16, depth: 2, seed });
      for (let i = 0; i < 200; i++) filter.recordLookup(i % 3 === 0 ? `${i % 50}` : i % 50);
      return Array.from({ length: 50 }, (_, i) => filter.estimate(i));
    };
    expect(run(1)).toEqual(run(1));
    expect(run(1)).not.toEqual(run(2));
  });

  it('is built from config and validates it', () => {
    expect(createAdmissionFilter({ kind: 'always' }).name).toBe('always');
    expect(createAdmissionFilter({ kind: 'lookups', lookups: 2 })).toBeInstanceOf(LookupCountAdmission);
    expect(() => createAdmissionFilter({ kind: 'sometimes' } as never)).toThrow(/config.kind/);
    expect(() => new LookupCountAdmission({ lookups: 0 })).toThrow(/options.lookups/);
    expect(() => new LookupCountAdmission({ lookups: 2, width: 8 })).toThrow(/options.width/);
    expect(new LookupCountAdmission({ lookups: 2, width: 1000 }).width).toBe(1024);
  });
});
