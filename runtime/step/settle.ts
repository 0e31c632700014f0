/**
 * The writes that end one request of a tool call: confirmed with its result,
 * failed for good (the model sees the failure), flagged for a person, or
 * left waiting on a remote that accepted it. Each returns the row as its
 * write left it, applied to the run's state; none decides what comes next.
 *
 * @module
 */

import { applyRow, type RunDeps, type RunState } from "../run/context.ts";
import { definedFields, type RetryPolicy } from "../base/retry.ts";
import { ToolError } from "../base/errors.ts";
import { toStorable } from "../base/storable.ts";
import type { SideEffectRow } from "../store/store.ts";
import type { Json, Tool, ToolAccepted } from "../agent/tools.ts";
import { checkAtWithFloor, waitExpired } from "../agent/accepted.ts";

/** A call ready to send: its row's identity and its parsed arguments. */
export interface PreparedCall {
  key: string;
  seq: number;
  tool: Tool;
  /**
   * The tool's name as the step decided it, when the call is carried by a
   * tool that replaces that name (a run moved to a newer version): the row
   * records the call as decided. Absent: `tool.name`.
   */
  decidedTool?: string;
  /** As decided (stored, and compared by the remote). */
  rawArgs: Json;
  /** As parsed by the tool's schema (what `run` receives). */
  args: unknown;
  /**
   * Set for a call an earlier worker left at `intent` (recovery): what a
   * person said about it since its last request.
   */
  resumed?: Resumed;
}

/** The tool name a call's rows record: as the step decided it (see {@link PreparedCall.decidedTool}). */
export function decidedName(call: Pick<PreparedCall, "tool" | "decidedTool">): string {
  return call.decidedTool ?? call.tool.name;
}

/** What a person said about a call left at `intent` since its last request. */
export interface Resumed {
  /** `resolve --retry`: the person checked the remote and approved one more request. */
  approved: boolean;
  /** `reopen`: one more request than the tool's `maxAttempts` is allowed. */
  reopened: boolean;
}

/** The retry policy of `tool`'s calls: its own fields over its agent's (and the process's). */
export function toolPolicy(deps: Pick<RunDeps, "retry">, tool: Tool): RetryPolicy {
  return { ...deps.retry, ...definedFields(tool.retry) };
}

/** Records a permanent failure of the call `row` (the model sees it) and returns the row as the write left it. */
export async function failCall(
  deps: RunDeps,
  state: RunState,
  row: SideEffectRow,
  e: ToolError,
): Promise<SideEffectRow> {
  const settled = await deps.store.writes.effectSettle(
    state.fence,
    row,
    { status: "failed", error: e.message },
    deps.clock.now(),
  );
  applyRow(state, settled);
  deps.log.warn("tool-failed", {
    run: state.fence.runId,
    seq: row.seq,
    key: row.idempotency_key,
    tool: row.tool,
    code: e.code,
    error: e.message,
  });
  return settled;
}

/**
 * The remote accepted the call and will finish it later: the row goes to
 * `waiting` with the accepted answer (a job id) and when to ask again (at the
 * latest the call's deadline, fixed by the first accepted answer at
 * `waitDeadlineMs`). An answer past the deadline fails the call
 * `TOOL_WAIT_EXPIRED`; an answer that is not a valid wait fails it
 * `TOOL_ACCEPTED_INVALID`.
 */
export async function accepted(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
  intent: SideEffectRow,
  outcome: ToolAccepted,
): Promise<SideEffectRow> {
  const now = deps.clock.now();
  const deadlineAt = intent.wait_deadline_at
    ? new Date(intent.wait_deadline_at)
    : new Date(now.getTime() + call.tool.waitDeadlineMs);
  let checkAt: Date;
  try {
    // No sooner than the tool's floor, which doubles with each poll: a remote that keeps saying "ask again
    // at once" is asked less and less often (bounded by the call's deadline below).
    const ceiling = toolPolicy(deps, call.tool).backoffMaxMs;
    const asked = checkAtWithFloor(call.tool, outcome, intent.polls, ceiling, now);
    if (asked.raised) {
      deps.log.info("check-after-raised", {
        run: state.fence.runId,
        seq: call.seq,
        key: call.key,
        polls: intent.polls,
        asked_ms: (outcome.accepted as { checkAfterMs: number }).checkAfterMs,
        floor_ms: asked.floorMs,
      });
    }
    checkAt = asked.at;
  } catch (err) {
    return await failCall(deps, state, intent, err as ToolError);
  }
  if (now >= deadlineAt) {
    return await failCall(deps, state, intent, waitExpired(call.tool, call.key, deadlineAt));
  }
  if (checkAt > deadlineAt) checkAt = deadlineAt;
  const stored = toStorable(outcome.result, { writeOut: true });
  if (!stored.ok) {
    return await failCall(
      deps,
      state,
      intent,
      new ToolError(
        "TOOL_RESULT_UNSTORABLE",
        `${call.tool.name} answered that its remote accepted the call, but what it returned cannot be stored: ` +
          `it holds ${stored.reason}. The call is failed for good, though the remote may be doing it (key ${call.key})`,
        { transient: false },
      ),
    );
  }
  const row = await deps.store.writes.effectWaiting(state.fence, intent, {
    result: stored.value,
    checkAt,
    deadlineAt,
  });
  applyRow(state, row);
  deps.log.info("accepted", {
    run: state.fence.runId,
    seq: call.seq,
    key: call.key,
    tool: call.tool.name,
    polls: intent.polls,
    check_at: checkAt.toISOString(),
    deadline: deadlineAt.toISOString(),
  });
  await deps.crash.hit("after_confirm", call.seq);
  return row;
}

/** Commits the outcome of the call `row` and returns the row as the write left it, applied to the run's state. */
export async function confirm(
  deps: RunDeps,
  state: RunState,
  row: SideEffectRow,
  result: Json,
  remote: "created" | "already_done" | "reconciled" | "original" | "stub",
): Promise<SideEffectRow> {
  const confirmed = await deps.store.writes.effectConfirm(
    state.fence,
    row,
    { result, remote },
    deps.clock.now(),
  );
  applyRow(state, confirmed);
  deps.log.info("confirmed", {
    run: state.fence.runId,
    seq: row.seq,
    key: row.idempotency_key,
    result,
    remote,
  });
  return confirmed;
}

/**
 * Marks the call `row`, whose outcome cannot be known safely, as `flagged`,
 * and returns the row as the write left it: the step reads a flagged row as
 * the run blocked, once its other calls have settled.
 */
export async function flag(
  deps: RunDeps,
  state: RunState,
  row: SideEffectRow,
  reason: string,
): Promise<SideEffectRow> {
  const flagged = await deps.store.writes.effectSettle(
    state.fence,
    row,
    { status: "flagged", error: reason },
    deps.clock.now(),
  );
  applyRow(state, flagged);
  deps.log.warn("flagged", {
    run: state.fence.runId,
    seq: row.seq,
    key: row.idempotency_key,
    tool: row.tool,
    reason,
  });
  return flagged;
}
