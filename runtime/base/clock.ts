/**
 * Time, behind an interface. Nothing in `runtime/` reads the time or sleeps
 * except through a {@link Clock}, so the harness can drive a whole run (leases,
 * backoff, timeouts) from a {@link ManualClock} and replay it byte for byte.
 *
 * @module
 */

import { AbortedError } from "./errors.ts";

const pad2 = (n: number): string => (n < 10 ? "0" : "") + n;
const pad3 = (n: number): string => (n < 10 ? "00" : n < 100 ? "0" : "") + n;

/**
 * `d.toISOString()`, formatted by hand for years 1000 to 9999 (the engine's
 * own for any other, and its RangeError for an invalid date). #11: every
 * write carries a timestamp, and the built-in cost more: measured, 0.41
 * against 0.17 µs a call hot, 0.55 against 0.32 µs with the string encoded.
 */
export function isoTimestamp(d: Date): string {
  const year = d.getUTCFullYear();
  if (!(year >= 1000 && year <= 9999)) return d.toISOString();
  return year + "-" + pad2(d.getUTCMonth() + 1) + "-" + pad2(d.getUTCDate()) + "T" + pad2(d.getUTCHours()) +
    ":" + pad2(d.getUTCMinutes()) + ":" + pad2(d.getUTCSeconds()) + "." + pad3(d.getUTCMilliseconds()) + "Z";
}

/** A source of time that can also wait. */
export interface Clock {
  /** The current time. */
  now(): Date;
  /**
   * Resolves after `ms` milliseconds of this clock's time; rejects with the
   * signal's reason (or an {@link AbortedError}) when `signal` aborts first.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new AbortedError("The wait was aborted");
}

/** The wall clock, with `setTimeout` for sleeping. */
export class SystemClock implements Clock {
  /** The current wall-clock time. */
  now(): Date {
    return new Date();
  }

  /** Waits `ms` milliseconds of real time, or until `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        clearTimeout(timer);
        reject(abortReason(signal!));
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, Math.max(0, ms));
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }
}

interface Sleeper {
  wakeAtMs: number;
  order: number;
  resolve: () => void;
}

/**
 * A clock that only moves when told to. Sleepers wake in order of their wake
 * time (ties in the order they went to sleep) when {@link ManualClock.advance}
 * passes it, which makes lease expiry and backoff deterministic.
 *
 * @example
 * ```ts
 * import { ManualClock } from "./clock.ts";
 * const clock = new ManualClock(Date.UTC(2026, 0, 1));
 * const woke = clock.sleep(1_000);
 * await clock.advance(1_000);
 * await woke;
 * ```
 */
export class ManualClock implements Clock {
  #nowMs: number;
  #sleepers: Sleeper[] = [];
  #order = 0;

  /** Starts the clock at `startMs` (milliseconds since the epoch). */
  constructor(startMs: number = Date.UTC(2026, 0, 1)) {
    this.#nowMs = startMs;
  }

