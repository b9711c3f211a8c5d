import { describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native';
import { PAGE_KEY_PATTERN } from '@tiersync/tiers';
import { ANCHOR_SPAN, KEY_PATTERN, createNamespace, kvLayoutPreset, pageKeys } from './index.js';

const layout = kvLayoutPreset('llama-3-8b');
const ns = createNamespace({ model: 'meta-llama/Meta-Llama-3-8B@main', layout });
const seq = (n: number, f = (i: number) => (i * 2654435761) >>> 0) => Uint32Array.from({ length: n }, (_, i) => f(i));

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(TierSyncError);
    return `${(e as TierSyncError).code}: ${(e as Error).message}`;
  }
  throw new Error('did not throw');
}

describe('namespaces', () => {
  it('are pinned values of model, layout and salt', () => {
    expect(ns.id).toBe('35ae7e67bbb2bad3f1b71f95eb103366907d185045591ca41920f9391a3a16df');
    expect(ns.layoutFingerprint).toBe(layout.fingerprint);
    expect(createNamespace({ model: 'meta-llama/Meta-Llama-3-8B@main', layout }).id).toBe(ns.id);
    const ids = new Set([
      ns.id,
      createNamespace({ model: 'meta-llama/Meta-Llama-3-8B@other', layout }).id,
      createNamespace({ model: 'meta-llama/Meta-Llama-3-8B@main', layout: kvLayoutPreset('llama-3-8b', { tokensPerPage: 32 }) }).id,
      createNamespace({ model: 'meta-llama/Meta-Llama-3-8B@main', layout, tenantSalt: 'tenant-a' }).id,
      createNamespace({ model: 'meta-llama/Meta-Llama-3-8B@main', layout, tenantSalt: Buffer.from('tenant-b') }).id,
    ]);
    expect(ids.size).toBe(5);
    // The label alone does not separate tenants (they share pages unless salted).
    expect(createNamespace({ model: 'meta-llama/Meta-Llama-3-8B@main', layout, tenant: 'x' }).id).toBe(ns.id);
  });

  it('reject bad options by name', () => {
    expect(code(() => createNamespace({ model: '', layout }))).toMatch(/ERR_INVALID_ARGUMENT: model must be a string of 1\.\.512/);
    expect(code(() => createNamespace({ model: 'm', layout, tenantSalt: 5 as never }))).toMatch(/tenantSalt must be a string or Uint8Array/);
    expect(code(() => createNamespace({ model: 'm', layout: { layers: 0 } as never }))).toMatch(/layout: /);
  });
});

