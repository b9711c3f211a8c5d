/**
 * Cross-check: each optimized policy against an independent, obviously correct reference written here with plain
 * arrays (index 0 = head / most recent) and O(n) scans, replayed on random traces with removals. Both must give
 * the same hit/miss sequence, the same victims in the same order, and the same final contents.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ArcPolicy } from './arc.js';
import { ClockPolicy } from './clock.js';
import { FifoPolicy } from './fifo.js';
import { LfuPolicy } from './lfu.js';
import { LruPolicy } from './lru.js';
import { S3FifoPolicy } from './s3fifo.js';
import { SievePolicy } from './sieve.js';
import { GdsfPolicy } from './gdsf.js';
import { LfudaPolicy } from './lfuda.js';
import { LirsPolicy } from './lirs.js';
import { MruPolicy } from './mru.js';
import { SlruPolicy } from './slru.js';
import { TwoQPolicy } from './twoq.js';
import { WTinyLfuPolicy } from './wtinylfu.js';
import { LookupCountAdmission } from '../admission.js';
import type { CapacityUnit, EvictionPolicy } from '../types.js';

interface Entry {
  key: number;
  size: number;
  bit: number;
  freq: number;
  stamp: number;
}

type Op = { kind: 'request'; key: number; size: number } | { kind: 'remove'; key: number } | { kind: 'evict' };

/** The reference side: the same request flow as `replay`, written out. */
abstract class Naive {
  constructor(
    readonly capacity: number,
    readonly unit: CapacityUnit,
  ) {}

  cost(size: number): number {
    return this.unit === 'objects' ? 1 : size;
  }

  sum(list: Entry[]): number {
    return list.reduce((total, e) => total + this.cost(e.size), 0);
  }

  entry(key: number, size: number): Entry {
    return { key, size, bit: 0, freq: 0, stamp: 0 };
  }

  abstract resident(): Entry[];
  abstract access(key: number): boolean;
  abstract evict(incoming: number): number;
  abstract place(key: number, size: number): void;
  abstract remove(key: number): void;

  used(): number {
    return this.sum(this.resident());
  }

  canAdmit(_key: number, size: number): boolean {
    return this.cost(size) <= this.capacity;
  }

  insert(key: number, size: number): number[] {
    const victims: number[] = [];
    while (this.used() + this.cost(size) > this.capacity) victims.push(this.evict(this.cost(size)));
    this.place(key, size);
    return victims;
  }
}

class NaiveLru extends Naive {
  list: Entry[] = [];
  resident(): Entry[] {
    return this.list;
  }
  access(key: number): boolean {
    const i = this.list.findIndex((e) => e.key === key);
    if (i < 0) return false;
    this.list.unshift(...this.list.splice(i, 1));
    return true;
  }
  evict(): number {
    return this.list.pop()!.key;
  }
  place(key: number, size: number): void {
    this.list.unshift(this.entry(key, size));
  }
  remove(key: number): void {
    this.list = this.list.filter((e) => e.key !== key);
  }
}

class NaiveFifo extends NaiveLru {
  override access(key: number): boolean {
    return this.list.some((e) => e.key === key);
  }
}

class NaiveClock extends NaiveLru {
  override access(key: number): boolean {
    const e = this.list.find((x) => x.key === key);
    if (e) e.bit = 1;
    return e !== undefined;
  }
  override evict(): number {
    for (;;) {
      const tail = this.list.pop()!;
      if (tail.bit === 0) return tail.key;
      tail.bit = 0;
      this.list.unshift(tail);
    }
  }
}

class NaiveSieve extends NaiveClock {
  hand: Entry | null = null;
  override evict(): number {
    let i = this.hand ? this.list.indexOf(this.hand) : this.list.length - 1;
    while (this.list[i]!.bit === 1) {
      this.list[i]!.bit = 0;
      i = i === 0 ? this.list.length - 1 : i - 1;
    }
    const victim = this.list[i]!;
    this.hand = i > 0 ? this.list[i - 1]! : null;
    this.list.splice(i, 1);
    return victim.key;
  }
  override remove(key: number): void {
    const i = this.list.findIndex((e) => e.key === key);
    if (i < 0) return;
    if (this.list[i] === this.hand) this.hand = i > 0 ? this.list[i - 1]! : null;
    this.list.splice(i, 1);
  }
}

