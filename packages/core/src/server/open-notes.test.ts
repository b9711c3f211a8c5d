import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { parseServerConfig } from './config.js';
import { TierSyncServer } from './server.js';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;

describe('the daemon at start', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-open-notes-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** Starts and stops a daemon over an fs tier in `dir`, returning its log lines. */
  async function startAndStop(): Promise<Array<{ level: number; msg: string; tier?: string; note?: string }>> {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(...chunk.toString().split('\n').filter(Boolean));
        done();
      },
    });
    const server = await TierSyncServer.start(
      parseServerConfig({
        model: 'open-notes-test@1',
        layout,
        tiers: [{ url: `host://?capacity=${16 * PAGE}`, name: 'host' }, { url: `fs://${dir}/fs?capacity=${64 * PAGE}`, name: 'fs' }],
        index: { path: path.join(dir, 'index.sqlite') },
        http: { port: 0 },
        peer: { enabled: false },
      }),
      { logger: pino({ level: 'info' }, sink) },
    );
    await server.close();
    return lines.map((l) => JSON.parse(l));
  }

  it("logs each tier driver's open note, at warn when the driver dropped something", async () => {
    const first = await startAndStop();
    const fsNote = first.find((l) => l.msg === 'tier opened' && l.tier === 'fs');
    expect(fsNote).toMatchObject({ level: 30, note: expect.stringMatching(/^new folder /) });
    expect(first.find((l) => l.tier === 'host' && l.msg === 'tier opened')).toMatchObject({ level: 30, note: expect.stringMatching(/anonymous memory/) });

    // A slot header cut short (garbage where slot 0's header is): the fs tier drops the slot at the next open.
    writeFileSync(path.join(dir, 'fs', 'slab-000000.tsd'), Buffer.from([0xde, 0xad, 0xbe, 0xef]));
    const second = await startAndStop();
    const warned = second.find((l) => l.tier === 'fs' && l.level === 40);
    expect(warned).toMatchObject({ msg: 'tier opened and dropped what it could not keep', note: expect.stringMatching(/dropped 1 torn slot/) });
  });
});

describe('the daemon while a tier fails', () => {
  it('logs failed transfers at warn level, one line per operation and tier a minute (a write-through tier whose writes all fail)', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-transfer-warn-'));
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(...chunk.toString().split('\n').filter(Boolean));
        done();
      },
    });
    const inner = encodeURIComponent(`fs://${dir}/fs?capacity=${64 * PAGE}`);
    const server = await TierSyncServer.start(
      parseServerConfig({
        model: 'transfer-warn-test@1',
        layout,
        tiers: [{ url: `host://?capacity=${16 * PAGE}`, name: 'host' }, { url: `fault://?inner=${inner}&writeErrors=1`, name: 'cold', writeThrough: true }],
        index: { path: ':memory:' },
        http: { port: 0 },
        peer: { enabled: false },
      }),
      { logger: pino({ level: 'info' }, sink) },
    );
    const { HostArena } = await import('@tiersync/native');
    const arena = HostArena.create({ capacity: 4 * PAGE });
    try {
      for (let i = 0; i < 4; i++) {
        const key = `0000fa11${i.toString(16).padStart(8, '0')}`;
        await server.ts.storeKeys([key], [{ arena, offset: i * PAGE, length: PAGE }]);
        await server.ts.flush();
      }
    } finally {
      arena.close();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
    const warned = lines.map((l) => JSON.parse(l) as { level: number; msg: string; op?: string; tier?: string; err?: string }).filter((l) => l.msg === 'transfer failed');
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ level: 40, op: 'move', tier: 'cold', err: expect.any(String) });
  });
});
