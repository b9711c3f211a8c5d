// The agent server end to end (issue 8): llama.cpp through node-llama-cpp on a generated GGUF model, an HTTP chat
// server with more sessions than context sequences, so sessions are parked into tiersync (token-range pages, host RAM
// then an fs tier under pressure) and restored on their next turn. Every turn's greedy tokens must be the ones of a
// run that never left the engine. Also: prefix pages shared between sessions, and refusal of foreign states.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native';
// Plain ESM from the examples package (node-llama-cpp is its dependency, resolved from there).
// @ts-expect-error -- untyped .mjs example
import { greedy, loadGeneratedModel } from '../examples/agent-server/engine.mjs';
// @ts-expect-error -- untyped .mjs example
import { PrefixStore } from '../examples/agent-server/prefix-store.mjs';
// @ts-expect-error -- untyped .mjs example
import { AgentServer } from '../examples/agent-server/server.mjs';

/* eslint-disable @typescript-eslint/no-explicit-any */
const THREADS = 1; // llama.cpp threads: 2 shared cores
const CONTEXT = 1024;
const PAGE = 16 * 4096; // tiny model: 2 (K,V) x 4 layers x 4 KV heads x 64 x fp16 = 4 KiB per token, 16 tokens per page
const SYSTEM = 'System: you are a careful assistant. You answer questions about memory tiers: HBM, host RAM, NVMe. ';
const TURNS = (who: string) => [`${SYSTEM}User ${who}: what is a page?`, 'And a tier?', `Thanks, ${who} again: why demote?`];
const MAX_TOKENS = 8;

let modelA: any;
let modelB: any;
let dir: string;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-agent-server-'));
  modelA = (await loadGeneratedModel('tiny')).model;
  modelB = (await loadGeneratedModel({ seed: 2 })).model; // same shape, other weights
});

