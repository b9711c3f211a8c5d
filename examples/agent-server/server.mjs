// An HTTP chat server on llama.cpp (node-llama-cpp) with many concurrent sessions and tiersync underneath.
//
// The engine has a few context sequences (KV slots); the server has any number of sessions (conversations). A session
// holds a sequence while it is in use. When a turn arrives for a session without one and none is free, the least
// recently used session is parked: its KV pages are saved into tiersync (PrefixStore: token-range pages, so sessions
// sharing a prefix share pages) and its sequence is released. A session also parks after `idleMs` without a turn.
// On its next turn the longest cached prefix of its conversation is restored from whichever tier holds it (host RAM,
// or the fs tier after pressure moved it down) and only the rest is evaluated; a new session whose system prompt
// another session already stored starts from those pages.
//
// Engine work (turns, saves, restores) runs one at a time, in arrival order. Two reasons: llama.cpp's numerics depend
// on how tokens are grouped into batches (a turn batched with another session's tokens may not reproduce the tokens
// it would give alone), and greedy continuations must be identical whether or not a session left the engine; and on
// a CPU the batch would share the same cores anyway. HTTP handling, parsing and waiting stay concurrent.
//
// Crash safety: tiersync pins pages only while they are copied into a private host arena; llama.cpp then reads a
// private tmpfs file. Nothing llama.cpp does can touch the index or a tier's memory, and the index (SQLite, WAL)
// commits only completed stores.
//
// API (JSON):
//   POST   /sessions/:id/turns  { "text": "...", or "tokens": [..], "maxTokens": 32,
//                                  "awaitingToolMs": 5000 (the turn ended in a tool call of about that long),
//                                  "final": true (the session is done) }
//          -> { session, tokens, text, source: "live" | "restored" | "recomputed" | "new", restoredTokens,
//               evaluatedTokens, contextTokens, ttftMs, restore?: { byTier, timings } }
//   GET    /sessions/:id        -> { session, contextTokens, live, turns }
//   DELETE /sessions/:id        -> { deleted: true } (its cached pages stay for sessions sharing them, marked
//                                  finished: a session-aware tier lets them go first)
//
// Retention hints: a session parked while it waits on a tool call is stored with `{ expectedReturnMs }`; a final
// one is not saved when parked (nothing of its own comes back) and, like a deleted one, what is cached of it is
// marked `{ finished: true }`. With a `session-aware:<policy>` tier (the default host tier runs
// session-aware:lru) those pages are ordered as victims by it: finished first, expected back soon last. Hints are
// soft: they never refuse a store nor hold a page the way a pin does.
//   GET    /stats               -> sessions, live sequences, counters, tiers
//
//   node examples/agent-server/server.mjs [--model tiny] [--port 8080] [--sequences 2] [--context-size 2048]
//        [--threads 1] [--host-capacity 256MiB] [--fs DIR] [--fs-capacity 4GiB] [--idle-ms 30000]
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { TierSyncError } from '@tiersync/core';
import { loadGeneratedModel } from './engine.mjs';
import { PrefixStore } from './prefix-store.mjs';

const SESSION_ID = /^[A-Za-z0-9_.-]{1,128}$/;
const MAX_BODY_BYTES = 1 << 20;
const STATUS_OF = { ERR_INVALID_ARGUMENT: 400, ERR_OUT_OF_RANGE: 413, ERR_NOT_FOUND: 404, ERR_TIMEOUT: 503, ERR_UNAVAILABLE: 503 };

/** A FIFO mutex whose waiters give up after a deadline. */
class EngineLock {
  #tail = Promise.resolve();
  run(fn, timeoutMs) {
    const prev = this.#tail;
    let release;
    const mine = new Promise((r) => (release = r));
    this.#tail = prev.then(() => mine);
    let timer;
    let timedOut = false;
    const turn = new Promise((resolve, reject) => {
      timer = setTimeout(() => {
        timedOut = true;
        reject(new TierSyncError(`the engine stayed busy for ${timeoutMs} ms`, 'ERR_TIMEOUT'));
      }, timeoutMs);
      prev.then(() => {
        clearTimeout(timer);
        if (timedOut) return release();
        Promise.resolve()
          .then(fn)
          .then(resolve, reject)
          .finally(release);
      });
    });
    return turn;
  }
}

