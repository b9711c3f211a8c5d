/**
 * Property-based fuzzing (fast-check) of everything that parses outside input: the hierarchy and daemon config
 * loaders, the KV layout, tier URLs, the peer protocol frame decoder, the RESP parser, and the native transfer
 * descriptor API. The property is the same everywhere: any input either parses or is refused with a typed
 * TierSyncError of the expected code; nothing else is thrown and the process never crashes. Where a round trip
 * exists (valid frames, valid transfers) it must give back exactly what went in.
 */
import fc from 'fast-check';
import { HostArena, TierSyncError, TransferBatch, TransferEngine, peerFrames, type ErrorCode } from '@tiersync/native';
import { createTier, faultUrl } from '@tiersync/tiers';
import { kvLayout, parseConfig } from '@tiersync/core';
import { fuzzRespParser, parseServerConfig } from '@tiersync/core/server';
import { scenario, type ScenarioResult } from './report.js';

export interface FuzzOptions {
  /** Cases per target. Default 100,000 (the benchmark run). */
  cases?: number;
  seed?: number;
  log?: (line: string) => void;
}

type Verdict = 'accepted' | 'refused';

/**
 * Runs `predicate` under fast-check; each case returns whether the input was accepted or refused with one of
 * `codes`. Any other throw fails the property (fast-check shrinks it and the note names the counterexample).
 */
function fuzz<T>(name: string, command: string, arb: fc.Arbitrary<T>, codes: readonly ErrorCode[], run: (value: T) => Verdict | void, options: FuzzOptions): ScenarioResult {
  const cases = options.cases ?? 100_000;
  const result = scenario(name, command);
  const outcome = { accepted: 0, refused: 0 };
  const check = fc.check(
    fc.property(arb, (value) => {
      try {
        outcome[run(value) ?? 'accepted']++;
      } catch (e) {
        if (e instanceof TierSyncError && codes.includes(e.code)) {
          outcome.refused++;
          return;
        }
        throw e;
      }
    }),
    { numRuns: cases, seed: options.seed ?? 1, endOnFailure: false },
  );
  result.runs = check.numRuns;
  result.faults = outcome.refused;
  result.details = { accepted: outcome.accepted, refused: outcome.refused, seed: options.seed ?? 1 };
  if (check.failed) {
    result.failures++;
    const error = check.errorInstance instanceof Error ? `${check.errorInstance.name}: ${check.errorInstance.message}` : String(check.errorInstance);
    result.notes.push(`counterexample ${fc.stringify(check.counterexample).slice(0, 400)}: ${error.slice(0, 400)}`);
  }
  options.log?.(`fuzz ${name}: ${result.runs} cases, ${outcome.accepted} accepted, ${outcome.refused} refused, ${result.failures ? 'FAILED' : 'ok'}`);
  return result;
}

/** Values that break naive checks: wrong types, NaN, infinities, huge and negative numbers, odd strings. */
const weird = fc.oneof(
  fc.constantFrom<unknown>(null, undefined, NaN, Infinity, -Infinity, -1, 0, 1, 2 ** 31, 2 ** 53, -(2 ** 53), 0.5, '', ' ', '0', 'true', '../../etc/passwd', '\u0000', '__proto__', [], {}),
  fc.string(),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.array(fc.anything(), { maxLength: 3 }),
);

const validTier = (i: number) => ({ url: i === 0 ? 'host://?capacity=64MiB' : `fs:///tmp/tiersync-fuzz-${i}?capacity=1GiB` });
const validHierarchy = () => ({ model: 'fuzz@1', layout: 'llama-3-8b', tiers: [validTier(0), validTier(1)] });

/** A valid object with one field (at any depth of `paths`) replaced by a weird value, or deleted, or an extra key. */
function mutated(base: () => Record<string, unknown>, paths: readonly string[]): fc.Arbitrary<unknown> {
  return fc.tuple(fc.constantFrom(...paths), weird, fc.constantFrom('set', 'delete', 'extra')).map(([p, value, how]) => {
    const root = base();
    const parts = p.split('.');
    let at: Record<string, unknown> = root;
    for (const part of parts.slice(0, -1)) {
      if (typeof at[part] !== 'object' || at[part] === null) at[part] = {};
      at = at[part] as Record<string, unknown>;
    }
    const last = parts[parts.length - 1]!;
    if (how === 'delete') delete at[last];
    else if (how === 'extra') at[`${last}_unknown`] = value;
    else at[last] = value;
    return root;
  });
}

