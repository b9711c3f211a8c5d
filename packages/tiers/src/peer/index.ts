/**
 * peer tier: another host's host tier, over the native peer data plane.
 * `peer://10.0.0.7:7070?secret=env:TIERSYNC_PEER_SECRET&streams=4`. Without a secret only loopback peers are
 * contacted. Volatile (the remote's RAM); every page is checked against its CRC32C when it arrives.
 */
import { HostArena, PeerClient, PeerStatus, TierSyncError, type PeerReply } from '@tiersync/native';
import { z } from 'zod';
import type { IoOptions, PageInfo, PageKey, PageRead, PageWrite, ReadOutcome, TierCapabilities, TierContext, TierDriver, TierStats, WriteResult } from '../driver.js';
import { InFlight, PinTable, TierCounters } from '../stats.js';
import { bool, configError, int, parseOptions, size, splitUrlOf } from '../url.js';
import { checkKeys, checkReads, checkWrites } from '../validate.js';

const options = z
  .object({
    /** The shared secret, literally or as env:NAME (read from the environment at open). */
    secret: z.string().min(1).optional(),
    /** Encrypt frames (AES-256-GCM) as well as authenticate them; needs a secret. Default false. */
    encrypt: bool.optional(),
    /** Parallel TCP streams. Default 4. */
    streams: int(1, 64).optional(),
    /** Deadline of connecting and of every socket read/write, ms. Default 30000. */
    timeoutMs: int(1, 3_600_000).optional(),
    /** Capacity to report in stats (the remote enforces its own). Default 0 (unknown). */
    capacity: size('a capacity').optional(),
  })
  .strict();

export interface PeerTierConfig {
  host: string;
  port: number;
  secret?: string;
  encrypt: boolean;
  streams: number;
  timeoutMs: number;
  capacity: number;
  redacted: string;
}

export function parsePeerUrl(url: string): PeerTierConfig {
  const u = splitUrlOf(url, 'peer');
  if (!u.host) throw configError(u, 'needs a host, e.g. peer://10.0.0.7:7070');
  if (!u.port) throw configError(u, 'needs a port, e.g. peer://10.0.0.7:7070');
  if (u.path !== '' && u.path !== '/') throw configError(u, `takes no path, got '${u.path}'`);
  const o = parseOptions(u, options);
  let secret = o.secret;
  if (secret?.startsWith('env:')) {
    const name = secret.slice(4);
    secret = process.env[name];
    if (!secret) throw configError(u, `option 'secret' names environment variable ${name}, which is not set`);
  }
  const encrypt = o.encrypt ?? false;
  if (encrypt && !secret) throw configError(u, "option 'encrypt' needs a secret (the frame keys derive from it)");
  return {
    host: u.host.replace(/^\[|\]$/g, ''),
    port: u.port,
    ...(secret ? { secret } : {}),
    encrypt,
    streams: o.streams ?? 4,
    timeoutMs: o.timeoutMs ?? 30_000,
    capacity: o.capacity ?? 0,
    redacted: u.redacted,
  };
}

/** Below this many bytes a batch goes as one request; above it, it is spread over the streams. */
const SPLIT_BYTES = 4 << 20;

export class PeerTier implements TierDriver {
  readonly capabilities: TierCapabilities = { kind: 'peer', persistent: false, remote: true, zeroCopy: true, memoryKinds: ['host'], verifiesOnRead: true, rangeReads: true };
  readonly url: string;
  readonly config: PeerTierConfig;
  readonly #context: TierContext;
  readonly #counters = new TierCounters();
  readonly #pins = new PinTable();
  readonly #inflight = new InFlight();
  #client: PeerClient | undefined;
  /** Set by a failure that may have come from the sockets; the next call reconnects. */
  #broken = false;
  #reconnecting: Promise<PeerClient> | undefined;
  #closed = false;
  #pages = 0;
  #usedBytes = 0;

  constructor(url: string, context: TierContext) {
    this.config = parsePeerUrl(url);
    this.url = this.config.redacted;
    this.#context = context;
  }

