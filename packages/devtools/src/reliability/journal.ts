/**
 * The append-only journal a killed child writes (one fsynced line per fact: `durable KEY`, `deleting KEY`,
 * `corrupt KEY`) and the parent reads after each kill.
 */
import { readFileSync, truncateSync } from 'node:fs';
import type { PageKey } from '@tiersync/tiers';

/**
 * Reads the journal: pages acknowledged durable and not deleted since, and how many pages the child saw served
 * corrupt. Only whole lines count: the last may be cut short by the kill (its write was never acknowledged). That
 * torn line is cut off the file too, since the next child appends to it and would otherwise extend it (a
 * `durable KEY` cut inside the key, then `deleting ...`, read as one line).
 */
export function readJournal(file: string): { durable: Set<PageKey>; corrupt: number } {
  const durable = new Set<PageKey>();
  let corrupt = 0;
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return { durable, corrupt };
  }
  const lines = text.split('\n');
  const torn = lines.pop()!;
  if (torn) truncateSync(file, Buffer.byteLength(text) - Buffer.byteLength(torn));
  for (const line of lines) {
    const [what, key] = line.split(' ');
    if (!key) continue;
    if (what === 'durable') durable.add(key);
    else if (what === 'deleting') durable.delete(key);
    else if (what === 'corrupt') corrupt++;
  }
  return { durable, corrupt };
}