class NaiveLfu extends NaiveLru {
  clock = 0;
  override access(key: number): boolean {
    const e = this.list.find((x) => x.key === key);
    if (!e) return false;
    e.freq++;
    e.stamp = ++this.clock;
    return true;
  }
  override evict(): number {
    let best = this.list[0]!;
    for (const e of this.list) if (e.freq < best.freq || (e.freq === best.freq && e.stamp < best.stamp)) best = e;
    this.remove(best.key);
    return best.key;
  }
  override place(key: number, size: number): void {
    this.list.push({ ...this.entry(key, size), freq: 1, stamp: ++this.clock });
  }
}

class NaiveArc extends Naive {
  t1: Entry[] = [];
  t2: Entry[] = [];
  b1: Entry[] = [];
  b2: Entry[] = [];
  p = 0;
  ghostHit: 'b1' | 'b2' | null = null;

  resident(): Entry[] {
    return [...this.t1, ...this.t2];
  }
  take(list: Entry[], key: number): Entry | undefined {
    const i = list.findIndex((e) => e.key === key);
    return i < 0 ? undefined : list.splice(i, 1)[0];
  }
  access(key: number): boolean {
    this.ghostHit = null;
    const inT1 = this.take(this.t1, key);
    if (inT1) {
      this.t2.unshift(inT1);
      return true;
    }
    const inT2 = this.take(this.t2, key);
    if (inT2) {
      this.t2.unshift(inT2);
      return true;
    }
    if (this.b1.some((e) => e.key === key)) {
      this.p = Math.min(this.p + Math.max(this.sum(this.b2) / this.sum(this.b1), 1), this.capacity);
      this.take(this.b1, key);
      this.ghostHit = 'b1';
    } else if (this.b2.some((e) => e.key === key)) {
      this.p = Math.max(this.p - Math.max(this.sum(this.b1) / this.sum(this.b2), 1), 0);
      this.take(this.b2, key);
      this.ghostHit = 'b2';
    }
    return false;
  }
  replace(): number {
    const t1 = this.sum(this.t1);
    if ((t1 > 0 && (t1 > this.p || (t1 === this.p && this.ghostHit === 'b2'))) || this.t2.length === 0) {
      const e = this.t1.pop()!;
      this.b1.unshift(e);
      return e.key;
    }
    const e = this.t2.pop()!;
    this.b2.unshift(e);
    return e.key;
  }
  evict(incoming: number): number {
    if (this.ghostHit !== null) return this.replace();
    const [t1, t2, b1, b2] = [this.sum(this.t1), this.sum(this.t2), this.sum(this.b1), this.sum(this.b2)];
    if (t1 + b1 + incoming > this.capacity) {
      if (b1 > 0) {
        this.b1.pop();
        return this.replace();
      }
      return this.t1.pop()!.key;
    }
    if (t1 + b1 + t2 + b2 >= 2 * this.capacity && b2 > 0) this.b2.pop();
    return this.replace();
  }
  place(key: number, size: number): void {
    (this.ghostHit !== null ? this.t2 : this.t1).unshift(this.entry(key, size));
    this.ghostHit = null;
  }
  remove(key: number): void {
    for (const list of [this.t1, this.t2, this.b1, this.b2]) this.take(list, key);
  }
}

class NaiveS3Fifo extends Naive {
  small: Entry[] = [];
  main: Entry[] = [];
  ghost: Entry[] = [];
  ghostHit: number | null = null;
  readonly smallCap: number;
  readonly mainCap: number;
  readonly ghostCap: number;