const HIERARCHY_PATHS = ['model', 'layout', 'tokensPerPage', 'tenant', 'tenantSalt', 'tiers', 'tiers.0', 'tiers.0.url', 'tiers.0.name', 'tiers.0.highWatermark', 'tiers.0.lowWatermark', 'tiers.0.policy', 'tiers.1.writeThrough', 'index', 'index.path', 'index.synchronous', 'threads', 'stagingPages', 'maxQueuedPages', 'promoteOnHit', 'admission', 'admission.kind', 'admission.lookups'];
const SERVER_PATHS = [...HIERARCHY_PATHS, 'http', 'http.host', 'http.port', 'http.token', 'peer', 'peer.enabled', 'peer.host', 'peer.port', 'peer.secret', 'cluster', 'cluster.redis', 'cluster.heartbeatMs', 'cluster.ttlMs', 'tenants', 'tenants.0', 'tenants.0.name', 'tenants.0.token', 'client', 'log'];

export function fuzzHierarchyConfig(options: FuzzOptions = {}): ScenarioResult {
  const arb = fc.oneof(fc.anything(), mutated(validHierarchy, HIERARCHY_PATHS));
  return fuzz('fuzz: hierarchy config (parseConfig)', `tiersync bench reliability --scenarios fuzz --cases ${options.cases ?? 100_000} --json`, arb, ['ERR_CONFIG'], (v) => void parseConfig(v), options);
}

export function fuzzServerConfig(options: FuzzOptions = {}): ScenarioResult {
  const base = () => ({ ...validHierarchy(), http: { host: '127.0.0.1', port: 0 }, peer: { enabled: true, host: '127.0.0.1', port: 0 }, tenants: [{ name: 'a', token: 'token-a-123456' }] });
  const arb = fc.oneof(fc.anything(), mutated(base, SERVER_PATHS));
  return fuzz('fuzz: daemon config (parseServerConfig)', `tiersync bench reliability --scenarios fuzz --cases ${options.cases ?? 100_000} --json`, arb, ['ERR_CONFIG'], (v) => void parseServerConfig(v), options);
}

export function fuzzLayout(options: FuzzOptions = {}): ScenarioResult {
  const base = () => ({ tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 2, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] });
  const paths = ['tokensPerPage', 'dtype', 'groups', 'groups.0', 'groups.0.name', 'groups.0.layers', 'groups.0.attention', 'groups.0.attention.type', 'groups.0.attention.kvHeads', 'groups.0.attention.headDim', 'groups.0.slidingWindow'];
  const arb = fc.oneof(fc.anything(), mutated(base, paths));
  return fuzz('fuzz: KV layout (kvLayout)', `tiersync bench reliability --scenarios fuzz --cases ${options.cases ?? 100_000} --json`, arb, ['ERR_INVALID_ARGUMENT', 'ERR_CONFIG'], (v) => void kvLayout(v as never), options);
}

