/**
 * Crash consistency: SIGKILL a process at random moments of heavy store, demote, write-through, load and delete
 * traffic (crash-child.ts), restart the hierarchy on what it left behind, and check:
 * - the index and the tiers open (a hang or an error counts);
 * - every page acknowledged durable in the child's journal (and not deleted since) loads byte-exact;
 * - no page is delivered whose bytes are not the page's (the child's own loads and the checker's);
 * - fs slots holding pages the index does not reference (leaked space) stay bounded: after open they must be 0,
 *   since reconcile adopts them into the index.
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HostArena, TransferEngine } from '@tiersync/native';
import { FsTier, type PageKey } from '@tiersync/tiers';
import { kvLayout, TierSync } from '@tiersync/core';
import { killCycle, seededRandom, type KillLoopOptions } from './child-process.js';
import { readJournal } from './journal.js';
import { Deadline, scenario, withDeadline, type ScenarioResult } from './report.js';
import { CRASH_LAYOUT, CRASH_PAGE_BYTES, PROMPTS, crashConfig, pageMatches, promptTokens } from './workload.js';

/** Defaults: 200 cycles (the benchmark; CI runs 20), kills 30..500 ms after the child is ready. */
export type CrashLoopOptions = KillLoopOptions;

const READY_MS = 60_000;
/** The fs tier's fingerprint as TierSync gives it (model / layout fingerprint), to open the tier on its own. */
const FINGERPRINT = `${crashConfig('/').model}/${kvLayout(CRASH_LAYOUT as never).fingerprint}`;
const VERIFY_MS = 60_000;
const CHECK_BATCH = 64;

export async function runCrashLoop(options: CrashLoopOptions = {}): Promise<ScenarioResult> {
  const cycles = options.cycles ?? 200;
  const minKill = options.minKillMs ?? 30;
  const maxKill = options.maxKillMs ?? 500;
  const log = options.log ?? (() => undefined);
  const result = scenario('crash: SIGKILL during store/demote/write-through', `tiersync bench reliability --scenarios crash --cycles ${cycles} --json`);
  const dir = options.dir ?? mkdtempSync(path.join(os.tmpdir(), 'tiersync-crash-'));
  const journal = path.join(dir, 'journal.log');
  const random = seededRandom(options.seed ?? 1);
  const engine = new TransferEngine({ threads: 1 });
  const totals = { acknowledged: 0, checked: 0, leakedSlotsMax: 0, orphanSlotsMax: 0, recoveredUnacknowledged: 0, integrityFailuresDetected: 0, childCorrupt: 0 };
  try {
    for (let cycle = 0; cycle < cycles; cycle++) {
      result.runs++;
      const args = [dir, journal, String(Math.floor(random() * 2 ** 31) + 1)];
      const outcome = await killCycle('crash-child', args, { readyMs: READY_MS, workMs: minKill + random() * (maxKill - minKill) });
      if (outcome.kind === 'not-started') {
        if (outcome.hang) result.hangs++;
        else result.failures++;
        result.notes.push(`cycle ${cycle}: child did not start: ${outcome.detail}`);
        continue;
      }
      if (outcome.kind === 'exited') {
        result.failures++;
        result.notes.push(`cycle ${cycle}: child exited by itself (${outcome.detail})`);
      } else {
        result.faults++;
      }
      const check = await verify(dir, journal, result, cycle, engine);
      totals.acknowledged = check.acknowledged;
      totals.checked += check.acknowledged;
      totals.leakedSlotsMax = Math.max(totals.leakedSlotsMax, check.leakedSlots);
      totals.orphanSlotsMax = Math.max(totals.orphanSlotsMax, check.orphanSlots);
      totals.recoveredUnacknowledged = check.recoveredUnacknowledged;
      totals.integrityFailuresDetected += check.integrityFailures;
      totals.childCorrupt = check.childCorrupt;
      if ((cycle + 1) % 10 === 0 || cycle + 1 === cycles) {
        log(`crash: ${cycle + 1}/${cycles} cycles, ${check.acknowledged} pages acknowledged durable, lost ${result.lostDurablePages}, corrupt ${result.corruptPagesServed}, leaked slots ${check.leakedSlots}`);
      }
    }
    // Disk held by the fs tier's slab files at the end: bounded by its configured capacity, whatever the kills did.
    result.details.slabBytes = slabBytes(dir);
  } finally {
    await engine.close();
    if (!options.dir) rmSync(dir, { recursive: true, force: true });
  }
  result.corruptPagesServed += totals.childCorrupt;
  result.details = {
    ...result.details,
    acknowledgedDurablePages: totals.acknowledged,
    durablePageChecks: totals.checked,
    recoveredUnacknowledgedPages: totals.recoveredUnacknowledged,
    orphanSlotsAfterKillMax: totals.orphanSlotsMax,
    leakedSlotsMax: totals.leakedSlotsMax,
    checksumFailuresDetected: totals.integrityFailuresDetected,
  };
  return result;
}

