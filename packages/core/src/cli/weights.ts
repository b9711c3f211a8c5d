import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { TierSyncError, TransferEngine } from '@tiersync/native';
import { createTier, type TierDriver } from '@tiersync/tiers';
import { parseBytes } from '../sim/index.js';
import { changeTensors, chunksChangedPerStep, DEFAULT_CHUNK_BYTES, generateTensors, loadSafetensors, TierSource, WeightPublisher, WeightReceiver, type ChunkSource, type LoadedTensors, type PeerAddress } from '../weights/index.js';
import { UsageError, type Command } from './command.js';

const usage = `Usage: tiersync weights <publish|pull|status> [options]

Model weight synchronization (docs/WEIGHTS.md).

publish   serve versions of a tensor set to receivers until interrupted
  --safetensors FILE   tensors of a safetensors file            --generate BYTES  random bf16 tensors (default 256MiB)
  --tensors N          generated tensors (default 40)           --version V       first version name (default step-0)
  --steps N            publish N more versions, each rewriting --change of the bytes (whole tensors), every --interval-ms
  --change F           fraction changed per step (default 0.1)  --interval-ms MS  (default 1000)
  --stage URL          also stage every version on an fs:// or s3:// tier (a checkpoint for new workers)
  --push H:P[,H:P]     also push every version to these receivers (started with pull --accept-push)
  --host H --port P    listen address (default 127.0.0.1, any port)
  --chunk BYTES        chunk size (default 4MiB)                --exit-after-ms MS  stop after MS (default: on SIGINT/SIGTERM)

pull      fetch a version, switch to it, report
  --from HOST:PORT     a publisher or an upstream receiver      --stage URL   or a staging tier instead
  --version V          default: the source's latest             --follow      keep pulling each new latest version
  --commands           read 'pull [VERSION]' / 'exit' lines from stdin (scripts, benchmarks)
  --accept-push        with --serve-port: wait for versions pushed by 'publish --push' (until SIGINT/SIGTERM)
  --serve-port P       serve held chunks downstream (chain fan-out; 0 = any port)   --serve-host H (default 127.0.0.1)
  --prefault           fault the chunk store in at start        --reserve BYTES   allocate the first device slot at start
  --reserve-slots 1|2  with --reserve: 2 allocates the second slot too (used from the second version on)
  --capacity BYTES     host memory for chunks (default 8GiB, reserved lazily)   --memory sim|cuda|host (default sim)
  --wait-ms MS         keep asking for a version the source does not hold yet (default 0)
  --streams N          TCP streams (default 4)

status    the latest version a node or a staging tier holds, with its tensors
  --from HOST:PORT | --stage URL

Common: --json (one JSON object per line), --chunk BYTES (page size of a staging tier; default 4MiB)
  --secret-file FILE   HMAC secret shared with peers, read from FILE (or set TIERSYNC_SECRET); never on the
                       command line, where ps would show it`;

/** The peers' HMAC secret: --secret-file, else TIERSYNC_SECRET, else none (loopback only). */
function readSecret(file: string | undefined): string | undefined {
  if (file !== undefined) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      throw new TierSyncError(`--secret-file ${file}: ${(e as Error).message}`, 'ERR_INVALID_ARGUMENT', { cause: e });
    }
    const secret = text.replace(/\r?\n$/, '');
    if (!secret) throw new TierSyncError(`--secret-file ${file} is empty`, 'ERR_INVALID_ARGUMENT');
    return secret;
  }
  return process.env['TIERSYNC_SECRET'] || undefined;
}

function parseAddress(text: string, secret: string | undefined, streams?: number): PeerAddress {
  const m = /^(.+):(\d{1,5})$/.exec(text);
  if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535) throw new TierSyncError(`--from must be HOST:PORT, got '${text}'`, 'ERR_INVALID_ARGUMENT');
  return { host: m[1]!, port: Number(m[2]), ...(secret ? { secret } : {}), ...(streams ? { streams } : {}) };
}

async function openStage(url: string, engine: TransferEngine, chunkBytes: number): Promise<TierDriver> {
  const tier = createTier(url, { engine, pageBytes: chunkBytes, fingerprint: 'tiersync-weights' });
  await tier.open();
  return tier;
}

function out(json: boolean, record: Record<string, unknown>, text: string): void {
  console.log(json ? JSON.stringify(record) : text);
}

