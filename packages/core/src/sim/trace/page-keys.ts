/**
 * Prefix-chained page ids for synthetic workloads (the Azure prefix model and the multi-round QA generator).
 *
 * A conversation is an append-only token stream that starts with one of a few shared system prompts. Page j of a
 * prompt covers tokens [j*B, (j+1)*B). Its content, hence its chained hash, is fixed by what precedes it, so:
 * - a full page that lies inside the shared system prompt has id `(prompt, j)` (shared by every conversation that
 *   starts with that prompt);
 * - any other full page has id `(conversation, j)` (shared by the turns of that conversation);
 * - a partial last page is new content (its tail will differ next turn), so it gets a fresh id.
 * Ids are dense integers in first-seen order.
 */

/** Allocates dense ids for page identities. */
export class PageIds {
  readonly #ids = new Map<string, number>();
  #fresh = 0;

  /** Number of ids handed out (distinct pages). */
  get size(): number {
    return this.#ids.size + this.#fresh;
  }

  /** The id of a named page identity. */
  named(key: string): number {
    let id = this.#ids.get(key);
    if (id === undefined) {
      id = this.size;
      this.#ids.set(key, id);
    }
    return id;
  }

  /** A new id that no other page shares. */
  fresh(): number {
    const id = this.size;
    this.#fresh++;
    return id;
  }
}

/** Where a prompt's tokens come from. */
export interface PromptStream {
  /** Shared system prompt index, or -1 for none. */
  readonly systemPrompt: number;
  /** Tokens of the shared system prompt at the start of the stream. */
  readonly systemTokens: number;
  /** Conversation id (unique per conversation). */
  readonly conversation: number;
}

/** Page ids of a prompt of `inputTokens` tokens taken from the start of `stream`. */
export function promptPages(stream: PromptStream, inputTokens: number, blockTokens: number, ids: PageIds): Uint32Array {
  const n = Math.ceil(inputTokens / blockTokens);
  const pages = new Uint32Array(n);
  for (let j = 0; j < n; j++) {
    const end = (j + 1) * blockTokens;
    if (end > inputTokens) pages[j] = ids.fresh();
    else if (stream.systemPrompt >= 0 && end <= stream.systemTokens) pages[j] = ids.named(`s${stream.systemPrompt}:${j}`);
    else pages[j] = ids.named(`c${stream.conversation}:${j}`);
  }
  return pages;
}
