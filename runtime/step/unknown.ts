/**
 * A call whose last request's outcome is unknown: a worker stopped before it
 * wrote one, or the request failed in a way that says nothing of whether the
 * remote acted. Here is decided, writing nothing, whether one more request
 * may go out under its key, whether the tool's `reconcile` found that it
 * happened, or whether a person must look; and, past the retry horizon, how
 * the call is given up as its tool says.
 *
 * @module
 */

import { type RunDeps, type RunState } from "../run/context.ts";
import { ToolError } from "../base/errors.ts";
import { humanMs } from "../base/retry.ts";
import { toStorable } from "../base/storable.ts";
import type { SideEffectRow } from "../store/store.ts";
import type { Json } from "../agent/tools.ts";
import { askRemote } from "./reconcile.ts";
import { confirm, failCall, flag, toolPolicy } from "./settle.ts";
import type { PreparedCall } from "./settle.ts";

/** What the worker knows of a call whose last request's outcome is unknown. */
export interface Unknown {
  /** Requests sent under the key so far. */
  attempts: number;
  /** Of them, those whose outcome no worker recorded (it stopped mid-call): bounded by `maxAttempts`. */
  unrecorded: number;
  /** The last request's error; none when a worker stopped before writing its outcome. */
  error?: ToolError;
  /** See {@link Resumed}. */
  approved: boolean;
  /** See {@link Resumed}. */
  reopened: boolean;
}

/**
 * What becomes of a call whose last request's outcome is unknown, when it is
 * not sent again: confirmed as `reconciled` with what the remote says it
 * returned, or flagged for a human, for the reason given.
 */
export type Verdict = { reconciled: Json } | { flag: string } | { later: string };

/**
 * Decides what becomes of a call whose last request's outcome is unknown (an
 * unknown-outcome error, or a worker that stopped before writing it), and
 * writes nothing: "send" when one more request may go out, `reconciled` when
 * the tool's `reconcile` found that it happened, `flag` when a human must
 * look. Otherwise it throws `TOOL_GAVE_UP`.
 *
 * - A person's `resolve --retry` since the last request approves one more.
 * - At the tool's `maxAttempts` (one more after a `reopen`) nothing is sent:
 *   the run fails `TOOL_GAVE_UP` with the row at `intent`, as the outcome is
 *   still unknown, unless `reconcile` says it happened. A tool that takes no
 *   key is flagged instead when `reconcile` cannot say it did not happen.
 * - Below it a tool that takes a key is sent again under it; one that takes
 *   none only when `reconcile` says it did not happen, and flagged otherwise.
 */
export async function unknownOutcome(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
  seen: Unknown,
  opts: { canWait?: boolean } = {},
): Promise<"send" | Verdict> {
  const { key, seq, tool } = call;
  if (seen.approved) return "send";
  const atLimit = seen.unrecorded >= tool.maxAttempts && !seen.reopened;
  if (tool.idempotent && !atLimit) return "send";
  let answer = await askRemote(deps, state, { key, seq, tool, args: call.args, attempts: seen.attempts });
  if (answer?.status === "happened") {
    // What the remote says it returned is stored like any result: one the
    // database cannot hold confirms nothing, and the lookup could not tell.
    const stored = toStorable(answer.result, { writeOut: true });
    if (stored.ok) return { reconciled: stored.value };
    answer = { status: "unknown", reason: `the result it found cannot be stored: it holds ${stored.reason}` };
  }
  if (answer?.status === "not_happened" && !atLimit) return "send";
  const lookup = answer === undefined
    ? ""
    : answer.status === "not_happened"
    ? "; its reconcile says it did not happen"
    : `; its reconcile could not tell${answer.reason ? ` (${answer.reason})` : ""}`;
  // A lookup that could not be made (it threw, or timed out): a remote that is down cannot be asked either.
  if (opts.canWait && !tool.idempotent && answer?.status === "unknown" && answer.unasked) {
    return { later: `its reconcile could not ask the remote (${answer.reason ?? "no answer"})` };
  }
  if (!tool.idempotent && answer?.status !== "not_happened") {
    const unknown = seen.error
      ? `it failed with an unknown outcome (${seen.error.message})`
      : "its outcome is unknown";
    return { flag: `${unknown} and ${tool.name} takes no idempotency key${lookup}` };
  }
  deps.log.error("gave-up", {
    run: state.fence.runId,
    seq,
    key,
    tool: tool.name,
    attempts: seen.attempts,
    code: seen.error?.code,
    error: seen.error?.message,
    reconcile: answer?.status,
  });
  const maybe = answer?.status === "not_happened" ? "" : ", so the remote may have acted";
  const what =
    (seen.unrecorded === seen.attempts
      ? `was sent ${seen.attempts} times (maxAttempts is ${tool.maxAttempts}) and no outcome was recorded: `
      : `was sent ${seen.attempts} times, ${seen.unrecorded} of them with no outcome recorded (maxAttempts is ${tool.maxAttempts}): `) +
    `each worker stopped before it could write one${maybe}${
      seen.error ? `; last error: ${seen.error.message}` : ""
    }${lookup}. Check the remote, then 'deno task reopen ${state.fence.runId}' sends it once more under its key`;
  throw new ToolError("TOOL_GAVE_UP", `Tool call ${key} (${tool.name}) ${what}`, {
    transient: false,
    cause: seen.error,
  });
}

