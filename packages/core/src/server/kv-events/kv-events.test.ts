import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { HostArena } from '@tiersync/native';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEBIAN_PYTHON, requirePythonModules } from '../../../../../scripts/system-packages.mjs';
import { parseServerConfig, type ServerConfig } from '../config.js';
import { TierSyncServer } from '../server.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const SUBSCRIBER = path.join(here, 'kv-subscriber.fixture.py');
// 1 layer x 2 KV heads x 64 dims, bf16, 16 tokens per page = 8 KiB pages.
const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

interface View {
  last: number;
  view: Record<string, string[]>;
  stats: { live: number; replayed: number; snapshots: number; gaps: number };
}

/** The Python subscriber, driven line by line. */
class Subscriber {
  readonly #proc: ChildProcessWithoutNullStreams;
  readonly #lines: AsyncIterator<string>;
  #stderr = '';

  constructor(pub: string, replay: string, state: string) {
    this.#proc = spawn(DEBIAN_PYTHON, [SUBSCRIBER, pub, replay, state]);
    this.#proc.stderr.on('data', (d: Buffer) => (this.#stderr += d.toString()));
    this.#lines = createInterface({ input: this.#proc.stdout })[Symbol.asyncIterator]();
  }

  async #ask(line: string): Promise<any> {
    this.#proc.stdin.write(`${line}\n`);
    const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`subscriber did not answer '${line}': ${this.#stderr}`)), 30_000).unref());
    const next = await Promise.race([this.#lines.next(), timeout]);
    if (next.done) throw new Error(`subscriber exited: ${this.#stderr}`);
    return JSON.parse(next.value);
  }

  sync(seq: number): Promise<View> {
    return this.#ask(`sync ${seq}`);
  }

  /** Saves its state and exits (a subscriber that leaves). */
  async leave(): Promise<void> {
    await this.#ask('save');
    await this.quit();
  }

  async quit(): Promise<void> {
    if (this.#proc.exitCode !== null) return;
    const exited = new Promise((r) => this.#proc.once('exit', r));
    this.#proc.stdin.write('quit\n');
    await exited;
  }
}

function tokens(seed: number, pages: number): Uint32Array {
  return Uint32Array.from({ length: pages * 16 }, (_, i) => (seed * 1_000_003 + i * 7) % 50_000);
}

async function store(server: TierSyncServer, toks: Uint32Array): Promise<void> {
  const n = Math.floor(toks.length / 16);
  const arena = HostArena.create({ capacity: n * PAGE });
  try {
    for (let i = 0; i < n; i++) arena.view(i * PAGE, PAGE).fill(i + 1);
    await server.ts.store(toks, Array.from({ length: n }, (_, i) => ({ arena, offset: i * PAGE, length: PAGE })));
  } finally {
    arena.close();
  }
}

/** What the daemon says it holds: (low 64 bits of the key, medium) from lookups, and pages per medium from /v1/stats. */
async function truth(server: TierSyncServer, sequences: Uint32Array[]): Promise<{ pairs: Set<string>; perMedium: Record<string, number> }> {
  const medium: Record<string, string> = { host: 'CPU', fs: 'DISK' };
  const pairs = new Set<string>();
  for (const toks of sequences) {
    const keys = server.ts.keysOf(toks);
    const exact = server.ts.lookupKeys(keys);
    for (const p of exact.pages) for (const t of p.tiers) pairs.add(`${medium[t]}/${p.key.slice(-16)}`);
    // The HTTP lookup (longest cached prefix) names the same tiers for the pages it returns.
    const r = await fetch(`${server.url}/v1/lookup`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tokens: [...toks] }) });
    const body = (await r.json()) as { pages: Array<{ key: string; tiers: string[] }> };
    for (const p of body.pages) for (const t of p.tiers) expect(pairs.has(`${medium[t]}/${p.key.slice(-16)}`)).toBe(true);
  }
  const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as { tiers: Array<{ name: string; usedPages: number }> };
  return { pairs, perMedium: Object.fromEntries(stats.tiers.map((t) => [medium[t.name]!, t.usedPages])) };
}

function pairsOf(v: View): Set<string> {
  return new Set(Object.entries(v.view).flatMap(([m, hs]) => hs.map((h) => `${m}/${h}`)));
}

