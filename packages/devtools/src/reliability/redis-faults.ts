/**
 * Redis killed and restarted under a daemon: two `TierSyncServer`s share a Redis cluster registry. Each cycle
 * SIGKILLs redis-server while lookups run against both daemons' HTTP endpoints, then restarts it (empty) on the
 * same port. While Redis is down every lookup must still answer (200, local pages found, the cluster part saying
 * why it is missing) within its deadline; after the restart both daemons must re-register and node A's pages be
 * found from node B again (the retry that succeeds).
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HostArena } from '@tiersync/native';
import { freePort, startRedis } from '../bench/services.js';
import { parseServerConfig, TierSyncServer } from '@tiersync/core/server';
import { Deadline, scenario, withDeadline, type ScenarioResult } from './report.js';

export interface RedisFaultOptions {
  /** Kill/restart cycles. Default 20. */
  cycles?: number;
  log?: (line: string) => void;
}

const LAYOUT = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;
const REQUEST_MS = 10_000;
const RECOVER_MS = 15_000;

/** redis-server on a fixed port (the daemons keep its address across restarts). */
async function redisOn(port: number): Promise<ChildProcess> {
  return (await startRedis({ port })).child;
}

function kill(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

async function until(check: () => Promise<boolean> | boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await Promise.resolve().then(check).catch(() => false)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

export async function runRedisRestarts(options: RedisFaultOptions = {}): Promise<ScenarioResult> {
  const cycles = options.cycles ?? 20;
  const result = scenario('Redis killed and restarted under two daemons (cluster registry)', `tiersync bench reliability --scenarios redis --cycles ${cycles} --json`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-redis-faults-'));
  const port = await freePort();
  let redis: ChildProcess | undefined;
  const servers: TierSyncServer[] = [];
  const outcomes: Record<string, number> = {};
  const bump = (k: string) => (outcomes[k] = (outcomes[k] ?? 0) + 1);
  try {
    redis = await redisOn(port);
    const config = (name: string) =>
      parseServerConfig({
        model: 'reliability-redis@1',
        layout: LAYOUT,
        tiers: [{ url: `host://?capacity=${64 * PAGE}`, name: 'host' }],
        index: { path: path.join(dir, `${name}.sqlite`) },
        http: { port: 0 },
        peer: { port: 0 },
        cluster: { redis: `redis://127.0.0.1:${port}`, name: 'rel', nodeId: name, heartbeatMs: 100, ttlMs: 1000, publishIntervalMs: 20, commandTimeoutMs: 300 },
        log: { level: 'silent' },
      });
    const a = await TierSyncServer.start(config('node-a'));
    servers.push(a);
    const b = await TierSyncServer.start(config('node-b'));
    servers.push(b);
    const tokens = Array.from({ length: 4 * 16 }, (_, i) => (i * 7 + 3) % 50_000);
    const arena = HostArena.create({ capacity: 4 * PAGE });
    try {
      await a.ts.store(Uint32Array.from(tokens), Array.from({ length: 4 }, (_, i) => ({ arena, offset: i * PAGE, length: PAGE })));
    } finally {
      arena.close();
    }
    const lookup = async (s: TierSyncServer): Promise<{ status: number; json: { tokens: number; cluster?: { holders?: Array<{ node: string; pages: number }>; error?: string } } }> => {
      const r = await withDeadline(fetch(`${s.url}/v1/lookup`, { method: 'POST', body: JSON.stringify({ tokens }), signal: AbortSignal.timeout(REQUEST_MS) }), REQUEST_MS + 1000, 'lookup');
      return { status: r.status, json: (await r.json()) as never };
    };
    const foundFromB = async () => (await lookup(b)).json.cluster?.holders?.some((h) => h.node === 'node-a' && h.pages === 4) ?? false;
    if (!(await until(foundFromB, RECOVER_MS))) throw new Error('node-a was never found from node-b before any fault');
    for (let c = 0; c < cycles; c++) {
      result.runs++;
      // Lookups in flight while Redis dies.
      const during = Array.from({ length: 8 }, (_, i) => lookup(i % 2 ? a : b));
      for (const p of during) p.catch(() => undefined);
      await kill(redis);
      result.faults++;
      for (const [i, p] of during.entries()) {
        try {
          const r = await p;
          if (r.status !== 200) {
            result.failures++;
            result.notes.push(`cycle ${c}: a lookup in flight answered ${r.status}`);
          } else bump('in flight: answered 200');
          if (i % 2 && r.json.tokens !== 64) {
            result.failures++;
            result.notes.push(`cycle ${c}: node-a lost its local pages (${r.json.tokens} tokens)`);
          }
        } catch (e) {
          if (e instanceof Deadline) result.hangs++;
          else result.failures++;
          result.notes.push(`cycle ${c}: lookup in flight: ${(e as Error).message}`);
        }
      }
      // Down: both daemons notice, keep answering from local tiers and say why the cluster part is missing.
      if (!(await until(() => !a.registry!.stats().up && !b.registry!.stats().up, RECOVER_MS))) {
        result.failures++;
        result.notes.push(`cycle ${c}: the registries did not notice Redis was gone`);
      }
      try {
        const r = await lookup(b);
        if (r.status === 200 && r.json.cluster?.error) bump('down: answered with the cluster error');
        else {
          result.failures++;
          result.notes.push(`cycle ${c}: lookup while Redis was down answered ${r.status} ${JSON.stringify(r.json).slice(0, 200)}`);
        }
      } catch (e) {
        if (e instanceof Deadline) result.hangs++;
        else result.failures++;
        result.notes.push(`cycle ${c}: lookup while Redis was down: ${(e as Error).message}`);
      }
      redis = await redisOn(port);
      if (await until(foundFromB, RECOVER_MS)) bump('restarted: re-registered and found again');
      else {
        result.failures++;
        result.notes.push(`cycle ${c}: node-a's pages were not found from node-b within ${RECOVER_MS} ms of Redis coming back`);
      }
      if ((c + 1) % 5 === 0) options.log?.(`redis: ${c + 1}/${cycles} cycles, failures ${result.failures}, hangs ${result.hangs}`);
    }
  } catch (e) {
    result.failures++;
    result.notes.push(`setup: ${(e as Error).message}`);
  } finally {
    for (const s of servers) await withDeadline(s.close(), 30_000, 'daemon close').catch((e) => result.notes.push(String(e)));
    if (redis) await kill(redis);
    rmSync(dir, { recursive: true, force: true });
  }
  result.details = outcomes;
  return result;
}
