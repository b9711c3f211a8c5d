/**
 * Prometheus metrics of the daemon (prom-client, one private Registry per server so several servers in one
 * process never mix). Tier gauges and counters are read from the hierarchy's stats at scrape time; transfer
 * latency and bytes come from TierSync's `transfer:*` events as they happen.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { PeerServerStats } from '@tiersync/native';
import type { TierSync } from '../hierarchy/index.js';
import { nativeBuild, packageVersion } from '../build-info.js';

/** Latency buckets, seconds: 50 us .. ~100 s (a page from host RAM up to a large batch from a bucket). */
const LATENCY_BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 100];

export interface MetricsSources {
  ts: TierSync;
  /** The daemon's own lookup counters. */
  lookups: () => { requests: number; pagesRequested: number; pagesHit: number };
  peer: () => PeerServerStats | undefined;
  registry: () => { up: boolean; failures: number; publishedPages: number } | undefined;
}

/** Sets a counter to an absolute (monotonic) value read from elsewhere. */
function setCounter(c: Counter<string>, labels: Record<string, string>, value: number): void {
  c.remove(labels);
  if (value > 0) c.inc(labels, value);
  else c.inc(labels, 0);
}

export class ServerMetrics {
  readonly registry = new Registry();
  readonly httpRequests: Counter<'route' | 'method' | 'code'>;
  readonly httpDuration: Histogram<'route'>;
  readonly #detach: () => void;

  constructor(src: MetricsSources) {
    const r = this.registry;
    const tenant = src.ts.config.tenant;
    if (tenant) r.setDefaultLabels({ tenant });
    // Node's default metrics keep their standard names (process_*, nodejs_*): stock dashboards and alerts use them.
    collectDefaultMetrics({ register: r });
    const build = new Gauge({ name: 'tiersync_build_info', help: 'Always 1; labels say which tiersync and native core run.', labelNames: ['version', 'native', 'node'], registers: [r] });
    build.set({ version: packageVersion(), native: nativeBuild(), node: process.versions.node }, 1);
    const stats = () => src.ts.stats();

    const tierGauge = (name: string, help: string, pick: (t: ReturnType<typeof stats>['tiers'][number]) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['tier', 'kind'],
        registers: [r],
        collect() {
          this.reset();
          for (const t of stats().tiers) this.set({ tier: t.name, kind: t.kind }, pick(t));
        },
      });
    const tierCounter = (name: string, help: string, pick: (t: ReturnType<typeof stats>['tiers'][number]) => number) =>
      new Counter({
        name,
        help,
        labelNames: ['tier', 'kind'],
        registers: [r],
        collect() {
          for (const t of stats().tiers) setCounter(this, { tier: t.name, kind: t.kind }, pick(t));
        },
      });
    tierGauge('tiersync_tier_capacity_bytes', 'Capacity of each tier in bytes (0: unbounded or unknown).', (t) => t.capacityBytes);
    tierGauge('tiersync_tier_used_bytes', 'Bytes of pages held by each tier.', (t) => t.usedBytes);
    tierGauge('tiersync_tier_capacity_pages', 'Capacity of each tier in pages, as the hierarchy sizes it.', (t) => t.capacityPages);
    tierGauge('tiersync_tier_pages', 'Pages held by each tier, as its eviction policy counts them.', (t) => t.usedPages);
    tierGauge('tiersync_tier_pinned_pages', 'Pinned pages of each tier.', (t) => t.pinned);
    tierCounter('tiersync_tier_hits_total', 'Page reads that found the page on the tier.', (t) => t.hits);
    tierCounter('tiersync_tier_misses_total', 'Page reads that did not find the page on the tier.', (t) => t.misses);
    tierCounter('tiersync_tier_read_bytes_total', 'Bytes read from each tier.', (t) => t.bytesRead);
    tierCounter('tiersync_tier_written_bytes_total', 'Bytes written to each tier.', (t) => t.bytesWritten);
    tierCounter('tiersync_tier_errors_total', 'Failed page operations on each tier.', (t) => t.errors);
    tierCounter('tiersync_tier_checksum_failures_total', 'Pages whose CRC32C did not match when read from each tier.', (t) => t.checksumFailures);

