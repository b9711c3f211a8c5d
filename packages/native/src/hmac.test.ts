import { createHmac, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { hmacSha256Hex } from './hmac.js';
import { TierSyncError } from './errors.js';

describe('hmacSha256Hex', () => {
  it('matches RFC 4231 test case 2 and node:crypto for keys of every size class', () => {
    // RFC 4231 section 4.3: key "Jefe", data "what do ya want for nothing?".
    expect(hmacSha256Hex(Buffer.from('Jefe'), ['what do ya want for nothing?'])).toEqual(['5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843']);
    for (const keyBytes of [0, 1, 32, 64, 65, 200]) {
      const key = randomBytes(keyBytes);
      const messages = ['', 'a', randomBytes(32).toString('hex'), randomBytes(100).toString('hex'), 'é→漢'];
      expect(hmacSha256Hex(key, messages), `key of ${keyBytes} bytes`).toEqual(messages.map((m) => createHmac('sha256', key).update(m).digest('hex')));
    }
  });

  it('derives thousands in one call, each independent of its neighbours', () => {
    const key = randomBytes(32);
    const messages = Array.from({ length: 3000 }, (_, i) => i.toString(16).padStart(64, '0'));
    const got = hmacSha256Hex(key, messages);
    for (const i of [0, 1, 1499, 2999]) expect(got[i]).toBe(createHmac('sha256', key).update(messages[i]!).digest('hex'));
    expect(hmacSha256Hex(key, [])).toEqual([]);
  });

  it('refuses a key that is not a Uint8Array and messages that are not strings, with typed errors', () => {
    expect(() => hmacSha256Hex('key' as unknown as Uint8Array, ['a'])).toThrow(TierSyncError);
    expect(() => hmacSha256Hex(new Uint16Array(4) as unknown as Uint8Array, ['a'])).toThrow(/Uint8Array/);
    expect(() => hmacSha256Hex(Buffer.from('k'), ['a', 7 as unknown as string])).toThrow(/messages\[1\] must be a string/);
  });
});
