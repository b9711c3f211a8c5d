/**
 * The chain bookkeeping both prefix wrappers keep (`prefix-aware:` and `prefix-hold:`): each resident page's parent,
 * resident children by parent, the pages stranded by a lost ancestor, the caller's pins, and the pass-through of the
 * inner policy's reads. The wrappers differ in how they keep ancestors out of the victim order and how they choose
 * victims; that is theirs.
 */
import { checkKey, describe } from '../internal/validate.js';
import type { CapacityUnit, EvictionPolicy, PageHint, PolicyKey } from '../types.js';

/** Chain bookkeeping over an inner policy; subclasses decide victims. */
export abstract class ChainTreePolicy<K extends PolicyKey = PolicyKey> implements EvictionPolicy<K> {
  readonly name: string;
  /** The policy the wrapper makes chain-aware. */
  readonly inner: EvictionPolicy<K>;
  /** Parent of each resident page that named one (kept for a stranded page whose parent is gone). */
  protected readonly parents = new Map<K, K>();
  /** Resident children by parent key, in insertion order (the parent may be absent: its children are stranded). */
  protected readonly children = new Map<K, Set<K>>();
  /** Resident pages whose chain is broken, in the order they were stranded. */
  protected readonly stranded = new Set<K>();
  /** The caller's pin counts. */
  protected readonly pins = new Map<K, number>();
  #pinnedUsed = 0;

  /**
   * @param inner the policy to make chain-aware (fresh: the wrapper must see every call)
   * @param kind the wrapper's name prefix (`prefix-aware`, `prefix-hold`)
   */
  constructor(inner: EvictionPolicy<K>, kind: string) {
    if (typeof inner !== 'object' || inner === null || typeof inner.insert !== 'function') {
      throw new TypeError(`inner must be an EvictionPolicy, got ${describe(inner)}`);
    }
    this.inner = inner;
    this.name = `${kind}:${inner.name}`;
  }

  get capacity(): number {
    return this.inner.capacity;
  }
  get unit(): CapacityUnit {
    return this.inner.unit;
  }
  get used(): number {
    return this.inner.used;
  }
  get usedBytes(): number {
    return this.inner.usedBytes;
  }
  get count(): number {
    return this.inner.count;
  }
  get pinnedCount(): number {
    return this.pins.size;
  }
  get pinnedUsed(): number {
    return this.#pinnedUsed;
  }
  /** Resident pages whose chain is broken (dropped before any other victim). */
  get strandedCount(): number {
    return this.stranded.size;
  }

  /** The parent a resident page was stored with, `undefined` for a root or an absent page. */
  parentOf(key: K): K | undefined {
    return this.parents.get(key);
  }

  /** Whether a resident page is stranded (an ancestor is gone). */
  isStranded(key: K): boolean {
    return this.stranded.has(key);
  }

  has(key: K): boolean {
    return this.inner.has(key);
  }
  sizeOf(key: K): number | undefined {
    return this.inner.sizeOf(key);
  }
  keys(): IterableIterator<K> {
    return this.inner.keys();
  }
  access(key: K): boolean {
    return this.inner.access(key);
  }

  canAdmit(key: K, size: number): boolean {
    return this.inner.canAdmit(key, size);
  }

  abstract insert(key: K, size: number, hint?: PageHint<K>): K[];
  abstract evict(): K | undefined;
  abstract peekVictims(count: number): K[];
  abstract remove(key: K): boolean;

  /** Records a parent named after the page was stored (the first one named counts); passes the hint on. */
  hint(key: K, hint: PageHint<K>): boolean {
    if (!this.inner.has(key)) return false;
    const parent = hint.parent;
    if (parent !== undefined && parent !== null && parent !== key && !this.parents.has(key)) {
      checkKey(parent, 'hint.parent');
      this.link(key, parent);
      this.onLateLink(key, parent);
      if (!this.inner.has(parent) || this.stranded.has(parent)) {
        this.stranded.add(key);
        this.mark(key, true);
      }
    }
    this.inner.hint?.(key, hint);
    return true;
  }

  pin(key: K): number {
    if (this.inner.pin(key) === 0) return 0;
    const n = (this.pins.get(key) ?? 0) + 1;
    this.pins.set(key, n);
    if (n === 1) {
      this.#pinnedUsed += this.#cost(key);
      this.onFirstPin(key);
    }
    return n;
  }

  unpin(key: K): number {
    const n = this.pins.get(key);
    if (n === undefined) {
      checkKey(key);
      return 0;
    }
    this.inner.unpin(key);
    if (n > 1) this.pins.set(key, n - 1);
    else {
      this.pins.delete(key);
      this.#pinnedUsed -= this.#cost(key);
      this.onLastUnpin(key);
    }
    return n - 1;
  }

  pinCount(key: K): number {
    checkKey(key);
    return this.pins.get(key) ?? 0;
  }

  reset(): void {
    this.inner.reset();
    this.parents.clear();
    this.children.clear();
    this.stranded.clear();
    this.pins.clear();
    this.#pinnedUsed = 0;
    this.onReset();
  }

  // ---- for subclasses --------------------------------------------------------------------------------------------

  /** A page the caller had not pinned is pinned now. */
  protected onFirstPin(_key: K): void {}

  /** The caller's last pin of a page is gone. */
  protected onLastUnpin(_key: K): void {}

  /** `hint` linked a resident page to `parent` (before its stranding is settled). */
  protected onLateLink(_key: K, _parent: K): void {}

  /** The wrapper's own state is cleared (the shared state already is). */
  protected onReset(): void {}

  /** Throws the errors an insert of a resident key, or of one that cannot be admitted, gets. */
  protected checkInsert(key: K, size: number): void {
    if (this.inner.has(key)) throw new RangeError(`key ${describe(key)} is already resident`);
    if (!this.inner.canAdmit(key, size)) {
      throw new RangeError(`size: an object of ${size} bytes cannot be admitted now (check canAdmit first)`);
    }
  }

  /** Drops the caller's pins of a resident page about to be removed; whether it had any. */
  protected dropPins(key: K): boolean {
    if (!this.pins.delete(key)) return false;
    this.#pinnedUsed -= this.#cost(key);
    return true;
  }

  /** Records `parent` as the parent of `child`. */
  protected link(child: K, parent: K): void {
    this.parents.set(child, parent);
    let kids = this.children.get(parent);
    if (kids === undefined) this.children.set(parent, (kids = new Set()));
    kids.add(child);
  }

  /** Unlinks a page that left from its parent; answers the parent when this was its last resident child. */
  protected unlink(key: K): K | undefined {
    const parent = this.parents.get(key);
    if (parent === undefined) return undefined;
    this.parents.delete(key);
    const siblings = this.children.get(parent)!;
    siblings.delete(key);
    if (siblings.size > 0) return undefined;
    this.children.delete(parent);
    return parent;
  }

  /** Marks (or clears) the stranding of every resident descendant of `key`. */
  protected mark(key: K, stranded: boolean): void {
    const stack = [key];
    while (stack.length) {
      const kids = this.children.get(stack.pop()!);
      if (kids === undefined) continue;
      for (const c of kids) {
        if (stranded ? this.stranded.has(c) : !this.stranded.has(c)) continue;
        if (stranded) this.stranded.add(c);
        else this.stranded.delete(c);
        stack.push(c);
      }
    }
  }

  #cost(key: K): number {
    return this.inner.unit === 'objects' ? 1 : this.inner.sizeOf(key)!;
  }
}
