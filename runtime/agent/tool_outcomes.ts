/**
 * What a tool's `run` returns and what the runtime tells a tool's hooks: a
 * call done or accepted by its remote, how its calls ride out an outage,
 * what `onGiveUp` is told, and what `reconcile` is given and answers.
 * Re-exported by `tools.ts`, where a tool's author finds them.
 *
 * @module
 */

import type { Json } from "../base/values.ts";
import type { ToolError } from "../base/errors.ts";

/** What a tool's `run` returns: the call is done ({@link ToolDone}), or its remote will finish it later ({@link ToolAccepted}). */
export type ToolOutcome = ToolDone | ToolAccepted;

/** The call is done: what the remote answered. */
export interface ToolDone {
  /** The remote's answer, stored and shown to the model. */
  result: Json;
  /**
   * `created` when the remote did the work for this request, `already_done`
   * when it recognised the key and returned what it stored earlier.
   * Default `created`.
   */
  remote?: "created" | "already_done";
  /** Absent: the call is done. */
  accepted?: undefined;
}

/**
 * The remote accepted the work and will finish it later (the HTTP 202
 * pattern): the call waits, holding no worker's slot, and after
 * `checkAfterMs` the runtime re-sends it under the same key, which asks the
 * remote how the job stands (`ctx.polls` counts these). Each answer is
 * again done, failed (a thrown {@link ToolError}), or accepted with when to
 * look next, until the tool's `waitDeadlineMs` from the first accepted
 * answer: the call then fails. A call that waits can also be settled from
 * outside (`client.operators.settleCall`, `deno task settle`), by a webhook or a person.
 *
 * @example
 * ```ts
 * import { z } from "zod";
 * import { ToolError } from "../base/errors.ts";
 * import { defineTool, idempotencyKeyHeader } from "./tools.ts";
 * const build = defineTool({
 *   name: "build",
 *   description: "Build a release; takes minutes.",
 *   args: z.strictObject({ version: z.string() }),
 *   waitDeadlineMs: 30 * 60_000,
 *   // The same request each time: the remote knows the job by its key and answers how it stands.
 *   run: async (args, ctx) => {
 *     const res = await fetch("https://builds.example.com/releases", {
 *       method: "POST",
 *       headers: { "Idempotency-Key": idempotencyKeyHeader(ctx.idempotencyKey) },
 *       body: JSON.stringify(args),
 *       signal: ctx.signal,
 *     });
 *     if (!res.ok) throw new ToolError("BUILD_HTTP", `HTTP ${res.status}`, { transient: res.status >= 500 });
 *     const body = await res.json();
 *     if (res.status === 202) return { result: { job: body.id }, accepted: { checkAfterMs: 10_000 } };
 *     return { result: body };
 *   },
 * });
 * ```
 */
export interface ToolAccepted {
  /** The remote's accepted answer (its job id, how far it got), stored as the call's result while it waits. */
  result: Json;
  /** When to ask again. */
  accepted: {
    /** Milliseconds until the call is re-sent to ask how the job stands: a positive integer (asked no later than the deadline). */
    checkAfterMs: number;
  };
  /** Not said of an accepted call: the remote says it once it is done. */
  remote?: undefined;
}

/** True when `outcome` says the remote accepted the work and will finish it later. */
export function isAccepted(outcome: ToolOutcome): outcome is ToolAccepted {
  return outcome.accepted !== undefined;
}

/**
 * How a tool's calls ride out an outage: a request that fails for a reason
 * an outage explains (a refused or reset connection, a timeout, a transient
 * {@link ToolError}: 408, 409, 429, 5xx) is sent again under the same key,
 * after a backoff, until `horizonMs` has passed since the call's first such
 * failure; a wait longer than a moment lets the run go (no worker slot held)
 * until the call is due.
 */
export interface ToolRetry {
  /** How long failures are retried, from the first (counted in the database, across restarts). */
  horizonMs?: number;
  /** The first backoff; doubled for each failure, with jitter. */
  backoffBaseMs?: number;
  /** The longest backoff. */
  backoffMaxMs?: number;
}

/** What a tool's `onGiveUp` function is told of a call it gives up. */
export interface ToolGiveUp {
  /** The call's key. */
  idempotencyKey: string;
  /** The last request's error. */
  error: ToolError;
  /** Failed requests recorded under the key. */
  failures: number;
  /** How long the call has been failing, in milliseconds. */
  failingForMs: number;
}

/** What a tool's `reconcile` receives besides the call's arguments. */
export interface ReconcileContext {
  /** The call's key, `<run_id>:<seq>`: look the call up by it (sent as the remote's reference). */
  idempotencyKey: string;
  /** The run the call belongs to. */
  runId: string;
  /** The step the call belongs to. */
  seq: number;
  /** Requests sent under the key so far, the last one's outcome unknown. */
  attempts: number;
  /** Aborts when the check times out (`reconcileTimeoutMs`) or the worker stops. */
  signal: AbortSignal;
  /** The trace context of the check as HTTP headers (`traceparent`), empty with telemetry off. */
  traceHeaders(): Record<string, string>;
}

/**
 * What a tool's `reconcile` found out about a call whose outcome was unknown:
 *
 * - `happened`: the remote did it, and `result` is what it returned. The
 *   call is confirmed with `remote = "reconciled"` and never sent again.
 * - `not_happened`: the remote has no trace of it, so sending it now cannot
 *   do the work twice. The runtime sends it (within `maxAttempts`).
 * - `unknown`: the remote cannot say (the lookup failed, the job is still
 *   running, two records match): the runtime does what it would have done
 *   without a check, flags the call for a person (or, for a tool that takes
 *   a key, stops at `maxAttempts`). `reason` is shown to that person.
 *
 * A `reconcile` that throws, answers anything else or outlasts
 * `reconcileTimeoutMs` counts as `unknown`.
 */
export type Reconciliation =
  | { status: "happened"; result: Json }
  | { status: "not_happened" }
  | { status: "unknown"; reason?: string };