describe('page keys', () => {
  const tokens = seq(16 * 4, (i) => i);

  it('match pinned vectors (computed independently from the documented formula with Python hashlib)', () => {
    expect(pageKeys(ns, tokens)).toEqual([
      '90061cfd8a9e390f2ab910d3bcc43fea7b1b7f6f8622f332ee130d845718c4b5',
      '90061cfd8a9e390fc68c5f71ce8683c7f30e50b3c8d1d4807c46fc3b94264535',
      '90061cfd8a9e390fc7853fb87aeb91beff26afbc5139bb781fbad8e610035232',
      '90061cfd8a9e390f2638171a769f0e7b41b2d23f4ced39eb2548e30222ac7f08',
    ]);
  });

  it('are lower-case hex PageKeys, one per full page only', () => {
    expect(KEY_PATTERN.source).toBe(PAGE_KEY_PATTERN.source);
    const keys = pageKeys(ns, seq(16 * 5 + 7));
    expect(keys).toHaveLength(5);
    for (const k of keys) expect(k).toMatch(/^[0-9a-f]{64}$/);
    expect(pageKeys(ns, seq(15))).toEqual([]);
  });

  it('chain: a prefix has the prefix of keys; a changed token changes that page and all after it', () => {
    const long = seq(16 * 10);
    const all = pageKeys(ns, long);
    expect(pageKeys(ns, long.subarray(0, 16 * 6 + 3))).toEqual(all.slice(0, 6));
    const changed = long.slice();
    changed[16 * 4 + 5]! ^= 1;
    const other = pageKeys(ns, changed);
    expect(other.slice(0, 4)).toEqual(all.slice(0, 4));
    for (let p = 4; p < 10; p++) expect(other[p]).not.toBe(all[p]);
    // Same tokens at the same position after a different parent: a different key.
    expect(new Set(pageKeys(ns, seq(32, () => 7))).size).toBe(2);
  });

  it('continue from a parent exactly as if hashed in one go (across anchor boundaries)', () => {
    const long = seq(16 * 200);
    const all = pageKeys(ns, long);
    for (const split of [1, 63, 64, 65, 130]) {
      const rest = pageKeys(ns, long.subarray(16 * split), { parent: all[split - 1]!, position: split });
      expect([...all.slice(0, split), ...rest]).toEqual(all);
    }
  });

  it('cluster runs of ANCHOR_SPAN pages under one 8-byte prefix', () => {
    const all = pageKeys(ns, seq(16 * (2 * ANCHOR_SPAN + 1)));
    const prefixes = all.map((k) => k.slice(0, 16));
    expect(new Set(prefixes.slice(0, ANCHOR_SPAN)).size).toBe(1);
    expect(new Set(prefixes.slice(ANCHOR_SPAN, 2 * ANCHOR_SPAN)).size).toBe(1);
    expect(prefixes[ANCHOR_SPAN]).not.toBe(prefixes[0]);
    expect(prefixes[2 * ANCHOR_SPAN]).not.toBe(prefixes[ANCHOR_SPAN]);
    expect(new Set(all.map((k) => k.slice(16))).size).toBe(all.length);
  });

  it('separate namespaces completely', () => {
    const a = pageKeys(ns, tokens);
    const b = pageKeys(createNamespace({ model: 'meta-llama/Meta-Llama-3-8B@main', layout, tenantSalt: 'secret' }), tokens);
    const c = pageKeys(createNamespace({ model: 'other-model', layout }), tokens);
    for (let i = 0; i < a.length; i++) {
      expect(b[i]).not.toBe(a[i]);
      expect(c[i]).not.toBe(a[i]);
    }
  });

  it('give the same keys for Uint32Array, Int32Array and number[]', () => {
    const t = seq(16 * 3, (i) => i * 1000);
    const k = pageKeys(ns, t);
    expect(pageKeys(ns, Int32Array.from(t))).toEqual(k);
    expect(pageKeys(ns, Array.from(t))).toEqual(k);
    expect(pageKeys(ns, new Uint32Array(t.buffer, 16 * 4, 32))).toEqual(pageKeys(ns, t.slice(16)));
  });

  it('reject bad input with typed errors naming the argument', () => {
    expect(code(() => pageKeys(ns, new Uint32Array(0)))).toBe('ERR_INVALID_ARGUMENT: tokens must not be empty');
    expect(code(() => pageKeys(ns, []))).toBe('ERR_INVALID_ARGUMENT: tokens must not be empty');
    expect(code(() => pageKeys(ns, [1, 2.5]))).toMatch(/tokens\[1\] must be an integer token id in \[0, 2\^32\), got 2\.5/);
    expect(code(() => pageKeys(ns, [1, -1]))).toMatch(/tokens\[1\]/);
    expect(code(() => pageKeys(ns, [2 ** 32]))).toMatch(/tokens\[0\]/);
    expect(code(() => pageKeys(ns, [Number.NaN]))).toMatch(/tokens\[0\].*NaN/);
    expect(code(() => pageKeys(ns, ['1'] as never))).toMatch(/tokens\[0\].*"1"/);
    expect(code(() => pageKeys(ns, Int32Array.of(1, 2, -3)))).toMatch(/tokens\[2\] must be a token id >= 0, got -3/);
    expect(code(() => pageKeys(ns, 'abc' as never))).toMatch(/tokens must be a Uint32Array, Int32Array or array of integers/);
    expect(code(() => pageKeys(ns, tokens, { parent: 'xyz', position: 1 }))).toMatch(/options\.parent must be a 64-character page key/);
    expect(code(() => pageKeys(ns, tokens, { parent: 'a'.repeat(64) }))).toMatch(/options\.position must be given/);
    expect(code(() => pageKeys(ns, tokens, { position: 3 }))).toMatch(/options\.parent must be given/);
    expect(code(() => pageKeys(ns, tokens, { position: -1 }))).toMatch(/options\.position must be an integer >= 0/);
    expect(code(() => pageKeys({ id: 'x' } as never, tokens))).toMatch(/namespace must be a Namespace/);
  });

  it('hash 2,048 pages in a few milliseconds', () => {
    const big = seq(16 * 2048);
    for (let i = 0; i < 5; i++) pageKeys(ns, big);
    const times: number[] = [];
    for (let i = 0; i < 15; i++) {
      const t = performance.now();
      pageKeys(ns, big);
      times.push(performance.now() - t);
    }
    times.sort((a, b) => a - b);
    const median = times[7]!;
    console.log(`pageKeys: 2,048 pages of 16 tokens in ${median.toFixed(2)} ms (median of 15)`);
    // Generous bound for a shared 2-core machine; measured ~1.5-2 ms.
    expect(median).toBeLessThan(25);
  });
});
