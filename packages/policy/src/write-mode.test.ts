import { describe, expect, it } from 'vitest';
import { checkWriteMode, decideWrite, type WriteMode } from './write-mode.js';

const fresh = { hits: 0, copiedBelow: false };

describe('decideWrite', () => {
  it('write-through copies at store time, and catches up later if the copy is missing', () => {
    const mode: WriteMode = { kind: 'write-through' };
    expect(decideWrite(mode, 'stored', fresh)).toBe('copy-down');
    expect(decideWrite(mode, 'hit', { hits: 1, copiedBelow: true })).toBe('none');
    expect(decideWrite(mode, 'evicting', { hits: 1, copiedBelow: false })).toBe('copy-down');
  });

  it('write-back copies only when the page is evicted', () => {
    const mode: WriteMode = { kind: 'write-back' };
    expect(decideWrite(mode, 'stored', fresh)).toBe('none');
    expect(decideWrite(mode, 'hit', { hits: 9, copiedBelow: false })).toBe('none');
    expect(decideWrite(mode, 'evicting', { hits: 0, copiedBelow: false })).toBe('copy-down');
    expect(decideWrite(mode, 'evicting', { hits: 0, copiedBelow: true })).toBe('none');
  });

  it('selective writes through pages hit at least n times, and drops or demotes the cold ones', () => {
    const drop: WriteMode = { kind: 'selective', minHits: 2 };
    expect(decideWrite(drop, 'stored', fresh)).toBe('none');
    expect(decideWrite(drop, 'hit', { hits: 1, copiedBelow: false })).toBe('none');
    expect(decideWrite(drop, 'hit', { hits: 2, copiedBelow: false })).toBe('copy-down');
    expect(decideWrite(drop, 'hit', { hits: 3, copiedBelow: true })).toBe('none');
    expect(decideWrite(drop, 'evicting', { hits: 1, copiedBelow: false })).toBe('none');
    expect(decideWrite(drop, 'evicting', { hits: 2, copiedBelow: false })).toBe('copy-down');
    const demote: WriteMode = { kind: 'selective', minHits: 2, coldOnEvict: 'demote' };
    expect(decideWrite(demote, 'evicting', { hits: 0, copiedBelow: false })).toBe('copy-down');
    expect(decideWrite({ kind: 'selective', minHits: 0 }, 'stored', fresh)).toBe('copy-down');
  });

  it('names what is malformed', () => {
    expect(() => decideWrite({ kind: 'write-around' } as never, 'stored', fresh)).toThrow(/mode.kind/);
    expect(() => checkWriteMode({ kind: 'selective', minHits: -1 })).toThrow(/mode.minHits/);
    expect(() => checkWriteMode({ kind: 'selective', minHits: 1, coldOnEvict: 'keep' } as never)).toThrow(/coldOnEvict/);
    expect(() => decideWrite({ kind: 'write-back' }, 'loaded' as never, fresh)).toThrow(/event/);
    expect(() => decideWrite({ kind: 'write-back' }, 'hit', { hits: 1.5, copiedBelow: false })).toThrow(/state.hits/);
    expect(() => decideWrite({ kind: 'write-back' }, 'hit', { hits: 1, copiedBelow: 1 } as never)).toThrow(/copiedBelow/);
  });
});
