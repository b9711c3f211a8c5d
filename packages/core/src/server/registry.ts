/**
 * The cluster registry on Redis: each daemon registers itself with a heartbeat (keys that expire when it stops),
 * publishes which pages its served host tier holds, and answers "which hosts hold this prefix" so a lookup can
 * point at a peer's RAM.
 *
 * Keys (prefix = cluster name):
 * - `{c}:node:{id}`   JSON { id, peer, http, model, startedAt }, expires ttlMs after the last heartbeat;
 * - `{c}:nodes`       sorted set id -> last heartbeat (ms since epoch), for discovery;
 * - `{c}:pages:{id}`  set of the node's page keys as 32 raw bytes each (half the hex), expires with the node.
 *
 * Page changes are coalesced locally and sent at most every publishIntervalMs, publishBatch keys per command.
 * Redis is never on the data path: while it is down every command fails fast (no offline queue), failures are
 * counted and logged once per outage, and when it answers again the node re-registers and republishes its whole
 * page set (Redis may have restarted empty). A heartbeat that finds its page set expired does the same.
 */
import { Redis } from 'ioredis';
import type { Logger } from 'pino';

export interface RegistryOptions {
  redis: string;
  cluster: string;
  nodeId: string;
  heartbeatMs: number;
  ttlMs: number;
  publishIntervalMs: number;
  publishBatch: number;
  commandTimeoutMs: number;
  /** What other nodes need to reach this one. */
  info: { peer: string; http: string; model: string };
  logger: Logger;
}

export interface NodeInfo {
  id: string;
  peer: string;
  http: string;
  model: string;
  startedAt: number;
}

export interface HolderAnswer {
  node: NodeInfo;
  /** Length of the prefix of the asked keys that the node holds, pages. */
  pages: number;
}

export interface RegistryStats {
  up: boolean;
  failures: number;
  registrations: number;
  publishedPages: number;
  pendingChanges: number;
}

const HEX64 = /^[0-9a-f]{64}$/;

function toMember(key: string): Buffer {
  return HEX64.test(key) ? Buffer.from(key, 'hex') : Buffer.from(key);
}

export class ClusterRegistry {
  readonly options: RegistryOptions;
  readonly #redis: Redis;
  readonly #log: Logger;
  /** The served tier's pages as this node knows them: the source of truth for a full republish. */
  readonly #held = new Set<string>();
  /** Changes not yet sent: key -> true (added) / false (removed). */
  readonly #pending = new Map<string, boolean>();
  readonly #startedAt = Date.now();
  #up = false;
  #resync = true;
  #failures = 0;
  #registrations = 0;
  #published = 0;
  #heartbeat: NodeJS.Timeout | undefined;
  #publisher: NodeJS.Timeout | undefined;
  #busy: Promise<void> = Promise.resolve();
  #closed = false;

