/**
 * The writer the index-loss scenario kills: stores prompts through a hierarchy whose tiers are both persistent (a
 * host tier on a /dev/shm file, over an fs tier by write-through), and journals every page acknowledged durable:
 * store() resolved and a lookup lists a persistent tier for it. Runs until SIGKILL. No deletes: every journaled page
 * must be found again, even after the parent deletes the index file.
 *
 * Usage: index-loss-child DIR SHM JOURNAL SEED. Prints `ready` on stdout once the hierarchy is open.
 */
import { fsyncSync, openSync, writeSync } from 'node:fs';
import { HostArena } from '@tiersync/native';
import { TierSync } from '@tiersync/core';
import { indexLossConfig } from './index-loss-workload.js';
import { CRASH_PAGE_BYTES, PROMPTS, PROMPT_PAGES, fillPage, promptTokens } from './workload.js';
import { seededRandom } from './child-process.js';

const [dir, shm, journalPath, seedText] = process.argv.slice(2);
if (!dir || !shm || !journalPath) {
  process.stderr.write('usage: index-loss-child DIR SHM JOURNAL SEED\n');
  process.exit(2);
}
// The traffic differs per cycle but is reproducible from the seed.
const uniform = seededRandom(Number(seedText ?? 1));
const random = (n: number): number => Math.floor(uniform() * n);

const journal = openSync(journalPath, 'a');
const ts = new TierSync(indexLossConfig(dir, shm));
await ts.open();
const src = HostArena.create({ capacity: PROMPT_PAGES * CRASH_PAGE_BYTES });
process.stdout.write('ready\n');

for (;;) {
  const tokens = promptTokens(random(PROMPTS), 1 + random(PROMPT_PAGES));
  const keys = ts.keysOf(tokens);
  keys.forEach((k, i) => fillPage(src, i * CRASH_PAGE_BYTES, CRASH_PAGE_BYTES, k));
  await ts.store(tokens, keys.map((_, i) => ({ arena: src, offset: i * CRASH_PAGE_BYTES, length: CRASH_PAGE_BYTES })));
  const durable = ts.lookupKeys(keys).pages.filter((p) => p.tiers.length > 0).map((p) => `durable ${p.key}`);
  if (durable.length) {
    writeSync(journal, durable.join('\n') + '\n');
    fsyncSync(journal);
  }
}