const options = {
  json: { type: 'boolean' },
  safetensors: { type: 'string' },
  generate: { type: 'string' },
  tensors: { type: 'string' },
  version: { type: 'string' },
  steps: { type: 'string' },
  change: { type: 'string' },
  'interval-ms': { type: 'string' },
  stage: { type: 'string' },
  host: { type: 'string' },
  port: { type: 'string' },
  'secret-file': { type: 'string' },
  chunk: { type: 'string' },
  'exit-after-ms': { type: 'string' },
  from: { type: 'string' },
  follow: { type: 'boolean' },
  commands: { type: 'boolean' },
  'serve-port': { type: 'string' },
  'serve-host': { type: 'string' },
  'accept-push': { type: 'boolean' },
  push: { type: 'string' },
  prefault: { type: 'boolean' },
  reserve: { type: 'string' },
  'reserve-slots': { type: 'string' },
  capacity: { type: 'string' },
  memory: { type: 'string' },
  'wait-ms': { type: 'string' },
  streams: { type: 'string' },
} as const;

function int(text: string | undefined, name: string, fallback: number): number {
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 0) throw new TierSyncError(`${name} must be a non-negative integer, got '${text}'`, 'ERR_INVALID_ARGUMENT');
  return n;
}

/** `pull --follow`: first wait after a failed pull, and the most it doubles to, ms. */
const FOLLOW_BACKOFF_MS = 100;
const FOLLOW_BACKOFF_MAX_MS = 5000;

type Values = ReturnType<typeof parseArgs<{ args: string[]; options: typeof options; allowPositionals: true }>>['values'] & { secret: string | undefined };

async function publish(v: Values): Promise<number> {
  const json = v.json ?? false;
  const chunkBytes = v.chunk ? parseBytes(v.chunk, '--chunk') : DEFAULT_CHUNK_BYTES;
  const set: LoadedTensors = v.safetensors ? loadSafetensors(v.safetensors) : generateTensors(parseBytes(v.generate ?? '256MiB', '--generate'), int(v.tensors, '--tensors', 40));
  const total = set.tensors.reduce((s, t) => s + t.length, 0);
  const steps = int(v.steps, '--steps', 0);
  const change = v.change === undefined ? 0.1 : Number(v.change);
  if (!(change > 0 && change <= 1)) throw new TierSyncError(`--change must be in (0, 1], got '${v.change}'`, 'ERR_INVALID_ARGUMENT');
  // Slots (one per chunk, whatever its length): two retained versions (the older whole, the newer's changed
  // chunks), the changed chunks of the version being cut, one cutting window and the blobs. The chunks a step
  // changes follow the tensors changeTensors actually rewrites (0.7 rewrites all of them), not --change itself.
  const pieces = set.tensors.reduce((s, t) => s + Math.ceil(t.length / chunkBytes), 0);
  const perStep = steps > 0 ? chunksChangedPerStep(set, change, chunkBytes) : 0;
  const slots = Math.ceil((pieces + 2 * perStep) * 1.05) + 24;
  const pub = new WeightPublisher({ capacity: slots * chunkBytes, chunkBytes });
  const engine = new TransferEngine({ threads: 1 });
  const tier = v.stage ? await openStage(v.stage, engine, chunkBytes) : undefined;
  const port = pub.serve({ ...(v.host ? { host: v.host } : {}), port: int(v.port, '--port', 0), ...(v.secret ? { secret: v.secret } : {}) });
  out(json, { event: 'listening', host: v.host ?? '127.0.0.1', port }, `serving weights on ${v.host ?? '127.0.0.1'}:${port}`);
  const pushTo = (v.push ?? '').split(',').filter((x) => x.length > 0).map((a) => parseAddress(a, v.secret));
  const publishOne = async (version: string) => {
    const r = await pub.publishWeights(version, set.tensors);
    const staged = tier ? await pub.stage(version, tier) : undefined;
    out(json, { event: 'published', ...r, ...(staged ? { staged } : {}) }, `published ${version}: ${r.bytes} bytes, ${r.chunks} chunks (${r.newChunks} new)${staged ? `, staged ${staged.chunksWritten} chunks` : ''}`);
    for (const to of pushTo) {
      try {
        const p = await pub.pushWeights(version, to);
        out(json, { event: 'pushed', version, to: `${to.host}:${to.port}`, ...p }, `pushed ${version} to ${to.host}:${to.port}: ${p.chunksSent} chunks, ${p.bytesSent} bytes`);
      } catch (e) {
        if (!(e instanceof TierSyncError)) throw e;
        out(json, { event: 'error', to: `${to.host}:${to.port}`, code: e.code, message: e.message }, `push of ${version} to ${to.host}:${to.port} failed: ${e.message} (${e.code})`);
      }
    }
  };
  const stop = new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
    const after = int(v['exit-after-ms'], '--exit-after-ms', 0);
    if (after > 0) setTimeout(resolve, after);
  });
  let stopped = false;
  void stop.then(() => (stopped = true));
  try {
    const first = v.version ?? 'step-0';
    await publishOne(first);
    for (let s = 1; s <= steps && !stopped; s++) {
      await Promise.race([stop, new Promise((r) => setTimeout(r, int(v['interval-ms'], '--interval-ms', 1000)))]);
      if (stopped) break;
      changeTensors(set, change, s);
      await publishOne(`${first}+${s}`);
    }
    await stop;
  } finally {
    await pub.close();
    await tier?.close();
    await engine.close();
    set.arena.close();
  }
  return 0;
}