export class AgentServer {
  /**
   * @param options.model        a loaded node-llama-cpp model, identified (identifyModel / loadGeneratedModel)
   * @param options.tiers        TierSync tiers, fastest first (default: host RAM 256 MiB only, policy session-aware:lru)
   * @param options.sequences    context sequences (KV slots), default 2
   * @param options.contextSize  tokens per sequence, default 2048
   * @param options.threads      llama.cpp threads, default 1
   * @param options.idleMs       park a session after this long without a turn (0: only when its slot is needed)
   * @param options.maxTokens    default and upper bound of generated tokens per turn, default 32 / 512
   * @param options.waitMs       longest wait for the engine before a turn fails with 503, default 120000
   */
  static async create({ model, tiers, index, sequences = 2, contextSize = 2048, threads = 1, tokensPerPage = 16, idleMs = 0, maxTokens = 32, waitMs = 120_000 } = {}) {
    const context = await model.createContext({ contextSize, sequences, threads, flashAttention: true });
    try {
      const store = await PrefixStore.open(context, { tiers: tiers ?? [{ url: 'host://?capacity=256MiB', policy: 'session-aware:lru' }], index, tokensPerPage });
      return new AgentServer({ model, context, store, idleMs, maxTokens, waitMs });
    } catch (e) {
      await context.dispose();
      throw e;
    }
  }

  #sessions = new Map();
  #lock = new EngineLock();
  #http;
  counters = { turns: 0, parks: 0, restores: 0, restoredTokens: 0, recomputes: 0, recomputedTokens: 0, evaluatedTokens: 0, saveErrors: 0, restoreErrors: 0 };

  constructor({ model, context, store, idleMs, maxTokens, waitMs }) {
    Object.assign(this, { model, context, store, idleMs, maxTokens, waitMs });
    this.vocabularySize = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? 2 ** 31;
    this.#http = http.createServer((req, res) => void this.#handle(req, res));
    this.#http.headersTimeout = 10_000;
    this.#http.requestTimeout = waitMs + 60_000;
  }

  /** Listens on `host:port` (port 0: any free one); resolves to the bound port. */
  listen(port = 0, host = '127.0.0.1') {
    return new Promise((resolve, reject) => {
      this.#http.once('error', reject);
      this.#http.listen(port, host, () => resolve(this.#http.address().port));
    });
  }

  /**
   * One turn of session `id`: `input` tokens (or `text`) appended to its conversation, `maxTokens` generated
   * greedily. Returns what the HTTP API returns.
   */
  turn(id, { text, tokens, maxTokens = this.maxTokens, awaitingToolMs, final } = {}) {
    if (typeof id !== 'string' || !SESSION_ID.test(id)) throw new TierSyncError('session id must be 1..128 characters of [A-Za-z0-9_.-]', 'ERR_INVALID_ARGUMENT');
    if (awaitingToolMs !== undefined && (typeof awaitingToolMs !== 'number' || !Number.isFinite(awaitingToolMs) || awaitingToolMs < 0)) {
      throw new TierSyncError(`awaitingToolMs must be a number of ms >= 0, got ${awaitingToolMs}`, 'ERR_INVALID_ARGUMENT');
    }
    if (final !== undefined && typeof final !== 'boolean') throw new TierSyncError(`final must be a boolean, got ${final}`, 'ERR_INVALID_ARGUMENT');
    if (final && awaitingToolMs !== undefined) throw new TierSyncError('a final turn awaits no tool call', 'ERR_INVALID_ARGUMENT');
    // What the store is told when this session is parked after the turn (see the file's doc).
    const retention = final ? { finished: true } : awaitingToolMs !== undefined ? { expectedReturnMs: awaitingToolMs } : undefined;
    if (!Number.isInteger(maxTokens) || maxTokens < 1 || maxTokens > 512) throw new TierSyncError(`maxTokens must be an integer in [1, 512], got ${maxTokens}`, 'ERR_INVALID_ARGUMENT');
    let added;
    if (tokens !== undefined) {
      if (!Array.isArray(tokens) || tokens.length === 0 || tokens.some((t) => !Number.isInteger(t) || t < 0 || t >= this.vocabularySize)) {
        throw new TierSyncError(`tokens must be a non-empty array of token ids in [0, ${this.vocabularySize})`, 'ERR_INVALID_ARGUMENT');
      }
      added = tokens;
    } else if (typeof text === 'string' && text.length > 0) {
      added = this.model.tokenize(text);
    } else {
      throw new TierSyncError('a turn needs "text" (a non-empty string) or "tokens"', 'ERR_INVALID_ARGUMENT');
    }
    const t0 = performance.now();
    return this.#lock.run(() => this.#turn(id, added, maxTokens, t0, retention), this.waitMs);
  }

