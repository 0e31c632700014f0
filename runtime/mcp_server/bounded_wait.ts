/**
 * A bounded wait for a run, as an MCP tool call makes one: read, and read
 * again every `pollMs` until the reading says it is done or `waitMs` has
 * passed, telling a caller that asked for progress where the run stands
 * every `progressMs`. The caller's signal (the client cancelled the request,
 * or its connection closed) ends the wait at once with the last reading.
 *
 * @module
 */

import type { Clock } from "../base/clock.ts";
import type { PendingApproval } from "./run_results.ts";

/** Who is calling, and what the call can do beyond answering. */
export interface Caller {
  /** The client's name, from its `initialize` (`clientInfo.name`); empty when it gave none. */
  client: string;
  /** Aborts when the request is cancelled or its connection closes. */
  signal?: AbortSignal;
  /** Sends progress (present when the request carried a progress token). */
  progress?: (progress: number, total: number, message: string) => Promise<void>;
  /**
   * Asks the person behind the client whether a tool call the run waits for
   * may go ahead (present when the client takes elicitation). Undefined: no
   * answer (declined to say, or no answer within `timeoutMs`).
   */
  askApproval?: (
    approval: PendingApproval,
    runId: string,
    timeoutMs: number,
  ) => Promise<{ approved: boolean; reason?: string } | undefined>;
}

/** One reading of what is waited for. */
export interface Reading<T> {
  /** True when the wait is over. */
  done: boolean;
  /** What the wait answers with, if it ends now. */
  value: T;
  /** Where it stands, in a word or two, for progress. */
  status: string;
}

/** What {@link waitFor} takes. */
export interface WaitOptions<T> {
  /** The clock waited by. */
  clock: Clock;
  /** The longest wait, in ms (0: one reading). */
  waitMs: number;
  /** How often to read again, in ms. */
  pollMs: number;
  /** How often to report progress, in ms. */
  progressMs: number;
  /** The caller (its signal and progress). */
  caller: Caller;
  /** Reads once. */
  read: () => Promise<Reading<T>>;
}

/** Reads until done or the wait's bound; answers with the last reading's value. */
export async function waitFor<T>(opts: WaitOptions<T>): Promise<T> {
  const { clock, caller } = opts;
  const start = clock.now().getTime();
  const deadline = start + opts.waitMs;
  let nextProgress = start + opts.progressMs;
  let reported = 0;
  // Bounded by the deadline: each pass sleeps at least a poll, or ends.
  for (;;) {
    const reading = await opts.read();
    const now = clock.now().getTime();
    if (reading.done || now >= deadline || caller.signal?.aborted) return reading.value;
    if (caller.progress && now >= nextProgress) {
      // Progress must grow with each notification: the time waited, in ms, does.
      const progress = Math.max(reported + 1, now - start);
      reported = progress;
      await caller.progress(progress, opts.waitMs, `run is ${reading.status}`);
      nextProgress = now + opts.progressMs;
    }
    try {
      await clock.sleep(Math.min(opts.pollMs, deadline - now), caller.signal);
    } catch (err) {
      // An aborted sleep: the request is gone, and the last reading is the answer no one will read.
      if (caller.signal?.aborted) return reading.value;
      throw err;
    }
  }
}