  constructor(options: RegistryOptions) {
    this.options = options;
    this.#log = options.logger.child({ component: 'registry' });
    this.#redis = new Redis(options.redis, {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      connectTimeout: options.commandTimeoutMs,
      commandTimeout: options.commandTimeoutMs,
      // Keep trying forever, at most once a second: the daemon serves locally meanwhile.
      retryStrategy: (times) => Math.min(50 * times, 1000),
    });
    this.#redis.on('error', (e: Error) => this.#down(e));
    this.#redis.on('ready', () => {
      if (!this.#up) this.#log.info({ redis: this.#redacted() }, 'cluster registry reachable; registering');
      this.#up = true;
      this.#resync = true;
      this.#serial(() => this.#beat());
    });
    this.#redis.on('close', () => this.#down());
  }

  #redacted(): string {
    return this.options.redis.replace(/\/\/([^@/]*)@/, '//***@');
  }

  #key(...parts: string[]): string {
    return [this.options.cluster, ...parts].join(':');
  }

  #down(e?: Error): void {
    if (this.#closed) return;
    if (e) this.#failures++;
    if (this.#up) this.#log.warn({ redis: this.#redacted(), err: e?.message }, 'cluster registry unreachable; serving from local tiers');
    this.#up = false;
  }

  #fail(what: string, e: unknown): void {
    this.#failures++;
    this.#resync = true;
    const message = (e as Error)?.message ?? String(e);
    if (this.#up) this.#log.warn({ err: message, what }, 'cluster registry command failed');
    else this.#log.debug({ err: message, what }, 'cluster registry command failed');
  }

  /** Runs registry writes one at a time, so a republish never interleaves with a batch of changes. */
  #serial(fn: () => Promise<void>): Promise<void> {
    const run = this.#busy.then(fn);
    this.#busy = run.catch(() => undefined);
    return this.#busy;
  }

  /**
   * Connects and registers; resolves even when Redis is down (the node keeps retrying in the background).
   * `initial` are the pages the served tier already holds.
   */
  async start(initial: Iterable<string> = []): Promise<void> {
    for (const k of initial) this.#held.add(k);
    this.#redis.connect().catch((e: unknown) => this.#fail('connect', e));
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, this.options.commandTimeoutMs);
      t.unref();
      this.#redis.once('ready', () => {
        clearTimeout(t);
        // The 'ready' handler queued the registration: wait for it.
        setImmediate(() => this.#busy.then(resolve));
      });
    });
    this.#heartbeat = setInterval(() => void this.#serial(() => this.#beat()), this.options.heartbeatMs);
    this.#heartbeat.unref();
    this.#publisher = setInterval(() => void this.#serial(() => this.#publish()), this.options.publishIntervalMs);
    this.#publisher.unref();
  }

  /** Pages now held by the served tier. */
  added(keys: readonly string[]): void {
    for (const k of keys) {
      this.#held.add(k);
      this.#pending.set(k, true);
    }
  }

  /** Pages no longer held by the served tier. */
  removed(keys: readonly string[]): void {
    for (const k of keys) {
      this.#held.delete(k);
      this.#pending.set(k, false);
    }
  }

  async #beat(): Promise<void> {
    if (this.#closed) return;
    const { ttlMs } = this.options;
    const now = Date.now();
    const info: NodeInfo = { id: this.options.nodeId, ...this.options.info, startedAt: this.#startedAt };
    try {
      const r = await this.#redis
        .multi()
        .set(this.#key('node', this.options.nodeId), JSON.stringify(info), 'PX', ttlMs)
        .zadd(this.#key('nodes'), now, this.options.nodeId)
        .zremrangebyscore(this.#key('nodes'), '-inf', now - 10 * ttlMs)
        .pexpire(this.#key('pages', this.options.nodeId), ttlMs)
        .exec();
      const expired = r?.[3]?.[1] === 0;
      if (expired && this.#held.size > 0) this.#resync = true;
      if (!this.#up) this.#log.info('cluster registry answering again');
      this.#up = true;
    } catch (e) {
      this.#fail('heartbeat', e);
      return;
    }
    if (this.#resync) await this.#republish();
  }

  /** Replaces the node's page set with everything it holds now. */
  async #republish(): Promise<void> {
    const setKey = this.#key('pages', this.options.nodeId);
    const keys = [...this.#held];
    this.#pending.clear();
    try {
      const m = this.#redis.multi().del(setKey);
      for (let at = 0; at < keys.length; at += this.options.publishBatch) m.sadd(setKey, ...keys.slice(at, at + this.options.publishBatch).map(toMember));
      m.pexpire(setKey, this.options.ttlMs);
      await m.exec();
      this.#published = keys.length;
      this.#resync = false;
      this.#registrations++;
      this.#log.info({ pages: keys.length, node: this.options.nodeId }, 'registered in the cluster registry');
    } catch (e) {
      this.#fail('republish', e);
    }
  }

  async #publish(): Promise<void> {
    if (this.#closed || !this.#up) return;
    if (this.#resync) return this.#beat();
    if (this.#pending.size === 0) return;
    const changes = [...this.#pending];
    this.#pending.clear();
    const add = changes.filter(([, a]) => a).map(([k]) => toMember(k));
    const del = changes.filter(([, a]) => !a).map(([k]) => toMember(k));
    const setKey = this.#key('pages', this.options.nodeId);
    try {
      const p = this.#redis.pipeline();
      const b = this.options.publishBatch;
      for (let at = 0; at < del.length; at += b) p.srem(setKey, ...del.slice(at, at + b));
      for (let at = 0; at < add.length; at += b) p.sadd(setKey, ...add.slice(at, at + b));
      p.pexpire(setKey, this.options.ttlMs);
      p.scard(setKey);
      const r = await p.exec();
      const failed = r?.find(([err]) => err);
      if (failed) throw failed[0];
      this.#published = Number(r?.[r.length - 1]?.[1] ?? this.#published);
    } catch (e) {
      // What was lost is resent whole on the next heartbeat that reaches Redis.
      this.#fail('publish', e);
    }
  }

  /** Sends pending changes now (tests, shutdown). */
  flush(): Promise<void> {
    return this.#serial(() => this.#publish());
  }

  /** Live nodes (heartbeat within ttl), this one included. @throws when Redis cannot be reached */
  async nodes(): Promise<NodeInfo[]> {
    try {
      const ids = await this.#redis.zrangebyscore(this.#key('nodes'), Date.now() - this.options.ttlMs, '+inf');
      if (!ids.length) return [];
      const infos = await this.#redis.mget(...ids.map((id) => this.#key('node', id)));
      return infos.filter((s): s is string => typeof s === 'string').map((s) => JSON.parse(s) as NodeInfo);
    } catch (e) {
      this.#fail('nodes', e);
      throw e;
    }
  }

  /**
   * For each other live node holding a prefix of `keys`: how many leading pages it holds. Longest first.
   * @throws when Redis cannot be reached (the caller answers from local tiers alone)
   */
  async whoHolds(keys: readonly string[], options: { includeSelf?: boolean } = {}): Promise<HolderAnswer[]> {
    if (!keys.length) return [];
    const nodes = (await this.nodes()).filter((n) => options.includeSelf || n.id !== this.options.nodeId);
    if (!nodes.length) return [];
    const members = keys.map(toMember);
    try {
      const p = this.#redis.pipeline();
      for (const n of nodes) p.smismember(this.#key('pages', n.id), ...members);
      const r = await p.exec();
      const out: HolderAnswer[] = [];
      nodes.forEach((node, i) => {
        const [err, flags] = r?.[i] ?? [new Error('no reply')];
        if (err) throw err;
        const f = flags as number[];
        let pages = 0;
        while (pages < f.length && f[pages] === 1) pages++;
        if (pages > 0) out.push({ node, pages });
      });
      return out.sort((a, b) => b.pages - a.pages || a.node.id.localeCompare(b.node.id));
    } catch (e) {
      this.#fail('whoHolds', e);
      throw e;
    }
  }

  /**
   * For each of `keys` (any set, not only a prefix): the live nodes that published it, this one included.
   * @throws when Redis cannot be reached
   */
  async locate(keys: readonly string[]): Promise<NodeInfo[][]> {
    const out: NodeInfo[][] = keys.map(() => []);
    if (!keys.length) return out;
    const nodes = await this.nodes();
    if (!nodes.length) return out;
    const members = keys.map(toMember);
    try {
      const p = this.#redis.pipeline();
      for (const n of nodes) p.smismember(this.#key('pages', n.id), ...members);
      const r = await p.exec();
      nodes.forEach((node, i) => {
        const [err, flags] = r?.[i] ?? [new Error('no reply')];
        if (err) throw err;
        (flags as number[]).forEach((f, k) => f === 1 && out[k]!.push(node));
      });
      return out;
    } catch (e) {
      this.#fail('locate', e);
      throw e;
    }
  }

  stats(): RegistryStats {
    return { up: this.#up, failures: this.#failures, registrations: this.#registrations, publishedPages: this.#published, pendingChanges: this.#pending.size };
  }

  /** Stops the timers; with `deregister` (default) removes this node's keys so peers stop pointing at it. */
  async close(options: { deregister?: boolean } = {}): Promise<void> {
    if (this.#closed) return;
    clearInterval(this.#heartbeat);
    clearInterval(this.#publisher);
    await this.#busy;
    this.#closed = true;
    if (this.#up && options.deregister !== false) {
      try {
        await this.#redis
          .multi()
          .del(this.#key('node', this.options.nodeId), this.#key('pages', this.options.nodeId))
          .zrem(this.#key('nodes'), this.options.nodeId)
          .exec();
      } catch (e) {
        this.#failures++;
        this.#log.warn({ err: (e as Error).message }, 'could not deregister from the cluster registry');
      }
    }
    this.#redis.disconnect();
  }
}
