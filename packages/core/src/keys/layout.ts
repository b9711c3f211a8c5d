/**
 * KV layouts: how many bytes one token, one page and one layer group of KV cache take, and a stable fingerprint
 * that goes into every key's namespace (two engines whose layouts differ must never share pages).
 *
 * A layout is one or more **layer groups**. A plain model (Llama) is one group of full-attention layers; a hybrid
 * model is several groups in one layout (Gemma 2: sliding-window layers and full-attention layers alternate); an
 * MLA model (DeepSeek-V3) stores one compressed latent per token and layer instead of K and V heads.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { TierSyncError } from '@tiersync/native/errors';

/** Element types of KV caches, with their size in bytes. */
export const DTYPE_BYTES = {
  fp32: 4,
  fp16: 2,
  bf16: 2,
  fp8_e4m3: 1,
  fp8_e5m2: 1,
  int8: 1,
} as const;
export type KvDtype = keyof typeof DTYPE_BYTES;

const dtype = z.enum(Object.keys(DTYPE_BYTES) as [KvDtype, ...KvDtype[]]);
const positive = (max: number) => z.number().int('must be an integer').min(1, 'must be >= 1').max(max, `must be <= ${max}`);

const mhaAttention = z
  .object({
    /** Multi-head / grouped-query attention: K and V each have `kvHeads` heads of `headDim` elements. */
    type: z.literal('mha'),
    /** KV heads per layer (num_key_value_heads). */
    kvHeads: positive(4096),
    /** Elements per K head (head_dim). */
    headDim: positive(65536),
    /** Elements per V head when it differs from `headDim`. Default: `headDim`. */
    valueHeadDim: positive(65536).optional(),
  })
  .strict();

const mlaAttention = z
  .object({
    /** Multi-head latent attention: one latent vector per token and layer, shared by K and V. */
    type: z.literal('mla'),
    /** Elements of the compressed KV latent (kv_lora_rank). */
    latentDim: positive(65536),
    /** Elements of the decoupled RoPE key stored beside the latent (qk_rope_head_dim). Default 0. */
    ropeDim: z.number().int('must be an integer').min(0, 'must be >= 0').max(65536).optional(),
  })
  .strict();

const groupInput = z
  .object({
    /** Group name, unique in the layout (e.g. 'full', 'sliding'). Default `group<i>`. */
    name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1..64 characters of A-Z a-z 0-9 _ . -').optional(),
    /**
     * The layers of this group: a count (the next layers after the previous groups' count-given layers) or the
     * explicit 0-based layer indices (interleaved hybrids). Every layer 0..L-1 belongs to exactly one group.
     */
    layers: z.union([positive(100_000), z.array(z.number().int('must be an integer').min(0, 'must be >= 0')).min(1, 'must not be empty')]),
    attention: z.discriminatedUnion('type', [mhaAttention, mlaAttention]),
    /** Element type of this group's cache. Default: the layout's dtype. */
    dtype: dtype.optional(),
    /** Tokens a sliding-window layer attends to; absent for full attention. Informational for placement. */
    slidingWindow: positive(1 << 30).optional(),
  })
  .strict();

const layoutInput = z
  .object({
    /** Tokens per page (the engine's block size): 16 in vLLM by default, 256 in LMCache. */
    tokensPerPage: positive(1 << 20),
    /** Default element type of every group. */
    dtype,
    groups: z.array(groupInput).min(1, 'must list at least one layer group').max(64, 'at most 64 groups'),
  })
  .strict();

/** A KV layout as written by users (see the zod schema for every field's meaning). */
export type KvLayoutInput = z.input<typeof layoutInput>;
export type KvAttention = z.infer<typeof mhaAttention> | z.infer<typeof mlaAttention>;

