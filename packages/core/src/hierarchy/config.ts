/**
 * Configuration of a TierSync hierarchy, validated with zod: every field is described with its unit and default,
 * and a wrong config names the field and why.
 */
import { TierSyncError } from '@tiersync/native/errors';
import { hasPolicy, ORACLE_POLICIES, parsePolicySpec, policyNames, policyWrapperNames } from '@tiersync/policy';
import { z } from 'zod';
import { KV_PRESETS, kvLayout, type KvLayoutInput } from '../keys/index.js';

const fraction = z.number().gt(0).lte(1);

export const tierConfigSchema = z
  .object({
    /** Tier URL, e.g. `hbm://sim?capacity=8GiB`, `host://?capacity=64GiB`, `fs:///mnt/kv?capacity=2TiB`. */
    url: z.string().min(1),
    /** Name in the index and in events. Default: the URL scheme (`hbm`, `host`, `fs`, `s3`, `peer`). */
    name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1..64 characters of [A-Za-z0-9_.-]').optional(),
    /** Fraction of capacity above which a store first evicts or demotes victims. Default 0.95. */
    highWatermark: fraction.default(0.95),
    /** Fraction of capacity that eviction brings the tier back down to. Default 0.85. */
    lowWatermark: fraction.default(0.85),
    /** Eviction policy by name (`lru`, `fifo`, `clock`, `lfu`, `arc`, `s3fifo`, `sieve`). Default `lru`. */
    policy: z.string().default('lru'),
    /** Copy every stored page to this tier too, in the background (write-through). Default false. Shorthand for `writeMode: 'write-through'`. */
    writeThrough: z.boolean().default(false),
    /**
     * How pages reach this tier from the tiers above it (ignored on the first tier, which takes every store):
     * - `'write-through'`: every stored page is copied here in the background;
     * - `'write-back'` (default): a page comes here only when evicted from above with no copy lower down (demotion);
     * - `{ kind: 'selective', minHits: n, coldOnEvict? }`: a page is copied here once loads have hit it n times;
     *   evicted from above before that, it is dropped (`coldOnEvict: 'drop'`, default) or demoted (`'demote'`).
     * Decisions are the policy package's `decideWrite` (packages/policy/src/write-mode.ts).
     */
    writeMode: z
      .union([
        z.enum(['write-through', 'write-back']),
        z.object({ kind: z.literal('selective'), minHits: z.number().int().min(0).max(1_000_000), coldOnEvict: z.enum(['demote', 'drop']).optional() }).strict(),
      ])
      .optional(),
  })
  .strict()
  .refine((t) => t.lowWatermark <= t.highWatermark, { message: 'lowWatermark must not exceed highWatermark', path: ['lowWatermark'] })
  .refine((t) => !(t.writeThrough && t.writeMode !== undefined && t.writeMode !== 'write-through'), {
    message: 'writeThrough: true contradicts writeMode (give one of them)',
    path: ['writeMode'],
  });