  #error(message: string, code: TierSyncError['code']): TierSyncError {
    return new TierSyncError(`peer tier ${this.config.host}:${this.config.port}: ${message}`, code, { tier: 'peer' });
  }

  #connect(): Promise<PeerClient> {
    const c = this.config;
    return PeerClient.connect({ host: c.host, port: c.port, streams: c.streams, timeoutMs: c.timeoutMs, encrypt: c.encrypt, ...(c.secret ? { secret: c.secret } : {}) });
  }

  /**
   * Set by open() when the peer could not be reached (it connects on the first call instead): the daemon logs it.
   * A cluster restarted as a whole then starts in any order.
   */
  openNote: string | undefined;
  #opened = false;

  /**
   * Connects. A peer that cannot be reached now (not up yet, a cut link) does not fail the open: the tier's calls
   * fail with their typed error until it is (each tries to connect again). A refused handshake (a wrong secret) does.
   */
  async open(): Promise<void> {
    this.#opened = true;
    try {
      this.#client = await this.#connect();
    } catch (e) {
      if (!(e instanceof TierSyncError) || (e.code !== 'ERR_IO' && e.code !== 'ERR_TIMEOUT')) throw e;
      this.#broken = true;
      this.openNote = `peer ${this.config.host}:${this.config.port} unreachable at open (${e.message}); the tier connects on its first call`;
    }
  }

  /**
   * The live connection. After a connection-level failure (a cut link, a restarted peer) the next call connects
   * again, once for all concurrent callers; while the peer stays unreachable each call fails with its typed error.
   */
  async #connection(): Promise<PeerClient> {
    this.#ready();
    if (!this.#broken && this.#client) return this.#client;
    this.#reconnecting ??= this.#connect()
      .then((fresh) => {
        if (this.#closed) {
          fresh.close();
          throw this.#error('tier is closed', 'ERR_CLOSED');
        }
        this.#client?.close();
        this.#client = fresh;
        this.#broken = false;
        return fresh;
      })
      .finally(() => (this.#reconnecting = undefined));
    return this.#reconnecting;
  }

  /** Runs one remote call; a failure that may have come from the sockets marks the connection for reconnecting. */
  async #call<T>(fn: (client: PeerClient) => Promise<T>): Promise<T> {
    try {
      return await fn(await this.#connection());
    } catch (e) {
      // ERR_AUTH after the handshake: a frame failed its tag and the stream was dropped.
      if (e instanceof TierSyncError && (e.code === 'ERR_IO' || e.code === 'ERR_TIMEOUT' || e.code === 'ERR_PROTOCOL' || e.code === 'ERR_AUTH')) this.#broken = true;
      throw e;
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#inflight.drained();
    this.#client?.close();
  }

  #ready(): void {
    if (this.#closed) throw this.#error('tier is closed', 'ERR_CLOSED');
    if (!this.#opened) throw this.#error('tier is not open; call open() first', 'ERR_CLOSED');
  }

  /** Cuts [0, n) into runs of about SPLIT_BYTES, at most one per stream, so the streams move bytes in parallel. */
  #chunks(lengths: readonly number[]): Array<[number, number]> {
    const total = lengths.reduce((a, b) => a + b, 0);
    const parts = Math.max(1, Math.min(this.config.streams, Math.ceil(total / SPLIT_BYTES), lengths.length));
    const target = total / parts;
    const out: Array<[number, number]> = [];
    let start = 0;
    let acc = 0;
    lengths.forEach((len, i) => {
      acc += len;
      if (acc >= target * (out.length + 1) && out.length < parts - 1) {
        out.push([start, i + 1]);
        start = i + 1;
      }
    });
    if (start < lengths.length) out.push([start, lengths.length]);
    return out;
  }

  write(pages: readonly PageWrite[], opts: IoOptions = {}): Promise<WriteResult> {
    this.#ready();
    checkWrites(pages, this.#context.pageBytes, 'peer');
    for (const [i, p] of pages.entries()) {
      if (!(p.source.arena instanceof HostArena)) throw this.#error(`pages[${i}].source must be a HostArena (stage device pages through host memory)`, 'ERR_UNSUPPORTED');
    }
    return this.#inflight.run(() => this.#call(async (client) => {
      // Known checksums travel as given; missing ones are computed by the native stream threads.
      const known = pages.every((p) => p.crc32c !== undefined);
      const crcs = pages.map((p) => p.crc32c ?? 0);
      const statuses = new Uint8Array(pages.length);
      // One request per (arena, chunk): a request names a single arena.
      const byArena = indicesByArena(pages.map((p) => p.source.arena as HostArena));
      const requests: Array<Promise<void>> = [];
      const deadline = new CallDeadline(opts, this.config.timeoutMs);
      for (const [arena, idx] of byArena) {
        for (const [from, to] of this.#chunks(idx.map((i) => pages[i]!.source.length))) {
          const part = idx.slice(from, to);
          requests.push(
            deadline.wrap(
              client.put(
                arena,
                part.map((i) => pages[i]!.key),
                Float64Array.from(part, (i) => pages[i]!.source.offset),
                Uint32Array.from(part, (i) => pages[i]!.source.length),
                known ? Uint32Array.from(part, (i) => crcs[i]!) : undefined,
              ),
            ).then((r) =>
              part.forEach((i, k) => {
                statuses[i] = r.statuses[k]!;
                crcs[i] = r.crcs[k]!;
              }),
            ),
          );
        }
      }
      await settleAll(requests, () => this.#counters.errors++).finally(() => deadline.dispose());
      const written = pages.filter((_, i) => statuses[i] === PeerStatus.ok).map((p) => p.key);
      const refused = refusal(statuses);
      if (refused !== undefined) {
        // All-or-nothing: take back what landed from this batch before reporting.
        if (written.length) await withDeadline(client.delete(written), {}, this.config.timeoutMs).catch(() => undefined);
        if (refused === PeerStatus.outOfRange) {
          const longest = Math.max(...pages.filter((_, i) => statuses[i] === PeerStatus.outOfRange).map((p) => p.source.length));
          throw this.#error(`the remote host tier's slots are smaller than a ${longest}-byte page: the hosts' page sizes differ (this host's is ${this.#context.pageBytes} bytes); give both the same page size`, 'ERR_OUT_OF_RANGE');
        }
        const full = refused === PeerStatus.full;
        throw this.#error(full ? `the remote host tier has no room for ${pages.length} page(s)` : 'pages arrived damaged at the remote (CRC32C mismatch)', full ? 'ERR_TIER_FULL' : 'ERR_CHECKSUM');
      }
      this.#pages += written.length;
      for (const [i, p] of pages.entries()) {
        if (statuses[i] !== PeerStatus.ok) continue;
        this.#usedBytes += p.source.length;
        this.#counters.bytesWritten += p.source.length;
      }
      this.#counters.writes += written.length;
      return { written, existing: pages.filter((_, i) => statuses[i] === PeerStatus.existing).map((p) => p.key), crc32c: crcs };
    }));
  }

  read(pages: readonly PageRead[], opts: IoOptions = {}): Promise<ReadOutcome[]> {
    this.#ready();
    checkReads(pages, this.#context.pageBytes, 'peer');
    for (const [i, p] of pages.entries()) {
      if (!(p.into.arena instanceof HostArena)) throw this.#error(`pages[${i}].into must be a HostArena`, 'ERR_UNSUPPORTED');
      const r = p.range;
      if (r === undefined) continue;
      if (!Number.isSafeInteger(r.offset) || !Number.isSafeInteger(r.length) || r.offset < 0 || r.length < 1) throw this.#error(`pages[${i}].range must be { offset >= 0, length >= 1 } integers`, 'ERR_INVALID_ARGUMENT');
      if (r.offset + r.length > this.#context.pageBytes) throw this.#error(`pages[${i}].range [${r.offset}, +${r.length}) is past the page size ${this.#context.pageBytes}`, 'ERR_OUT_OF_RANGE');
      if (p.into.length < r.length) throw this.#error(`pages[${i}].into holds ${p.into.length} bytes, less than the range's ${r.length}`, 'ERR_OUT_OF_RANGE');
    }
    return this.#inflight.run(() => this.#call(async (client) => {
      const outcomes: ReadOutcome[] = new Array(pages.length);
      let outOfRange: PageKey | undefined;
      const byArena = indicesByArena(pages.map((p) => p.into.arena as HostArena));
      const requests: Array<Promise<void>> = [];
      const deadline = new CallDeadline(opts, this.config.timeoutMs);
      for (const [arena, idx] of byArena) {
        for (const [from, to] of this.#chunks(idx.map((i) => pages[i]!.into.length))) {
          const part = idx.slice(from, to);
          const keys = part.map((i) => pages[i]!.key);
          requests.push(
            deadline.wrap(
              client.get(
                arena,
                keys,
                Float64Array.from(part, (i) => pages[i]!.into.offset),
                Uint32Array.from(part, (i) => pages[i]!.into.length),
                part.some((i) => pages[i]!.range) ? { offsets: Float64Array.from(part, (i) => pages[i]!.range?.offset ?? 0), lengths: Uint32Array.from(part, (i) => pages[i]!.range?.length ?? 0) } : undefined,
              ),
            ).then((r: PeerReply) =>
              part.forEach((i, k) => {
                const key = keys[k]!;
                const s = r.statuses[k];
                if (s === PeerStatus.ok) {
                  outcomes[i] = { key, status: 'hit', length: r.lengths[k]!, crc32c: r.crcs[k]! };
                  this.#counters.hits++;
                  this.#counters.reads++;
                  this.#counters.bytesRead += r.lengths[k]!;
                } else if (s === PeerStatus.outOfRange) {
                  outOfRange = key;
                  outcomes[i] = { key, status: 'miss' };
                } else if (s === PeerStatus.miss) {
                  outcomes[i] = { key, status: 'miss' };
                  this.#counters.misses++;
                } else if (s === PeerStatus.badChecksum) {
                  this.#counters.checksumFailures++;
                  this.#counters.errors++;
                  outcomes[i] = { key, status: 'error', error: this.#error(`page ${key} failed its CRC32C check on arrival`, 'ERR_CHECKSUM') };
                } else {
                  this.#counters.errors++;
                  outcomes[i] = { key, status: 'error', error: this.#error(`page ${key} could not be delivered (status ${s}): is the destination large enough?`, 'ERR_OUT_OF_RANGE') };
                }
              }),
            ),
          );
        }
      }
      await settleAll(requests, () => this.#counters.errors++).finally(() => deadline.dispose());
      if (outOfRange !== undefined) throw this.#error(`the range asked of page ${outOfRange} is past the page's stored length`, 'ERR_OUT_OF_RANGE');
      return outcomes;
    }));
  }

  async has(keys: readonly PageKey[]): Promise<boolean[]> {
    this.#ready();
    checkKeys(keys, 'peer');
    if (keys.length === 0) return [];
    const r = await this.#inflight.run(() => this.#call((client) => withDeadline(client.has([...keys]), {}, this.config.timeoutMs)));
    return Array.from(r.statuses, (s) => s === PeerStatus.ok);
  }

  async delete(keys: readonly PageKey[]): Promise<{ deleted: PageKey[]; pinned: PageKey[] }> {
    this.#ready();
    checkKeys(keys, 'peer');
    const unique = [...new Set(keys)];
    const pinned = unique.filter((k) => this.#pins.isPinned(k));
    const rest = unique.filter((k) => !this.#pins.isPinned(k));
    if (rest.length === 0) return { deleted: [], pinned };
    const r = await this.#inflight.run(() => this.#call((client) => withDeadline(client.delete(rest), {}, this.config.timeoutMs)));
    const deleted = rest.filter((_, i) => r.statuses[i] === PeerStatus.ok);
    this.#pages = Math.max(0, this.#pages - deleted.length);
    return { deleted, pinned: [...pinned, ...rest.filter((_, i) => r.statuses[i] === PeerStatus.pinned)] };
  }

  /** A peer's pages belong to the remote host: nothing to recover here. */
  async *list(): AsyncIterable<PageInfo> {
    this.#ready();
  }

  /** Pins held by this client: deletes through this driver skip them (the remote pins pages only while it sends them). */
  pin(keys: readonly PageKey[]): void {
    this.#ready();
    checkKeys(keys, 'peer');
    this.#pins.pin(keys, () => true);
  }

  unpin(keys: readonly PageKey[]): void {
    checkKeys(keys, 'peer');
    this.#pins.unpin(keys);
  }

  stats(): TierStats {
    return this.#counters.snapshot('peer', this.config.capacity, this.#usedBytes, this.#pages, this.#pins.size);
  }
}

/**
 * One deadline (`opts.timeoutMs`, else the tier's) and one abort listener for every request of a call: a listener
 * per request would pile up on a load's signal (a layer-wise load keeps several reads of several requests each in
 * flight, past Node's 10-listener warning).
 */
class CallDeadline {
  readonly #stop: Promise<never>;
  readonly #timer: NodeJS.Timeout;
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort: () => void;

  constructor(opts: IoOptions, fallbackMs: number) {
    const ms = opts.timeoutMs ?? fallbackMs;
    let fail: (e: TierSyncError) => void = () => undefined;
    this.#stop = new Promise<never>((_, reject) => (fail = reject));
    this.#stop.catch(() => undefined); // observed through wrap(); a call that finished first never looks
    this.#timer = setTimeout(() => fail(new TierSyncError(`peer request passed its ${ms} ms deadline`, 'ERR_TIMEOUT', { tier: 'peer' })), ms);
    this.#timer.unref();
    this.#signal = opts.signal;
    this.#onAbort = () => fail(new TierSyncError('peer request aborted', 'ERR_ABORTED', { tier: 'peer' }));
    this.#signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  /** `p`, or the deadline's or the abort's error, whichever comes first. */
  wrap<T>(p: Promise<T>): Promise<T> {
    return Promise.race([p, this.#stop]);
  }

  dispose(): void {
    clearTimeout(this.#timer);
    this.#signal?.removeEventListener('abort', this.#onAbort);
  }
}

/**
 * Why a PUT's batch is refused, by the status that explains it best, or undefined when every page was stored or held
 * already: outOfRange (a page longer than the remote's slots: a page size mismatch, no retry helps), then full, then
 * badChecksum or failed (damaged on the way).
 */
function refusal(statuses: Uint8Array): number | undefined {
  for (const s of [PeerStatus.outOfRange, PeerStatus.full, PeerStatus.badChecksum, PeerStatus.failed]) if (statuses.includes(s)) return s;
  return undefined;
}

/** Rejects with ERR_TIMEOUT / ERR_ABORTED if the request has not settled by the deadline (the socket deadline backs it). */
async function withDeadline<T>(p: Promise<T>, opts: IoOptions, fallbackMs: number): Promise<T> {
  const deadline = new CallDeadline(opts, fallbackMs);
  try {
    return await deadline.wrap(p);
  } finally {
    deadline.dispose();
  }
}

/** Waits for every request (so none is left writing into memory the caller reuses), then throws the first error. */
async function settleAll(requests: Array<Promise<void>>, onError: () => void): Promise<void> {
  const results = await Promise.allSettled(requests);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    onError();
    throw failed.reason;
  }
}

/** The positions of `arenas` grouped by arena, in first-seen order (a peer request names a single arena). */
function indicesByArena(arenas: readonly HostArena[]): Map<HostArena, number[]> {
  const out = new Map<HostArena, number[]>();
  arenas.forEach((a, i) => {
    const list = out.get(a);
    if (list) list.push(i);
    else out.set(a, [i]);
  });
  return out;
}
