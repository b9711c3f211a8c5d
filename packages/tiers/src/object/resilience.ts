/**
 * What keeps the object tier well-behaved against a remote endpoint: a concurrency limit, a per-attempt timeout,
 * retries with full-jitter exponential backoff, and a circuit breaker that stops calling an endpoint that keeps
 * failing. The S3 SDK's own retries are switched off (maxAttempts 1) so this is the only retry loop: retries do
 * not multiply, and the breaker sees every failed attempt.
 */
import { TierSyncError, type ErrorCode } from '@tiersync/native';

const TIER = 'object';

/** Knobs of {@link RequestRunner}; see ObjectTierConfig for units and defaults. */
export interface RetryPolicy {
  retries: number;
  backoffMs: number;
  backoffMaxMs: number;
  timeoutMs: number;
}

export type BreakerState = 'closed' | 'open' | 'half-open';

/**
 * Classic three-state breaker. Closed: calls pass; `threshold` consecutive failures open it. Open: calls fail
 * fast with ERR_UNAVAILABLE until `cooldownMs` has passed. Half-open: one probe passes; success closes it,
 * failure opens it again for another cool-down.
 */
export class CircuitBreaker {
  #state: BreakerState = 'closed';
  #failures = 0;
  #openedAt = 0;
  #probing = false;
  #lastError: unknown;
  /** How many times the breaker has opened (for stats and tests). */
  opened = 0;

  constructor(
    readonly threshold: number,
    readonly cooldownMs: number,
    readonly describe: string,
    private readonly now: () => number = Date.now,
  ) {}