    new Gauge({
      name: 'tiersync_index_pages',
      help: 'Pages recorded in the block index.',
      registers: [r],
      collect() {
        this.set(stats().index.pages);
      },
    });
    const counters = (name: string, help: string, pick: (c: ReturnType<typeof stats>['counters']) => number) =>
      new Counter({
        name,
        help,
        registers: [r],
        collect() {
          setCounter(this, {}, pick(stats().counters));
        },
      });
    counters('tiersync_stores_total', 'store() calls.', (c) => c.stores);
    counters('tiersync_pages_stored_total', 'Pages written by store().', (c) => c.pagesStored);
    counters('tiersync_pages_dropped_total', 'Pages not stored because the first tier had no room.', (c) => c.pagesDropped);
    counters('tiersync_pages_not_admitted_total', 'New pages the admission filter turned away.', (c) => c.pagesNotAdmitted);
    counters('tiersync_loads_total', 'load() calls.', (c) => c.loads);
    counters('tiersync_pages_loaded_total', 'Pages delivered by load().', (c) => c.pagesLoaded);
    counters('tiersync_pages_missing_total', 'Pages a load() found on no tier any more (recomputed by the caller).', (c) => c.pagesMissing);
    counters('tiersync_background_dropped_pages_total', 'Write-through or promotion pages dropped because the background queue was full.', (c) => c.backgroundDropped);

    new Counter({
      name: 'tiersync_lookup_requests_total',
      help: 'Lookups served by the daemon.',
      registers: [r],
      collect() {
        setCounter(this, {}, src.lookups().requests);
      },
    });
    new Counter({
      name: 'tiersync_lookup_pages_total',
      help: 'Pages asked for by lookups, by result (hit: in the cached prefix; miss: not).',
      labelNames: ['result'],
      registers: [r],
      collect() {
        const l = src.lookups();
        setCounter(this, { result: 'hit' }, l.pagesHit);
        setCounter(this, { result: 'miss' }, l.pagesRequested - l.pagesHit);
      },
    });

    const transferBytes = new Counter({ name: 'tiersync_transfer_bytes_total', help: 'Bytes moved by completed transfers, by operation and destination/source tier.', labelNames: ['op', 'tier'], registers: [r] });
    const transferPages = new Counter({ name: 'tiersync_transfer_pages_total', help: 'Pages moved by completed transfers.', labelNames: ['op', 'tier'], registers: [r] });
    const transferSeconds = new Histogram({ name: 'tiersync_transfer_duration_seconds', help: 'Duration of completed transfer batches, seconds.', labelNames: ['op', 'tier'], buckets: LATENCY_BUCKETS, registers: [r] });
    const transferFailures = new Counter({ name: 'tiersync_transfer_failures_total', help: 'Transfer batches that failed.', labelNames: ['op', 'tier'], registers: [r] });
    const integrity = new Counter({ name: 'tiersync_integrity_failures_total', help: 'Pages that failed their CRC32C check when read, by tier.', labelNames: ['tier'], registers: [r] });
    const evicted = new Counter({ name: 'tiersync_evicted_pages_total', help: 'Pages the placement evicted from a tier (room, pressure, refused admissions); deletes are not evictions.', labelNames: ['tier'], registers: [r] });
    const removed = new Counter({ name: 'tiersync_removed_pages_total', help: 'Copies that left a tier otherwise than by eviction: deleted (by a client or a peer) or lost (found missing or damaged on read).', labelNames: ['tier', 'why'], registers: [r] });
    const demoted = new Counter({ name: 'tiersync_demoted_pages_total', help: 'Pages copied down a tier before eviction.', labelNames: ['from', 'to'], registers: [r] });
    const promoted = new Counter({ name: 'tiersync_promoted_pages_total', help: 'Pages copied up into a faster tier.', labelNames: ['from', 'to'], registers: [r] });
    const policyFailures = new Counter({ name: 'tiersync_policy_failures_total', help: "Calls of a tier's eviction policy that threw or broke the policy contract (custom policies).", labelNames: ['tier'], registers: [r] });
    // Known label sets start at zero, so every series shows from the first scrape.
    for (const t of src.ts.stats().tiers) integrity.inc({ tier: t.name }, 0);