interface CycleCheck {
  acknowledged: number;
  /** fs slots holding a page the index does not reference, as the kill left them (reconcile adopts them). */
  orphanSlots: number;
  /** The same after the hierarchy opened: must be 0. */
  leakedSlots: number;
  recoveredUnacknowledged: number;
  integrityFailures: number;
  childCorrupt: number;
}

async function verify(dir: string, journal: string, result: ScenarioResult, cycle: number, engine: TransferEngine): Promise<CycleCheck> {
  const { durable, corrupt } = readJournal(journal);
  // The fs tier alone first: how many pages the kill left on disk (before the hierarchy's reconcile runs).
  const raw = new FsTier(crashConfig(dir).tiers[1]!.url, { engine, pageBytes: CRASH_PAGE_BYTES, fingerprint: FINGERPRINT });
  let onDisk = 0;
  try {
    await raw.open();
    onDisk = raw.stats().pages;
  } finally {
    await raw.close();
  }
  const ts = new TierSync(crashConfig(dir, { promoteOnHit: false }));
  const arena = HostArena.create({ capacity: CHECK_BATCH * CRASH_PAGE_BYTES });
  try {
    await withDeadline(ts.open(), VERIFY_MS, 'open after kill');
    const fsPages = ts.tierDriver('fs').stats().pages;
    const indexed = ts.stats().index.tiers['fs']?.ready ?? 0;
    const universe: PageKey[] = [];
    for (let p = 0; p < PROMPTS; p++) universe.push(...ts.keysOf(promptTokens(p)));
    const readable = new Set<PageKey>();
    for (let at = 0; at < universe.length; at += CHECK_BATCH) {
      const hit = ts.lookupKeys(universe.slice(at, at + CHECK_BATCH));
      if (!hit.pages.length) continue;
      const r = await withDeadline(
        ts.load(hit, hit.pages.map((_, i) => ({ arena, offset: i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES }))),
        VERIFY_MS,
        'load after kill',
      );
      const missing = new Set(r.missing);
      hit.pages.forEach((p, i) => {
        if (missing.has(i)) return;
        if (pageMatches(arena, i * CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, p.key)) readable.add(p.key);
        else {
          result.corruptPagesServed++;
          result.notes.push(`cycle ${cycle}: page ${p.key} was served with wrong bytes`);
        }
      });
    }
    for (const k of durable) {
      if (!readable.has(k)) {
        result.lostDurablePages++;
        if (result.notes.length < 50) result.notes.push(`cycle ${cycle}: page ${k} was acknowledged durable and is not readable`);
      }
    }
    const integrityFailures = ts.counters.integrityFailures;
    await withDeadline(ts.close(), VERIFY_MS, 'close after check');
    return { acknowledged: durable.size, orphanSlots: Math.max(0, onDisk - indexed), leakedSlots: Math.max(0, fsPages - indexed), recoveredUnacknowledged: [...readable].filter((k) => !durable.has(k)).length, integrityFailures, childCorrupt: corrupt };
  } catch (e) {
    if (e instanceof Deadline) result.hangs++;
    else result.failures++;
    result.notes.push(`cycle ${cycle}: check failed: ${(e as Error).message}`);
    await ts.close().catch(() => undefined);
    return { acknowledged: durable.size, orphanSlots: 0, leakedSlots: 0, recoveredUnacknowledged: 0, integrityFailures: 0, childCorrupt: corrupt };
  } finally {
    arena.close();
  }
}

/** Bytes of the fs tier's slab files (for the report: bounded by the configured capacity). */
export function slabBytes(dir: string): number {
  const fsDir = path.join(dir, 'fs');
  let total = 0;
  for (const f of readdirSync(fsDir)) if (f.endsWith('.tsd')) total += statSync(path.join(fsDir, f)).size;
  return total;
}
