/**
 * The page keys of RESP values: a value of a Redis key is stored as pages under
 * `VALUE_PAGE_TAG + hex(SHA-256(salt || u32be(tenant UTF-8 bytes) || u32be(key bytes) || u64be(generation) ||
 * tenant || key || u32be(page index)))`. The salt is random per door process (door.ts says why).
 *
 * Two implementations of the one derivation, which must stay byte-identical (page-keys.test.ts compares them):
 * - valuePageKeys (node:crypto), for one value: SETs parsed in JavaScript;
 * - landedPageKeys (the addon's respPageKeys), for every value that landed natively in one batch of door events:
 *   one call, the prefix absorbed once per value, no hash object per page on the event loop.
 */
import { createHash } from 'node:crypto';
import { respPageKeys, type RespPageKeySpec } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';
import { VALUE_PAGE_TAG } from './manifest.js';

/** The page keys of one value (`key` as a latin1 string: each char one byte of the Redis key). */
export function valuePageKeys(salt: Uint8Array, tenant: string, key: string, generation: number, count: number): PageKey[] {
  const base = createHash('sha256');
  const t = Buffer.from(tenant, 'utf8');
  const k = Buffer.from(key, 'latin1');
  const head = Buffer.alloc(16);
  head.writeUInt32BE(t.length, 0);
  head.writeUInt32BE(k.length, 4);
  head.writeBigUInt64BE(BigInt(generation), 8);
  base.update(salt).update(head).update(t).update(k);
  const out: PageKey[] = [];
  const index = Buffer.alloc(4);
  for (let i = 0; i < count; i++) {
    index.writeUInt32BE(i, 0);
    out.push(`${VALUE_PAGE_TAG}${base.copy().update(index).digest('hex')}`);
  }
  return out;
}

/** The page keys of many values in one native call, one array per value, equal to valuePageKeys() of each. */
export function landedPageKeys(salt: Uint8Array, values: readonly RespPageKeySpec[]): PageKey[][] {
  const flat = respPageKeys(salt, VALUE_PAGE_TAG, values);
  const out: PageKey[][] = [];
  let at = 0;
  for (const v of values) {
    out.push(flat.slice(at, at + v.count));
    at += v.count;
  }
  return out;
}
