/**
 * The process the crash scenario kills: heavy store, demote, write-through, load and delete traffic on the crash
 * workload's hierarchy, until SIGKILL. It records in an append-only journal, fsynced before anything depends on
 * it:
 *
 * - `durable KEY`: the page is acknowledged durable. The TierSync API's meaning of that: store() has resolved and
 *   a lookup lists a persistent tier (fs) among the page's tiers. By then the fs driver has fdatasync'ed the page's
 *   data and then its slot header, and the index commit that made the copy ready is in the SQLite WAL
 *   (synchronous=normal survives a process kill; power loss needs index.synchronous='full').
 * - `deleting KEY`: written before deleteKeys() is called; from there on the page may legitimately be gone.
 * - `corrupt KEY`: a load of this process delivered bytes that are not the page's (must never happen).
 *
 * Usage: crash-child DIR JOURNAL SEED. Prints `ready` on stdout once the hierarchy is open.
 */
import { fsyncSync, openSync, writeSync } from 'node:fs';
import { HostArena } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';
import { TierSync } from '@tiersync/core';
import { CRASH_PAGE_BYTES, PROMPTS, PROMPT_PAGES, crashConfig, fillPage, pageMatches, promptTokens } from './workload.js';
import { seededRandom } from './child-process.js';

const [dir, journalPath, seedText] = process.argv.slice(2);
if (!dir || !journalPath) {
  process.stderr.write('usage: crash-child DIR JOURNAL SEED\n');
  process.exit(2);
}

// The traffic differs per cycle but is reproducible from the seed.
const uniform = seededRandom(Number(seedText ?? 1));
const random = (n: number): number => Math.floor(uniform() * n);

const journal = openSync(journalPath, 'a');
const record = (lines: string[]): void => {
  if (!lines.length) return;
  writeSync(journal, lines.join('\n') + '\n');
  fsyncSync(journal);
};

const ts = new TierSync(crashConfig(dir));
await ts.open();
/** Operations in flight at once; each owns one prompt-sized region of the source and destination arenas. */
const PARALLEL = 3;
const REGION = PROMPT_PAGES * CRASH_PAGE_BYTES;
const src = HostArena.create({ capacity: PARALLEL * REGION });
const dst = HostArena.create({ capacity: PARALLEL * REGION });
const freeRegions = Array.from({ length: PARALLEL }, (_, i) => i * REGION);
/** Stored and not yet seen on fs; keys being deleted are never acknowledged until their delete has finished. */
const unacknowledged = new Set<PageKey>();
const deleting = new Set<PageKey>();
process.stdout.write('ready\n');

async function storeOne(base: number): Promise<void> {
  const p = random(PROMPTS);
  const tokens = promptTokens(p, 2 + random(PROMPT_PAGES - 1));
  const keys = ts.keysOf(tokens);
  keys.forEach((k, i) => fillPage(src, base + i * CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, k));
  await ts.store(tokens, keys.map((_, i) => ({ arena: src, offset: base + i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES })));
  for (const k of keys) if (!deleting.has(k)) unacknowledged.add(k);
}

async function loadOne(base: number): Promise<void> {
  const hit = ts.lookup(promptTokens(random(PROMPTS)));
  if (!hit.pages.length) return;
  const r = await ts.load(hit, hit.pages.map((_, i) => ({ arena: dst, offset: base + i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES })));
  const gone = new Set(r.missing);
  const bad = hit.pages.filter((p, i) => !gone.has(i) && !pageMatches(dst, base + i * CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, p.key));
  record(bad.map((p) => `corrupt ${p.key}`));
}

/** Journals the pages that now have a ready fs copy (synchronously: no delete can start in between). */
function acknowledge(): void {
  const keys = [...unacknowledged].filter((k) => !deleting.has(k));
  if (!keys.length) return;
  const found = ts.lookupKeys(keys);
  const durable = found.pages.filter((p) => p.tiers.includes('fs')).map((p) => p.key);
  for (const k of durable) unacknowledged.delete(k);
  record(durable.map((k) => `durable ${k}`));
}

async function deleteOne(): Promise<void> {
  const keys = ts.keysOf(promptTokens(random(PROMPTS))).slice(-1 - random(3));
  for (const k of keys) {
    deleting.add(k);
    unacknowledged.delete(k);
  }
  record(keys.map((k) => `deleting ${k}`));
  try {
    await ts.deleteKeys(keys);
  } finally {
    for (const k of keys) deleting.delete(k);
  }
}

// Stores, loads and deletes overlap (up to three operations in flight); every few operations the acknowledged set
// is journaled. Runs until killed.
const inFlight = new Set<Promise<void>>();
for (let op = 0; ; op++) {
  while (inFlight.size >= PARALLEL) await Promise.race(inFlight);
  const base = freeRegions.pop()!;
  const roll = random(100);
  const task = roll < 60 ? storeOne(base) : roll < 95 ? loadOne(base) : deleteOne();
  const tracked: Promise<void> = task.finally(() => {
    inFlight.delete(tracked);
    freeRegions.push(base);
  });
  inFlight.add(tracked);
  if (op % 4 === 0) acknowledge();
}