/** Tier URLs: each scheme with random hosts, paths and options (known names with weird values, unknown names). */
export function fuzzTierUrls(engine: TransferEngine, options: FuzzOptions = {}): ScenarioResult {
  const optionNames = ['capacity', 'shm', 'lock', 'hugepages', 'prefault', 'verify', 'slab', 'direct', 'preallocate', 'secret', 'streams', 'timeoutMs', 'region', 'endpoint', 'prefix', 'retries', 'inner', 'readErrors', 'seed', 'x'];
  const value = fc.oneof(fc.constantFrom('64MiB', '0', '-1', '1.5TiB', '99999999999999999999GiB', 'true', 'maybe', 'NaN', '%00', '../..', 'always', 'host://?capacity=1MiB', 'fault://?inner=x'), fc.string({ maxLength: 12 }));
  const structured = fc
    .tuple(
      fc.constantFrom('hbm', 'host', 'fs', 's3', 'gs', 'peer', 'fault', 'ftp', 'HOST', ''),
      fc.oneof(fc.constant(''), fc.domain(), fc.constantFrom('sim', 'cuda', '127.0.0.1:7000', '[::1]:1', 'bucket', '..', 'a:b@c')),
      fc.oneof(fc.constant(''), fc.constantFrom('/', '/tmp/tiersync-fuzz-url', '/../../etc', '/a%2F..%2Fb', '//x'), fc.webPath()),
      fc.array(fc.tuple(fc.constantFrom(...optionNames), value), { maxLength: 4 }),
    )
    .map(([scheme, host, path, params]) => `${scheme}://${host}${path}${params.length ? '?' : ''}${params.map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('&')}`);
  // Valid URLs of each scheme with one option added or replaced: most parse, so the option checks are reached.
  const valid = ['hbm://sim?capacity=64MiB', 'host://?capacity=64MiB', 'fs:///tmp/tiersync-fuzz-url?capacity=1GiB', 's3://bucket/prefix?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1', 'peer://127.0.0.1:7000?secret=s3cret-s3cret'];
  const nearValid = fc.tuple(fc.constantFrom(...valid), fc.constantFrom(...optionNames), value, fc.boolean()).map(([u, k, v, replace]) => {
    const url = new URL(u);
    if (replace) url.searchParams.set(k, v);
    else url.searchParams.append(k, v);
    return url.href;
  });
  const arb = fc.oneof(fc.string(), fc.webUrl({ withQueryParameters: true, withFragments: true }), structured, nearValid, fc.constantFrom(...valid), structured.map((u) => faultUrl(u, { readErrors: 0.5 })));
  const context = { engine, pageBytes: 16384, fingerprint: 'fuzz' };
  return fuzz('fuzz: tier URL parser (createTier)', `tiersync bench reliability --scenarios fuzz --cases ${options.cases ?? 100_000} --json`, arb, ['ERR_CONFIG'], (url) => void createTier(url, context), options);
}

/** Peer protocol frames: random bytes, valid frames with bytes changed or cut, valid frames (round trip). */
export function fuzzPeerFrames(options: FuzzOptions = {}): ScenarioResult {
  const hex = fc.stringMatching(/^[0-9a-f]{16,128}$/);
  const entry = fc.record({ key: hex, status: fc.integer({ min: 0, max: 3 }), length: fc.nat(), crc32c: fc.nat() });
  const frame = fc.record({ op: fc.integer({ min: 1, max: 4 }), requestId: fc.nat(), entries: fc.array(entry, { maxLength: 4 }) });
  const damage = fc.tuple(frame, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }), fc.option(fc.nat()));
  const arb = fc.oneof(
    fc.uint8Array({ maxLength: 512 }).map((bytes) => ({ kind: 'noise' as const, bytes })),
    damage.map(([f, edits, cut]) => ({ kind: 'damaged' as const, f, edits, cut })),
    frame.map((f) => ({ kind: 'valid' as const, f })),
  );
  return fuzz('fuzz: peer frame decoder', `tiersync bench reliability --scenarios fuzz --cases ${options.cases ?? 100_000} --json`, arb, ['ERR_PROTOCOL'], (c) => {
    if (c.kind === 'noise') {
      peerFrames.decode(c.bytes);
      return 'accepted';
    }
    let bytes: Uint8Array;
    try {
      bytes = peerFrames.encode(c.f.op, c.f.requestId, c.f.entries);
    } catch (e) {
      // The encoder refusing what it cannot represent is fine; it must say so with a typed error.
      if (e instanceof TierSyncError && (e.code === 'ERR_INVALID_ARGUMENT' || e.code === 'ERR_OUT_OF_RANGE' || e.code === 'ERR_PROTOCOL')) return 'refused';
      throw e;
    }
    if (c.kind === 'valid') {
      const d = peerFrames.decode(bytes);
      if (d.op !== c.f.op || d.requestId !== c.f.requestId || d.entries.length !== c.f.entries.length || d.entries.some((e, i) => e.key !== c.f.entries[i]!.key)) {
        throw new Error(`round trip changed the frame: ${JSON.stringify(d).slice(0, 200)}`);
      }
      return 'accepted';
    }
    const copy = Uint8Array.from(bytes);
    let changed = false;
    for (const [at, v] of c.edits) {
      const i = at % copy.length;
      changed ||= copy[i] !== v;
      copy[i] = v;
    }
    const cut = c.cut === null ? copy : copy.subarray(0, c.cut % (copy.length + 1));
    peerFrames.decode(cut);
    // Header and entry table carry CRC32C: a changed header or table must not decode.
    if (changed && cut.length === copy.length) {
      const d = peerFrames.decode(copy);
      if (d.op !== c.f.op || d.requestId !== c.f.requestId || d.entries.some((e, i) => e.key !== c.f.entries[i]?.key)) throw new Error('a damaged frame decoded into a different frame');
    }
    return 'accepted';
  }, options);
}

