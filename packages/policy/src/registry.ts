/**
 * Policies by name. The built-in algorithms are registered at load; custom policies plug in through
 * {@link registerPolicy} and are then created exactly like the built-ins (by the simulator, the CLI, config files).
 */
import { ArcPolicy } from './policies/arc.js';
import { ClockPolicy } from './policies/clock.js';
import { FifoPolicy } from './policies/fifo.js';
import { LfuPolicy } from './policies/lfu.js';
import { LruPolicy } from './policies/lru.js';
import { S3FifoPolicy, type S3FifoOptions } from './policies/s3fifo.js';
import { SievePolicy } from './policies/sieve.js';
import { GdsfPolicy } from './policies/gdsf.js';
import { LfudaPolicy } from './policies/lfuda.js';
import { LirsPolicy, type LirsOptions } from './policies/lirs.js';
import { MruPolicy } from './policies/mru.js';
import { OptPolicy } from './policies/opt.js';
import { OptSizePolicy } from './policies/opt-size.js';
import { SlruPolicy, type SlruOptions } from './policies/slru.js';
import { TwoQPolicy, type TwoQOptions } from './policies/twoq.js';
import { WTinyLfuPolicy, type WTinyLfuOptions } from './policies/wtinylfu.js';
import { CheckedPolicy } from './internal/checked-policy.js';
import { checkFunction, checkOptions, describe } from './internal/validate.js';
import type { EvictionPolicy, PolicyKey, PolicyOptions } from './types.js';
import { PrefixAwarePolicy } from './wrappers/prefix-aware.js';
import { PrefixHoldPolicy } from './wrappers/prefix-hold.js';
import { SessionAwarePolicy } from './wrappers/session-aware.js';

/**
 * Builds a policy from its options. It should validate them and throw TypeError / RangeError naming the option.
 * Policies treat keys as opaque, so a factory returns a policy over any {@link PolicyKey}.
 */
export type PolicyFactory<O extends PolicyOptions = PolicyOptions> = (options: O) => EvictionPolicy;

/** Options of each built-in policy, by name. */
export interface BuiltinPolicyOptions {
  lru: PolicyOptions;
  fifo: PolicyOptions;
  clock: PolicyOptions;
  lfu: PolicyOptions;
  arc: PolicyOptions;
  s3fifo: S3FifoOptions;
  sieve: PolicyOptions;
  slru: SlruOptions;
  lirs: LirsOptions;
  '2q': TwoQOptions;
  wtinylfu: WTinyLfuOptions;
  lfuda: PolicyOptions;
  gdsf: PolicyOptions;
  mru: PolicyOptions;
  /** Belady's OPT: needs `access(key, nextAccess)` (offline bound). */
  opt: PolicyOptions;
  /** Size-aware OPT for byte capacities: needs `access(key, nextAccess)` (offline bound). */
  'opt-size': PolicyOptions;
}

/** Names of the built-in policies. */
export type BuiltinPolicyName = keyof BuiltinPolicyOptions;

const NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

const BUILTINS: { [N in BuiltinPolicyName]: PolicyFactory<BuiltinPolicyOptions[N]> } = {
  lru: (options) => new LruPolicy(options),
  fifo: (options) => new FifoPolicy(options),
  clock: (options) => new ClockPolicy(options),
  lfu: (options) => new LfuPolicy(options),
  arc: (options) => new ArcPolicy(options),
  s3fifo: (options) => new S3FifoPolicy(options),
  sieve: (options) => new SievePolicy(options),
  slru: (options) => new SlruPolicy(options),
  lirs: (options) => new LirsPolicy(options),
  '2q': (options) => new TwoQPolicy(options),
  wtinylfu: (options) => new WTinyLfuPolicy(options),
  lfuda: (options) => new LfudaPolicy(options),
  gdsf: (options) => new GdsfPolicy(options),
  mru: (options) => new MruPolicy(options),
  opt: (options) => new OptPolicy(options),
  'opt-size': (options) => new OptSizePolicy(options),
};

/**
 * Built-ins that need oracle knowledge (`access(key, nextAccess)`, see {@link EvictionPolicy.access}): offline
 * bounds for simulations, not policies to run live.
 */
export const ORACLE_POLICIES: readonly string[] = ['opt', 'opt-size'];

/**
 * Wraps an inner policy (wrappers/): `prefix-aware`, `prefix-hold`, `session-aware`. A policy spec names wrappers before the
 * policy, outermost first: `prefix-aware:session-aware:lru` is prefix-aware(session-aware(lru)).
 */
