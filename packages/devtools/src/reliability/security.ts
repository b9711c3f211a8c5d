/**
 * Security checks, each run as attempts that must be refused:
 * - peer protocol: connecting with a wrong secret, or none, is refused with ERR_AUTH (and the right one works);
 * - page keys as paths: keys built to escape a folder (`../`, absolute paths, NUL, %-escapes, upper case) are
 *   refused with ERR_INVALID_ARGUMENT by the fs and object drivers and by TierSync, and no file or object appears;
 * - tenants: through the daemon's client API, a tenant that knows another tenant's key gets nothing (lookup absent,
 *   load missing, delete leaves the page), and a wrong token is refused;
 * - the RESP door: commands before AUTH and a wrong password are refused (checked with redis-cli, a real client).
 * `faults` counts refused attempts; a wrongly accepted one is a failure named in `notes`.
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HostArena, TierSyncError, TransferEngine, type ErrorCode } from '@tiersync/native';
import { FsTier, HostTier, ObjectTier, PeerTier, servePeer, type TierDriver } from '@tiersync/tiers';
import { s3rverCredentials, startS3rver } from '../bench/services.js';
import { TierSyncClient } from '@tiersync/core/client';
import { TierSync } from '@tiersync/core';
import { parseServerConfig, TierSyncServer } from '@tiersync/core/server';
import { scenario, type ScenarioResult } from './report.js';
import { CRASH_LAYOUT, CRASH_PAGE_BYTES, fillPage, pageMatches } from './workload.js';

const PAGE = CRASH_PAGE_BYTES;

/** Keys that would escape a folder or bucket prefix if used as a name. */
export function hostileKeys(escapeTo: string): string[] {
  return [
    '../../../../../../../../' + escapeTo,
    escapeTo,
    `deadbeefdeadbeef/../../${path.basename(escapeTo)}`,
    '..',
    '.',
    '',
    'DEADBEEFDEADBEEF',
    'deadbeefdeadbeef\u0000',
    'deadbeefdeadbeef\n',
    '%2e%2e%2fdeadbeefdeadbeef',
    'deadbeefdeadbee/',
    'deadbeefdeadbeefg',
    'deadbeef'.repeat(17),
    'ｄｅａｄｂｅｅｆｄｅａｄｂｅｅｆ',
  ];
}