  constructor(
    capacity: number,
    unit: CapacityUnit,
    readonly smallRatio: number,
    readonly threshold: number,
  ) {
    super(capacity, unit);
    this.smallCap = Math.floor(capacity * smallRatio);
    this.mainCap = capacity - this.smallCap;
    this.ghostCap = Math.floor(capacity * 0.9);
  }
  resident(): Entry[] {
    return [...this.small, ...this.main];
  }
  access(key: number): boolean {
    this.ghostHit = null;
    const e = this.resident().find((x) => x.key === key);
    if (e) {
      e.freq = Math.min(e.freq + 1, 3);
      return true;
    }
    const g = this.ghost.findIndex((x) => x.key === key);
    if (g >= 0) {
      this.ghost.splice(g, 1);
      this.ghostHit = key;
    }
    return false;
  }
  override canAdmit(key: number, size: number): boolean {
    const c = this.cost(size);
    if (c > this.capacity) return false;
    return this.ghostHit === key ? c <= this.smallCap : c < this.smallCap;
  }
  evict(): number {
    for (;;) {
      if (this.small.length === 0 || this.sum(this.main) > this.mainCap) {
        for (;;) {
          const e = this.main.pop()!;
          if (e.freq === 0) return e.key;
          e.freq = Math.min(e.freq, 3) - 1;
          this.main.unshift(e);
        }
      }
      while (this.small.length > 0) {
        const e = this.small.pop()!;
        if (e.freq >= this.threshold) {
          e.freq = 0;
          this.main.unshift(e);
          continue;
        }
        const c = this.cost(e.size);
        if (c <= this.ghostCap) {
          while (this.sum(this.ghost) + c > this.ghostCap) this.ghost.pop();
          this.ghost.unshift(e);
        }
        return e.key;
      }
    }
  }
  place(key: number, size: number): void {
    (this.ghostHit === key ? this.main : this.small).unshift(this.entry(key, size));
    this.ghostHit = null;
  }
  remove(key: number): void {
    this.small = this.small.filter((e) => e.key !== key);
    this.main = this.main.filter((e) => e.key !== key);
    this.ghost = this.ghost.filter((e) => e.key !== key);
  }
}

// ---- the field's policies (issue 17): references written from libCacheSim's sources or the papers --------------

class NaiveMru extends NaiveLru {
  override evict(): number {
    return this.list.shift()!.key;
  }
}

/** libCacheSim SLRU.c, except that cooling never evicts from segment 0 (see slru.ts). */
class NaiveSlru extends Naive {
  segs: Entry[][];
  readonly segCap: number;
  constructor(capacity: number, unit: CapacityUnit, readonly n: number) {
    super(capacity, unit);
    this.segs = Array.from({ length: n }, () => []);
    this.segCap = Math.floor(capacity / n);
  }
  resident(): Entry[] {
    return this.segs.flat();
  }
  override canAdmit(key: number, size: number): boolean {
    return this.cost(size) <= this.segCap && super.canAdmit(key, size);
  }
  access(key: number): boolean {
    for (let i = 0; i < this.n; i++) {
      const j = this.segs[i]!.findIndex((e) => e.key === key);
      if (j < 0) continue;
      const [e] = this.segs[i]!.splice(j, 1);
      if (i === this.n - 1) this.segs[i]!.unshift(e!);
      else {
        this.segs[i + 1]!.unshift(e!);
        while (this.sum(this.segs[i + 1]!) > this.segCap) this.cool(i + 1);
      }
      return true;
    }
    return false;
  }
  cool(id: number): void {
    this.segs[id - 1]!.unshift(this.segs[id]!.pop()!);
    if (id - 1 === 0) return;
    while (this.sum(this.segs[id - 1]!) > this.segCap) this.cool(id - 1);
  }
  evict(): number {
    return this.segs.find((seg) => seg.length > 0)!.pop()!.key;
  }
  place(key: number, size: number): void {
    let i = this.segs.findIndex((seg) => this.sum(seg) + this.cost(size) <= this.segCap);
    if (i < 0) i = 0;
    this.segs[i]!.unshift(this.entry(key, size));
  }
  remove(key: number): void {
    this.segs = this.segs.map((seg) => seg.filter((e) => e.key !== key));
  }
}

interface Ranked extends Entry {
  pri: number;
}

/** libCacheSim GDSF.cpp: H = L + freq x 1e6 / size, ties by the time of the last update. */
class NaiveGdsf extends Naive {
  list: Ranked[] = [];
  clock = 0;
  seq = 0;
  resident(): Entry[] {
    return this.list;
  }
  access(key: number): boolean {
    const e = this.list.find((x) => x.key === key);
    if (!e) return false;
    e.freq++;
    e.pri = this.clock + (e.freq * 1e6) / this.cost(e.size);
    e.stamp = ++this.seq;
    return true;
  }
  evict(): number {
    let best = this.list[0]!;
    for (const e of this.list) if (e.pri < best.pri || (e.pri === best.pri && e.stamp < best.stamp)) best = e;
    this.clock = best.pri;
    this.remove(best.key);
    return best.key;
  }
  place(key: number, size: number): void {
    this.list.push({ ...this.entry(key, size), freq: 1, pri: this.clock + 1e6 / this.cost(size), stamp: ++this.seq });
  }
  remove(key: number): void {
    this.list = this.list.filter((e) => e.key !== key);
  }
}

