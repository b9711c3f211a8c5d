/**
 * A binary min-heap of (priority, key, version) entries with lazy deletion: an entry is stale when its version no
 * longer matches the owner's record of the key, and callers skip stale entries as they pop.
 */
export interface HeapEntry<K> {
  readonly priority: number;
  readonly key: K;
  readonly version: number;
}

/**
 * Min-heap on `priority`; ties pop in push order, or the reverse with `lastFirst` (a sequence number breaks them),
 * so replays are deterministic.
 */
export class LazyHeap<K> {
  #items: (HeapEntry<K> & { seq: number })[] = [];
  #seq = 0;
  readonly #sign: number;

  constructor(lastFirst = false) {
    this.#sign = lastFirst ? -1 : 1;
  }

  get size(): number {
    return this.#items.length;
  }

  push(priority: number, key: K, version: number): void {
    const items = this.#items;
    items.push({ priority, key, version, seq: this.#seq++ });
    let i = items.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.#less(i, p)) break;
      [items[i], items[p]] = [items[p]!, items[i]!];
      i = p;
    }
  }

  peek(): HeapEntry<K> | undefined {
    return this.#items[0];
  }

  pop(): HeapEntry<K> | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last !== undefined) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < items.length && this.#less(l, m)) m = l;
        if (r < items.length && this.#less(r, m)) m = r;
        if (m === i) break;
        [items[i], items[m]] = [items[m]!, items[i]!];
        i = m;
      }
    }
    return top;
  }

  /** Entries in no particular order (for peeks). */
  entries(): readonly HeapEntry<K>[] {
    return this.#items;
  }

  clear(): void {
    this.#items = [];
  }

  #less(a: number, b: number): boolean {
    const x = this.#items[a]!;
    const y = this.#items[b]!;
    return x.priority < y.priority || (x.priority === y.priority && this.#sign * (x.seq - y.seq) < 0);
  }
}
