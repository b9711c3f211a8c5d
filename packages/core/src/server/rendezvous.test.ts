import { describe, expect, it } from 'vitest';
import { rendezvousOwner, rendezvousPlace } from './rendezvous.js';

const keys = Array.from({ length: 3000 }, (_, i) => i.toString(16).padStart(32, '0'));

describe('rendezvous hashing (Thaler & Ravishankar 1998)', () => {
  it('spreads keys evenly and deterministically', () => {
    const place = rendezvousPlace(keys, ['a', 'b', 'c']);
    for (const id of ['a', 'b', 'c']) {
      expect(place.get(id)!.length).toBeGreaterThan(850);
      expect(place.get(id)!.length).toBeLessThan(1150);
    }
    expect(rendezvousOwner(keys[7]!, ['c', 'a', 'b'])).toBe(rendezvousOwner(keys[7]!, ['a', 'b', 'c']));
    expect(rendezvousOwner(keys[0]!, [])).toBeUndefined();
  });

  it('moves only the keys of a node that leaves, and only keys a new node wins', () => {
    const three = keys.map((k) => rendezvousOwner(k, ['a', 'b', 'c']));
    const two = keys.map((k) => rendezvousOwner(k, ['a', 'c']));
    keys.forEach((_, i) => {
      if (three[i] !== 'b') expect(two[i]).toBe(three[i]);
    });
    const four = keys.map((k) => rendezvousOwner(k, ['a', 'b', 'c', 'd']));
    keys.forEach((_, i) => {
      if (four[i] !== 'd') expect(four[i]).toBe(three[i]);
    });
    expect(four.filter((o) => o === 'd').length).toBeGreaterThan(600);
  });
});
