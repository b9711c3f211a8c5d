/**
 * Index loss: the index is a record the tiers can rebuild. Each cycle SIGKILLs a writer (index-loss-child.ts) at
 * a random moment, deletes the index file it left, and reopens the hierarchy on the tiers alone. Checked:
 * - every page the writer journaled as acknowledged durable is found by keyed lookup, and loads byte-exact (the
 *   tiers verify each page's CRC32C as they read it);
 * - prefix lookups work: each prompt's lookup reaches at least as far as its journaled pages reach unbroken, and the
 *   adopted pages carry the parent and position they were stored with (read back from the rebuilt index file);
 * - at the end, a hierarchy opened twice in a row with `index: ':memory:'` still finds every journaled page (no
 *   reconcile deletes what an empty index does not know).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HostArena } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';
import { BlockIndex, TierSync } from '@tiersync/core';
import { killCycle, seededRandom, type KillLoopOptions } from './child-process.js';
import { indexLossConfig } from './index-loss-workload.js';
import { readJournal } from './journal.js';
import { Deadline, scenario, withDeadline, type ScenarioResult } from './report.js';
import { CRASH_PAGE_BYTES, PROMPTS, pageMatches, promptTokens } from './workload.js';

/** Kill, delete-the-index and reopen cycles. Defaults: 20 cycles, kills 50..600 ms after the writer is ready. */
export type IndexLossOptions = KillLoopOptions;

const READY_MS = 60_000;
const CHECK_MS = 60_000;
const CHECK_BATCH = 64;

interface Check {
  /** Journaled pages found and loaded byte-exact. */
  found: number;
  /** Pages the reopened index held (ready copies, all tiers) right after open: what reconcile adopted. */
  indexed: number;
}

export async function runIndexLoss(options: IndexLossOptions = {}): Promise<ScenarioResult> {
  const cycles = options.cycles ?? 20;
  const minKill = options.minKillMs ?? 50;
  const maxKill = options.maxKillMs ?? 600;
  const log = options.log ?? (() => undefined);
  const result = scenario('index-loss: SIGKILL a writer, delete the index, reopen on the tiers', `tiersync bench reliability --scenarios index-loss --cycles ${cycles} --json`);
  const dir = options.dir ?? mkdtempSync(path.join(os.tmpdir(), 'tiersync-index-loss-'));
  // The host tier's file: /dev/shm when the machine has it (what `shm=` is for), else beside the rest.
  const shm = path.join(shmFolder(), `tiersync-index-loss-${process.pid}-${path.basename(dir)}`);
  const journal = path.join(dir, 'journal.log');
  const indexFile = path.join(dir, 'index.sqlite');
  const random = seededRandom(options.seed ?? 1);
  const chain = chainOfPrompts();
  const totals = { acknowledged: 0, adoptedMax: 0, chainRecovered: 0, keyedOnly: 0, memoryReopens: 0 };
  try {
    for (let cycle = 0; cycle < cycles; cycle++) {
      result.runs++;
      const args = [dir, shm, journal, String(Math.floor(random() * 2 ** 31) + 1)];
      const outcome = await killCycle('index-loss-child', args, { readyMs: READY_MS, workMs: minKill + random() * (maxKill - minKill) });
      if (outcome.kind === 'not-started') {
        if (outcome.hang) result.hangs++;
        else result.failures++;
        result.notes.push(`cycle ${cycle}: writer did not start: ${outcome.detail}`);
        continue;
      }
      if (outcome.kind === 'exited') {
        result.failures++;
        result.notes.push(`cycle ${cycle}: writer exited by itself (${outcome.detail})`);
        continue;
      }
      result.faults++;
      // The index is lost: only the tiers know what was stored.
      for (const suffix of ['', '-wal', '-shm']) rmSync(indexFile + suffix, { force: true });
      result.faults++;
      const durable = readJournal(journal).durable;
      totals.acknowledged = durable.size;
      const c = await check(indexLossConfig(dir, shm), durable, result, `cycle ${cycle}`);
      if (c) totals.adoptedMax = Math.max(totals.adoptedMax, c.indexed);
      // Parents and positions as stored: read back from the index file the reopened hierarchy rebuilt.
      const recovered = chainCheck(indexFile, durable, chain, result, `cycle ${cycle}`);
      totals.chainRecovered = recovered.chain;
      totals.keyedOnly = recovered.keyed;
      if ((cycle + 1) % 5 === 0 || cycle + 1 === cycles) {
        log(`index-loss: ${cycle + 1}/${cycles} cycles, ${durable.size} pages acknowledged durable, lost ${result.lostDurablePages}, corrupt ${result.corruptPagesServed}`);
      }
    }
    // The library's default index: in memory. Opening twice in a row must keep (and find) every page both times.
    const durable = readJournal(journal).durable;
    for (let i = 0; i < 2; i++) {
      result.runs++;
      if (await check(indexLossConfig(dir, shm, ':memory:'), durable, result, `':memory:' reopen ${i + 1}`)) totals.memoryReopens++;
    }
  } finally {
    rmSync(shm, { force: true });
    if (!options.dir) rmSync(dir, { recursive: true, force: true });
  }
  result.details = {
    acknowledgedDurablePages: totals.acknowledged,
    pagesIndexedAfterReopenMax: totals.adoptedMax,
    pagesWithRecoveredParentAndPosition: totals.chainRecovered,
    pagesAdoptedWithoutChain: totals.keyedOnly,
    memoryIndexReopens: totals.memoryReopens,
  };
  return result;
}