/** LFUDA from Arlitt et al. 2000: K = F + L, L = the last victim's K. */
class NaiveLfuda extends NaiveGdsf {
  override access(key: number): boolean {
    const e = this.list.find((x) => x.key === key);
    if (!e) return false;
    e.freq++;
    e.pri = e.freq + this.clock;
    e.stamp = ++this.seq;
    return true;
  }
  override place(key: number, size: number): void {
    this.list.push({ ...this.entry(key, size), freq: 1, pri: 1 + this.clock, stamp: ++this.seq });
  }
}

/** libCacheSim TwoQ.c (full 2Q of the VLDB'94 paper, Kin = 25%, Kout = 50%). */
class NaiveTwoQ extends Naive {
  ain: Entry[] = [];
  am: Entry[] = [];
  aout: Entry[] = [];
  ghostHit: number | null = null;
  readonly inCap: number;
  readonly mainCap: number;
  readonly outCap: number;
  constructor(capacity: number, unit: CapacityUnit) {
    super(capacity, unit);
    this.inCap = Math.floor(capacity * 0.25);
    this.mainCap = capacity - this.inCap;
    this.outCap = Math.floor(capacity * 0.5);
  }
  resident(): Entry[] {
    return [...this.ain, ...this.am];
  }
  override canAdmit(key: number, size: number): boolean {
    return this.cost(size) <= this.inCap && super.canAdmit(key, size);
  }
  access(key: number): boolean {
    this.ghostHit = null;
    if (this.ain.some((e) => e.key === key)) return true;
    const i = this.am.findIndex((e) => e.key === key);
    if (i >= 0) {
      this.am.unshift(...this.am.splice(i, 1));
      return true;
    }
    const g = this.aout.findIndex((e) => e.key === key);
    if (g >= 0) {
      this.aout.splice(g, 1);
      this.ghostHit = key;
    }
    return false;
  }
  evictIn(): number {
    const e = this.ain.pop()!;
    const c = this.cost(e.size);
    if (c <= this.outCap) {
      while (this.sum(this.aout) + c > this.outCap) this.aout.pop();
      this.aout.unshift(e);
    }
    return e.key;
  }
  evict(): number {
    if (this.sum(this.ain) > this.inCap) return this.evictIn();
    if (this.am.length > 0) return this.am.pop()!.key;
    return this.evictIn();
  }
  override insert(key: number, size: number): number[] {
    if (this.ghostHit !== key) return super.insert(key, size);
    const c = this.cost(size);
    const victims: number[] = [];
    while (this.used() + c > this.capacity) victims.push(this.evict());
    while (this.sum(this.am) + c > this.mainCap && this.am.length > 0) victims.push(this.am.pop()!.key);
    this.place(key, size);
    return victims;
  }
  place(key: number, size: number): void {
    (this.ghostHit === key ? this.am : this.ain).unshift(this.entry(key, size));
    this.ghostHit = null;
  }
  remove(key: number): void {
    for (const name of ['ain', 'am', 'aout'] as const) this[name] = this[name].filter((e) => e.key !== key);
  }
}

