/**
 * A pull's deadline and abort signal, raced against every wait of the pull: a network request, the connect, the
 * wait for readers to release a slot. Native requests cannot be cancelled, so a request that loses the race is
 * abandoned: its `abandon` callback runs when it settles (to free the store slots it was writing into, which must
 * stay allocated until then), and it is listed in {@link late} so the pull's own peer client is closed only after
 * it settled (the native close joins the stream threads, which would hold the event loop until the request's
 * socket deadline).
 */
import { TierSyncError } from '@tiersync/native';

export class PullDeadline {
  readonly deadline: number;
  readonly signal: AbortSignal | undefined;
  readonly #what: string;
  /** Requests given up on that have not necessarily settled yet. */
  readonly late: Array<Promise<unknown>> = [];

  /** `what` names the operation in errors, e.g. "pull of 'step-7'". */
  constructor(deadline: number, signal: AbortSignal | undefined, what: string) {
    this.deadline = deadline;
    this.signal = signal;
    this.#what = what;
  }

  /** Milliseconds left before the deadline (0 once past). */
  get left(): number {
    return Math.max(0, this.deadline - Date.now());
  }

  /** The error the pull fails with now (ERR_ABORTED, ERR_TIMEOUT), or undefined while it may go on. */
  check(): TierSyncError | undefined {
    if (this.signal?.aborted) return new TierSyncError(`${this.#what} aborted`, 'ERR_ABORTED', { cause: this.signal.reason });
    if (Date.now() >= this.deadline) return new TierSyncError(`${this.#what} did not finish before its deadline`, 'ERR_TIMEOUT');
    return undefined;
  }

  /**
   * Settles with `p`, or rejects with ERR_ABORTED / ERR_TIMEOUT when the signal or the deadline comes first. A
   * lost `p` is handed to `abandon` (which must handle its rejection too).
   */
  race<T>(p: Promise<T>, abandon?: (late: Promise<T>) => void): Promise<T> {
    const now = this.check();
    if (now) {
      this.#giveUp(p, abandon);
      return Promise.reject(now);
    }
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const done = () => {
        settled = true;
        clearTimeout(timer);
        this.signal?.removeEventListener('abort', lose);
      };
      const lose = () => {
        if (settled) return;
        done();
        this.#giveUp(p, abandon);
        reject(this.check() ?? new TierSyncError(`${this.#what} did not finish before its deadline`, 'ERR_TIMEOUT'));
      };
      const timer = setTimeout(lose, this.left);
      this.signal?.addEventListener('abort', lose, { once: true });
      p.then(
        (v) => {
          if (settled) return;
          done();
          resolve(v);
        },
        (e: unknown) => {
          if (settled) return;
          done();
          reject(e);
        },
      );
    });
  }

  #giveUp<T>(p: Promise<T>, abandon: ((late: Promise<T>) => void) | undefined): void {
    if (abandon) abandon(p);
    this.late.push(p.then(() => undefined, () => undefined));
  }
}