export type PolicyWrapperFactory = (inner: EvictionPolicy, options: PolicyOptions) => EvictionPolicy;

/** Names of the built-in wrappers. */
export type BuiltinWrapperName = 'prefix-aware' | 'prefix-hold' | 'session-aware';

const WRAPPERS: Record<BuiltinWrapperName, PolicyWrapperFactory> = {
  'prefix-aware': (inner) => new PrefixAwarePolicy(inner),
  'prefix-hold': (inner) => new PrefixHoldPolicy(inner),
  'session-aware': (inner) => new SessionAwarePolicy(inner),
};

/**
 * Splits a policy spec into its wrappers (outermost first) and its policy name, without checking that they exist.
 * @throws TypeError for a spec that is not a string
 */
export function parsePolicySpec(spec: string): { wrappers: string[]; policy: string } {
  if (typeof spec !== 'string') throw new TypeError(`policy must be a string, got ${describe(spec)}`);
  const parts = spec.split(':');
  return { wrappers: parts.slice(0, -1), policy: parts[parts.length - 1]! };
}

/** Options of {@link PolicyRegistry.register} and {@link registerPolicy}. */
export interface RegisterOptions {
  /** Allow replacing a custom policy of the same name (built-ins are never replaced). Default false. */
  replace?: boolean;
  /**
   * The factory takes {@link PolicyOptions.denseKeys} (the built-ins do). Default false: `denseKeys` is taken out of
   * the options before they reach the factory, so a factory that refuses options it does not know (as it should)
   * is created the same way by the simulator, which asks for dense keys, and by a live tier, which does not.
   */
  denseKeys?: boolean;
}

/** A table of policy factories by name. Most code uses the process-wide one through the functions below. */
export class PolicyRegistry {
  readonly #factories = new Map<string, PolicyFactory<never>>();
  readonly #builtin = new Set<string>();
  /** Factories that take `denseKeys`. */
  readonly #dense = new Set<string>();
  readonly #wrappers = new Map<string, PolicyWrapperFactory>(Object.entries(WRAPPERS));

  /** @param withBuiltins register the built-in policies (the keys of {@link BuiltinPolicyOptions}; default true) */
  constructor(withBuiltins = true) {
    if (!withBuiltins) return;
    for (const [name, factory] of Object.entries(BUILTINS)) {
      this.#factories.set(name, factory as PolicyFactory<never>);
      this.#builtin.add(name);
      this.#dense.add(name);
    }
  }

