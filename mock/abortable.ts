/**
 * Waiting that gives up as soon as the request it serves is aborted.
 *
 * @module
 */

/**
 * Resolves after `delay_ms`, or rejects with `signal.reason` as soon as
 * `signal` aborts (clearing the timer, so nothing leaks).
 */
export function sleep(delay_ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const on_abort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", on_abort);
      resolve();
    }, delay_ms);
    signal.addEventListener("abort", on_abort, { once: true });
  });
}

/** Never resolves; rejects with `signal.reason` once `signal` aborts. */
export function waitForAbort(signal: AbortSignal): Promise<never> {
  return new Promise((_resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}