/** One normalized layer group: explicit layer indices, dtype resolved, sizes computed. */
export interface KvLayerGroup {
  readonly name: string;
  /** Sorted 0-based layer indices. */
  readonly layers: readonly number[];
  readonly attention: Readonly<KvAttention>;
  readonly dtype: KvDtype;
  readonly slidingWindow: number | undefined;
  /** Bytes of KV per token in one layer of this group. */
  readonly bytesPerTokenPerLayer: number;
  /** Bytes of KV per token for all layers of this group. */
  readonly bytesPerToken: number;
  /** Bytes of this group's part of one page (tokensPerPage tokens). */
  readonly bytesPerPage: number;
}

/** A validated, normalized KV layout. Build with {@link kvLayout}. */
export interface KvLayout {
  readonly tokensPerPage: number;
  readonly dtype: KvDtype;
  readonly layers: number;
  readonly groups: readonly KvLayerGroup[];
  /** Bytes of KV per token, all groups. */
  readonly bytesPerToken: number;
  /** Bytes of one page, all groups (the page is the group pages laid out in group order). */
  readonly bytesPerPage: number;
  /** 32 lower-case hex characters: SHA-256 of the canonical layout, truncated to 128 bits. Stable across releases. */
  readonly fingerprint: string;
}

/** Shorthand for the common case: one group of MHA/GQA layers. */
export interface SimpleLayoutInput {
  layers: number;
  kvHeads: number;
  headDim: number;
  dtype: KvDtype;
  tokensPerPage: number;
  slidingWindow?: number;
}