  get state(): BreakerState {
    if (this.#state === 'open' && this.now() - this.#openedAt >= this.cooldownMs) return 'half-open';
    return this.#state;
  }

  /**
   * Asks to send one request.
   * @returns true when this request is the half-open probe (report its outcome like any other).
   * @throws TierSyncError ERR_UNAVAILABLE while open, or while another probe is in flight.
   */
  admit(): boolean {
    if (this.#state === 'closed') return false;
    const waited = this.now() - this.#openedAt;
    if (this.#state === 'open' && waited >= this.cooldownMs) this.#state = 'half-open';
    if (this.#state === 'half-open' && !this.#probing) {
      this.#probing = true;
      return true;
    }
    const retryIn = Math.max(0, this.cooldownMs - waited);
    const last = this.#lastError instanceof Error ? `; last error: ${this.#lastError.message}` : '';
    throw new TierSyncError(
      `object tier: ${this.describe} is unavailable (circuit open after ${this.#failures} consecutive failed requests${last}); ` +
        (this.#state === 'half-open' ? 'a probe request is in flight' : `next probe in ${retryIn} ms`),
      'ERR_UNAVAILABLE',
      { tier: TIER, cause: this.#lastError },
    );
  }

  success(): void {
    this.#state = 'closed';
    this.#failures = 0;
    this.#probing = false;
  }

  failure(error: unknown): void {
    this.#lastError = error;
    this.#failures++;
    this.#probing = false;
    if (this.#state === 'half-open' || (this.#state === 'closed' && this.#failures >= this.threshold)) {
      if (this.#state === 'closed') this.opened++;
      this.#state = 'open';
      this.#openedAt = this.now();
    }
  }

  /** An attempt ended without saying anything about the endpoint (the caller aborted): free the probe slot. */
  neutral(wasProbe: boolean): void {
    if (wasProbe) this.#probing = false;
  }
}

/** A counting semaphore whose waiters can give up (abort). */
export class Limiter {
  #free: number;
  readonly #waiters: Array<{ grant: () => void }> = [];

  constructor(readonly limit: number) {
    this.#free = limit;
  }

  async acquire(signal?: AbortSignal): Promise<void> {
    if (this.#free > 0) {
      this.#free--;
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const waiter = {
        grant: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        const i = this.#waiters.indexOf(waiter);
        if (i >= 0) this.#waiters.splice(i, 1);
        reject(abortError(signal));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  release(): void {
    const next = this.#waiters.shift();
    if (next) next.grant();
    else this.#free++;
  }

  get waiting(): number {
    return this.#waiters.length;
  }
}

/** The caller's limits on a whole driver call (IoOptions): abort signal and absolute deadline. */
export interface CallScope {
  signal?: AbortSignal | undefined;
  /** Date.now() value after which the call fails with ERR_TIMEOUT. */
  deadline?: number | undefined;
}

/** How one failed attempt is treated. */
interface Verdict {
  retryable: boolean;
  /** The endpoint misbehaved (counts toward the breaker). */
  endpointFault: boolean;
  code: ErrorCode;
  reason: string;
}

/** Attempt-level counters, for stats and tests. */
export interface RequestCounters {
  requests: number;
  attempts: number;
  retries: number;
  timeouts: number;
  failures: number;
  rejectedByBreaker: number;
}

const TRANSIENT_NETWORK = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'ENETDOWN',
  'UND_ERR_SOCKET',
  'ERR_STREAM_PREMATURE_CLOSE',
]);
const TRANSIENT_NAMES = new Set(['SlowDown', 'RequestTimeout', 'RequestTimeoutException', 'InternalError', 'ServiceUnavailable', 'TimeoutError', 'Throttling', 'ThrottlingException']);

/** Sorts an S3 SDK / network failure into retry and breaker decisions (exported for unit tests). */
export function classify(error: unknown): Verdict {
  const e = error as { name?: string; code?: string; message?: string; $metadata?: { httpStatusCode?: number }; $retryable?: unknown };
  const status = e?.$metadata?.httpStatusCode;
  const name = e?.name ?? '';
  const what = `${name || 'Error'}${status ? ` (HTTP ${status})` : ''}${e?.code ? ` ${e.code}` : ''}: ${e?.message ?? String(error)}`;
  if (error instanceof IncompleteBody) return { retryable: true, endpointFault: true, code: 'ERR_IO', reason: what };
  if (status !== undefined && status >= 500) return { retryable: true, endpointFault: true, code: 'ERR_IO', reason: what };
  if (status === 429 || status === 408 || TRANSIENT_NAMES.has(name)) return { retryable: true, endpointFault: true, code: 'ERR_IO', reason: what };
  if (name === 'NoSuchBucket') return { retryable: false, endpointFault: false, code: 'ERR_CONFIG', reason: `${what} (the bucket does not exist)` };
  if (status === 404 || name === 'NoSuchKey' || name === 'NotFound') return { retryable: false, endpointFault: false, code: 'ERR_NOT_FOUND', reason: what };
  if (status === 401 || status === 403) return { retryable: false, endpointFault: false, code: 'ERR_CONFIG', reason: `${what} (check the credentials and the bucket's permissions)` };
  if (status !== undefined && status >= 400) return { retryable: false, endpointFault: false, code: 'ERR_IO', reason: what };
  // No HTTP status: the request did not complete (connection refused/reset, socket hang up, body cut short).
  if ((e?.code && TRANSIENT_NETWORK.has(e.code)) || /socket hang up|ECONNRESET|premature close|aborted/i.test(e?.message ?? '')) {
    return { retryable: true, endpointFault: true, code: 'ERR_IO', reason: what };
  }
  return { retryable: true, endpointFault: true, code: 'ERR_IO', reason: what };
}

/** Thrown by body readers when a response ends before the bytes its headers promised. */
export class IncompleteBody extends Error {
  override readonly name = 'IncompleteBody';
}

function abortError(signal: AbortSignal | undefined): TierSyncError {
  return new TierSyncError('object tier: call aborted', 'ERR_ABORTED', { tier: TIER, cause: signal?.reason });
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(abortError(signal));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Runs requests through the limiter, breaker, timeout and retry loop. Each attempt gets its own AbortSignal
 * that fires on the attempt timeout, the call deadline or the caller's abort; the attempt function must stop
 * (and release what it holds) when it fires.
 */
export class RequestRunner {
  readonly counters: RequestCounters = { requests: 0, attempts: 0, retries: 0, timeouts: 0, failures: 0, rejectedByBreaker: 0 };

  constructor(
    readonly policy: RetryPolicy,
    readonly breaker: CircuitBreaker,
    readonly limiter: Limiter,
    private readonly random: () => number = Math.random,
  ) {}

  /** Full jitter: uniform in [0, min(max, base * 2^retry)]. */
  backoff(retry: number): number {
    const ceiling = Math.min(this.policy.backoffMaxMs, this.policy.backoffMs * 2 ** retry);
    return Math.floor(this.random() * ceiling);
  }

  /**
   * @param what names the request in errors ("PUT data/…").
   * @throws TierSyncError ERR_UNAVAILABLE (breaker open), ERR_TIMEOUT (attempts timed out, or the call deadline
   *   passed), ERR_ABORTED, ERR_NOT_FOUND (404), ERR_CONFIG (401/403, missing bucket), ERR_IO (anything else,
   *   after retries), each with the SDK's error as `cause`.
   */
  async run<T>(what: string, attempt: (signal: AbortSignal) => Promise<T>, scope: CallScope = {}): Promise<T> {
    this.counters.requests++;
    for (let n = 0; ; n++) {
      this.#checkScope(scope, what);
      let probe: boolean;
      try {
        probe = this.breaker.admit();
      } catch (e) {
        this.counters.rejectedByBreaker++;
        throw e;
      }
      try {
        await this.limiter.acquire(scope.signal);
      } catch (e) {
        this.breaker.neutral(probe);
        throw e;
      }
      const ctrl = new AbortController();
      let why: 'timeout' | 'deadline' | 'abort' | undefined;
      const stop = (reason: 'timeout' | 'deadline' | 'abort') => {
        why ??= reason;
        ctrl.abort(new Error(`request ${reason}`));
      };
      const budget = scope.deadline === undefined ? Infinity : scope.deadline - Date.now();
      const timer = setTimeout(() => stop(budget < this.policy.timeoutMs ? 'deadline' : 'timeout'), Math.max(0, Math.min(this.policy.timeoutMs, budget)));
      const onAbort = () => stop('abort');
      scope.signal?.addEventListener('abort', onAbort, { once: true });
      this.counters.attempts++;
      let failure: unknown;
      try {
        // A response that completed is good even if a timer fired in the same tick.
        const value = await attempt(ctrl.signal);
        this.breaker.success();
        return value;
      } catch (e) {
        failure = e;
      } finally {
        clearTimeout(timer);
        scope.signal?.removeEventListener('abort', onAbort);
        this.limiter.release();
      }
      if (why === 'abort' || why === 'deadline') {
        this.breaker.neutral(probe);
        this.#checkScope(scope, what);
        throw this.#error(`${what} was cut off`, why === 'abort' ? 'ERR_ABORTED' : 'ERR_TIMEOUT', failure);
      }
      const verdict: Verdict =
        why === 'timeout'
          ? { retryable: true, endpointFault: true, code: 'ERR_TIMEOUT', reason: `no complete response within ${this.policy.timeoutMs} ms` }
          : classify(failure);
      if (why === 'timeout') this.counters.timeouts++;
      if (verdict.endpointFault) this.breaker.failure(failure);
      else {
        // A 4xx is a well-formed answer: the endpoint is healthy.
        this.breaker.success();
      }
      if (!verdict.retryable || n >= this.policy.retries) {
        this.counters.failures++;
        const tries = n + 1;
        throw this.#error(`${what} failed${verdict.retryable ? ` after ${tries} attempt${tries > 1 ? 's' : ''}` : ''}: ${verdict.reason}`, verdict.code, failure);
      }
      this.counters.retries++;
      const delay = this.backoff(n);
      if (scope.deadline !== undefined && Date.now() + delay >= scope.deadline) {
        throw this.#error(`${what}: the call's deadline passed while retrying (${verdict.reason})`, 'ERR_TIMEOUT', failure);
      }
      await sleep(delay, scope.signal);
    }
  }

  #checkScope(scope: CallScope, what: string): void {
    if (scope.signal?.aborted) throw this.#error(`${what}: call aborted`, 'ERR_ABORTED', scope.signal.reason);
    if (scope.deadline !== undefined && Date.now() >= scope.deadline) throw this.#error(`${what}: the call's deadline passed`, 'ERR_TIMEOUT');
  }

  #error(message: string, code: ErrorCode, cause?: unknown): TierSyncError {
    return new TierSyncError(`object tier: ${message}`, code, { tier: TIER, ...(cause === undefined ? {} : { cause }) });
  }
}
