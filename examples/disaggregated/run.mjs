// Disaggregated serving: a prefill process hands a long context's KV pages to a decode process on another host.
//
//   prefill process ──peer protocol (TCP)──▶ decode host's daemon (host tier in /dev/shm) ──shared memory──▶ decode process
//
// The prefill stores the pages in its own hierarchy, then pushes them over the peer protocol into the decode
// host's RAM; the decode process maps that RAM and copies the pages into its accelerator memory (sim), checking
// each page's CRC32C. The hand-off (push start -> pages in decode's device memory) is timed beside the raw
// loopback-TCP time for the same bytes (tcpBaseline: two native threads, one connection), in the same run,
// alternating, medians reported.
//
// Two hand-offs are timed: sequential (push everything, then load everything: the time of each leg) and
// pipelined (decode loads each chunk of --chunk-pages while the next is on the wire).
//
//   node examples/disaggregated/run.mjs [--tokens 2048] [--reps 3] [--chunk-pages 16] [--layout llama-3-8b] [--json]
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { HostArena } from '@tiersync/native';
import { tcpBaseline } from '@tiersync/native/bench';

const here = path.dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({ options: { tokens: { type: 'string', default: '2048' }, reps: { type: 'string', default: '3' }, 'chunk-pages': { type: 'string', default: '16' }, layout: { type: 'string', default: 'llama-3-8b' }, json: { type: 'boolean', default: false } } });
const tokens = Number(values.tokens);
const reps = Number(values.reps);
if (!Number.isInteger(tokens) || tokens < 1) throw new Error(`--tokens must be a positive integer, got ${values.tokens}`);
if (!Number.isInteger(reps) || reps < 1) throw new Error(`--reps must be a positive integer, got ${values.reps}`);
const chunkPages = Number(values['chunk-pages']);
if (!Number.isInteger(chunkPages) || chunkPages < 1) throw new Error(`--chunk-pages must be a positive integer, got ${values['chunk-pages']}`);
// A JSON object is a custom layout (the test uses a small one); otherwise a preset name.
const layout = values.layout.startsWith('{') ? JSON.parse(values.layout) : values.layout;
const model = 'disaggregated-demo@1';
const log = (...a) => values.json || console.log(...a);