/** LIRS from the SIGMETRICS'02 paper, with S's ghosts bounded to the capacity (oldest forgotten first). */
class NaiveLirs extends Naive {
  s: number[] = []; // top first
  q: number[] = []; // end (newest) first, front last
  g: number[] = []; // ghosts, newest first
  status = new Map<number, 'lir' | 'hir' | 'ghost'>();
  sizes = new Map<number, number>();
  ghostHit: number | null = null;
  readonly hirCap: number;
  readonly lirCap: number;
  constructor(capacity: number, unit: CapacityUnit) {
    super(capacity, unit);
    this.hirCap = Math.max(1, Math.floor(capacity * 0.01));
    this.lirCap = capacity - this.hirCap;
  }
  resident(): Entry[] {
    return [...this.status].filter(([, st]) => st !== 'ghost').map(([key]) => this.entry(key, this.sizes.get(key)!));
  }
  c(key: number): number {
    return this.cost(this.sizes.get(key)!);
  }
  lirUsed(): number {
    return [...this.status].filter(([, st]) => st === 'lir').reduce((t, [k]) => t + this.c(k), 0);
  }
  drop(list: number[], key: number): void {
    const i = list.indexOf(key);
    if (i >= 0) list.splice(i, 1);
  }
  forget(key: number): void {
    this.drop(this.s, key);
    this.drop(this.g, key);
    this.status.delete(key);
    this.sizes.delete(key);
  }
  prune(): void {
    while (this.s.length > 0 && this.status.get(this.s[this.s.length - 1]!) !== 'lir') {
      const key = this.s.pop()!;
      if (this.status.get(key) === 'ghost') this.forget(key);
    }
  }
  demote(): void {
    while (this.lirUsed() > this.lirCap) {
      this.prune();
      const bottom = this.s.pop()!;
      this.status.set(bottom, 'hir');
      this.q.unshift(bottom);
    }
  }
  access(key: number): boolean {
    this.ghostHit = null;
    const st = this.status.get(key);
    if (st === 'lir') {
      const wasBottom = this.s[this.s.length - 1] === key;
      this.drop(this.s, key);
      this.s.unshift(key);
      if (wasBottom) this.prune();
      return true;
    }
    if (st === 'hir') {
      if (this.s.includes(key)) {
        this.drop(this.s, key);
        this.s.unshift(key);
        this.drop(this.q, key);
        this.status.set(key, 'lir');
        this.demote();
        this.prune();
      } else {
        this.s.unshift(key);
        this.drop(this.q, key);
        this.q.unshift(key);
      }
      return true;
    }
    if (st === 'ghost') {
      this.forget(key);
      this.ghostHit = key;
    }
    return false;
  }
  evict(): number {
    if (this.q.length > 0) {
      const key = this.q.pop()!;
      const c = this.c(key);
      if (!this.s.includes(key) || c > this.capacity) {
        this.drop(this.s, key);
        this.status.delete(key);
        this.sizes.delete(key);
        return key;
      }
      while (this.g.reduce((t, k) => t + this.c(k), 0) + c > this.capacity) this.forget(this.g[this.g.length - 1]!);
      this.status.set(key, 'ghost');
      this.g.unshift(key);
      return key;
    }
    let i = this.s.length - 1;
    while (this.status.get(this.s[i]!) !== 'lir') i--;
    const key = this.s[i]!;
    const wasBottom = i === this.s.length - 1;
    this.s.splice(i, 1);
    this.status.delete(key);
    this.sizes.delete(key);
    if (wasBottom) this.prune();
    return key;
  }
  place(key: number, size: number): void {
    this.sizes.set(key, size);
    const fromGhost = this.ghostHit === key;
    this.ghostHit = null;
    this.s.unshift(key);
    if (fromGhost || this.lirUsed() + this.cost(size) <= this.lirCap) {
      this.status.set(key, 'lir');
      if (fromGhost) {
        this.demote();
        this.prune();
      }
    } else {
      this.status.set(key, 'hir');
      this.q.unshift(key);
    }
  }
  remove(key: number): void {
    const st = this.status.get(key);
    if (st === 'lir') {
      const wasBottom = this.s[this.s.length - 1] === key;
      this.drop(this.s, key);
      this.status.delete(key);
      this.sizes.delete(key);
      if (wasBottom) this.prune();
    } else if (st === 'hir') {
      this.drop(this.q, key);
      this.drop(this.s, key);
      this.status.delete(key);
      this.sizes.delete(key);
    } else if (st === 'ghost') this.forget(key);
  }
}

