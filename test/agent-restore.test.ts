// A real engine end to end (issue 8): llama.cpp through node-llama-cpp on a generated GGUF model; a sequence's
// state is saved into tiersync, the sequence dropped, the state restored into a new sequence, and the greedy
// continuation must be the one of a run that never left the engine.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native';
// Plain ESM from the examples package (node-llama-cpp is its dependency, resolved from there).
// @ts-expect-error -- untyped .mjs example
import { greedy, loadGeneratedModel } from '../examples/agent-server/engine.mjs';
// @ts-expect-error -- untyped .mjs example
import { SessionStore } from '../examples/agent-server/session-store.mjs';

const THREADS = 1; // llama.cpp threads: with 2 cores and other work running, more threads spin and slow down
const GENERATE = 16;
const PAGE = 16 * 4096; // tiny model: 2 (K,V) x 4 layers x 4 KV heads x 64 x fp16 = 4 KiB per token, 16 tokens per page

/* eslint-disable @typescript-eslint/no-explicit-any */
let modelA: any;
let modelB: any;
let dir: string;
let prompt: number[];
const stores: any[] = [];

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-agent-'));
  modelA = (await loadGeneratedModel('tiny')).model;
  modelB = (await loadGeneratedModel({ seed: 2 })).model; // same shape, other weights
  prompt = modelA.tokenize('You are a careful assistant. Summarize the tiers: HBM, host RAM, local NVMe, object storage. '.repeat(1));
  expect(prompt.length).toBeGreaterThanOrEqual(90);
});

afterAll(async () => {
  for (const s of stores) await s.close().catch(() => undefined);
  await modelA?.dispose();
  await modelB?.dispose();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('agent server: llama.cpp state through tiersync', () => {
  it('restores a saved sequence with an identical greedy continuation, from HBM and after demotion to host RAM', async () => {
    // Reference: the whole prompt evaluated at once, never leaving the engine.
    const refCtx = await modelA.createContext({ contextSize: 512, sequences: 1, threads: THREADS });
    const reference = await greedy(refCtx.getSequence(), prompt, GENERATE);
    await refCtx.dispose();
    expect(reference).toHaveLength(GENERATE);

    const ctx = await modelA.createContext({ contextSize: 512, sequences: 2, threads: THREADS });
    // HBM (simulated) holds 8 pages, so a second session's save demotes the first one's pages to host RAM.
    const store = await SessionStore.open(ctx, { tiers: [{ url: `hbm://sim?capacity=${8 * PAGE}` }, { url: 'host://?capacity=64MiB' }] });
    stores.push(store);
    const head = prompt.slice(0, -1);
    const last = prompt.slice(-1);

    let seq = ctx.getSequence();
    await seq.evaluateWithoutGeneratingNewTokens(head);
    const saved = await store.save(seq);
    expect(saved).toMatchObject({ tokens: head.length, stored: saved.pages });
    seq.dispose();

    seq = ctx.getSequence();
    const r1 = await store.restore(seq, head);
    expect(r1).not.toBeNull();
    expect(r1.byTier).toEqual({ hbm: saved.pages });
    expect(await greedy(seq, last, GENERATE)).toEqual(reference);
    seq.dispose();

    // Another session pushes the first one's pages down to host RAM.
    const other = modelA.tokenize('A different conversation about eviction policies, watermarks and write-through. '.repeat(1));
    seq = ctx.getSequence();
    await seq.evaluateWithoutGeneratingNewTokens(other);
    await store.save(seq);
    seq.dispose();

    seq = ctx.getSequence();
    const r2 = await store.restore(seq, head);
    expect(r2).not.toBeNull();
    expect(r2.byTier.host).toBeGreaterThan(0);
    expect(await greedy(seq, last, GENERATE)).toEqual(reference);
    seq.dispose();

    // A prefix never saved is a miss (recompute), not an error.
    seq = ctx.getSequence();
    expect(await store.restore(seq, prompt)).toBeNull();
    seq.dispose();
    console.log(`[agent-restore] state ${saved.bytes} B / ${saved.pages} pages; save ms`, saved.timings, 'restore ms (hbm)', r1.timings, '(host)', r2.timings);
    await ctx.dispose();
  });

  it('refuses a state saved for another model or context shape before it reaches llama.cpp (typed error)', async () => {
    const ctxA = await modelA.createContext({ contextSize: 512, sequences: 1, threads: THREADS });
    const folder = path.join(dir, 'fs-tier');
    const store = await SessionStore.open(ctxA, { tiers: [{ url: 'host://?capacity=16MiB' }, { url: `fs://${folder}?capacity=64MiB`, writeThrough: true }] });
    const head = prompt.slice(0, -1);
    const seqA = ctxA.getSequence();
    await seqA.evaluateWithoutGeneratingNewTokens(head);
    await store.save(seqA);
    await store.tierSync.flush();

    const expectRefused = async (p: Promise<unknown>) => {
      const e = await p.then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(e).toBeInstanceOf(TierSyncError);
      expect((e as TierSyncError).code).toBe('ERR_GEOMETRY_MISMATCH');
    };
    // Another model (same shape, other weights): refused by the store, the sequence untouched.
    const ctxB = await modelB.createContext({ contextSize: 512, sequences: 1, threads: THREADS });
    const seqB = ctxB.getSequence();
    await expectRefused(store.restore(seqB, head));
    await expectRefused(store.save(seqB));
    expect(seqB.contextTokens).toEqual([]);
    // Same model, another context shape.
    const ctxA2 = await modelA.createContext({ contextSize: 1024, sequences: 1, threads: THREADS });
    await expectRefused(store.restore(ctxA2.getSequence(), head));
    await store.close();

    // The fs tier's pages were written under model A's fingerprint: a hierarchy for model B refuses the folder.
    await expectRefused(SessionStore.open(ctxB, { tiers: [{ url: `fs://${folder}?capacity=64MiB` }] }));
    await Promise.all([ctxA.dispose(), ctxB.dispose(), ctxA2.dispose()]);
  });
});