describe('KV events: a Python subscriber (python3-zmq, python3-msgpack) follows every tier change', () => {
  let dir: string;
  let config: ServerConfig;
  beforeAll(async () => {
    requirePythonModules(['zmq', 'msgpack']);
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-kv-events-'));
    const [pubPort, replayPort] = [await freePort(), await freePort()];
    config = {
      model: 'kv-events-test@1',
      layout,
      // A small host tier over a small fs tier written back on demotion: stores push pages down, then out.
      tiers: [
        { url: `host://?capacity=${8 * PAGE}`, name: 'host' },
        { url: `fs://${dir}/fs?capacity=${20 * PAGE}`, name: 'fs' },
      ],
      index: { path: path.join(dir, 'index.sqlite') },
      http: { port: 0 },
      peer: { enabled: false },
      log: { level: 'silent' },
      kvEvents: { endpoint: `tcp://127.0.0.1:${pubPort}`, replayEndpoint: `tcp://127.0.0.1:${replayPort}`, replayBatches: 100_000 },
    };
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('after stores, demotions, evictions, deletes and a daemon restart, every subscriber view equals /v1/stats and lookups', async () => {
    let server = await TierSyncServer.start(parseServerConfig(config));
    const { pub, replay } = server.kvEvents!.endpoints;
    const moves = { stored: 0, demoted: 0, evicted: 0, promoted: 0 };
    const count = (s: TierSyncServer) => {
      s.ts.on('block:stored', (e) => (moves.stored += e.keys.length));
      s.ts.on('block:demoted', (e) => (moves.demoted += e.keys.length));
      s.ts.on('block:promoted', (e) => (moves.promoted += e.keys.length));
      s.ts.on('block:evicted', (e) => (moves.evicted += e.keys.length));
    };
    count(server);
    const stayer = new Subscriber(pub, replay, path.join(dir, 'a.json'));
    const early = new Subscriber(pub, replay, path.join(dir, 'b.json'));
    const late = new Subscriber(pub, replay, path.join(dir, 'c.json'));
    const sequences: Uint32Array[] = [];
    try {
      await stayer.sync(server.kvEvents!.lastSeq);
      for (let s = 0; s < 5; s++) {
        sequences.push(tokens(s, 4));
        await store(server, sequences[s]!);
      }
      await server.ts.flush();
      await early.sync(server.kvEvents!.lastSeq);
      // This one leaves before the deletes and the restart; the batches it misses are gone with the old daemon.
      await early.leave();

      // Loading a prefix that went down to fs (promotion per policy), then deleting one sequence.
      const hit = server.ts.lookup(sequences[0]!);
      const arena = HostArena.create({ capacity: 4 * PAGE });
      await server.ts.load(hit, hit.pages.map((_, i) => ({ arena, offset: i * PAGE, length: PAGE })));
      arena.close();
      await server.ts.deleteKeys(server.ts.keysOf(sequences[1]!));
      await server.ts.flush();

      const beforeRestart = server.kvEvents!.lastSeq;
      await server.close();
      // Host RAM is gone with the process; the fs tier's pages are adopted by the new daemon.
      server = await TierSyncServer.start(parseServerConfig(config));
      count(server);
      const reset = server.kvEvents!.lastSeq;
      expect(reset, 'sequence numbers continue across the restart').toBe(beforeRestart + 1);
      expect(server.kvEvents!.stats().pages.host).toBe(0);

      await late.sync(reset);
      // This one leaves after the restart and comes back: it replays the batches it missed from the ring.
      await late.leave();
      for (let s = 5; s < 8; s++) {
        sequences.push(tokens(s, 4));
        await store(server, sequences[s]!);
      }
      await server.ts.deleteKeys(server.ts.keysOf(sequences[5]!).slice(2));
      await server.ts.flush();

      const last = server.kvEvents!.lastSeq;
      const back = [new Subscriber(pub, replay, path.join(dir, 'b.json')), new Subscriber(pub, replay, path.join(dir, 'c.json'))];
      const views = [await stayer.sync(last), ...(await Promise.all(back.map((s) => s.sync(last))))];
      await Promise.all(back.map((s) => s.quit()));

      expect(moves.demoted, 'the workload demoted pages').toBeGreaterThan(0);
      expect(moves.evicted, 'the workload evicted pages').toBeGreaterThan(0);
      const { pairs, perMedium } = await truth(server, sequences);
      for (const v of views) {
        expect(v.last).toBe(last);
        expect(pairsOf(v)).toEqual(pairs);
        expect(Object.fromEntries(Object.keys(perMedium).map((m) => [m, v.view[m]?.length ?? 0]))).toEqual(perMedium);
      }
      // The one that left before the restart came back to a ring without its batches: it got a snapshot; the one
      // that left after it replayed the batches themselves.
      expect(views[1]!.stats.snapshots).toBeGreaterThan(0);
      expect(views[2]!.stats.replayed).toBeGreaterThan(0);
      expect(views[2]!.stats.snapshots).toBe(0);
      expect(server.kvEvents!.stats().pages).toEqual({ host: perMedium.CPU, fs: perMedium.DISK });
    } finally {
      await Promise.all([stayer.quit(), early.quit(), late.quit()]);
      await server.close();
    }
  }, 120_000);
});