/** W-TinyLFU (TOS'17) as wtinylfu.ts describes it, with the same sketch (the package's count-min sketch). */
class NaiveWTinyLfu extends Naive {
  win: Entry[] = [];
  prob: Entry[] = [];
  prot: Entry[] = [];
  readonly wCap: number;
  readonly mCap: number;
  readonly pCap: number;
  readonly sketch: LookupCountAdmission<number>;
  constructor(capacity: number, unit: CapacityUnit) {
    super(capacity, unit);
    this.wCap = Math.max(1, Math.floor(capacity * 0.01));
    this.mCap = capacity - this.wCap;
    this.pCap = Math.floor(this.mCap * 0.8);
    this.sketch = new LookupCountAdmission({ lookups: 1, width: unit === 'objects' ? Math.max(capacity, 16) : 1 << 16 });
  }
  resident(): Entry[] {
    return [...this.win, ...this.prob, ...this.prot];
  }
  access(key: number): boolean {
    const hit = this.touch(key);
    this.sketch.recordLookup(key);
    return hit;
  }
  touch(key: number): boolean {
    for (const list of [this.win, this.prot]) {
      const i = list.findIndex((e) => e.key === key);
      if (i >= 0) {
        list.unshift(...list.splice(i, 1));
        return true;
      }
    }
    const i = this.prob.findIndex((e) => e.key === key);
    if (i < 0) return false;
    this.prot.unshift(...this.prob.splice(i, 1));
    while (this.sum(this.prot) > this.pCap) this.prob.unshift(this.prot.pop()!);
    return true;
  }
  evict(incoming: number): number {
    for (;;) {
      if (this.sum(this.win) + incoming > this.wCap && this.win.length > 0) {
        const cand = this.win.pop()!;
        if (this.sum(this.prob) + this.sum(this.prot) + this.cost(cand.size) <= this.mCap) {
          this.prob.unshift(cand);
          continue;
        }
        const from = this.prob.length > 0 ? this.prob : this.prot.length > 0 ? this.prot : null;
        if (from && this.sketch.estimate(cand.key) > this.sketch.estimate(from[from.length - 1]!.key)) {
          const victim = from.pop()!;
          this.prob.unshift(cand);
          return victim.key;
        }
        return cand.key;
      }
      const from = this.prob.length > 0 ? this.prob : this.prot.length > 0 ? this.prot : this.win;
      return from.pop()!.key;
    }
  }
  place(key: number, size: number): void {
    this.win.unshift(this.entry(key, size));
    while (this.sum(this.win) > this.wCap && this.sum(this.prob) + this.sum(this.prot) + this.cost(this.win[this.win.length - 1]!.size) <= this.mCap) {
      this.prob.unshift(this.win.pop()!);
    }
  }
  remove(key: number): void {
    for (const name of ['win', 'prob', 'prot'] as const) this[name] = this[name].filter((e) => e.key !== key);
  }
}

interface Setup {
  name: string;
  capacity: number;
  unit: CapacityUnit;
  smallRatio: number;
  threshold: number;
}

function build(setup: Setup): [EvictionPolicy<number>, Naive] {
  const { capacity, unit } = setup;
  switch (setup.name) {
    case 'lru':
      return [new LruPolicy({ capacity, unit }), new NaiveLru(capacity, unit)];
    case 'fifo':
      return [new FifoPolicy({ capacity, unit }), new NaiveFifo(capacity, unit)];
    case 'clock':
      return [new ClockPolicy({ capacity, unit }), new NaiveClock(capacity, unit)];
    case 'sieve':
      return [new SievePolicy({ capacity, unit }), new NaiveSieve(capacity, unit)];
    case 'lfu':
      return [new LfuPolicy({ capacity, unit }), new NaiveLfu(capacity, unit)];
    case 'arc':
      return [new ArcPolicy({ capacity, unit }), new NaiveArc(capacity, unit)];
    case 'mru':
      return [new MruPolicy({ capacity, unit }), new NaiveMru(capacity, unit)];
    case 'slru':
      return [new SlruPolicy({ capacity, unit, segments: 4 }), new NaiveSlru(capacity, unit, 4)];
    case 'gdsf':
      return [new GdsfPolicy({ capacity, unit }), new NaiveGdsf(capacity, unit)];
    case 'lfuda':
      return [new LfudaPolicy({ capacity, unit }), new NaiveLfuda(capacity, unit)];
    case '2q':
      return [new TwoQPolicy({ capacity, unit }), new NaiveTwoQ(capacity, unit)];
    case 'lirs':
      return [new LirsPolicy({ capacity, unit }), new NaiveLirs(capacity, unit)];
    case 'wtinylfu':
      return [new WTinyLfuPolicy({ capacity, unit }), new NaiveWTinyLfu(capacity, unit)];
    default: {
      const options = { capacity, unit, smallRatio: setup.smallRatio, moveToMainThreshold: setup.threshold };
      return [new S3FifoPolicy(options), new NaiveS3Fifo(capacity, unit, setup.smallRatio, setup.threshold)];
    }
  }
}