/** The RESP parser's own fuzz driver (server/resp/fuzz.ts), seeded; it throws on a broken property. */
export function fuzzResp(options: FuzzOptions = {}): ScenarioResult {
  const cases = options.cases ?? 100_000;
  const result = scenario('fuzz: RESP parser', `tiersync bench reliability --scenarios fuzz --cases ${cases} --json`);
  try {
    const r = fuzzRespParser({ cases, seed: options.seed ?? 1 });
    result.runs = r.cases;
    result.faults = r.refused + r.accepted;
    result.details = { roundTrips: r.roundTrips, refused: r.refused, acceptedDamaged: r.accepted, seed: r.seed };
  } catch (e) {
    result.runs = cases;
    result.failures++;
    result.notes.push(String((e as Error).message ?? e).slice(0, 400));
  }
  options.log?.(`fuzz RESP: ${result.runs} cases, ${result.failures ? 'FAILED' : 'ok'}`);
  return result;
}

const ARENA = 64 * 1024;

/**
 * The native descriptor API, both layers: TransferBatch.add with arbitrary numbers (the JavaScript checks), and
 * descriptors overwritten after they were checked, straight into the engine (the C++ checks). Valid transfers
 * must copy exactly; invalid ones must be refused with a typed error; out-of-range bytes are never touched
 * (sentinels around the target range are checked).
 */
