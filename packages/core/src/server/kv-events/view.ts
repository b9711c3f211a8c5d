/**
 * Which page is on which tier, as the event stream has told it: the publisher's own record, updated by the same
 * tier changes it publishes, so a snapshot is exactly the state after the last published batch.
 *
 * Subscribers see `(block hash, medium)` pairs. Two tiers may share a medium (an object and a peer tier are both
 * REMOTE): a page is announced on a medium when the first of its tiers gains it, and removed when the last one loses
 * it, so a subscriber's view stays exact whatever tiers map to which medium.
 */
import type { PageKey } from '@tiersync/tiers';

export interface ViewTier {
  name: string;
  medium: string;
}

export class TierView {
  readonly #tiers = new Map<string, { medium: string; keys: Set<PageKey> }>();
  /** medium -> key -> how many of that medium's tiers hold the key. */
  readonly #media = new Map<string, Map<PageKey, number>>();

  constructor(tiers: readonly ViewTier[]) {
    for (const t of tiers) {
      this.#tiers.set(t.name, { medium: t.medium, keys: new Set() });
      if (!this.#media.has(t.medium)) this.#media.set(t.medium, new Map());
    }
  }

  /** The medium of tier `tier`, or undefined for a tier this view does not know. */
  mediumOf(tier: string): string | undefined {
    return this.#tiers.get(tier)?.medium;
  }

  /** Records `keys` on `tier`. Returns the keys now on the tier's medium that were not before (in input order). */
  add(tier: string, keys: readonly PageKey[]): PageKey[] {
    const t = this.#tiers.get(tier);
    if (!t) return [];
    const counts = this.#media.get(t.medium)!;
    const fresh: PageKey[] = [];
    for (const k of keys) {
      if (t.keys.has(k)) continue;
      t.keys.add(k);
      const n = counts.get(k) ?? 0;
      counts.set(k, n + 1);
      if (n === 0) fresh.push(k);
    }
    return fresh;
  }

  /** Forgets `keys` on `tier`. Returns the keys no tier of its medium holds any more. Unknown keys are ignored. */
  remove(tier: string, keys: readonly PageKey[]): PageKey[] {
    const t = this.#tiers.get(tier);
    if (!t) return [];
    const counts = this.#media.get(t.medium)!;
    const gone: PageKey[] = [];
    for (const k of keys) {
      if (!t.keys.delete(k)) continue;
      const n = counts.get(k)!;
      if (n <= 1) {
        counts.delete(k);
        gone.push(k);
      } else counts.set(k, n - 1);
    }
    return gone;
  }

  /** Every (medium, keys) pair held now, media in tier order. */
  snapshot(): Array<{ medium: string; keys: PageKey[] }> {
    return [...this.#media].map(([medium, counts]) => ({ medium, keys: [...counts.keys()] }));
  }

  /** Pages on each tier now. */
  counts(): Record<string, number> {
    return Object.fromEntries([...this.#tiers].map(([name, t]) => [name, t.keys.size]));
  }
}