  /** The current manual time. */
  now(): Date {
    return new Date(this.#nowMs);
  }

  /** How many sleepers are waiting. */
  get pending(): number {
    return this.#sleepers.length;
  }

  /** When the next sleeper wakes (ms since the epoch), or undefined when nobody sleeps. */
  get nextWakeAtMs(): number | undefined {
    let next: number | undefined;
    for (const s of this.#sleepers) if (next === undefined || s.wakeAtMs < next) next = s.wakeAtMs;
    return next;
  }

  /** Sleeps until the clock is advanced past `ms` from now, or `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    return new Promise((resolve, reject) => {
      const sleeper: Sleeper = {
        wakeAtMs: this.#nowMs + Math.max(0, ms),
        order: this.#order++,
        resolve: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.#sleepers = this.#sleepers.filter((s) => s !== sleeper);
        reject(abortReason(signal!));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#sleepers.push(sleeper);
    });
  }

  /**
   * Moves time forward by `ms`, waking every sleeper whose time has come, in
   * order, and letting each one's continuation run before the next wakes
   * (`opts.settle`, default a few macrotask turns; the fuzzer passes a cheaper one).
   */
  async advance(ms: number, opts: { settle?: () => Promise<void> } = {}): Promise<void> {
    const letRun = opts.settle ?? settle;
    const target = this.#nowMs + ms;
    // Bounded: each pass wakes one sleeper; sleepers added while waking with
    // a wake time past the target stay asleep.
    for (let woken = 0; woken < 100_000; woken++) {
      const next = this.#sleepers
        .filter((s) => s.wakeAtMs <= target)
        .sort((a, b) => a.wakeAtMs - b.wakeAtMs || a.order - b.order)[0];
      if (!next) break;
      this.#sleepers = this.#sleepers.filter((s) => s !== next);
      this.#nowMs = Math.max(this.#nowMs, next.wakeAtMs);
      next.resolve();
      await letRun();
    }
    this.#nowMs = target;
  }
}

/** Lets pending promise continuations run (a few macrotask turns). */
export async function settle(turns = 3): Promise<void> {
  for (let i = 0; i < turns; i++) await new Promise((r) => setTimeout(r, 0));
}

// Given to abort() so no DOMException (with its stack) is built per cancel.
const CANCELLED = Symbol("cancelled");

/**
 * Calls `fire` after `ms` of `clock` time, unless the returned function is
 * called first. On the {@link SystemClock} it is one `setTimeout` (#11: a sleep
 * on an abort signal costs a controller, a listener and a rejected promise
 * when cancelled); any other clock (a manual one in tests, a simulated
 * process's, whose sleeps end with it) drives it through `sleep`.
 */
export function startTimer(clock: Clock, ms: number, fire: () => void): () => void {
  if (clock instanceof SystemClock) {
    const timer = setTimeout(fire, Math.max(0, ms));
    return () => clearTimeout(timer);
  }
  const stop = new AbortController();
  clock.sleep(ms, stop.signal).then(fire, () => {/* cancelled, or the clock's process ended */});
  return () => stop.abort(CANCELLED);
}

/** A request's signal: aborts when its worker stops or its time is up. See {@link deadline}. */
export interface Deadline {
  /**
   * Aborts with the worker's reason when `parent` aborts, or with the timeout's
   * error when time is up. Armed when first read: a request that never looks
   * at it (an in-process planner or tool) costs no timer and no listener.
   */
  readonly signal: AbortSignal;
  /** The timeout's error once time is up (and only then), whether or not the signal was read. */
  expired(): Error | undefined;
  /** Ends the guard: no timer left, no listener left on `parent`. */
  cancel(): void;
}

/**
 * One signal for a model or tool request: it aborts when `parent` (the
 * worker's stop signal) aborts, or after `ms` of `clock` time (counted from
 * this call) with `reason()`. Call `cancel` when the request is over.
 *
 * #11: this replaces a {@link clockTimeout} plus `AbortSignal.any` per request
 * (three controllers, a dependent signal, a sleep promise and a DOMException
 * per cancel). On the {@link SystemClock} it is one controller, one
 * `setTimeout` and one listener, made only when the request reads its signal
 * (two per step otherwise: in a V8 profile of the PGlite no-wire bench row,
 * Node-style timers, abort controllers and listeners took more self time than
 * formatting the step's statement parameters); a
 * manual clock still drives it through `sleep`. A request that ignores its
 * signal could not be stopped by it either: `expired()` still says when its
 * time ran out, from the clock.
 */
export function deadline(clock: Clock, parent: AbortSignal, ms: number, reason: () => Error): Deadline {
  const system = clock instanceof SystemClock;
  const nowMs = () => system ? Date.now() : clock.now().getTime();
  const startMs = nowMs();
  let timedOut: Error | undefined;
  let ctl: AbortController | undefined;
  let cancelled = false;
  let disarm = () => {};
  const arm = (): AbortSignal => {
    const c = new AbortController();
    ctl = c;
    // Read after cancel: the request is over, nothing is left to stop.
    if (cancelled) return c.signal;
    const expire = () => {
      if (c.signal.aborted) return;
      timedOut = reason();
      c.abort(timedOut);
    };
    if (parent.aborted) {
      c.abort(parent.reason);
      return c.signal;
    }
    const left = ms - (nowMs() - startMs);
    if (left <= 0) {
      expire();
      return c.signal;
    }
    const onStop = () => c.abort(parent.reason);
    parent.addEventListener("abort", onStop, { once: true });
    const cancelTimer = startTimer(clock, left, expire);
    disarm = () => {
      cancelTimer();
      parent.removeEventListener("abort", onStop);
    };
    return c.signal;
  };
  return {
    get signal() {
      return ctl?.signal ?? arm();
    },
    expired: () => {
      // Never armed: time is up if the clock says so (the worker's own stop takes precedence, as when armed).
      if (ctl === undefined && timedOut === undefined && !parent.aborted && nowMs() - startMs >= ms) {
        timedOut = reason();
      }
      return timedOut;
    },
    cancel: () => {
      cancelled = true;
      disarm();
    },
  };
}

/**
 * An AbortSignal that aborts after `ms` of `clock` time (so a manual clock
 * controls timeouts too). Call `cancel` when the guarded work is over.
 */
export function clockTimeout(
  clock: Clock,
  ms: number,
  reason: () => Error,
): { signal: AbortSignal; cancel: () => void } {
  const fired = new AbortController();
  const stop = new AbortController();
  clock.sleep(ms, stop.signal).then(
    () => fired.abort(reason()),
    () => {/* cancelled: the guarded work finished first */},
  );
  return { signal: fired.signal, cancel: () => stop.abort() };
}
