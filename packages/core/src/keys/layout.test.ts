import { describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native';
import { KV_PRESETS, kvBytes, kvLayout, kvLayoutPreset } from './layout.js';

const KiB = 1024;

describe('KV layouts', () => {
  it('sizes Llama-3-8B as published: 128 KiB per token', () => {
    const l = kvLayoutPreset('llama-3-8b');
    expect(l.layers).toBe(32);
    expect(l.bytesPerToken).toBe(128 * KiB);
    expect(l.tokensPerPage).toBe(16);
    expect(l.bytesPerPage).toBe(16 * 128 * KiB);
    expect(l.groups[0]!.bytesPerTokenPerLayer).toBe(4 * KiB);
    expect(kvBytes(l, 32_768)).toBe(4 * 1024 ** 3);
  });

  it('sizes the other presets', () => {
    expect(kvLayoutPreset('llama-3-70b').bytesPerToken).toBe(320 * KiB);
    expect(kvLayoutPreset('qwen2.5-7b').bytesPerToken).toBe(56 * KiB);
    const ds = kvLayoutPreset('deepseek-v3', { tokensPerPage: 64 });
    expect(ds.bytesPerToken).toBe(576 * 61 * 2);
    expect(ds.bytesPerPage).toBe(576 * 61 * 2 * 64);
    expect(kvLayoutPreset('llama-3-8b', { dtype: 'fp8_e4m3' }).bytesPerToken).toBe(64 * KiB);
    expect(Object.keys(KV_PRESETS)).toEqual(['llama-3-8b', 'llama-3-70b', 'qwen2.5-7b', 'gemma-2-9b', 'deepseek-v3']);
  });

  it('describes a hybrid model as one layout with several groups', () => {
    const g = kvLayoutPreset('gemma-2-9b', { tokensPerPage: 32 });
    expect(g.layers).toBe(42);
    expect(g.groups.map((x) => [x.name, x.layers.length, x.slidingWindow])).toEqual([
      ['sliding', 21, 4096],
      ['full', 21, undefined],
    ]);
    expect(g.groups[0]!.layers.slice(0, 3)).toEqual([0, 2, 4]);
    expect(g.bytesPerToken).toBe(2 * 42 * 8 * 256 * 2);
    expect(kvBytes(g, 10, 'full')).toBe(10 * 21 * 2 * 8 * 256 * 2);
    expect(g.groups[1]!.bytesPerPage).toBe(32 * 21 * 2 * 8 * 256 * 2);
    expect(() => kvBytes(g, 1, 'nope')).toThrow(/group 'nope' is not in the layout \(groups: sliding, full\)/);
  });

  it('mixes dtypes and value head sizes per group', () => {
    const l = kvLayout({
      tokensPerPage: 8,
      dtype: 'bf16',
      groups: [
        { layers: 2, attention: { type: 'mha', kvHeads: 2, headDim: 64, valueHeadDim: 32 } },
        { layers: 1, attention: { type: 'mha', kvHeads: 1, headDim: 16 }, dtype: 'fp32' },
      ],
    });
    expect(l.groups.map((g) => g.name)).toEqual(['group0', 'group1']);
    expect(l.groups[0]!.bytesPerToken).toBe(2 * 2 * (64 + 32) * 2);
    expect(l.groups[1]!.layers).toEqual([2]);
    expect(l.groups[1]!.bytesPerToken).toBe(2 * 16 * 4);
    expect(l.bytesPerPage).toBe(8 * (768 + 128));
  });

  it('has a stable fingerprint that ignores spelling and names but not sizes', () => {
    const a = kvLayoutPreset('llama-3-8b');
    const b = kvLayout({ layers: 32, kvHeads: 8, headDim: 128, dtype: 'bf16', tokensPerPage: 16 });
    expect(a.fingerprint).toMatch(/^[0-9a-f]{32}$/);
    expect(b.fingerprint).toBe(a.fingerprint);
    expect(kvLayout(a).fingerprint).toBe(a.fingerprint);
    // Pinned: a change here changes every key of every user; it needs a new version tag, not an edit.
    expect(a.fingerprint).toBe('36c1765003ec5d5b5821f7a1f26dc892');
    expect(kvLayoutPreset('llama-3-8b', { tokensPerPage: 32 }).fingerprint).not.toBe(a.fingerprint);
    expect(kvLayoutPreset('llama-3-8b', { dtype: 'fp16' }).fingerprint).not.toBe(a.fingerprint);
    expect(kvLayout({ layers: 32, kvHeads: 8, headDim: 128, dtype: 'bf16', tokensPerPage: 16, slidingWindow: 4096 }).fingerprint).not.toBe(a.fingerprint);
  });

  it('names the bad field', () => {
    const bad = (input: unknown, re: RegExp) => {
      try {
        kvLayout(input as never);
        throw new Error('did not throw');
      } catch (e) {
        expect(e).toBeInstanceOf(TierSyncError);
        expect((e as TierSyncError).code).toBe('ERR_INVALID_ARGUMENT');
        expect((e as Error).message).toMatch(re);
      }
    };
    bad({ layers: 32, kvHeads: 0, headDim: 128, dtype: 'bf16', tokensPerPage: 16 }, /layout: groups\.0\.attention\.kvHeads must be >= 1/);
    bad({ layers: 32, kvHeads: 8, headDim: 128, dtype: 'bf17', tokensPerPage: 16 }, /layout: dtype/);
    bad({ layers: 32, kvHeads: 8, headDim: 128, dtype: 'bf16', tokensPerPage: 1.5 }, /layout: tokensPerPage must be an integer/);
    bad({ layers: 32, kvHeads: 8, headDim: 128, dtype: 'bf16' }, /layout: tokensPerPage/);
    bad({ layers: 32, kvHeads: 8, headDim: 128, dtype: 'bf16', tokensPerPage: 16, heads: 3 }, /unknown field heads/);
    bad({ tokensPerPage: 16, dtype: 'bf16', groups: [] }, /layout: groups must list at least one layer group/);
    bad({ tokensPerPage: 16, dtype: 'bf16', groups: [{ layers: 2, attention: { type: 'mla' } }] }, /groups\.0\.attention\.latentDim/);
    bad({ tokensPerPage: 16, dtype: 'bf16', groups: [{ layers: 2, attention: { type: 'gqa', kvHeads: 1, headDim: 1 } }] }, /groups\.0\.attention/);
    bad(
      { tokensPerPage: 16, dtype: 'bf16', groups: [{ layers: [0, 1], attention: { type: 'mha', kvHeads: 1, headDim: 1 } }, { layers: [1, 2], attention: { type: 'mha', kvHeads: 1, headDim: 1 } }] },
      /groups\.1\.layers: layer 1 is already in group 'group0'/,
    );
    bad({ tokensPerPage: 16, dtype: 'bf16', groups: [{ layers: [0, 2], attention: { type: 'mha', kvHeads: 1, headDim: 1 } }] }, /layer 1 belongs to no group/);
    bad(
      { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'a', layers: 1, attention: { type: 'mha', kvHeads: 1, headDim: 1 } }, { name: 'a', layers: 1, attention: { type: 'mha', kvHeads: 1, headDim: 1 } }] },
      /groups\.1\.name 'a' is used twice/,
    );
    bad(null, /layout/);
  });
});