async function pull(v: Values): Promise<number> {
  const json = v.json ?? false;
  if (!v['accept-push'] && !v.from === !v.stage) throw new TierSyncError('pull needs exactly one of --from HOST:PORT and --stage URL (or --accept-push)', 'ERR_INVALID_ARGUMENT');
  const chunkBytes = v.chunk ? parseBytes(v.chunk, '--chunk') : DEFAULT_CHUNK_BYTES;
  const memory = v.memory ?? 'sim';
  if (memory !== 'sim' && memory !== 'cuda' && memory !== 'host') throw new TierSyncError(`--memory must be sim, cuda or host, got '${memory}'`, 'ERR_INVALID_ARGUMENT');
  const engine = new TransferEngine();
  const receiver = new WeightReceiver({
    capacity: v.capacity ? parseBytes(v.capacity, '--capacity') : 8 * 1024 ** 3,
    slotBytes: chunkBytes,
    memory: memory === 'host' ? { kind: 'host' } : { kind: 'device', backend: memory },
    prefault: v.prefault ?? false,
    engine,
  });
  if (v.reserve) receiver.reserve(parseBytes(v.reserve, '--reserve'), int(v['reserve-slots'], '--reserve-slots', 1) as 1 | 2);
  const tier = v.stage ? await openStage(v.stage, engine, chunkBytes) : undefined;
  const from: PeerAddress | ChunkSource | undefined = tier ? new TierSource(tier, chunkBytes) : v.from ? parseAddress(v.from, v.secret, v.streams ? int(v.streams, '--streams', 4) : undefined) : undefined;
  const waitMs = int(v['wait-ms'], '--wait-ms', 0);
  try {
    if (v['serve-port'] !== undefined) {
      const host = v['serve-host'] ?? '127.0.0.1';
      const port = receiver.serve({ host, port: int(v['serve-port'], '--serve-port', 0), ...(v.secret ? { secret: v.secret } : {}) });
      out(json, { event: 'serving', host, port }, `serving held chunks on ${host}:${port}`);
    }
    const pullOne = async (version: string | undefined) => {
      if (!from) throw new TierSyncError('pull needs --from HOST:PORT or --stage URL', 'ERR_INVALID_ARGUMENT');
      const r = await receiver.pullWeights(version, { from, waitForVersionMs: waitMs });
      out(json, { event: 'switched', ...r }, `switched to ${r.version}: fetched ${r.bytesFetched} of ${r.bytes} bytes (${r.chunksFetched} chunks, ${r.chunksReused} held already, ${r.corrupted} refetched) in ${r.seconds.toFixed(3)} s`);
    };
    if (v['accept-push']) {
      if (v['serve-port'] === undefined) throw new TierSyncError('--accept-push needs --serve-port (pushes arrive on the served port)', 'ERR_INVALID_ARGUMENT');
      receiver.acceptPushes();
      receiver.on('weights:switched', (e) => out(json, { event: 'switched', ...e }, `switched to ${e.version} (pushed): ${e.bytesFetched} bytes arrived, ${e.bytesReused} held already`));
      receiver.on('push:failed', (e) => out(json, { event: 'error', version: e.version, message: String((e.error as Error)?.message ?? e.error) }, `pushed version ${e.version ?? '?'} failed: ${String((e.error as Error)?.message ?? e.error)}`));
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
    } else if (v.commands) {
      out(json, { event: 'ready' }, 'ready: pull [VERSION] | exit');
      const lines = createInterface({ input: process.stdin });
      for await (const line of lines) {
        const [cmd, arg] = line.trim().split(/\s+/);
        if (cmd === 'exit') break;
        if (cmd !== 'pull') {
          out(json, { event: 'error', message: `unknown command '${cmd}'` }, `unknown command '${cmd}'`);
          continue;
        }
        try {
          await pullOne(arg);
        } catch (e) {
          if (!(e instanceof TierSyncError)) throw e;
          out(json, { event: 'error', code: e.code, message: e.message }, `pull failed: ${e.message} (${e.code})`);
        }
      }
      lines.close();
      process.stdin.destroy(); // an open stdin would keep the process alive after 'exit'
    } else if (v.follow) {
      let stopped = false;
      let wake: () => void = () => {};
      const stop = () => {
        stopped = true;
        wake();
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      const pause = (ms: number) => new Promise<void>((r) => setTimeout((wake = r), ms));
      // A failed pull (the trainer restarting, a version dropped mid-pull, no room) is reported and retried after
      // a backoff (100 ms doubling to 5 s, reset by the next switch): a follower outlives its trainer's hiccups.
      let backoff = FOLLOW_BACKOFF_MS;
      while (!stopped) {
        const latest = from ? await receiver.latest(from).catch(() => undefined) : undefined;
        if (latest === undefined || latest === receiver.version) {
          await pause(20);
          continue;
        }
        try {
          await pullOne(latest);
          backoff = FOLLOW_BACKOFF_MS;
        } catch (e) {
          if (!(e instanceof TierSyncError)) throw e;
          out(json, { event: 'error', version: latest, code: e.code, message: e.message, retryMs: backoff }, `pull of ${latest} failed: ${e.message} (${e.code}); retrying in ${backoff} ms`);
          await pause(backoff);
          backoff = Math.min(backoff * 2, FOLLOW_BACKOFF_MAX_MS);
        }
      }
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
    } else {
      await pullOne(v.version);
    }
  } finally {
    await receiver.close();
    await tier?.close();
    await engine.close();
  }
  return 0;
}

async function status(v: Values): Promise<number> {
  const json = v.json ?? false;
  if (!v.from === !v.stage) throw new TierSyncError('status needs exactly one of --from HOST:PORT and --stage URL', 'ERR_INVALID_ARGUMENT');
  const chunkBytes = v.chunk ? parseBytes(v.chunk, '--chunk') : DEFAULT_CHUNK_BYTES;
  const engine = new TransferEngine({ threads: 1 });
  const receiver = new WeightReceiver({ capacity: 2 * chunkBytes, slotBytes: chunkBytes, memory: { kind: 'host' }, engine });
  const tier = v.stage ? await openStage(v.stage, engine, chunkBytes) : undefined;
  try {
    const from: PeerAddress | ChunkSource = tier ? new TierSource(tier, chunkBytes) : parseAddress(v.from!, v.secret);
    const m = await receiver.manifestOf(from, v.version);
    if (!m) {
      out(json, { event: 'status', version: null }, 'no version announced');
      return 1;
    }
    const bytes = m.chunks.reduce((s, c) => s + c.length, 0);
    out(
      json,
      { event: 'status', version: m.version, bytes, chunks: m.chunks.length, chunkBytes: m.chunkBytes, tensors: m.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, bytes: t.length })) },
      [`version ${m.version}: ${m.tensors.length} tensors, ${bytes} bytes in ${m.chunks.length} chunks of up to ${m.chunkBytes} bytes`, ...m.tensors.slice(0, 20).map((t) => `  ${t.name} ${t.dtype} [${t.shape.join(', ')}] ${t.length} bytes`), ...(m.tensors.length > 20 ? [`  ... ${m.tensors.length - 20} more`] : [])].join('\n'),
    );
    return 0;
  } finally {
    await receiver.close();
    await tier?.close();
    await engine.close();
  }
}

export const weightsCommand: Command = {
  summary: 'model weight sync: publish versions, pull them into device memory, show status',
  usage,
  async run(args) {
    const { values, positionals } = parseArgs({ args, allowPositionals: true, options });
    const v = { ...values, secret: readSecret(values['secret-file']) };
    switch (positionals[0]) {
      case 'publish':
        return publish(v);
      case 'pull':
        return pull(v);
      case 'status':
        return status(v);
      default:
        throw new UsageError(positionals[0] ? `unknown subcommand '${positionals[0]}' (publish, pull or status)` : 'name a subcommand: publish, pull or status');
    }
  },
};
