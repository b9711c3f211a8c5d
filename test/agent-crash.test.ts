// A crash in the engine while a session is restored cannot corrupt the index (issue 8). A child process restores a
// parked session from a durable hierarchy (SQLite index file + fs tier) and is killed (SIGKILL) at the moment
// llama.cpp would read the rebuilt state; the parent then reopens the same index and folder, and the session comes
// back with the continuation of a run that never left the engine. The dead process's scratch file is swept.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// @ts-expect-error -- untyped .mjs example
import { greedy, loadGeneratedModel } from '../examples/agent-server/engine.mjs';
// @ts-expect-error -- untyped .mjs example
import { PrefixStore } from '../examples/agent-server/prefix-store.mjs';

/* eslint-disable @typescript-eslint/no-explicit-any */
const THREADS = 1;
const here = path.dirname(new URL(import.meta.url).pathname);
const example = (f: string) => pathToFileURL(path.join(here, '../examples/agent-server', f)).href;

// The child: opens the same durable hierarchy and dies inside what stands for llama.cpp's state load.
const CHILD = `
const [engineUrl, storeUrl, indexPath, folder, tokensJson] = process.argv.slice(2);
const { loadGeneratedModel } = await import(engineUrl);
const { PrefixStore } = await import(storeUrl);
const { model } = await loadGeneratedModel('tiny');
const ctx = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1, flashAttention: true });
const store = await PrefixStore.open(ctx, { tiers: [{ url: 'fs://' + folder + '?capacity=64MiB' }], index: { path: indexPath, synchronous: 'full' } });
const seq = ctx.getSequence();
seq.loadStateFromFile = async () => {
  process.stdout.write('crashing\\n');
  process.kill(process.pid, 'SIGKILL');
  await new Promise(() => undefined);
};
await store.restore(seq, JSON.parse(tokensJson));
process.stdout.write('not reached\\n');
`;

let model: any;
let dir: string;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-agent-crash-'));
  model = (await loadGeneratedModel('tiny')).model;
});

afterAll(async () => {
  await model?.dispose();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('agent server: a crash in the engine during a restore', () => {
  it('leaves the durable index and tier intact: the session restores after the crash with the same tokens', async () => {
    const indexPath = path.join(dir, 'index.sqlite');
    const folder = path.join(dir, 'fs-tier');
    const open = (ctx: any) => PrefixStore.open(ctx, { tiers: [{ url: `fs://${folder}?capacity=64MiB` }], index: { path: indexPath, synchronous: 'full' } });
    const tokens: number[] = model.tokenize('System: a durable session. User: what survives a crash of the engine? Assistant: the index.');
    const head = tokens.slice(0, -1);

    const ctx = await model.createContext({ contextSize: 1024, sequences: 1, threads: THREADS, flashAttention: true });
    try {
      let seq = ctx.getSequence();
      const reference = await greedy(seq, tokens, 8);
      seq.dispose();
      seq = ctx.getSequence();
      await seq.evaluateWithoutGeneratingNewTokens(head);
      let store = await open(ctx);
      const saved = await store.save(seq);
      expect(saved.stored).toBeGreaterThan(0);
      await store.close();
      seq.dispose();

      const script = path.join(dir, 'child.mjs');
      fs.writeFileSync(script, CHILD);
      const child = spawnSync(process.execPath, [script, example('engine.mjs'), example('prefix-store.mjs'), indexPath, folder, JSON.stringify(head)], { encoding: 'utf8', timeout: 60_000 });
      expect(child.signal).toBe('SIGKILL');
      expect(child.stdout).toContain('crashing');
      expect(child.stdout).not.toContain('not reached');
      const stale = `tiersync-seq-${child.pid}-`;
      const shm = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
      expect(fs.readdirSync(shm).some((n) => n.startsWith(stale))).toBe(true);

      store = await open(ctx);
      try {
        expect(fs.readdirSync(shm).some((n) => n.startsWith(stale))).toBe(false);
        seq = ctx.getSequence();
        const r = await store.restore(seq, head);
        expect(r).toMatchObject({ tokens: head.length });
        expect(await greedy(seq, tokens.slice(r.tokens), 8)).toEqual(reference);
        seq.dispose();
      } finally {
        await store.close();
      }
    } finally {
      await ctx.dispose();
    }
  });
});
