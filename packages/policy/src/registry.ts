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
import { checkFunction, checkOptions, describe } from './internal/validate.js';
import type { EvictionPolicy, PolicyKey, PolicyOptions } from './types.js';

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
};

/** A table of policy factories by name. Most code uses the process-wide one through the functions below. */
export class PolicyRegistry {
  readonly #factories = new Map<string, PolicyFactory<never>>();
  readonly #builtin = new Set<string>();

  /** @param withBuiltins register lru, fifo, clock, lfu, arc, s3fifo and sieve (default true) */
  constructor(withBuiltins = true) {
    if (!withBuiltins) return;
    for (const [name, factory] of Object.entries(BUILTINS)) {
      this.#factories.set(name, factory as PolicyFactory<never>);
      this.#builtin.add(name);
    }
  }

  /**
   * Registers `factory` under `name` (lowercase letters, digits, `.`, `_`, `-`; at most 64 characters).
   * @param options.replace allow replacing a custom policy of the same name (built-ins are never replaced)
   * @throws TypeError when `name` is not a string or `factory` not a function
   * @throws RangeError when `name` is malformed or taken
   */
  register<O extends PolicyOptions>(name: string, factory: PolicyFactory<O>, options: { replace?: boolean } = {}): void {
    checkName(name);
    checkFunction(factory, 'factory');
    if (this.#builtin.has(name)) throw new RangeError(`name: ${describe(name)} is a built-in policy`);
    if (this.#factories.has(name) && options.replace !== true) {
      throw new RangeError(`name: a policy ${describe(name)} is already registered (pass { replace: true })`);
    }
    this.#factories.set(name, factory as PolicyFactory<never>);
  }

  /**
   * Creates the policy registered as `name`.
   * @throws RangeError when no policy has that name; whatever the factory throws for bad options
   */
  create<N extends BuiltinPolicyName, K extends PolicyKey = PolicyKey>(
    name: N,
    options: BuiltinPolicyOptions[N],
  ): EvictionPolicy<K>;
  create<K extends PolicyKey = PolicyKey>(name: string, options: PolicyOptions): EvictionPolicy<K>;
  create<K extends PolicyKey>(name: string, options: PolicyOptions): EvictionPolicy<K> {
    checkName(name);
    checkOptions(options);
    const factory = this.#factories.get(name);
    if (factory === undefined) {
      throw new RangeError(`name: no policy ${describe(name)}; registered: ${this.names().join(', ')}`);
    }
    return (factory as PolicyFactory)(options) as EvictionPolicy<K>;
  }

  has(name: string): boolean {
    return this.#factories.has(name);
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
  options: { replace?: boolean } = {},
): void {
  registry.register(name, factory, options);
}

/** Names in the process-wide registry, sorted. */
export function policyNames(): string[] {
  return registry.names();
}