export async function fuzzDescriptors(engine: TransferEngine, options: FuzzOptions = {}): Promise<ScenarioResult> {
  const cases = options.cases ?? 100_000;
  const result = scenario('fuzz: native descriptors (TransferBatch, engine.submit)', `tiersync bench reliability --scenarios fuzz --cases ${cases} --json`);
  const a = HostArena.create({ capacity: ARENA });
  const b = HostArena.create({ capacity: ARENA });
  // Mostly in-range numbers, so many batches pass the JavaScript checks and the damaged ones reach C++.
  const number = fc.oneof(
    { arbitrary: fc.integer({ min: 0, max: ARENA / 2 }), weight: 6 },
    fc.integer({ min: -2, max: ARENA + 2 }),
    fc.constantFrom(NaN, Infinity, -Infinity, -0, 0.5, 2 ** 32, 2 ** 53, 2 ** 63, -(2 ** 31), ARENA, ARENA - 1, Number.MAX_VALUE, Number.MIN_VALUE),
    fc.double(),
  );
  const length = fc.oneof({ arbitrary: fc.integer({ min: 1, max: ARENA / 4 }), weight: 6 }, number);
  const desc = fc.record({ src: fc.constantFrom(0, 1), dst: fc.constantFrom(0, 1), srcOffset: number, dstOffset: number, length });
  const arb = fc.record({ descs: fc.array(desc, { minLength: 1, maxLength: 4 }), raw: fc.boolean(), field: fc.nat(19), value: fc.oneof(number, fc.constantFrom(2, 3, -1, 255)) });
  const arenas = [a, b];
  const typed = new Set<ErrorCode>(['ERR_INVALID_ARGUMENT', 'ERR_OUT_OF_RANGE', 'ERR_OVERLAP']);
  const counts = { accepted: 0, refusedInJs: 0, refusedNative: 0 };
  const sample = fc.sample(arb, { numRuns: cases, seed: options.seed ?? 1 });
  try {
    for (const [n, c] of sample.entries()) {
      result.runs++;
      a.view(0, ARENA).fill(0xaa);
      b.view(0, ARENA).fill(0x55);
      const batch = new TransferBatch();
      try {
        for (const d of c.descs) batch.add(arenas[d.src]!, d.srcOffset, arenas[d.dst]!, d.dstOffset, d.length);
      } catch (e) {
        if (e instanceof TierSyncError && typed.has(e.code)) {
          counts.refusedInJs++;
          continue;
        }
        result.failures++;
        result.notes.push(`case ${n}: TransferBatch.add threw ${String(e)} for ${JSON.stringify(c.descs)}`);
        continue;
      }
      // Every descriptor passed the JavaScript checks; now, half the time, damage one number behind their back.
      if (c.raw) {
        const raw = batch.descriptors;
        raw[c.field % raw.length] = c.value;
      }
      const before = [Buffer.from(a.view(0, ARENA)), Buffer.from(b.view(0, ARENA))];
      const planned = Array.from({ length: batch.length }, (_, i) => Array.from(batch.descriptors.subarray(i * 5, i * 5 + 5)));
      try {
        await engine.submit(batch, { timeoutMs: 10_000 });
      } catch (e) {
        if (e instanceof TierSyncError && typed.has(e.code)) {
          counts.refusedNative++;
          // A refused batch must not have moved a byte.
          if (Buffer.compare(before[0]!, Buffer.from(a.view(0, ARENA))) || Buffer.compare(before[1]!, Buffer.from(b.view(0, ARENA)))) {
            result.failures++;
            result.notes.push(`case ${n}: a refused batch changed memory`);
          }
          continue;
        }
        result.failures++;
        result.notes.push(`case ${n}: engine.submit threw ${String(e)} for ${JSON.stringify(planned)}`);
        continue;
      }
      // Accepted: each descriptor must have been valid, and the destination must now hold the source bytes.
      counts.accepted++;
      // Endpoint slots index the batch's own endpoint list, not `arenas`.
      const arenaOf = (slot: number) => (Number.isInteger(slot) && slot >= 0 && slot < batch.endpoints.length ? arenas.indexOf(batch.endpoints[slot] as HostArena) : -1);
      for (const [s, so, d, dO, len] of planned as Array<[number, number, number, number, number]>) {
        const inRange = arenaOf(s) >= 0 && arenaOf(d) >= 0 && [so, dO].every((x) => Number.isSafeInteger(x) && x >= 0) && Number.isSafeInteger(len) && len >= 1 && so + len <= ARENA && dO + len <= ARENA;
        const overlaps = arenaOf(s) === arenaOf(d) && so < dO + len && dO < so + len;
        if (!inRange || overlaps) {
          result.failures++;
          result.notes.push(`case ${n}: the engine accepted an invalid descriptor ${JSON.stringify([s, so, d, dO, len])}`);
          break;
        }
      }
      if (batch.length === 1 && result.failures === 0) {
        const [s, so, d, dO, len] = planned[0] as [number, number, number, number, number];
        if (Buffer.compare(before[arenaOf(s)]!.subarray(so, so + len), Buffer.from(arenas[arenaOf(d)]!.view(dO, len)))) {
          result.failures++;
          result.notes.push(`case ${n}: an accepted copy did not deliver the source bytes`);
        }
      }
      if (result.notes.length > 20) break;
    }
  } finally {
    a.close();
    b.close();
  }
  result.faults = counts.refusedInJs + counts.refusedNative;
  result.details = { ...counts, seed: options.seed ?? 1 };
  options.log?.(`fuzz descriptors: ${result.runs} cases, ${counts.accepted} accepted, ${counts.refusedInJs} refused in JS, ${counts.refusedNative} refused natively`);
  return result;
}
