/**
 * KvEvents: the daemon's KV event stream. It follows the hierarchy's tier events (a page stored, copied, demoted or
 * promoted onto a tier; evicted, deleted, forgotten or found broken on one), turns each into vLLM `BlockStored` /
 * `BlockRemoved` events with the tier's medium, and publishes them in batches (one per turn of the event loop, at
 * most maxBatchEvents each) with gap-free sequence numbers.
 *
 * At start it announces a reset: the first batch is `AllBlocksCleared` followed by `BlockStored` for every page on
 * every tier (what the hierarchy adopted from its tiers at open), so a subscriber that saw the previous daemon's
 * stream drops what that daemon held and learns what this one holds. With a sequence file the numbers continue
 * from the previous run; without one they restart at 0.
 */
import path from 'node:path';
import { TierSyncError } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';
import type { Logger } from 'pino';
import type { TierSync } from '../../hierarchy/index.js';
import type { ResolvedKvEventsConfig } from './config.js';
import { KvEventPublisher, type PublisherStats } from './publisher.js';
import { TierView } from './view.js';
import { KvEventEncoder, type BlockStoredEvent, type KvEvent } from './wire.js';

/** The default `medium` of each tier kind: hbm GPU, host CPU, fs DISK, object and peer REMOTE. */
export const DEFAULT_MEDIA: Readonly<Record<string, string>> = { hbm: 'GPU', host: 'CPU', fs: 'DISK', object: 'REMOTE', peer: 'REMOTE' };

export interface KvEventsStats extends PublisherStats {
  /** Pages on each tier as the stream has announced them. */
  pages: Record<string, number>;
}

export interface KvEventsStartOptions {
  /** The hierarchy's index path (the default sequence file lies beside it; none for ':memory:'). */
  indexPath: string;
  log: Logger;
}

export class KvEvents {
  readonly #ts: TierSync;
  readonly #config: ResolvedKvEventsConfig;
  readonly #view: TierView;
  readonly #blockSize: number;
  #publisher!: KvEventPublisher;
  #pending: KvEvent[] = [];
  #scheduled: NodeJS.Immediate | undefined;
  readonly #detach: Array<() => void> = [];

  private constructor(ts: TierSync, config: ResolvedKvEventsConfig, view: TierView) {
    this.#ts = ts;
    this.#config = config;
    this.#view = view;
    this.#blockSize = ts.tokensPerPage;
  }

