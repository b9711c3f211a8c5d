/**
 * Network faults on the peer tier: another "host" (peer-host-child.ts) in its own network namespace, linked by a
 * veth pair shaped to 40 Mbit/s (tc netem) so that transfers last long enough to be cut in the middle. Each trial
 * starts a load whose pages live on that host, then cuts the link (`ip link set DEV down`) or SIGKILLs the host
 * process at a random moment. The load must settle by its deadline with its pages delivered byte-exact, reported
 * missing (the caller recomputes them) or a typed error; afterwards, with the link back up or the host restarted,
 * a retry must succeed. Needs root and iproute2; skipped otherwise.
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import { HostArena, TierSyncError } from '@tiersync/native';
import type { PageKey, TierDriver } from '@tiersync/tiers';
import { TierSync } from '@tiersync/core';
import { killAndWait, seededRandom, spawnModule, waitForLine } from './child-process.js';
import { Deadline, scenario, withDeadline, type ScenarioResult } from './report.js';
import { CRASH_LAYOUT, CRASH_PAGE_BYTES, PROMPT_PAGES, fillPage, pageMatches, promptTokens } from './workload.js';

export interface PeerFaultOptions {
  /** Trials (alternating link cuts and host kills). Default 40. */
  trials?: number;
  seed?: number;
  log?: (line: string) => void;
}

const SECRET = 'reliability-peer-secret';
const PORT = 7411;
/** Deadline of each peer request (PeerTier timeoutMs): how long a cut link can hold a call. */
const PEER_TIMEOUT_MS = 2_000;
const LOAD_DEADLINE_MS = 20_000;
const PROMPTS = 12;

