/**
 * A provider's rate limit, as the mock model keeps one: at most `requests`
 * answered in any sliding `windowMs`; a request past it is refused, to be
 * answered 429 with a `Retry-After` of whole seconds until the window has
 * room. Every arrival is recorded with its time and how it was answered, so
 * a test reads the rate the provider saw, second by second.
 *
 * @module
 */

/** A sliding-window limit: at most `requests` answered in any `windowMs`. */
export interface RateLimitSpec {
  /** Requests answered in a window. */
  requests: number;
  /** The window, in ms. */
  windowMs: number;
}

/** One request as the provider saw it. */
export interface Arrival {
  /** When it arrived, in ms since the epoch. */
  at_ms: number;
  /** The run it named (`x-agent-run`). */
  run: string;
  /** True when the rate limit refused it (answered 429). */
  limited: boolean;
  /** The HTTP status it was answered with (a fault's, a 429 of the rate limit's, 200). */
  status: number;
}

/** The longest arrival log kept: older arrivals are dropped (a test reads them as it goes). */
export const ARRIVALS_MAX = 100_000;

/** A sliding-window rate limit and the log of every arrival, limited or not. */
export class RateLimiter {
  #spec?: RateLimitSpec;
  /** Times of the answered requests still in the window, oldest first. */
  #answered: number[] = [];
  #arrivals: Arrival[] = [];

  /** Sets (or, with undefined, lifts) the limit; throws a `TypeError` for a malformed one. */
  set(spec: RateLimitSpec | undefined): void {
    if (spec !== undefined) {
      for (const field of ["requests", "windowMs"] as const) {
        const v = spec[field];
        if (typeof v !== "number" || !Number.isInteger(v) || v < 1) {
          throw new TypeError(
            `Cannot set the rate limit as '${field}' must be a positive integer: current value is ${
              JSON.stringify(v)
            }`,
          );
        }
      }
    }
    this.#spec = spec === undefined ? undefined : { requests: spec.requests, windowMs: spec.windowMs };
    this.#answered = [];
  }

  /** The limit in force, if any. */
  get spec(): RateLimitSpec | undefined {
    return this.#spec === undefined ? undefined : { ...this.#spec };
  }

  /**
   * Records an arrival of `run` at `nowMs` (its `status` set by the caller
   * once answered): with the whole seconds to send as `Retry-After` (at
   * least 1) when the limit refuses it.
   */
  arrive(run: string, nowMs: number): { retryAfterS?: number; arrival: Arrival } {
    const spec = this.#spec;
    let retryAfterS: number | undefined;
    if (spec !== undefined) {
      // Bounded by the window's requests: each pass drops one that has left it.
      while (this.#answered.length > 0 && this.#answered[0] <= nowMs - spec.windowMs) this.#answered.shift();
      if (this.#answered.length >= spec.requests) {
        const room = this.#answered[this.#answered.length - spec.requests] + spec.windowMs - nowMs;
        retryAfterS = Math.max(1, Math.ceil(room / 1000));
      } else {
        this.#answered.push(nowMs);
      }
    }
    const arrival: Arrival = { at_ms: nowMs, run, limited: retryAfterS !== undefined, status: 429 };
    this.#arrivals.push(arrival);
    if (this.#arrivals.length > ARRIVALS_MAX) this.#arrivals.shift();
    return retryAfterS === undefined ? { arrival } : { retryAfterS, arrival };
  }

  /** Every arrival so far (a copy), oldest first. */
  arrivals(): Arrival[] {
    return this.#arrivals.map((a) => ({ ...a }));
  }
}

/**
 * The most arrivals of `arrivals` (those the limit let through, unless `all`) in any window
 * of `windowMs` that ends at an arrival: the rate the provider saw at its
 * busiest.
 */
export function busiestWindow(arrivals: readonly Arrival[], windowMs: number, all = false): number {
  const times = arrivals.filter((a) => all || !a.limited).map((a) => a.at_ms).sort((a, b) => a - b);
  let best = 0;
  let start = 0;
  for (let end = 0; end < times.length; end++) {
    // Bounded: start only moves forward.
    while (times[start] <= times[end] - windowMs) start++;
    best = Math.max(best, end - start + 1);
  }
  return best;
}