export async function runSecurity(): Promise<ScenarioResult> {
  const result = scenario('security: peer auth, keys as paths, tenant isolation, RESP AUTH', 'tiersync bench reliability --scenarios security --json');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-security-'));
  const engine = new TransferEngine({ threads: 2 });
  const arena = HostArena.create({ capacity: 4 * PAGE });
  const context = { engine, pageBytes: PAGE, fingerprint: 'security' };
  const fail = (note: string) => {
    result.failures++;
    result.notes.push(note);
  };
  const refusedWith = async (what: string, codes: readonly ErrorCode[], attempt: () => unknown) => {
    result.runs++;
    try {
      await attempt();
      result.failures++;
      result.notes.push(`${what}: accepted`);
    } catch (e) {
      if (e instanceof TierSyncError && codes.includes(e.code)) result.faults++;
      else {
        result.failures++;
        result.notes.push(`${what}: refused with ${e instanceof TierSyncError ? e.code : String(e)} instead of ${codes.join('/')}`);
      }
    }
  };
  try {
    // --- peer protocol authentication
    const served = new HostTier(`host://?capacity=${16 * PAGE}`, context);
    await served.open();
    const server = servePeer(served, { host: '127.0.0.1', secret: 'the-right-secret' });
    try {
      for (const secret of ['a-wrong-secret', 'the-right-secreT', '', undefined]) {
        const url = `peer://127.0.0.1:${server.port}?timeoutMs=5000${secret ? `&secret=${secret}` : ''}`;
        await refusedWith(`peer handshake with ${secret === undefined ? 'no secret' : `secret '${secret}'`}`, ['ERR_AUTH'], async () => {
          const t = new PeerTier(url, context);
          try {
            await t.open();
          } finally {
            await t.close();
          }
        });
      }
      result.runs++;
      const good = new PeerTier(`peer://127.0.0.1:${server.port}?secret=the-right-secret&timeoutMs=5000`, context);
      await good.open();
      fillPage(arena, 0, PAGE, 'c0ffee00c0ffee00');
      await good.write([{ key: 'c0ffee00c0ffee00', source: { arena, offset: 0, length: PAGE } }]);
      const [o] = await good.read([{ key: 'c0ffee00c0ffee00', into: { arena, offset: PAGE, length: PAGE } }]);
      if (o?.status !== 'hit' || !pageMatches(arena, PAGE, PAGE, 'c0ffee00c0ffee00')) {
        result.failures++;
        result.notes.push('peer with the right secret did not round-trip a page');
      }
      await good.close();
    } finally {
      server.close();
      await served.close();
    }

    // --- page keys never used as paths: fs and object drivers, and TierSync
    const fsDir = path.join(dir, 'tier');
    const escape = path.join(dir, 'escaped');
    mkdirSync(escape);
    const s3 = await startS3rver(['tiersync-security']);
    const drivers: Array<[string, TierDriver]> = [
      ['fs', new FsTier(`fs://${fsDir}?capacity=1MiB`, context)],
      ['object', new ObjectTier(`s3://tiersync-security/p?endpoint=${encodeURIComponent(s3.endpoint)}&region=us-east-1&${s3rverCredentials()}&retries=0`, context)],
    ];
    try {
      for (const [name, d] of drivers) {
        await d.open();
        for (const key of hostileKeys(path.join(escape, 'owned'))) {
          const shown = JSON.stringify(key).slice(0, 40);
          await refusedWith(`${name}.write key ${shown}`, ['ERR_INVALID_ARGUMENT'], () => d.write([{ key, source: { arena, offset: 0, length: PAGE } }]));
          await refusedWith(`${name}.read key ${shown}`, ['ERR_INVALID_ARGUMENT'], () => d.read([{ key, into: { arena, offset: 0, length: PAGE } }]));
          await refusedWith(`${name}.has key ${shown}`, ['ERR_INVALID_ARGUMENT'], () => d.has([key]));
          await refusedWith(`${name}.delete key ${shown}`, ['ERR_INVALID_ARGUMENT'], () => d.delete([key]));
        }
        const listed: string[] = [];
        for await (const p of d.list()) listed.push(p.key);
        if (listed.length) {
          result.failures++;
          result.notes.push(`${name}: pages appeared after hostile keys: ${listed.join(', ').slice(0, 200)}`);
        }
        await d.close();
      }
      if (readdirSync(escape).length || existsSync(path.join(dir, 'owned'))) {
        result.failures++;
        result.notes.push(`a file appeared outside the fs tier's folder: ${readdirSync(escape).join(', ')}`);
      }
      const ts = new TierSync({ model: 'security@1', layout: CRASH_LAYOUT, tiers: [{ url: `host://?capacity=${16 * PAGE}` }, { url: `fs://${path.join(dir, 'ts-fs')}?capacity=1MiB` }] });
      await ts.open();
      try {
        for (const key of hostileKeys(path.join(escape, 'owned'))) {
          const shown = JSON.stringify(key).slice(0, 40);
          await refusedWith(`TierSync.storeKeys key ${shown}`, ['ERR_INVALID_ARGUMENT'], () => ts.storeKeys([key], [{ arena, offset: 0, length: PAGE }]));
          await refusedWith(`TierSync.lookupKeys key ${shown}`, ['ERR_INVALID_ARGUMENT'], () => ts.lookupKeys([key]));
          await refusedWith(`TierSync.deleteKeys key ${shown}`, ['ERR_INVALID_ARGUMENT'], () => ts.deleteKeys([key]));
        }
      } finally {
        await ts.close();
      }
    } finally {
      await s3.stop();
    }

    // --- tenants, through the daemon's client API
    const shm = `/dev/shm/tiersync-security-${process.pid}`;
    const daemon = await TierSyncServer.start(
      parseServerConfig({
        model: 'security@1',
        layout: CRASH_LAYOUT,
        tiers: [{ url: `host://?capacity=${64 * PAGE}&shm=${shm}`, name: 'host' }],
        http: { port: 0, token: 'admin-token-0123456789' },
        peer: { port: 0 },
        tenants: [
          { name: 'alice', token: 'alice-token-0123456789' },
          { name: 'bob', token: 'bob-token-0123456789' },
        ],
        resp: { port: 0, tenants: { alice: 'alice-resp-password' } },
        log: { level: 'silent' },
      }),
    );
    try {
      const alice = await TierSyncClient.connect({ url: daemon.url, token: 'alice-token-0123456789' });
      const bob = await TierSyncClient.connect({ url: daemon.url, token: 'bob-token-0123456789' });
      try {
        const key = 'a11ce000a11ce000a11ce000a11ce000';
        fillPage(arena, 0, PAGE, key);
        await alice.store([key], [{ arena, offset: 0, length: PAGE }]);
        result.runs += 3;
        const seen = await bob.lookup([key]);
        if (seen.present[0]) fail("bob's lookup of alice's key found it");
        else result.faults++;
        const loaded = await bob.load([key], [{ arena, offset: PAGE, length: PAGE }]);
        if (loaded.loaded) fail("bob loaded alice's page");
        else result.faults++;
        await bob.delete([key]);
        const still = await alice.lookup([key]);
        if (!still.present[0]) fail("bob's delete removed alice's page");
        else result.faults++;
      } finally {
        await alice.close();
        await bob.close();
      }
      for (const token of ['wrong-token-0123456789', 'admin-token-0123456789x', '']) {
        await refusedWith(`client connect with token '${token}'`, ['ERR_AUTH'], async () => (await TierSyncClient.connect({ url: daemon.url, token })).close());
      }
      // Mutating HTTP endpoint without the daemon's token.
      result.runs++;
      const r = await fetch(`${daemon.url}/v1/prefetch`, { method: 'POST', body: JSON.stringify({ tokens: [1, 2, 3] }) });
      if (r.status === 401) result.faults++;
      else fail(`POST /v1/prefetch without a token answered ${r.status}`);
      // RESP door, with a real client.
      if (spawnSync('redis-cli', ['--version']).status === 0 && daemon.respPort) {
        // Asynchronous: the daemon runs in this process, so a synchronous child would block its event loop.
        const cli = (...a: string[]) =>
          new Promise<string>((resolve) => execFile('redis-cli', ['-p', String(daemon.respPort), '--no-auth-warning', ...a], { encoding: 'utf8', timeout: 10_000 }, (_, stdout, stderr) => resolve(`${stdout}${stderr}`.trim())));
        for (const [what, args] of [
          ['RESP GET before AUTH', ['GET', 'k']],
          ['RESP AUTH with a wrong password', ['--user', 'alice', '--pass', 'nope', 'GET', 'k']],
          ['RESP AUTH as an unknown user', ['--user', 'mallory', '--pass', 'alice-resp-password', 'GET', 'k']],
        ] as const) {
          result.runs++;
          const out = await cli(...args);
          result.details[what] = out.slice(0, 100);
          if (/^(\(error\) )?(NOAUTH|WRONGPASS)/m.test(out)) result.faults++;
          else fail(`${what}: answered '${out.slice(0, 80)}'`);
        }
      }
    } finally {
      await daemon.close();
      rmSync(shm, { force: true });
    }
  } catch (e) {
    result.failures++;
    result.notes.push(`security scenario: ${(e as Error).message.slice(0, 300)}`);
  } finally {
    arena.close();
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return result;
}