export function canUseNetns(): boolean {
  if (process.getuid?.() !== 0) return false;
  try {
    execFileSync('ip', ['netns', 'list'], { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
}

export async function runPeerFaults(options: PeerFaultOptions = {}): Promise<ScenarioResult> {
  const trials = options.trials ?? 40;
  const log = options.log ?? (() => undefined);
  const result = scenario('peer link cut / peer host killed mid-transfer (netns + veth)', `tiersync bench reliability --scenarios peer --operations ${trials} --json`);
  if (!canUseNetns()) {
    result.details.skipped = 'needs root and iproute2 (network namespaces)';
    return result;
  }
  const tag = process.pid % 1000;
  const ns = `tsrel${tag}`;
  const outside = `trh${tag}`;
  const inside = `trn${tag}`;
  const net = `10.${200 + (tag % 50)}.${tag % 250}`;
  const addr = `${net}.2`;
  const ip = (...a: string[]) => execFileSync('ip', a, { stdio: 'pipe' });
  const random = seededRandom(options.seed ?? 5);
  let host: ChildProcess | undefined;
  const startHost = async () => {
    host = spawnModule('peer-host-child', [addr, String(PORT), SECRET, String(CRASH_PAGE_BYTES)], ['ip', 'netns', 'exec', ns]);
    host.stderr!.resume();
    await waitForLine(host, `listening ${PORT}`, 60_000);
    host.stdout!.resume();
  };
  const outcomes: Record<string, number> = {};
  const bump = (k: string) => (outcomes[k] = (outcomes[k] ?? 0) + 1);
  const ts = new TierSync({
    model: 'reliability-peer@1',
    layout: CRASH_LAYOUT,
    tiers: [
      { url: `host://?capacity=${16 * CRASH_PAGE_BYTES}`, highWatermark: 1, lowWatermark: 0.75 },
      { url: `peer://${addr}:${PORT}?secret=${SECRET}&timeoutMs=${PEER_TIMEOUT_MS}&streams=2`, writeThrough: true },
    ],
    promoteOnHit: false,
    threads: 2,
  });
  const arena = HostArena.create({ capacity: 2 * PROMPT_PAGES * CRASH_PAGE_BYTES });
  const into = Array.from({ length: PROMPT_PAGES }, (_, i) => ({ arena, offset: (PROMPT_PAGES + i) * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES }));
  let opened = false;
  try {
    ip('netns', 'add', ns);
    ip('link', 'add', outside, 'type', 'veth', 'peer', 'name', inside);
    ip('link', 'set', inside, 'netns', ns);
    ip('addr', 'add', `${net}.1/24`, 'dev', outside);
    ip('link', 'set', outside, 'up');
    ip('-n', ns, 'addr', 'add', `${addr}/24`, 'dev', inside);
    ip('-n', ns, 'link', 'set', inside, 'up');
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    try {
      // Pages flow from the other host to this one on its side of the link: shape that direction.
      execFileSync('ip', ['netns', 'exec', ns, 'tc', 'qdisc', 'add', 'dev', inside, 'root', 'netem', 'rate', '40mbit'], { stdio: 'pipe' });
      result.details.shaping = '40mbit';
    } catch {
      result.details.shaping = 'none (netem unavailable)';
    }
    await startHost();
    await ts.open();
    opened = true;
    const peer = ts.tierDriver('peer');
    /** Puts prompt p's pages on the peer host (write-through), evicting them from the small host tier. */
    const fill = async (p: number) => {
      const tokens = promptTokens(p);
      const keys = ts.keysOf(tokens);
      keys.forEach((k, i) => fillPage(arena, i * CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, k));
      await withDeadline(ts.store(tokens, keys.map((_, i) => ({ arena, offset: i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES }))), LOAD_DEADLINE_MS, 'store');
      await withDeadline(ts.flush(), LOAD_DEADLINE_MS, 'flush');
    };
    for (let p = 0; p < PROMPTS; p++) await fill(p);
    for (let t = 0; t < trials; t++) {
      result.runs++;
      const mode = t % 2 === 0 ? 'cut' : 'kill';
      const p = Math.floor(random() * PROMPTS);
      const hit = ts.lookup(promptTokens(p));
      const loading = ts.load(hit, into.slice(0, hit.pages.length));
      // Awaited below, after the fault; mark it handled now so a rejection meanwhile is not reported as unhandled.
      loading.catch(() => undefined);
      // 12 pages of 16 KiB take ~40 ms at 40 Mbit/s: strike within that window.
      await new Promise((r) => setTimeout(r, random() * 40));
      if (mode === 'cut') ip('link', 'set', outside, 'down');
      else await killAndWait(host!);
      result.faults++;
      try {
        const r = await withDeadline(loading, LOAD_DEADLINE_MS, `load during a ${mode}`);
        const missing = new Set(r.missing);
        hit.pages.forEach((pg, i) => {
          if (missing.has(i) || pageMatches(arena, into[i]!.offset, CRASH_PAGE_BYTES, pg.key)) return;
          result.corruptPagesServed++;
          result.notes.push(`trial ${t}: page ${pg.key} served with wrong bytes`);
        });
        bump(r.missing.length ? `${mode}: fell back to recompute` : `${mode}: load completed`);
      } catch (e) {
        if (e instanceof Deadline) {
          result.hangs++;
          result.notes.push(`trial ${t}: ${e.message}`);
        } else if (e instanceof TierSyncError) bump(`${mode}: typed ${e.code}`);
        else {
          result.failures++;
          result.notes.push(`trial ${t}: untyped error ${String(e)}`);
        }
      }
      // Heal, then a retry through the peer tier must succeed within a few attempts.
      if (mode === 'cut') ip('link', 'set', outside, 'up');
      else await startHost();
      const recovered = await retryThroughPeer(peer, arena, t);
      if (recovered === 0) {
        result.failures++;
        result.details.unrecovered = Number(result.details.unrecovered ?? 0) + 1;
        result.notes.push(`trial ${t}: the peer tier did not recover after the ${mode === 'cut' ? 'link came back' : 'host restarted'} (5 attempts, 1 s apart)`);
      } else bump(`${mode}: retry succeeded at attempt ${recovered}`);
      if (mode === 'kill') for (let q = 0; q < PROMPTS; q++) await fill(q).catch(() => undefined);
      if ((t + 1) % 10 === 0) log(`peer faults: ${t + 1}/${trials} trials, hangs ${result.hangs}, failures ${result.failures}`);
    }
  } catch (e) {
    result.failures++;
    result.notes.push(`setup: ${(e as Error).message.slice(0, 300)}`);
  } finally {
    if (opened) await withDeadline(ts.close(), 30_000, 'close').catch((e) => result.notes.push(String(e)));
    arena.close();
    if (host) await killAndWait(host).catch(() => undefined);
    try {
      ip('link', 'del', outside);
    } catch {}
    try {
      ip('netns', 'del', ns);
    } catch {}
  }
  result.details = { ...result.details, ...outcomes };
  return result;
}

/** Writes one page straight to the peer driver and reads it back; returns the attempt that succeeded (0: none). */
async function retryThroughPeer(peer: TierDriver, arena: HostArena, trial: number): Promise<number> {
  const key: PageKey = `feedface${String(trial).padStart(8, '0')}${Date.now().toString(16).padStart(16, '0')}`;
  fillPage(arena, 0, CRASH_PAGE_BYTES, key);
  for (let attempt = 1; attempt <= 5; attempt++) {
    try {
      await withDeadline(peer.write([{ key, source: { arena, offset: 0, length: CRASH_PAGE_BYTES } }]), LOAD_DEADLINE_MS, 'peer write');
      const [o] = await withDeadline(peer.read([{ key, into: { arena, offset: CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES } }]), LOAD_DEADLINE_MS, 'peer read');
      if (o?.status === 'hit' && pageMatches(arena, CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, key)) return attempt;
    } catch {
      // a typed error while the connection re-forms: try again
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  return 0;
}