  /**
   * Registers `factory` under `name` (lowercase letters, digits, `.`, `_`, `-`; at most 64 characters).
   * @param options see {@link RegisterOptions}
   * @throws TypeError when `name` is not a string or `factory` not a function
   * @throws RangeError when `name` is malformed or taken
   */
  register<O extends PolicyOptions>(name: string, factory: PolicyFactory<O>, options: RegisterOptions = {}): void {
    checkName(name);
    checkFunction(factory, 'factory');
    if (this.#builtin.has(name)) throw new RangeError(`name: ${describe(name)} is a built-in policy`);
    if (this.#factories.has(name) && options.replace !== true) {
      throw new RangeError(`name: a policy ${describe(name)} is already registered (pass { replace: true })`);
    }
    this.#factories.set(name, factory as PolicyFactory<never>);
    if (options.denseKeys === true) this.#dense.add(name);
    else this.#dense.delete(name);
  }

  /**
   * Creates the policy registered as `name`. `options.denseKeys` reaches only factories that take it (the built-ins,
   * and custom ones registered with `denseKeys: true`); the others get the options without it. A custom policy comes back behind the contract's checks
   * (internal/checked-policy.ts): an answer that breaks the {@link EvictionPolicy} contract (a victim that was not
   * resident, or is still resident, or named twice, or the key being inserted; a capacity overrun; a hit on an
   * absent key), and any throw from its methods, become a `PolicyError` naming the policy, the call and the rule.
   * @throws RangeError when no policy has that name; whatever the factory throws for bad options; PolicyError when
   * a custom factory builds something that is not an EvictionPolicy
   */
  create<N extends BuiltinPolicyName, K extends PolicyKey = PolicyKey>(
    name: N,
    options: BuiltinPolicyOptions[N],
  ): EvictionPolicy<K>;
  create<K extends PolicyKey = PolicyKey>(name: string, options: PolicyOptions): EvictionPolicy<K>;
  create<K extends PolicyKey>(name: string, options: PolicyOptions): EvictionPolicy<K> {
    if (typeof name === 'string' && name.includes(':')) {
      const { wrappers, policy } = parsePolicySpec(name);
      let p = this.create<K>(policy, options);
      for (let i = wrappers.length - 1; i >= 0; i--) p = this.wrap(wrappers[i]!, p, options);
      return p;
    }
    checkName(name);
    checkOptions(options);
    const factory = this.#factories.get(name);
    if (factory === undefined) {
      throw new RangeError(`name: no policy ${describe(name)}; registered: ${this.names().join(', ')}`);
    }
    let given = options;
    if (options.denseKeys !== undefined && !this.#dense.has(name)) {
      const { denseKeys: _, ...rest } = options;
      given = rest;
    }
    const policy = (factory as PolicyFactory)(given) as EvictionPolicy<K>;
    // A custom policy is checked on every answer (internal/checked-policy.ts); the built-ins run bare.
    return this.#builtin.has(name) ? policy : new CheckedPolicy<K>(policy, name);
  }

  /** Whether `spec` names a registered policy, with any wrappers (`prefix-aware:lru`) known too. */
  has(spec: string): boolean {
    if (typeof spec !== 'string') return false;
    const { wrappers, policy } = parsePolicySpec(spec);
    return this.#factories.has(policy) && wrappers.every((w) => this.#wrappers.has(w));
  }

  /**
   * Wraps `inner` in the wrapper registered as `name`.
   * @throws RangeError when no wrapper has that name
   */
  wrap<K extends PolicyKey>(name: string, inner: EvictionPolicy<K>, options: PolicyOptions): EvictionPolicy<K> {
    const factory = this.#wrappers.get(name);
    if (factory === undefined) {
      throw new RangeError(`name: no policy wrapper ${describe(name)}; known: ${[...this.#wrappers.keys()].sort().join(', ')}`);
    }
    return factory(inner as EvictionPolicy, options) as EvictionPolicy<K>;
  }

  /** Registered wrapper names, sorted. */
  wrapperNames(): string[] {
    return [...this.#wrappers.keys()].sort();
  }

  /** Registered names, sorted. */
  names(): string[] {
    return [...this.#factories.keys()].sort();
  }
}

function checkName(name: unknown): asserts name is string {
  if (typeof name !== 'string') throw new TypeError(`name must be a string, got ${describe(name)}`);
  if (!NAME.test(name)) {
    throw new RangeError(`name must be lowercase letters, digits, '.', '_' or '-' (at most 64), got ${describe(name)}`);
  }
}

const registry = new PolicyRegistry();

/**
 * Creates a policy by name from the process-wide registry, e.g.
 * `createPolicy('s3fifo', { capacity: 1 << 30, unit: 'bytes' })`.
 * @throws RangeError for an unknown name; TypeError / RangeError naming a bad option
 */
export function createPolicy<N extends BuiltinPolicyName, K extends PolicyKey = PolicyKey>(
  name: N,
  options: BuiltinPolicyOptions[N],
): EvictionPolicy<K>;
export function createPolicy<K extends PolicyKey = PolicyKey>(name: string, options: PolicyOptions): EvictionPolicy<K>;
export function createPolicy<K extends PolicyKey>(name: string, options: PolicyOptions): EvictionPolicy<K> {
  return registry.create<K>(name, options);
}

/**
 * Registers a custom policy in the process-wide registry. See {@link PolicyRegistry.register}.
 * @throws TypeError / RangeError for a bad or taken name, or a factory that is not a function
 */
export function registerPolicy<O extends PolicyOptions>(
  name: string,
  factory: PolicyFactory<O>,
  options: RegisterOptions = {},
): void {
  registry.register(name, factory, options);
}

/** Names in the process-wide registry, sorted. */
export function policyNames(): string[] {
  return registry.names();
}

/** Whether a policy spec (`lru`, `prefix-aware:s3fifo`, ...) names registered policies and wrappers. */
export function hasPolicy(spec: string): boolean {
  return registry.has(spec);
}

/** Wraps `inner` in a registered wrapper (`prefix-aware`, `session-aware`). @throws RangeError for an unknown name */
export function wrapPolicy<K extends PolicyKey>(name: string, inner: EvictionPolicy<K>, options: PolicyOptions): EvictionPolicy<K> {
  return registry.wrap(name, inner, options);
}

/** Wrapper names of the process-wide registry, sorted. */
export function policyWrapperNames(): string[] {
  return registry.wrapperNames();
}