  /**
   * Starts the stream over an open hierarchy: binds the sockets, records what every tier holds and publishes the
   * reset batch, then follows the hierarchy's events.
   * @throws TierSyncError ERR_CONFIG (no endpoint, a medium for a tier that does not exist), ERR_UNAVAILABLE (an endpoint cannot be bound), ERR_IO (sequence file)
   */
  static async start(ts: TierSync, config: ResolvedKvEventsConfig, options: KvEventsStartOptions): Promise<KvEvents> {
    if (!config.endpoint) throw new TierSyncError('config kvEvents.endpoint: needed to publish KV events (e.g. tcp://127.0.0.1:5557)', 'ERR_CONFIG');
    const tiers = ts.stats().tiers;
    for (const name of Object.keys(config.media ?? {})) {
      if (!tiers.some((t) => t.name === name)) throw new TierSyncError(`config kvEvents.media.${name}: no tier named '${name}' (tiers: ${tiers.map((t) => t.name).join(', ')})`, 'ERR_CONFIG');
    }
    const view = new TierView(tiers.map((t) => ({ name: t.name, medium: config.media?.[t.name] ?? DEFAULT_MEDIA[t.kind] ?? t.kind.toUpperCase() })));
    // The planner records what each tier holds now (stored, and adopted from the tiers at open).
    tiers.forEach((t, i) => view.add(t.name, [...ts.planner.keysOn(i)]));
    const self = new KvEvents(ts, config, view);
    const sequenceFile = config.sequenceFile === 'auto' ? (options.indexPath === ':memory:' ? undefined : `${path.resolve(options.indexPath)}.kv-events`) : config.sequenceFile || undefined;
    self.#publisher = await KvEventPublisher.open({
      endpoint: config.endpoint,
      replayEndpoint: config.replayEndpoint,
      topic: config.topic,
      replayBatches: config.replayBatches,
      sendHighWaterMark: config.sendHighWaterMark,
      sequenceFile,
      encoder: new KvEventEncoder(config.hashes),
      flushPending: () => self.flush(),
      snapshot: () => self.#snapshot(),
      log: options.log,
    });
    self.#publisher.publish(self.#snapshot());
    self.#follow();
    options.log.info({ kvEvents: config.endpoint, replay: config.replayEndpoint ?? null, firstSeq: self.#publisher.nextSeq - 1, sequenceFile: sequenceFile ?? null }, 'KV events publishing');
    return self;
  }

  /** The endpoints bound (a `*` port resolved), for subscribers to connect to. */
  get endpoints(): { pub: string; replay: string | undefined } {
    return this.#publisher.endpoints;
  }

  /** Sequence number of the last batch published (pending changes are published first). */
  get lastSeq(): number {
    this.flush();
    return this.#publisher.nextSeq - 1;
  }

  stats(): KvEventsStats {
    return { ...this.#publisher.stats(), pages: this.#view.counts() };
  }

  /** Publishes pending changes now instead of at the end of this turn of the event loop. */
  flush(): void {
    if (this.#scheduled) clearImmediate(this.#scheduled);
    this.#scheduled = undefined;
    const max = this.#config.maxBatchEvents;
    while (this.#pending.length) this.#publisher.publish(this.#pending.splice(0, max));
  }

  /** Stops following the hierarchy, publishes what is pending and closes the sockets. */
  async close(): Promise<void> {
    for (const off of this.#detach.splice(0)) off();
    this.flush();
    await this.#publisher.close();
  }

  #follow(): void {
    const ts = this.#ts;
    const stored = (e: { keys: PageKey[]; tier: string }) => this.#landed(e.tier, e.keys);
    const moved = (e: { keys: PageKey[]; to: string }) => this.#landed(e.to, e.keys);
    const evicted = (e: { keys: PageKey[]; tier: string }) => this.#left(e.tier, e.keys);
    // A demotion's or promotion's source copy, when it goes, is a block:evicted of its own.
    ts.on('block:stored', stored).on('block:copied', moved).on('block:demoted', moved).on('block:promoted', moved).on('block:evicted', evicted);
    this.#detach.push(() => ts.off('block:stored', stored).off('block:copied', moved).off('block:demoted', moved).off('block:promoted', moved).off('block:evicted', evicted));
  }

  #landed(tier: string, keys: readonly PageKey[]): void {
    const fresh = this.#view.add(tier, keys);
    if (fresh.length) this.#queue(...this.#stored(this.#view.mediumOf(tier)!, fresh));
  }

  #left(tier: string, keys: readonly PageKey[]): void {
    const gone = this.#view.remove(tier, keys);
    if (gone.length) this.#queue({ type: 'BlockRemoved', blockHashes: gone, medium: this.#view.mediumOf(tier)! });
  }

  #queue(...events: KvEvent[]): void {
    this.#pending.push(...events);
    this.#scheduled ??= setImmediate(() => {
      this.#scheduled = undefined;
      this.flush();
    });
  }

  /** The current state: AllBlocksCleared, then every page on every medium. */
  #snapshot(): KvEvent[] {
    const out: KvEvent[] = [{ type: 'AllBlocksCleared' }];
    for (const { medium, keys } of this.#view.snapshot()) if (keys.length) out.push(...this.#stored(medium, keys));
    return out;
  }

  /**
   * BlockStored events for `keys` on `medium`: one per run of keys that chain (each key's parent is the key before
   * it), with the run's parent hash, as vLLM announces the blocks of one sequence.
   */
  #stored(medium: string, keys: readonly PageKey[]): BlockStoredEvent[] {
    let records: ReturnType<TierSync['pageRecords']> = [];
    try {
      records = this.#ts.pageRecords(keys);
    } catch {
      // The hierarchy closed (a snapshot asked for while the daemon shuts down): the pages, without parents.
    }
    const out: BlockStoredEvent[] = [];
    let run: BlockStoredEvent | undefined;
    keys.forEach((key, i) => {
      const parent = records[i]?.parent ?? null;
      if (run && parent !== null && parent === run.blockHashes[run.blockHashes.length - 1]) run.blockHashes.push(key);
      else {
        run = { type: 'BlockStored', blockHashes: [key], parentBlockHash: parent, tokenIds: [], blockSize: this.#blockSize, medium };
        out.push(run);
      }
    });
    return out;
  }
}