/** Runs the ops on both sides and returns what each observed. */
function drive(policy: EvictionPolicy<number>, naive: Naive, ops: Op[]): void {
  const seen: string[] = [];
  const expected: string[] = [];
  for (const op of ops) {
    if (op.kind === 'remove') {
      policy.remove(op.key);
      naive.remove(op.key);
      continue;
    }
    if (op.kind === 'evict') {
      seen.push(`evict ${policy.evict()}`);
      expected.push(`evict ${naive.resident().length > 0 ? naive.evict(0) : undefined}`);
      continue;
    }
    const { key, size } = op;
    // Peeking first also checks that peeking changes nothing.
    policy.peekVictims(3);
    if (policy.access(key)) seen.push(`hit ${key}`);
    else if (!policy.canAdmit(key, size)) seen.push(`refuse ${key}`);
    else seen.push(`miss ${key} evict ${policy.insert(key, size).join(',')}`);
    if (naive.access(key)) expected.push(`hit ${key}`);
    else if (!naive.canAdmit(key, size)) expected.push(`refuse ${key}`);
    else expected.push(`miss ${key} evict ${naive.insert(key, size).join(',')}`);
  }
  expect(seen).toEqual(expected);
  const contents = (keys: Iterable<number>): number[] => [...keys].sort((a, b) => a - b);
  expect(contents(policy.keys())).toEqual(contents(naive.resident().map((e) => e.key)));
  expect(policy.used).toBe(naive.used());
}

const NAMES = ['lru', 'fifo', 'clock', 'sieve', 'lfu', 'arc', 's3fifo', 'mru', 'slru', 'gdsf', 'lfuda', '2q', 'lirs', 'wtinylfu'] as const;

/** The smallest capacity (in units, before the bytes-mode x4) each policy accepts with the options used here. */
const MIN_CAPACITY: Record<string, number> = { slru: 4, '2q': 4, lirs: 2, wtinylfu: 2 };

const setups = (name: string): fc.Arbitrary<Setup> =>
  fc
    .record({
      unit: fc.constantFrom<CapacityUnit>('objects', 'bytes'),
      capacity: fc.integer({ min: 1, max: 24 }),
      smallRatio: fc.constantFrom(0.1, 0.25, 0.5),
      threshold: fc.integer({ min: 1, max: 3 }),
    })
    .map((s) => ({ ...s, name, capacity: name === 's3fifo' ? Math.max(s.capacity, Math.ceil(2 / s.smallRatio)) : Math.max(s.capacity, MIN_CAPACITY[name] ?? 1) }))
    .map((s) => (s.unit === 'bytes' ? { ...s, capacity: s.capacity * 4 } : s));

const opsFor = (keys: number): fc.Arbitrary<Op[]> =>
  fc.array(
    fc.oneof(
      {
        weight: 20,
        arbitrary: fc.record({
          kind: fc.constant('request' as const),
          key: fc.integer({ min: 0, max: keys }),
          size: fc.integer({ min: 1, max: 12 }),
        }),
      },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('remove' as const), key: fc.integer({ min: 0, max: keys }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('evict' as const) }) },
    ),
    { maxLength: 400, size: 'max' },
  );

/** Enough distinct keys to make hits, misses and ghost hits all common. */
const keysFor = (setup: Setup): number =>
  Math.max(3, setup.unit === 'bytes' ? Math.round(setup.capacity / 4) : Math.round(setup.capacity * 1.5));

describe('optimized policies agree with naive array-based references', () => {
  for (const name of NAMES) {
    it(`${name}: identical hits, misses, refusals and victims on random traces`, () => {
      fc.assert(
        fc.property(
          setups(name).chain((setup) => fc.tuple(fc.constant(setup), opsFor(keysFor(setup)))),
          ([setup, ops]) => {
            const [policy, naive] = build(setup);
            drive(policy, naive, ops);
          },
        ),
        { numRuns: 300 },
      );
    });
  }
});