/**
 * Requests under the call's key whose outcome no worker recorded (it stopped
 * mid-call): every request counts an attempt, and every failure a worker saw
 * is recorded, so the difference. The tool's `maxAttempts` bounds it.
 */
export function unknownRequests(row: SideEffectRow): number {
  return Math.max(0, row.attempts - row.failures);
}

/**
 * A call still failing once its retry horizon has passed: asked about once
 * more (its `reconcile`, if it has one), then given up as the tool says
 * (`onGiveUp`): the run fails `TOOL_GAVE_UP` (the row left at `intent`, its
 * outcome unknown; flagged for a person instead when the tool takes no key),
 * or the failure becomes the call's answer, which the model sees
 * (`TOOL_UNAVAILABLE`). Returns the call's row as its last write left it.
 */
export async function giveUp(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
  row: SideEffectRow,
  error: ToolError,
  failingForMs: number,
): Promise<SideEffectRow> {
  const { key, seq, tool } = call;
  const horizonMs = toolPolicy(deps, tool).horizonMs;
  const answer = tool.reconcile
    ? await askRemote(deps, state, { key, seq, tool, args: call.args, attempts: row.attempts })
    : undefined;
  if (answer?.status === "happened") {
    const stored = toStorable(answer.result, { writeOut: true });
    if (stored.ok) {
      return await confirm(deps, state, row, stored.value, "reconciled");
    }
  }
  const over = `failed ${row.failures} times over ${humanMs(failingForMs)} (the retry horizon is ${
    humanMs(horizonMs)
  }, counted from its first failure, across restarts); last error: ${error.message}`;
  deps.log.error("gave-up", {
    run: state.fence.runId,
    seq,
    key,
    tool: tool.name,
    failures: row.failures,
    failing_ms: failingForMs,
    code: error.code,
    error: error.message,
    on_give_up: typeof tool.onGiveUp === "function" ? "function" : tool.onGiveUp,
  });
  // A call of a tool that takes no key has an outcome nobody may guess at: a person looks.
  if (tool.onGiveUp === "fail-run" && !tool.idempotent) {
    const reason = `its outcome is unknown and ${tool.name} takes no idempotency key: it ${over}`;
    return await flag(deps, state, row, reason);
  }
  if (tool.onGiveUp === "fail-run") {
    throw new ToolError(
      "TOOL_GAVE_UP",
      `Tool call ${key} (${tool.name}) ${over}. When its remote is back, 'deno task reopen ${state.fence.runId}' ` +
        `sends it again under its key`,
      { transient: false, cause: error },
    );
  }
  const text = typeof tool.onGiveUp === "function"
    ? tool.onGiveUp({ idempotencyKey: key, error, failures: row.failures, failingForMs })
    : `${tool.name} is unavailable: its request ${over}`;
  return await failCall(
    deps,
    state,
    row,
    new ToolError("TOOL_UNAVAILABLE", String(text), { transient: false }),
  );
}
