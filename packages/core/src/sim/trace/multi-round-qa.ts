/**
 * Generator of the multi-round QA workload that LMCache and vLLM's production stack benchmark with
 * (`benchmarks/multi-round-qa.py`: `--num-users --num-rounds --qps --shared-system-prompt --user-history-prompt
 * --answer-len`).
 *
 * Every user's conversation starts with the same shared system prompt, then the user's own history, then rounds
 * of question and answer; round r's prompt is everything so far plus the r-th question. Requests arrive at a fixed
 * rate `qps`, the users taking turns (round 1 of users 0..U-1, then round 2, ...), as the benchmark's users do
 * when each waits for its answer. Page ids follow {@link promptPages}: the system prompt's full pages are shared
 * by all users, each conversation's full pages by its later rounds.
 */
import { invalid } from '../errors.js';
import { PageIds, promptPages } from './page-keys.js';
import type { LlmRequest, LlmTrace } from './types.js';

/** Options of {@link generateMultiRoundQa}. */
export interface MultiRoundQaOptions {
  /** Concurrent users. Default 10. */
  users?: number;
  /** Rounds per user. Default 5. */
  rounds?: number;
  /** Requests per second, over all users. Default 0.5. */
  qps?: number;
  /** Tokens of the system prompt every user shares. Default 1000. */
  systemPromptTokens?: number;
  /** Tokens of each user's own history (before round 1). Default 2000. */
  historyTokens?: number;
  /** Tokens of each question. Default 64. */
  questionTokens?: number;
  /** Tokens of each answer. Default 100. */
  answerTokens?: number;
  /** Tokens per page. Default 512. */
  blockTokens?: number;
}

/** The options with their defaults applied. */
export function multiRoundQaDefaults(o: MultiRoundQaOptions = {}): Required<MultiRoundQaOptions> {
  const r = {
    users: o.users ?? 10,
    rounds: o.rounds ?? 5,
    qps: o.qps ?? 0.5,
    systemPromptTokens: o.systemPromptTokens ?? 1000,
    historyTokens: o.historyTokens ?? 2000,
    questionTokens: o.questionTokens ?? 64,
    answerTokens: o.answerTokens ?? 100,
    blockTokens: o.blockTokens ?? 512,
  };
  for (const [name, v] of Object.entries(r)) {
    if (name === 'qps') {
      if (!(v > 0) || !Number.isFinite(v)) throw invalid(`multi-round-qa.qps must be a positive number, got ${v}`);
    } else if (!Number.isSafeInteger(v) || v < (['users', 'rounds', 'blockTokens'].includes(name) ? 1 : 0)) {
      throw invalid(`multi-round-qa.${name} must be a non-negative integer (users, rounds, blockTokens >= 1), got ${v}`);
    }
  }
  return r;
}

/**
 * Generates the workload. Deterministic (no randomness is needed: lengths are fixed, as in the benchmark).
 * @throws TierSyncError ERR_INVALID_ARGUMENT for a bad option
 */
export function generateMultiRoundQa(options: MultiRoundQaOptions = {}): LlmTrace {
  const o = multiRoundQaDefaults(options);
  const ids = new PageIds();
  const requests: LlmRequest[] = [];
  let pageRefs = 0;
  for (let round = 0; round < o.rounds; round++) {
    for (let user = 0; user < o.users; user++) {
      const input = o.systemPromptTokens + o.historyTokens + round * (o.questionTokens + o.answerTokens) + o.questionTokens;
      const stream = { systemPrompt: 0, systemTokens: o.systemPromptTokens, conversation: user };
      const pages = promptPages(stream, input, o.blockTokens, ids);
      pageRefs += pages.length;
      requests.push({ timeMs: (requests.length / o.qps) * 1000, inputTokens: input, outputTokens: o.answerTokens, pages });
    }
  }
  const source = `multi-round-qa(users=${o.users},rounds=${o.rounds},qps=${o.qps},system=${o.systemPromptTokens},history=${o.historyTokens},question=${o.questionTokens},answer=${o.answerTokens})`;
  return { kind: 'llm', source, blockTokens: o.blockTokens, requests, distinctPages: ids.size, pageRefs };
}
