import { describe, expect, it } from 'vitest';
import { createPolicy, policyNames, PolicyRegistry, registerPolicy } from './registry.js';
import { CheckedPolicy } from './internal/checked-policy.js';
import { LruPolicy } from './policies/lru.js';
import { S3FifoPolicy, type S3FifoOptions } from './policies/s3fifo.js';

describe('policy registry', () => {
  it('creates every built-in by name', () => {
    expect(policyNames()).toEqual(expect.arrayContaining(['arc', 'clock', 'fifo', 'lfu', 'lru', 's3fifo', 'sieve']));
    for (const name of ['arc', 'clock', 'fifo', 'lfu', 'lru', 's3fifo', 'sieve'] as const) {
      const policy = createPolicy(name, { capacity: 100, unit: 'objects' });
      expect([policy.name, policy.capacity, policy.unit]).toEqual([name, 100, 'objects']);
    }
    const s3 = createPolicy('s3fifo', { capacity: 1000, unit: 'bytes', smallRatio: 0.2 });
    expect(s3).toBeInstanceOf(S3FifoPolicy);
    expect((s3 as S3FifoPolicy).smallCapacity).toBe(200);
  });

  it('defaults the unit to bytes', () => {
    expect(createPolicy('lru', { capacity: 10 }).unit).toBe('bytes');
  });

  it('plugs custom policies in through the same interface', () => {
    let built: S3FifoPolicy<number> | undefined;
    registerPolicy<S3FifoOptions>('s3fifo-quarter', (options) => (built = new S3FifoPolicy({ ...options, smallRatio: 0.25 })));
    const policy = createPolicy<number>('s3fifo-quarter', { capacity: 40, unit: 'objects' });
    expect(built!.smallCapacity).toBe(10);
    // A custom policy comes back behind the contract's checks, named as registered; the built-ins come back bare.
    expect(policy).toBeInstanceOf(CheckedPolicy);
    expect([policy.name, policy.capacity, policy.unit]).toEqual(['s3fifo-quarter', 40, 'objects']);
    expect(createPolicy('s3fifo', { capacity: 40, unit: 'objects' })).toBeInstanceOf(S3FifoPolicy);
    expect(policyNames()).toContain('s3fifo-quarter');
    expect(() => registerPolicy('s3fifo-quarter', (o) => new LruPolicy(o))).toThrow(/already registered/);
    let replaced: unknown;
    registerPolicy('s3fifo-quarter', (o) => (replaced = new LruPolicy(o)), { replace: true });
    createPolicy('s3fifo-quarter', { capacity: 4 });
    expect(replaced).toBeInstanceOf(LruPolicy);
  });

  it('hands denseKeys only to factories that take them', () => {
    const registry = new PolicyRegistry();
    const seen: string[][] = [];
    registry.register('plain', (o) => (seen.push(Object.keys(o)), new LruPolicy(o)));
    registry.register('dense', (o) => (seen.push(Object.keys(o)), new LruPolicy(o)), { denseKeys: true });
    const options = { capacity: 4, unit: 'objects' as const, denseKeys: { bound: 100 } };
    registry.create('plain', options);
    registry.create('dense', options);
    registry.create('prefix-aware:plain', options);
    expect(seen).toEqual([['capacity', 'unit'], ['capacity', 'unit', 'denseKeys'], ['capacity', 'unit']]);
    // The built-ins take them (a key out of the bound is refused).
    expect(() => registry.create<number>('lru', options).insert(100, 1)).toThrow(RangeError);
  });

  it('keeps separate registries apart and refuses bad names and options', () => {
    const registry = new PolicyRegistry(false);
    expect(registry.names()).toEqual([]);
    expect(() => registry.create('lru', { capacity: 1 })).toThrow(RangeError);
    registry.register('mine', (o) => new LruPolicy(o));
    expect(registry.has('mine')).toBe(true);
    expect(() => registerPolicy('lru', (o) => new LruPolicy(o), { replace: true })).toThrow(/built-in/);
    expect(() => registerPolicy('Bad Name', (o) => new LruPolicy(o))).toThrow(/name/);
    expect(() => registerPolicy('ok', 42 as never)).toThrow(/factory/);
    expect(() => createPolicy('nope', { capacity: 1 })).toThrow(/no policy "nope"/);
    expect(() => createPolicy('lru', { capacity: -1 })).toThrow(/options.capacity/);
    expect(() => createPolicy('lru', { capacity: 2.5 })).toThrow(RangeError);
    expect(() => createPolicy('s3fifo', { capacity: 10, unit: 'objects' })).toThrow(/small queue/);
    expect(() => createPolicy('s3fifo', { capacity: 100, moveToMainThreshold: 4 })).toThrow(/moveToMainThreshold/);
    expect(() => createPolicy('s3fifo', { capacity: 100, smallRatio: 1.5 })).toThrow(/smallRatio/);
    expect(() => createPolicy('lru', null as never)).toThrow(TypeError);
  });
});