  async #turn(id, added, maxTokens, t0, retention) {
    // A new session is created only once its first turn is accepted: a refused one leaves nothing behind.
    const s = this.#sessions.get(id) ?? { id, tokens: [], pending: [], sequence: null, turns: 0, lastUsed: 0, idleTimer: undefined, retention: undefined };
    const input = s.pending.concat(added);
    const all = s.tokens.concat(input);
    if (all.length + maxTokens > this.context.contextSize) {
      throw new TierSyncError(`session ${id} would reach ${all.length + maxTokens} tokens, over the context size ${this.context.contextSize}`, 'ERR_OUT_OF_RANGE');
    }
    clearTimeout(s.idleTimer);
    this.#sessions.set(id, s);
    let source = 'live';
    let restoredTokens = 0;
    let restore;
    let toEvaluate = input;
    if (!s.sequence) {
      s.sequence = await this.#acquireSequence();
      // A parked session comes back as saved (its tail included); a new one from the longest cached prefix of its
      // input, all but the last token (a state holds no logits: the last token is evaluated).
      let r = null;
      try {
        r = await this.store.restore(s.sequence, s.tokens.length ? s.tokens : all.slice(0, -1));
      } catch (e) {
        // A failed load leaves the sequence to llama.cpp's cleanup: start again from an empty one and recompute.
        this.counters.restoreErrors++;
        this.emitWarning?.(e);
        s.sequence.dispose();
        s.sequence = this.context.getSequence();
      }
      restoredTokens = r?.tokens ?? 0;
      if (r) {
        restore = { byTier: r.byTier, timings: r.timings };
        this.counters.restores++;
        this.counters.restoredTokens += restoredTokens;
      }
      source = r ? 'restored' : s.tokens.length ? 'recomputed' : 'new';
      if (source === 'recomputed') {
        this.counters.recomputes++;
        this.counters.recomputedTokens += s.tokens.length;
      }
      toEvaluate = all.slice(restoredTokens);
    }
    const out = [];
    let ttftMs;
    for await (const t of s.sequence.evaluate(toEvaluate, { temperature: 0 })) {
      ttftMs ??= performance.now() - t0;
      out.push(t);
      if (out.length >= maxTokens) break;
    }
    this.counters.turns++;
    this.counters.evaluatedTokens += toEvaluate.length;
    // The last generated token is not in the KV yet: it leads the next turn's input.
    const spoken = all.concat(out);
    const held = s.sequence.contextTokens;
    if (held.length > spoken.length || held.some((t, i) => t !== spoken[i])) throw new TierSyncError(`session ${id}: the sequence holds tokens the conversation does not`, 'ERR_PROTOCOL');
    s.tokens = held.slice();
    s.pending = spoken.slice(held.length);
    s.turns++;
    s.lastUsed = performance.now();
    s.retention = retention;
    if (this.idleMs > 0) {
      s.idleTimer = setTimeout(() => void this.#lock.run(() => this.#parkIfIdle(s), this.waitMs).catch(() => undefined), this.idleMs);
      s.idleTimer.unref();
    }
    return {
      session: id,
      tokens: out,
      text: this.model.detokenize(out),
      source,
      restoredTokens,
      evaluatedTokens: toEvaluate.length,
      contextTokens: s.tokens.length,
      ttftMs,
      ...(restore ? { restore } : {}),
    };
  }

  /** A free sequence, parking the least recently used session when none is left. Runs under the engine lock. */
  async #acquireSequence() {
    if (this.context.sequencesLeft > 0) return this.context.getSequence();
    let victim;
    for (const s of this.#sessions.values()) if (s.sequence && (!victim || s.lastUsed < victim.lastUsed)) victim = s;
    if (!victim) throw new TierSyncError('no context sequence is free and no session holds one', 'ERR_UNAVAILABLE');
    await this.#park(victim);
    return this.context.getSequence();
  }