function fail(issues: z.core.$ZodIssue[], what: string): never {
  const first = issues[0];
  const field = first && first.path.length > 0 ? first.path.map(String).join('.') : what;
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more problem${issues.length > 2 ? 's' : ''})` : '';
  throw new TierSyncError(`${what}: ${field} ${first?.message ?? 'is invalid'}${more}`, 'ERR_INVALID_ARGUMENT');
}

/**
 * Validates and normalizes a layout. Accepts the full form (`groups`) or the one-group shorthand
 * ({@link SimpleLayoutInput}).
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming the field (`layout: groups.1.attention.kvHeads must be >= 1`).
 */
export function kvLayout(input: KvLayoutInput | SimpleLayoutInput | KvLayout): KvLayout {
  if (input !== null && typeof input === 'object' && 'fingerprint' in input && 'bytesPerPage' in input) {
    // Already normalized: re-validate through its input form so a hand-made object cannot slip through.
    return kvLayout(toInput(input as KvLayout));
  }
  let raw: unknown = input;
  if (input !== null && typeof input === 'object' && !('groups' in input)) {
    const s = input as Partial<SimpleLayoutInput>;
    raw = {
      tokensPerPage: s.tokensPerPage,
      dtype: s.dtype,
      groups: [
        {
          name: 'all',
          layers: s.layers,
          attention: { type: 'mha', kvHeads: s.kvHeads, headDim: s.headDim },
          ...(s.slidingWindow !== undefined ? { slidingWindow: s.slidingWindow } : {}),
        },
      ],
    };
    const extra = Object.keys(input).filter((k) => !['layers', 'kvHeads', 'headDim', 'dtype', 'tokensPerPage', 'slidingWindow'].includes(k));
    if (extra.length > 0) throw new TierSyncError(`layout: unknown field ${extra[0]}`, 'ERR_INVALID_ARGUMENT');
  }
  const parsed = layoutInput.safeParse(raw);
  if (!parsed.success) fail(parsed.error.issues, 'layout');
  const v = parsed.data;

  // Resolve layer indices: counts continue after the highest index assigned so far by counts.
  let next = 0;
  const names = new Set<string>();
  const owner = new Map<number, string>();
  const groups: KvLayerGroup[] = [];
  for (const [i, g] of v.groups.entries()) {
    const name = g.name ?? `group${i}`;
    if (names.has(name)) throw new TierSyncError(`layout: groups.${i}.name '${name}' is used twice`, 'ERR_INVALID_ARGUMENT');
    names.add(name);
    let layers: number[];
    if (typeof g.layers === 'number') {
      layers = Array.from({ length: g.layers }, (_, k) => next + k);
      next += g.layers;
    } else {
      layers = [...g.layers].sort((a, b) => a - b);
    }
    for (const l of layers) {
      const other = owner.get(l);
      if (other !== undefined) throw new TierSyncError(`layout: groups.${i}.layers: layer ${l} is already in group '${other}'`, 'ERR_INVALID_ARGUMENT');
      owner.set(l, name);
    }
    const dt = g.dtype ?? v.dtype;
    const a = g.attention;
    const elements = a.type === 'mha' ? a.kvHeads * (a.headDim + (a.valueHeadDim ?? a.headDim)) : a.latentDim + (a.ropeDim ?? 0);
    const attention: KvAttention =
      a.type === 'mha'
        ? { type: 'mha', kvHeads: a.kvHeads, headDim: a.headDim, ...(a.valueHeadDim !== undefined && a.valueHeadDim !== a.headDim ? { valueHeadDim: a.valueHeadDim } : {}) }
        : { type: 'mla', latentDim: a.latentDim, ropeDim: a.ropeDim ?? 0 };
    const perLayer = elements * DTYPE_BYTES[dt];
    const bytesPerToken = perLayer * layers.length;
    groups.push(
      Object.freeze({
        name,
        layers: Object.freeze(layers),
        attention: Object.freeze(attention),
        dtype: dt,
        slidingWindow: g.slidingWindow,
        bytesPerTokenPerLayer: perLayer,
        bytesPerToken,
        bytesPerPage: bytesPerToken * v.tokensPerPage,
      }),
    );
  }
  const total = owner.size;
  for (let l = 0; l < total; l++) {
    if (!owner.has(l)) throw new TierSyncError(`layout: groups: layer ${l} belongs to no group (layers must be 0..${total - 1} without gaps)`, 'ERR_INVALID_ARGUMENT');
  }
  const bytesPerToken = groups.reduce((s, g) => s + g.bytesPerToken, 0);
  const bytesPerPage = bytesPerToken * v.tokensPerPage;
  if (!Number.isSafeInteger(bytesPerPage)) throw new TierSyncError('layout: bytes per page exceeds 2^53', 'ERR_INVALID_ARGUMENT');
  const layout = { tokensPerPage: v.tokensPerPage, dtype: v.dtype, layers: total, groups: Object.freeze(groups), bytesPerToken, bytesPerPage };
  return Object.freeze({ ...layout, fingerprint: layoutFingerprint(layout) });
}

/** The canonical text a fingerprint hashes: fixed field order, explicit defaults, version tag. */
function canonical(l: Pick<KvLayout, 'tokensPerPage' | 'groups'>): string {
  return JSON.stringify({
    v: 'tiersync.kv-layout.1',
    tokensPerPage: l.tokensPerPage,
    // Group names are labels, not layout: they are left out so that renaming a group keeps the fingerprint.
    groups: l.groups.map((g) => ({
      layers: g.layers,
      dtype: g.dtype,
      attention:
        g.attention.type === 'mha'
          ? { type: 'mha', kvHeads: g.attention.kvHeads, headDim: g.attention.headDim, valueHeadDim: g.attention.valueHeadDim ?? g.attention.headDim }
          : { type: 'mla', latentDim: g.attention.latentDim, ropeDim: g.attention.ropeDim ?? 0 },
      slidingWindow: g.slidingWindow ?? null,
    })),
  });
}

function layoutFingerprint(l: Pick<KvLayout, 'tokensPerPage' | 'groups'>): string {
  return createHash('sha256').update(canonical(l)).digest('hex').slice(0, 32);
}

function toInput(l: KvLayout): KvLayoutInput {
  return {
    tokensPerPage: l.tokensPerPage,
    dtype: l.dtype,
    groups: l.groups.map((g) => ({
      name: g.name,
      layers: [...g.layers],
      attention: { ...g.attention },
      dtype: g.dtype,
      ...(g.slidingWindow !== undefined ? { slidingWindow: g.slidingWindow } : {}),
    })),
  };
}

/** Bytes of `tokens` tokens of KV in `layout` (all groups; pass a group name for one group). */
export function kvBytes(layout: KvLayout, tokens: number, group?: string): number {
  if (group === undefined) return layout.bytesPerToken * tokens;
  const g = layout.groups.find((x) => x.name === group);
  if (!g) throw new TierSyncError(`group '${group}' is not in the layout (groups: ${layout.groups.map((x) => x.name).join(', ')})`, 'ERR_INVALID_ARGUMENT');
  return g.bytesPerToken * tokens;
}

/**
 * Published model configurations (Hugging Face `config.json` of each model, fields named in the comment).
 * Tokens per page and dtype are the caller's (the engine's) choice: defaults 16 tokens (vLLM's block size), bf16.
 */
export const KV_PRESETS = {
  /**
   * meta-llama/Meta-Llama-3-8B: num_hidden_layers 32, num_key_value_heads 8, hidden_size 4096 /
   * num_attention_heads 32 = head_dim 128, torch_dtype bfloat16. 2*32*8*128*2 B = 128 KiB per token.
   */
  'llama-3-8b': { groups: [{ name: 'full', layers: 32, attention: { type: 'mha', kvHeads: 8, headDim: 128 } }] },
  /** meta-llama/Meta-Llama-3-70B: 80 layers, 8 KV heads, head_dim 8192/64 = 128. 320 KiB per token in bf16. */
  'llama-3-70b': { groups: [{ name: 'full', layers: 80, attention: { type: 'mha', kvHeads: 8, headDim: 128 } }] },
  /** Qwen/Qwen2.5-7B-Instruct: 28 layers, 4 KV heads, head_dim 3584/28 = 128. 56 KiB per token in bf16. */
  'qwen2.5-7b': { groups: [{ name: 'full', layers: 28, attention: { type: 'mha', kvHeads: 4, headDim: 128 } }] },
  /**
   * google/gemma-2-9b: 42 layers, 8 KV heads, head_dim 256, sliding_window 4096; layers alternate local (even
   * indices, sliding window) and global (odd). A hybrid layout: two groups. 336 KiB per token in bf16.
   */
  'gemma-2-9b': {
    groups: [
      { name: 'sliding', layers: Array.from({ length: 21 }, (_, i) => 2 * i), attention: { type: 'mha', kvHeads: 8, headDim: 256 }, slidingWindow: 4096 },
      { name: 'full', layers: Array.from({ length: 21 }, (_, i) => 2 * i + 1), attention: { type: 'mha', kvHeads: 8, headDim: 256 } },
    ],
  },
  /**
   * deepseek-ai/DeepSeek-V3: 61 layers of MLA, kv_lora_rank 512, qk_rope_head_dim 64: 576 elements per token and
   * layer, 68.6 KiB per token in bf16.
   */
  'deepseek-v3': { groups: [{ name: 'mla', layers: 61, attention: { type: 'mla', latentDim: 512, ropeDim: 64 } }] },
} as const satisfies Record<string, { groups: KvLayoutInput['groups'] }>;
export type KvPresetName = keyof typeof KV_PRESETS;

/**
 * A preset layout by name with the engine's page size and dtype.
 * @param options.tokensPerPage tokens per page, default 16.
 * @param options.dtype element type, default 'bf16'.
 */
export function kvLayoutPreset(name: KvPresetName, options: { tokensPerPage?: number; dtype?: KvDtype } = {}): KvLayout {
  const preset = (KV_PRESETS as Record<string, { groups: KvLayoutInput['groups'] }>)[name];
  if (!preset) throw new TierSyncError(`unknown layout preset '${String(name)}' (known: ${Object.keys(KV_PRESETS).join(', ')})`, 'ERR_INVALID_ARGUMENT');
  return kvLayout({
    tokensPerPage: options.tokensPerPage ?? 16,
    dtype: options.dtype ?? 'bf16',
    groups: preset.groups.map((g) => ({ ...g, layers: typeof g.layers === 'number' ? g.layers : [...g.layers], attention: { ...g.attention } })),
  });
}