/** Forks a child and resolves with it and its first message of type `type`; `scratch`: paths it removes if run.mjs dies. */
function start(file, arg, type, scratch = []) {
  const child = fork(path.join(here, file), [JSON.stringify(arg), JSON.stringify(scratch)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return next(child, type).then(
    (msg) => ({ child, msg }),
    (e) => {
      child.kill('SIGKILL'); // never leave a child behind that did not come up
      throw e;
    },
  );
}

/** The child's next message of type `type`; rejects if it exits first or after `ms`. */
function next(child, type, ms = 120_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${path.basename(child.spawnfile)}: no '${type}' within ${ms} ms`)), ms);
    const onMessage = (m) => {
      if (m.type !== type) return;
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(m);
    };
    const onExit = (code) => {
      clearTimeout(timer);
      reject(new Error(`child exited with ${code} before '${type}'`));
    };
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

async function stop(child) {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.send({ type: 'stop' });
  const t = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(t);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-disagg-'));
const shm = `/dev/shm/tiersync-disagg-${process.pid}`;
const children = [];

// Page size from the layout, without opening anything.
const { kvLayout, kvLayoutPreset } = await import('@tiersync/core');
const kv = typeof layout === 'string' ? kvLayoutPreset(layout) : kvLayout(layout);
const pages = Math.floor(tokens / kv.tokensPerPage);
const bytes = pages * kv.bytesPerPage;
log(`context: ${tokens} tokens = ${pages} pages x ${(kv.bytesPerPage / 1024).toFixed(0)} KiB = ${(bytes / 2 ** 20).toFixed(1)} MiB (${typeof layout === 'string' ? layout : 'custom layout'})`);

let report;
try {
  const daemon = await start(
    'daemon.mjs',
    {
      model,
      layout,
      // Room for one context; high watermark 1: nothing is evicted to make room while it fills.
      tiers: [{ url: `host://?capacity=${(pages + 1) * kv.bytesPerPage}&shm=${shm}`, name: 'host', highWatermark: 1 }],
      index: { path: path.join(dir, 'decode-index.sqlite') },
      http: { port: 0 },
      peer: { port: 0 },
      client: { maxBatchPages: 4096 },
      log: { level: 'warn' },
    },
    'listening',
    [shm, dir],
  );
  children.push(daemon.child);
  const prefill = await start('prefill.mjs', { layout, model, tokens, decodeUrl: daemon.msg.url }, 'ready');
  children.push(prefill.child);
  const decode = await start('decode.mjs', { daemonUrl: daemon.msg.url, pages, pageBytes: kv.bytesPerPage }, 'ready');
  children.push(decode.child);
  const { keys, crcs } = prefill.msg;

  const src = HostArena.create({ capacity: bytes, prefault: true });
  const dst = HostArena.create({ capacity: bytes, prefault: true });
  const chunk = Math.min(bytes, 4 << 20);
  tcpBaseline(src, dst, bytes, chunk); // warm-up
  const sequential = [];
  const pipelined = [];
  const tcp = [];
  const parts = [];

  /** One hand-off; resolves with its milliseconds (push start -> every page in decode's device memory, checked). */
  async function handOff(pipeline) {
    decode.child.send({ type: 'forget', keys });
    await next(decode.child, 'forgotten');
    let loadedPages = 0;
    const missing = [];
    let loadMs = 0;
    const t0 = process.hrtime.bigint();
    const allLoaded = new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('hand-off did not finish within 120 s')), 120_000);
      const onLoaded = (m) => {
        if (m.type !== 'loaded') return;
        loadedPages += m.loaded;
        loadMs += m.loadMs;
        missing.push(...m.missing);
        if (loadedPages + missing.length < pages) return;
        clearTimeout(timer);
        decode.child.off('message', onLoaded);
        resolve();
      };
      decode.child.on('message', onLoaded);
    });
    const onChunk = (m) => m.type === 'chunk' && pipeline && decode.child.send({ type: 'load', keys: keys.slice(m.from, m.to), first: m.from });
    prefill.child.on('message', onChunk);
    prefill.child.send({ type: 'push', chunkPages: pipeline ? chunkPages : pages });
    const pushed = await next(prefill.child, 'pushed');
    prefill.child.off('message', onChunk);
    if (!pipeline) decode.child.send({ type: 'load', keys, first: 0 });
    await allLoaded;
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (missing.length || loadedPages !== pages) throw new Error(`decode loaded ${loadedPages} of ${pages} pages; missing ${missing.slice(0, 5)}`);
    decode.child.send({ type: 'verify', crcs });
    const bad = (await next(decode.child, 'verified')).bad;
    if (bad.length) throw new Error(`${bad.length} page(s) differ in decode's device memory (first: ${bad[0]})`);
    if (!pipeline) parts.push({ sendMs: pushed.sendMs, loadMs });
    return ms;
  }

  await handOff(true); // warm-up
  for (let r = 0; r < reps; r++) {
    sequential.push(await handOff(false));
    tcp.push(tcpBaseline(src, dst, bytes, chunk) * 1000);
    pipelined.push(await handOff(true));
    tcp.push(tcpBaseline(src, dst, bytes, chunk) * 1000);
  }
  src.close();
  dst.close();
  const h = median(pipelined);
  const hs = median(sequential);
  const t = median(tcp);
  report = {
    tokens,
    pages,
    pageBytes: kv.bytesPerPage,
    bytes,
    reps,
    chunkPages,
    handoffMs: h,
    sequentialHandoffMs: hs,
    tcpBaselineMs: t,
    ratio: h / t,
    sequentialRatio: hs / t,
    handoffGiBps: bytes / 2 ** 30 / (h / 1000),
    tcpGiBps: bytes / 2 ** 30 / (t / 1000),
    sequentialParts: { pushMs: median(parts.map((p) => p.sendMs)), loadMs: median(parts.map((p) => p.loadMs)) },
    runs: { pipelinedMs: pipelined, sequentialMs: sequential, tcpBaselineMs: tcp },
    bytesVerified: true,
  };
  log(`hand-off, pipelined in ${chunkPages}-page chunks (push start -> every page in decode's device memory), median of ${reps}: ${h.toFixed(1)} ms (${report.handoffGiBps.toFixed(2)} GiB/s)`);
  log(`hand-off, sequential: ${hs.toFixed(1)} ms = push ${report.sequentialParts.pushMs.toFixed(1)} ms (device -> host staging + CRC32C, peer protocol into decode host RAM, index) + decode shm -> device ${report.sequentialParts.loadMs.toFixed(1)} ms`);
  log(`raw loopback TCP, same bytes (tcpBaseline), median of ${2 * reps}: ${t.toFixed(1)} ms (${report.tcpGiBps.toFixed(2)} GiB/s)`);
  log(`ratio hand-off / raw TCP: pipelined ${report.ratio.toFixed(2)}, sequential ${report.sequentialRatio.toFixed(2)}; every page's CRC32C matched in decode's device memory`);
} finally {
  for (const c of children.reverse()) await stop(c).catch(() => c.kill('SIGKILL'));
  rmSync(dir, { recursive: true, force: true });
  rmSync(shm, { force: true });
}
if (values.json) console.log(JSON.stringify(report));