    const onCompleted = (e: { op: string; tier: string; pages: number; bytes: number; seconds: number }) => {
      transferBytes.inc({ op: e.op, tier: e.tier }, e.bytes);
      transferPages.inc({ op: e.op, tier: e.tier }, e.pages);
      transferSeconds.observe({ op: e.op, tier: e.tier }, e.seconds);
    };
    const onFailed = (e: { op: string; tier: string }) => transferFailures.inc({ op: e.op, tier: e.tier });
    const onIntegrity = (e: { tier: string }) => integrity.inc({ tier: e.tier });
    const onEvicted = (e: { keys: string[]; tier: string; why: 'evicted' | 'deleted' | 'lost' }) => {
      if (e.why === 'evicted') evicted.inc({ tier: e.tier }, e.keys.length);
      else removed.inc({ tier: e.tier, why: e.why }, e.keys.length);
    };
    const onDemoted = (e: { keys: string[]; from: string; to: string }) => demoted.inc({ from: e.from, to: e.to }, e.keys.length);
    const onPromoted = (e: { keys: string[]; from: string; to: string }) => promoted.inc({ from: e.from, to: e.to }, e.keys.length);
    const onPolicy = (e: { tier: string }) => policyFailures.inc({ tier: e.tier });
    src.ts.on('transfer:completed', onCompleted);
    src.ts.on('transfer:failed', onFailed);
    src.ts.on('integrity:failed', onIntegrity);
    src.ts.on('block:evicted', onEvicted);
    src.ts.on('block:demoted', onDemoted);
    src.ts.on('block:promoted', onPromoted);
    src.ts.on('policy:failed', onPolicy);
    this.#detach = () => {
      src.ts.off('transfer:completed', onCompleted);
      src.ts.off('transfer:failed', onFailed);
      src.ts.off('integrity:failed', onIntegrity);
      src.ts.off('block:evicted', onEvicted);
      src.ts.off('block:demoted', onDemoted);
      src.ts.off('block:promoted', onPromoted);
      src.ts.off('policy:failed', onPolicy);
    };

    new Gauge({
      name: 'tiersync_peer_connections',
      help: 'Open peer data-plane connections to this host.',
      registers: [r],
      collect() {
        this.set(src.peer()?.connections ?? 0);
      },
    });
    new Counter({
      name: 'tiersync_peer_auth_failures_total',
      help: 'Peer handshakes refused (wrong or missing secret).',
      registers: [r],
      collect() {
        setCounter(this, {}, src.peer()?.authFailures ?? 0);
      },
    });
    new Counter({
      name: 'tiersync_peer_requests_total',
      help:
        'Peer requests received, by op and by where they were answered: data (on the connection thread: a PUT into a granted slot, a GET or HAS from the mirrored page table) or control (the serving process\'s JavaScript thread planned it: a PUT the slot pool could not take, every DELETE).',
      labelNames: ['op', 'plane'],
      registers: [r],
      collect() {
        const p = src.peer();
        const here = { put: p?.pooledPuts ?? 0, get: p?.getsPlannedHere ?? 0, has: p?.hasAnsweredHere ?? 0, delete: 0 };
        const all = { put: p?.putRequests ?? 0, get: p?.getRequests ?? 0, has: p?.hasRequests ?? 0, delete: p?.deleteRequests ?? 0 };
        for (const op of ['put', 'get', 'has', 'delete'] as const) {
          setCounter(this, { op, plane: 'data' }, here[op]);
          setCounter(this, { op, plane: 'control' }, all[op] - here[op]);
        }
      },
    });
    new Counter({
      name: 'tiersync_peer_ranges_total',
      help:
        'Ranged GET pages served to peers, by how they were verified: announced (chunk-aligned, sent with the CRC32C joined from the page\'s chunk table, checked by the client), chunks (checked here against that table), whole (the page checked here whole: its first ranged read).',
      labelNames: ['check'],
      registers: [r],
      collect() {
        const p = src.peer();
        setCounter(this, { check: 'announced' }, p?.rangesAnnounced ?? 0);
        setCounter(this, { check: 'chunks' }, p?.rangesByChunk ?? 0);
        setCounter(this, { check: 'whole' }, p?.rangesWhole ?? 0);
      },
    });
    new Gauge({
      name: 'tiersync_registry_up',
      help: '1 when the cluster registry (Redis) answered the last command, else 0; absent without a cluster.',
      registers: [r],
      collect() {
        const s = src.registry();
        if (s) this.set(s.up ? 1 : 0);
      },
    });
    new Counter({
      name: 'tiersync_registry_failures_total',
      help: 'Cluster registry (Redis) commands that failed.',
      registers: [r],
      collect() {
        setCounter(this, {}, src.registry()?.failures ?? 0);
      },
    });
    new Gauge({
      name: 'tiersync_registry_published_pages',
      help: 'Pages of the served host tier published in the cluster registry.',
      registers: [r],
      collect() {
        this.set(src.registry()?.publishedPages ?? 0);
      },
    });

    this.httpRequests = new Counter({ name: 'tiersync_http_requests_total', help: 'HTTP requests by route, method and status code.', labelNames: ['route', 'method', 'code'], registers: [r] });
    this.httpDuration = new Histogram({ name: 'tiersync_http_request_duration_seconds', help: 'HTTP request duration, seconds.', labelNames: ['route'], buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5], registers: [r] });
  }

  /** Stops listening to the hierarchy's events. */
  close(): void {
    this.#detach();
  }
}