  /** Saves a session's pages into tiersync and releases its sequence (a failed save only costs a recompute). */
  async #park(s) {
    clearTimeout(s.idleTimer);
    try {
      // A finished session's own pages have no future: nothing is saved, and what is cached of it goes first.
      if (s.retention?.finished) this.store.retain(s.sequence.contextTokens.slice(), s.retention);
      else await this.store.save(s.sequence, s.retention ? { retention: s.retention } : {});
    } catch (e) {
      this.counters.saveErrors++;
      this.emitWarning?.(e);
    }
    s.sequence.dispose();
    s.sequence = null;
    this.counters.parks++;
  }

  /** The idle timer fired: every turn clears it, so the session has had none since (one queued behind may follow). */
  async #parkIfIdle(s) {
    if (s.sequence && this.#sessions.get(s.id) === s) await this.#park(s);
  }

  /** Forgets a session (its pages stay cached for others sharing them). */
  deleteSession(id) {
    return this.#lock.run(async () => {
      const s = this.#sessions.get(id);
      if (!s) return false;
      clearTimeout(s.idleTimer);
      s.sequence?.dispose();
      this.#sessions.delete(id);
      // Its pages stay cached (sessions sharing its prefix may use them) but nothing of its own will come back.
      if (s.tokens.length) this.store.retain(s.tokens, { finished: true });
      return true;
    }, this.waitMs);
  }

  stats() {
    const sessions = [...this.#sessions.values()];
    return {
      sessions: sessions.length,
      live: sessions.filter((s) => s.sequence).length,
      sequences: this.context.totalSequences,
      counters: { ...this.counters },
      tiers: this.store.tierSync.stats().tiers.map((t) => ({ name: t.name, usedPages: t.usedPages, capacityPages: t.capacityPages })),
    };
  }

  async #handle(req, res) {
    const reply = (status, body) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    try {
      const url = new URL(req.url ?? '/', 'http://localhost');
      const m = /^\/sessions\/([^/]+)(\/turns)?$/.exec(url.pathname);
      if (req.method === 'GET' && url.pathname === '/stats') return reply(200, this.stats());
      if (m && req.method === 'POST' && m[2]) {
        const body = await readJson(req);
        return reply(200, await this.turn(decodeURIComponent(m[1]), body));
      }
      if (m && !m[2] && req.method === 'GET') {
        const s = this.#sessions.get(decodeURIComponent(m[1]));
        if (!s) return reply(404, { error: { code: 'ERR_NOT_FOUND', message: 'no such session' } });
        return reply(200, { session: s.id, contextTokens: s.tokens.length, live: Boolean(s.sequence), turns: s.turns });
      }
      if (m && !m[2] && req.method === 'DELETE') return reply(200, { deleted: await this.deleteSession(decodeURIComponent(m[1])) });
      return reply(404, { error: { code: 'ERR_NOT_FOUND', message: `no route ${req.method} ${url.pathname}` } });
    } catch (e) {
      const code = e instanceof TierSyncError ? e.code : 'ERR_INTERNAL';
      return reply(STATUS_OF[code] ?? 500, { error: { code, message: e instanceof Error ? e.message : String(e) } });
    }
  }

  /** Stops listening, parks nothing (the pages already saved stay in the tiers), frees the engine. */
  async close() {
    await new Promise((r) => this.#http.close(() => r()));
    this.#http.closeAllConnections?.();
    await this.#lock.run(async () => {
      for (const s of this.#sessions.values()) {
        clearTimeout(s.idleTimer);
        s.sequence?.dispose();
      }
      this.#sessions.clear();
    }, this.waitMs);
    await this.store.close();
    await this.context.dispose();
  }
}

/** Reads a JSON request body of at most 1 MiB within 10 s. */
function readJson(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    const timer = setTimeout(() => {
      req.destroy();
      reject(new TierSyncError('request body not received within 10 s', 'ERR_TIMEOUT'));
    }, 10_000);
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        clearTimeout(timer);
        req.destroy();
        reject(new TierSyncError(`request body over ${MAX_BODY_BYTES} bytes`, 'ERR_OUT_OF_RANGE'));
      } else chunks.push(c);
    });
    req.on('end', () => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}'));
      } catch {
        reject(new TierSyncError('request body is not JSON', 'ERR_INVALID_ARGUMENT'));
      }
    });
    req.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const { values } = parseArgs({
    options: {
      model: { type: 'string', default: 'tiny' },
      port: { type: 'string', default: '8080' },
      sequences: { type: 'string', default: '2' },
      'context-size': { type: 'string', default: '2048' },
      threads: { type: 'string', default: '1' },
      'host-capacity': { type: 'string', default: '256MiB' },
      fs: { type: 'string' },
      'fs-capacity': { type: 'string', default: '4GiB' },
      'idle-ms': { type: 'string', default: '30000' },
    },
  });
  const { model } = await loadGeneratedModel(values.model);
  const tiers = [{ url: `host://?capacity=${values['host-capacity']}`, policy: 'session-aware:lru' }];
  if (values.fs) tiers.push({ url: `fs://${path.resolve(values.fs)}?capacity=${values['fs-capacity']}` });
  const server = await AgentServer.create({ model, tiers, sequences: Number(values.sequences), contextSize: Number(values['context-size']), threads: Number(values.threads), idleMs: Number(values['idle-ms']) });
  server.emitWarning = (e) => console.error('[agent-server]', e instanceof Error ? e.message : e);
  const port = await server.listen(Number(values.port));
  console.log(`agent server on http://127.0.0.1:${port} (model ${values.model}, ${values.sequences} sequences, tiers ${tiers.map((t) => t.url).join(' > ')})`);
  const stop = async () => {
    await server.close();
    await model.dispose();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
