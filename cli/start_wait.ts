/**
 * How a long-lived process (a worker, the supervisor) waits at start for
 * something it cannot go on without and that is away for now: its database,
 * or the server its tools are listed from. It tries, and after each failure
 * that is an outage it says so and tries again after a wait that doubles up
 * to a cap; any other failure ends the wait at once. Exiting instead would
 * turn an outage into a restart loop under a supervisor, or, for exit code
 * 2, into a slot never restarted.
 *
 * @module
 */

import type { Clock } from "../runtime/base/clock.ts";
import { AbortedError } from "../runtime/base/errors.ts";

/** The waits between tries: the first, doubled after each failure, up to the cap. */
export interface Backoff {
  /** The wait after the first failure. */
  firstMs: number;
  /** The longest wait. */
  maxMs: number;
}

/**
 * For a database: a failover or a restart takes seconds, so the first try
 * again comes after a second, and none is more than 10 s apart, so a worker
 * takes runs again at most 10 s after the database is back. A try against a
 * server that is down is one refused connection.
 */
export const DATABASE_BACKOFF: Backoff = { firstMs: 1_000, maxMs: 10_000 };

/** For the server a worker's tools are listed from (MCP): 1 s, 2 s, ... up to 30 s. */
export const TOOLS_BACKOFF: Backoff = { firstMs: 1_000, maxMs: 30_000 };

/** One failure waited out, as told to {@link WaitAtStartOptions.onAway}. */
export interface AwayTry {
  /** What the try threw. */
  error: unknown;
  /** Tries so far, this one included (1 for the first). */
  attempt: number;
  /** The wait before the next try. */
  retryMs: number;
}

/** Options of {@link waitAtStart}. */
export interface WaitAtStartOptions<T> {
  /** One try. */
  attempt: () => Promise<T>;
  /** True for a failure to wait out (an outage); any other is thrown at once. */
  isAway: (err: unknown) => boolean;
  /** Told of each failure waited out, before the wait: log it. */
  onAway: (away: AwayTry) => void;
  clock: Clock;
  backoff: Backoff;
  /**
   * Ends the wait (SIGINT, SIGTERM): the promise rejects with the signal's
   * reason at once, also while a try is in flight.
   */
  signal?: AbortSignal;
  /** Disposes of what a try in flight returns after `signal` ended the wait (a store that opened too late). */
  discard?: (late: T) => Promise<void>;
}

/** What {@link waitAtStart} got, and how long it took. */
export interface Available<T> {
  /** The value of the try that worked. */
  value: T;
  /** Tries made, the one that worked included. */
  attempts: number;
  /** The clock's time from the first try to the end of the last. */
  waitedMs: number;
}

/**
 * Tries `attempt` until it works, waiting out the failures `isAway` accepts
 * with the `backoff` (each told to `onAway`); rethrows any other failure.
 * Not bounded by a count: it ends when a try works, a try fails otherwise,
 * or `signal` aborts.
 *
 * @example
 * ```ts
 * import { SystemClock } from "../runtime/base/clock.ts";
 * import { waitAtStart } from "./start_wait.ts";
 * let tries = 0;
 * const { value, attempts } = await waitAtStart({
 *   attempt: () => ++tries < 2 ? Promise.reject(new Error("away")) : Promise.resolve("up"),
 *   isAway: () => true,
 *   onAway: ({ retryMs }) => console.log(`again in ${retryMs} ms`), // again in 10 ms
 *   clock: new SystemClock(),
 *   backoff: { firstMs: 10, maxMs: 100 },
 * });
 * console.log(value, attempts); // up 2
 * ```
 */
export async function waitAtStart<T>(opts: WaitAtStartOptions<T>): Promise<Available<T>> {
  const { clock, backoff, signal } = opts;
  if (!(backoff.firstMs >= 0 && backoff.maxMs >= backoff.firstMs)) {
    throw new RangeError(
      `Cannot wait as 'backoff' must have 0 <= firstMs <= maxMs: current value is ${JSON.stringify(backoff)}`,
    );
  }
  const startedMs = clock.now().getTime();
  let retryMs = backoff.firstMs;
  for (let attempt = 1;; attempt++) {
    if (signal?.aborted) throw signal.reason ?? new AbortedError("The wait was aborted");
    try {
      const value = await untilAborted(opts.attempt(), signal, opts.discard);
      return { value, attempts: attempt, waitedMs: clock.now().getTime() - startedMs };
    } catch (err) {
      if (signal?.aborted || !opts.isAway(err)) throw err;
      opts.onAway({ error: err, attempt, retryMs });
    }
    await clock.sleep(retryMs, signal);
    retryMs = Math.min(backoff.maxMs, retryMs * 2);
  }
}

/** `p`, or the signal's reason as soon as it aborts (what `p` brings later goes to `discard`). */
function untilAborted<T>(
  p: Promise<T>,
  signal: AbortSignal | undefined,
  discard: ((late: T) => Promise<void>) | undefined,
): Promise<T> {
  if (!signal) return p;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      reject(signal.reason ?? new AbortedError("The wait was aborted"));
      // Nobody waits for this try any more: what it opens is closed, and how it failed is moot.
      p.then((late) => discard?.(late), () => {}).catch(() => {});
    };
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}