export const tierSyncConfigSchema = z
  .object({
    /** Model fingerprint (name and revision): part of every page key, so models never share pages. */
    model: z.string().min(1).max(512),
    /** KV layout: a preset name (`llama-3-8b`, ...) or a layout description (layers, KV heads, head size, dtype, tokens per page). */
    layout: z.union([z.enum(Object.keys(KV_PRESETS) as [string, ...string[]]), z.record(z.string(), z.unknown())]),
    /** Tokens per page when `layout` is a preset name. Default 16. */
    tokensPerPage: z.number().int().min(1).max(1 << 20).default(16),
    /** Tenant label for stats; with `tenantSalt` tenants never share pages. Default ''. */
    tenant: z.string().max(256).default(''),
    tenantSalt: z.string().max(1024).optional(),
    /** Tiers, fastest first. The first takes every store; lower tiers receive demotions and write-through. */
    tiers: z.array(tierConfigSchema).min(1).max(16),
    index: z
      .object({
        /** SQLite file of the block index; ':memory:' keeps it in memory (lost at exit). Default ':memory:'. */
        path: z.string().min(1).default(':memory:'),
        /** 'full' fsyncs every index commit. Default 'normal' (WAL: a crash loses no commit). */
        synchronous: z.enum(['normal', 'full']).default('normal'),
      })
      .strict()
      .default({ path: ':memory:', synchronous: 'normal' }),
    /** Transfer engine worker threads. Default: one per core. */
    threads: z.number().int().min(1).max(1024).optional(),
    /** Pages of host staging memory for moves between tiers (demotion, promotion, write-through). Default 64. */
    stagingPages: z.number().int().min(1).max(65536).default(64),
    /** Most pages waiting for background write-through or promotion; beyond it pages are dropped (counted). Default 4096. */
    maxQueuedPages: z.number().int().min(0).default(4096),
    /** Copy a page into the first tier when it is loaded from a lower one. Default true. */
    promoteOnHit: z.boolean().default(true),
    /**
     * Deadlines given to every driver call, in ms (every wait has one): a read of a load (a tier that misses it
     * counts as failed for those pages, which fall back to the next copy or are reported missing), the first-tier
     * write of a store (the store fails with ERR_TIMEOUT, nothing becomes visible), and each read and write of a
     * background move. Defaults: load 10000, store 30000, move 60000.
     */
    deadlines: z
      .object({
        loadMs: z.number().int().min(1).default(10_000),
        storeMs: z.number().int().min(1).default(30_000),
        moveMs: z.number().int().min(1).default(60_000),
      })
      .strict()
      .default({ loadMs: 10_000, storeMs: 30_000, moveMs: 60_000 }),
    /**
     * Which new pages a store admits: `{ kind: 'always' }` (default), or `{ kind: 'lookups', lookups: k }` to store
     * a page only once lookups have asked for it k times (counted in a seeded count-min sketch; keeps one-off
     * prompts from pushing reusable pages down).
     */
    admission: z
      .discriminatedUnion('kind', [
        z.object({ kind: z.literal('always') }).strict(),
        z.object({ kind: z.literal('lookups'), lookups: z.number().int().min(1).max(255), width: z.number().int().min(16).max(2 ** 26).optional(), seed: z.number().int().min(0).optional() }).strict(),
      ])
      .default({ kind: 'always' }),
    /**
     * Evict by priority: store()/storeKeys() take `{ priority }` (a safe integer, default 0); on every tier a victim
     * comes from the lowest priority level holding an unpinned page, ordered within the level by the tier's policy
     * (the policy package's PriorityPolicy). Default false (one level: cheaper).
     */
    priorities: z.boolean().default(false),
    /**
     * Per-tenant quotas on every tier, for callers that store several tenants' pages through one instance
     * (storeKeys/store `{ tenant }`; default the instance's `tenant`, or 'default'). Shares are fractions of each
     * tier's capacity in pages. Victims come from the tenant furthest over its share; a store that would take a
     * tenant over its share evicts that tenant's own pages first (`'evict-own'`, default) or is dropped
     * (`'refuse'`). The policy package's TenantQuotaPolicy. Default: none.
     */
    tenantQuotas: z
      .object({
        shares: z.record(z.string().min(1).max(256), z.number().min(0).max(1)),
        /** Share of tenants not in `shares`. Default 1 (the whole tier). */
        defaultShare: z.number().min(0).max(1).default(1),
        overQuota: z.enum(['evict-own', 'refuse']).default('evict-own'),
      })
      .strict()
      .optional(),
  })
  .strict();

export type TierSyncConfig = z.input<typeof tierSyncConfigSchema>;
export type ResolvedConfig = z.output<typeof tierSyncConfigSchema>;

/**
 * One ERR_CONFIG naming every field at fault and why, so a user fixes a config file in one pass (zod reports all
 * problems of a parse at once).
 */
export function configIssuesError(issues: readonly z.core.$ZodIssue[]): TierSyncError {
  const problems = issues.map((issue) => `config ${issue.path.length ? issue.path.join('.') : '(config)'}: ${issue.message}`);
  return new TierSyncError(problems.length === 1 ? problems[0]! : `${problems.length} problems in the config:\n  ${problems.join('\n  ')}`, 'ERR_CONFIG');
}

/**
 * `layout`, which the schema only tells apart as a name or an object: an unknown preset lists the presets, and a
 * layout object's faults are config errors like the rest (kvLayout's own are ERR_INVALID_ARGUMENT).
 */
function checkLayout(layout: unknown): void {
  if (typeof layout === 'string') {
    if (!Object.hasOwn(KV_PRESETS, layout)) throw new TierSyncError(`config layout: unknown preset '${layout}' (presets: ${Object.keys(KV_PRESETS).join(', ')}; or describe the layout as an object)`, 'ERR_CONFIG');
  } else if (layout !== null && typeof layout === 'object' && !Array.isArray(layout)) {
    try {
      kvLayout(layout as KvLayoutInput);
    } catch (e) {
      throw new TierSyncError(`config ${(e as Error).message}`, 'ERR_CONFIG', { cause: e });
    }
  }
}

/** @throws TierSyncError ERR_CONFIG naming every field at fault and why */
export function parseConfig(config: unknown): ResolvedConfig {
  checkLayout((config as { layout?: unknown } | null)?.layout);
  const r = tierSyncConfigSchema.safeParse(config);
  if (!r.success) throw configIssuesError(r.error.issues);
  for (const [i, t] of r.data.tiers.entries()) {
    if (!hasPolicy(t.policy)) {
      throw new TierSyncError(`config tiers.${i}.policy: unknown policy '${t.policy}' (known: ${policyNames().join(', ')}; wrappers, as 'wrapper:policy': ${policyWrapperNames().join(', ')}; a custom policy is registered with registerPolicy by a module loaded first, e.g. NODE_OPTIONS='--import ./mypolicy.mjs', see docs/SIMULATION.md)`, 'ERR_CONFIG');
    }
    // Bounds read each request's future from a trace: a live tier has none, so they exist only in the simulator.
    if (ORACLE_POLICIES.includes(parsePolicySpec(t.policy).policy)) {
      throw new TierSyncError(`config tiers.${i}.policy: '${t.policy}' is an offline bound that needs the trace's future; use it in \`tiersync sim\`, not in a live tier`, 'ERR_CONFIG');
    }
  }
  return r.data;
}