afterAll(async () => {
  await modelA?.dispose();
  await modelB?.dispose();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** The conversation in a sequence of its own that never leaves the engine: the tokens every turn must give. */
async function reference(turns: string[]): Promise<number[][]> {
  const ctx = await modelA.createContext({ contextSize: CONTEXT, sequences: 1, threads: THREADS, flashAttention: true });
  try {
    const seq = ctx.getSequence();
    let pending: number[] = [];
    const outs: number[][] = [];
    for (const text of turns) {
      const input = pending.concat(modelA.tokenize(text));
      const before = seq.contextTokens.length;
      const out = await greedy(seq, input, MAX_TOKENS);
      outs.push(out);
      pending = input.concat(out).slice(seq.contextTokens.length - before);
    }
    return outs;
  } finally {
    await ctx.dispose();
  }
}

async function refused(p: Promise<unknown>, code = 'ERR_GEOMETRY_MISMATCH'): Promise<void> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(TierSyncError);
  expect((e as TierSyncError).code).toBe(code);
}

describe('agent server: many sessions over few sequences, KV parked in tiersync', () => {
  it('gives every session the tokens of a run that never left the engine, through saves, demotion and restores', async () => {
    const ids = ['ana', 'bo', 'cy', 'di', 'ed'];
    const expected = new Map<string, number[][]>();
    for (const id of ids) expected.set(id, await reference(TURNS(id)));

    const server = await AgentServer.create({
      model: modelA,
      sequences: 2,
      contextSize: CONTEXT,
      threads: THREADS,
      // Host RAM holds 8 pages: parking five sessions pushes pages down to the fs tier.
      tiers: [{ url: `host://?capacity=${8 * PAGE}` }, { url: `fs://${path.join(dir, 'fs-tier')}?capacity=64MiB` }],
    });
    try {
      const port = await server.listen(0);
      const post = async (id: string, text: string) => {
        const res = await fetch(`http://127.0.0.1:${port}/sessions/${id}/turns`, { method: 'POST', body: JSON.stringify({ text, maxTokens: MAX_TOKENS }), signal: AbortSignal.timeout(60_000) });
        expect(res.status).toBe(200);
        return (await res.json()) as any;
      };
      // All sessions at once; each session's turns in order.
      const replies = await Promise.all(
        ids.map(async (id) => {
          const rs = [];
          for (const text of TURNS(id)) rs.push(await post(id, text));
          return rs;
        }),
      );
      const all = replies.flat();
      for (const [i, id] of ids.entries()) expect(replies[i]!.map((r) => r.tokens)).toEqual(expected.get(id));

      const stats = server.stats();
      expect(stats.counters.turns).toBe(ids.length * 3);
      expect(stats.counters.parks).toBeGreaterThan(0);
      expect(stats.counters.recomputes).toBe(0);
      expect(stats.counters.saveErrors + stats.counters.restoreErrors).toBe(0);
      // Sessions came back from both tiers.
      expect(all.some((r) => r.source === 'restored' && r.restore.byTier.fs > 0)).toBe(true);
      expect(all.some((r) => r.source === 'restored' && r.restore.byTier.host > 0)).toBe(true);
      // Prefix sharing: some session's first turn started from the system prompt pages another session stored.
      const systemPages = Math.floor(modelA.tokenize(SYSTEM).length / 16);
      expect(systemPages).toBeGreaterThanOrEqual(4);
      expect(all.some((r) => r.source === 'restored' && replies.some((rs) => rs[0] === r) && r.restoredTokens >= systemPages * 16)).toBe(true);

      // The API refuses bad input with a typed error and a 4xx.
      const bad = await fetch(`http://127.0.0.1:${port}/sessions/ana/turns`, { method: 'POST', body: JSON.stringify({ text: '' }) });
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as any).error.code).toBe('ERR_INVALID_ARGUMENT');
      const info = (await (await fetch(`http://127.0.0.1:${port}/sessions/ana`)).json()) as any;
      expect(info.turns).toBe(3);
      // A first turn refused (over the context size) leaves no session behind.
      const sessions = ((await (await fetch(`http://127.0.0.1:${port}/stats`)).json()) as any).sessions;
      const tooLong = await fetch(`http://127.0.0.1:${port}/sessions/never/turns`, { method: 'POST', body: JSON.stringify({ tokens: Array(CONTEXT + 1).fill(1) }) });
      expect(tooLong.status).toBe(413);
      expect((await fetch(`http://127.0.0.1:${port}/sessions/never`)).status).toBe(404);
      expect(((await (await fetch(`http://127.0.0.1:${port}/stats`)).json()) as any).sessions).toEqual(sessions);
      console.log('[agent-server] stats', JSON.stringify(stats));
    } finally {
      await server.close();
    }
  });

  it('keeps a session waiting on a tool call over others under pressure (retention hints, session-aware host tier)', async () => {
    // One sequence: every new session parks the previous one. Host RAM holds about two parked sessions.
    const run = async (policy: string) => {
      const server = await AgentServer.create({ model: modelA, sequences: 1, contextSize: CONTEXT, threads: THREADS, tiers: [{ url: `host://?capacity=${24 * PAGE}`, policy }] });
      try {
        await server.turn('tool', { text: TURNS('tool')[0], maxTokens: MAX_TOKENS, awaitingToolMs: 600_000 });
        for (const id of ['x1', 'x2', 'x3']) await server.turn(id, { text: `${id}: ${TURNS(id)[0]!.slice(SYSTEM.length)} ${'more words '.repeat(12)}`, maxTokens: MAX_TOKENS });
        // A final turn: the session is not saved when parked, and nothing is refused.
        await server.turn('x4', { text: 'x4: short and done', maxTokens: MAX_TOKENS, final: true });
        const back = await server.turn('tool', { text: TURNS('tool')[1], maxTokens: MAX_TOKENS });
        expect(await server.deleteSession('tool')).toBe(true);
        return back;
      } finally {
        await server.close();
      }
    };
    const hinted = await run('session-aware:lru');
    const plain = await run('lru');
    console.log('[agent-server] tool session back:', `hinted ${hinted.source}:${hinted.restoredTokens}`, `plain ${plain.source}:${plain.restoredTokens}`);
    expect(hinted.source).toBe('restored');
    expect(hinted.restoredTokens).toBeGreaterThan(plain.restoredTokens);
    await refused(
      AgentServer.create({ model: modelA, sequences: 1, contextSize: CONTEXT, threads: THREADS }).then(async (s) => {
        try {
          await s.turn('z', { text: 'hi', awaitingToolMs: -1 });
        } finally {
          await s.close();
        }
      }),
      'ERR_INVALID_ARGUMENT',
    );
  });

  it('recomputes what no tier holds any more and still gives the same tokens', async () => {
    const ids = ['p', 'q', 'r'];
    const expected = new Map<string, number[][]>();
    for (const id of ids) expected.set(id, await reference(TURNS(id)));
    // One tier of 3 pages: most parked pages are evicted for good, so sessions come back partly or not at all.
    const server = await AgentServer.create({ model: modelA, sequences: 1, contextSize: CONTEXT, threads: THREADS, tiers: [{ url: `host://?capacity=${3 * PAGE}` }] });
    try {
      const replies = await Promise.all(
        ids.map(async (id) => {
          const rs = [];
          for (const text of TURNS(id)) rs.push(await server.turn(id, { text, maxTokens: MAX_TOKENS }));
          return rs;
        }),
      );
      for (const [i, id] of ids.entries()) expect(replies[i]!.map((r: any) => r.tokens)).toEqual(expected.get(id));
      const sources = new Set(replies.flat().map((r: any) => r.source));
      console.log('[agent-server] under eviction:', replies.flat().map((r: any) => `${r.session}:${r.source}:${r.restoredTokens}+${r.evaluatedTokens}`).join(' '), JSON.stringify(server.stats().counters));
      expect(sources.has('recomputed') || replies.flat().some((r: any) => r.source === 'restored' && r.evaluatedTokens > 40)).toBe(true);
    } finally {
      await server.close();
    }
  });

  it('parks an idle session and brings it back with the same tokens', async () => {
    const turns = TURNS('idle');
    const expected = await reference(turns);
    const server = await AgentServer.create({ model: modelA, sequences: 1, contextSize: CONTEXT, threads: THREADS, idleMs: 50, tiers: [{ url: 'host://?capacity=8MiB' }] });
    try {
      const first = await server.turn('idle', { text: turns[0], maxTokens: MAX_TOKENS });
      expect(first.source).toBe('new');
      const deadline = Date.now() + 10_000;
      while (server.stats().live > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(server.stats()).toMatchObject({ live: 0, counters: { parks: 1 } });
      const second = await server.turn('idle', { text: turns[1], maxTokens: MAX_TOKENS });
      expect(second).toMatchObject({ source: 'restored', restoredTokens: first.contextTokens });
      expect([first.tokens, second.tokens]).toEqual(expected.slice(0, 2));
    } finally {
      await server.close();
    }
  });

  it('shares the pages of a common prefix and rebuilds a state for the longest cached prefix', async () => {
    const ctx = await modelA.createContext({ contextSize: CONTEXT, sequences: 1, threads: THREADS, flashAttention: true });
    const store = await PrefixStore.open(ctx, { tiers: [{ url: 'host://?capacity=16MiB' }] });
    try {
      const a = modelA.tokenize(`${SYSTEM}User a: tell me about eviction.`);
      const b = modelA.tokenize(`${SYSTEM}User b: and what about write-through caching?`);
      const shared = Math.floor(modelA.tokenize(SYSTEM).length / 16);
      let seq = ctx.getSequence();
      await seq.evaluateWithoutGeneratingNewTokens(a);
      const sa = await store.save(seq);
      // Its full pages and its tail (the tokens after the last full page, kept for this conversation only).
      expect(sa).toMatchObject({ pages: Math.floor(a.length / 16), tail: a.length % 16, stored: Math.floor(a.length / 16) + 1, existing: 0 });
      seq.dispose();

      // Session b: its system-prompt pages come from a's save; only the rest is evaluated.
      const refB = await reference([`${SYSTEM}User b: and what about write-through caching?`]);
      seq = ctx.getSequence();
      const r = await store.restore(seq, b.slice(0, -1));
      expect(r.tokens).toBeGreaterThanOrEqual(shared * 16);
      expect(await greedy(seq, b.slice(r.tokens), MAX_TOKENS)).toEqual(refB[0]);
      // Saving b stores only its own pages (and its tail).
      const held = seq.contextTokens.slice();
      const sb = await store.save(seq);
      expect(sb.existing).toBe(r.pages);
      expect(sb.stored).toBe(sb.pages - r.pages + (sb.tail ? 1 : 0));
      seq.dispose();
      // b comes back exactly, tail included, with the same next token.
      seq = ctx.getSequence();
      const back = await store.restore(seq, held);
      expect(back).toMatchObject({ tokens: held.length, tail: held.length % 16 });
      expect(seq.contextTokens).toEqual(held);
      seq.dispose();
      // Nothing cached for an unrelated prompt: a miss, not an error.
      seq = ctx.getSequence();
      expect(await store.restore(seq, modelA.tokenize('Completely unrelated words about gardening and weather.'))).toBeNull();
      seq.dispose();
    } finally {
      await store.close();
      await ctx.dispose();
    }
  });

  it('survives llama.cpp refusing a rebuilt state: typed error, pages unpinned, the next restore works', async () => {
    const ctx = await modelA.createContext({ contextSize: CONTEXT, sequences: 2, threads: THREADS, flashAttention: true });
    const store = await PrefixStore.open(ctx, { tiers: [{ url: 'host://?capacity=16MiB' }] });
    try {
      const tokens = modelA.tokenize(`${SYSTEM}User x: one more question.`);
      let seq = ctx.getSequence();
      await seq.evaluateWithoutGeneratingNewTokens(tokens);
      await store.save(seq);
      seq.dispose();
      // A state file naming another stream count makes llama.cpp throw ("n_stream mismatch") inside loadStateFromFile.
      const right = store.nStream;
      store.nStream = right + 3;
      seq = ctx.getSequence();
      await refused(store.restore(seq, tokens), 'ERR_PROTOCOL');
      expect(seq.contextTokens).toEqual([]);
      seq.dispose();
      store.nStream = right;
      const s = store.tierSync.stats();
      expect(s.index.pins).toBe(0);
      seq = ctx.getSequence();
      const r = await store.restore(seq, tokens);
      expect(r).toMatchObject({ tokens: tokens.length });
      expect(seq.contextTokens).toEqual(tokens);
      seq.dispose();
    } finally {
      await store.close();
      await ctx.dispose();
    }
  });

  it('refuses pages of another model or KV layout before they reach llama.cpp (typed error)', async () => {
    const folder = path.join(dir, 'fs-refuse');
    const ctxA = await modelA.createContext({ contextSize: 512, sequences: 1, threads: THREADS, flashAttention: true });
    const ctxB = await modelB.createContext({ contextSize: 512, sequences: 1, threads: THREADS, flashAttention: true });
    const ctxNoFa = await modelA.createContext({ contextSize: 512, sequences: 1, threads: THREADS, flashAttention: false });
    try {
      const store = await PrefixStore.open(ctxA, { tiers: [{ url: 'host://?capacity=16MiB' }, { url: `fs://${folder}?capacity=64MiB`, writeThrough: true }] });
      const tokens = modelA.tokenize(SYSTEM);
      const seqA = ctxA.getSequence();
      await seqA.evaluateWithoutGeneratingNewTokens(tokens);
      expect((await store.save(seqA)).stored).toBeGreaterThan(0);
      await store.tierSync.flush();

      // Another model (same shape, other weights): refused, its sequence untouched.
      const seqB = ctxB.getSequence();
      await refused(store.restore(seqB, tokens));
      await refused(store.save(seqB));
      expect(seqB.contextTokens).toEqual([]);
      // Same model, V transposed (no flash attention): another KV layout, refused too.
      await refused(store.restore(ctxNoFa.getSequence(), tokens));
      await store.close();

      // The fs tier's pages were written under model A's fingerprint: a store for model B refuses the folder.
      await refused(PrefixStore.open(ctxB, { tiers: [{ url: `fs://${folder}?capacity=64MiB` }] }));
      // A transposed-V context cannot be paged at all.
      await refused(PrefixStore.open(ctxNoFa, { tiers: [{ url: 'host://?capacity=1MiB' }] }), 'ERR_UNSUPPORTED');
    } finally {
      await Promise.all([ctxA.dispose(), ctxB.dispose(), ctxNoFa.dispose()]);
    }
  });
});