/** Opens the hierarchy, finds and loads every journaled page, checks prefix lookups; undefined when it broke. */
async function check(config: ReturnType<typeof indexLossConfig>, durable: ReadonlySet<PageKey>, result: ScenarioResult, what: string): Promise<Check | undefined> {
  const ts = new TierSync(config);
  const arena = HostArena.create({ capacity: CHECK_BATCH * CRASH_PAGE_BYTES });
  try {
    await withDeadline(ts.open(), CHECK_MS, `${what}: open`);
    const stats = ts.stats().index.tiers;
    const indexed = Object.values(stats).reduce((n, t) => n + (t?.ready ?? 0), 0);
    const keys = [...durable];
    let found = 0;
    for (let at = 0; at < keys.length; at += CHECK_BATCH) {
      const part = keys.slice(at, at + CHECK_BATCH);
      const hit = ts.lookupKeys(part);
      const hitKeys = new Set(hit.pages.map((p) => p.key));
      for (const k of part) if (!hitKeys.has(k)) lost(result, `${what}: page ${k} was acknowledged durable and is not found by lookup`);
      if (!hit.pages.length) continue;
      const r = await withDeadline(ts.load(hit, hit.pages.map((_, i) => ({ arena, offset: i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES }))), CHECK_MS, `${what}: load`);
      const missing = new Set(r.missing);
      hit.pages.forEach((p, i) => {
        if (missing.has(i)) lost(result, `${what}: page ${p.key} was found but did not load`);
        else if (!pageMatches(arena, i * CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, p.key)) {
          result.corruptPagesServed++;
          result.notes.push(`${what}: page ${p.key} was served with wrong bytes`);
        } else found++;
      });
    }
    // Prefix lookups: as far as the journaled pages of each prompt reach without a gap.
    for (let p = 0; p < PROMPTS; p++) {
      const tokens = promptTokens(p);
      const promptKeys = ts.keysOf(tokens);
      let reach = 0;
      while (reach < promptKeys.length && durable.has(promptKeys[reach]!)) reach++;
      const got = ts.lookup(tokens).pages.length;
      if (got < reach) {
        result.failures++;
        result.notes.push(`${what}: prompt ${p}: prefix lookup found ${got} page(s), ${reach} were acknowledged durable in a row`);
      }
    }
    await withDeadline(ts.close(), CHECK_MS, `${what}: close`);
    return { found, indexed };
  } catch (e) {
    if (e instanceof Deadline) result.hangs++;
    else result.failures++;
    result.notes.push(`${what}: check failed: ${(e as Error).message}`);
    await ts.close().catch(() => undefined);
    return undefined;
  } finally {
    arena.close();
  }
}

function lost(result: ScenarioResult, note: string): void {
  result.lostDurablePages++;
  if (result.notes.length < 50) result.notes.push(note);
}

/** Every prompt page's expected parent and position (prompts share no prefix, so each key has one). */
function chainOfPrompts(): Map<PageKey, { parent: PageKey | null; position: number }> {
  const ts = new TierSync(indexLossConfig('/nonexistent', '/nonexistent'));
  const out = new Map<PageKey, { parent: PageKey | null; position: number }>();
  for (let p = 0; p < PROMPTS; p++) {
    const keys = ts.keysOf(promptTokens(p));
    keys.forEach((k, i) => out.set(k, { parent: i === 0 ? null : keys[i - 1]!, position: i }));
  }
  return out;
}

/**
 * Reads the rebuilt index file and compares each journaled page's parent and position with how it was stored.
 * A page adopted without them (parent null, position 0 where the chain says otherwise: the tier holds no meta for
 * it) is counted apart; any other difference is a failure.
 */
function chainCheck(file: string, durable: ReadonlySet<PageKey>, chain: ReadonlyMap<PageKey, { parent: PageKey | null; position: number }>, result: ScenarioResult, what: string): { chain: number; keyed: number } {
  const index = BlockIndex.open({ path: file, tiers: [{ name: 'host', kind: 'host', persistent: true }, { name: 'fs', kind: 'fs', persistent: true }] });
  let ok = 0;
  let keyed = 0;
  try {
    const keys = [...durable];
    const records = index.pages(keys);
    records.forEach((r, i) => {
      const want = chain.get(keys[i]!);
      if (!r || !want) return; // not found: already counted as lost by the lookup check
      if (r.parent === want.parent && r.position === want.position) ok++;
      else if (r.parent === null && r.position === 0) keyed++;
      else {
        result.failures++;
        result.notes.push(`${what}: page ${keys[i]} came back with parent ${r.parent} position ${r.position}, stored with ${want.parent} / ${want.position}`);
      }
    });
  } finally {
    index.close();
  }
  return { chain: ok, keyed };
}

function shmFolder(): string {
  return existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
}
