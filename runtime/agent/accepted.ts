/**
 * A call its remote accepted (a job id, and when to ask again): when it is
 * asked again, no sooner than its tool's floor, and how it fails when the
 * remote has not finished by the call's deadline.
 *
 * @module
 */

import { describeValue, ToolError } from "../base/errors.ts";
import type { Tool, ToolAccepted } from "./tools.ts";

/**
 * When, after `now`, to re-send a call its remote accepted: `now` plus its
 * `checkAfterMs`, which must be a positive integer (the step asks no
 * later than the call's deadline, whatever the remote said); a tool that
 * answers anything else has a bug, and the call fails for good with
 * `TOOL_ACCEPTED_INVALID`.
 */
export function checkAtOf(tool: Tool, outcome: ToolAccepted, now: Date): Date {
  const ms = (outcome.accepted as { checkAfterMs?: unknown } | null)?.checkAfterMs;
  if (typeof ms !== "number" || !Number.isSafeInteger(ms) || ms < 1) {
    throw new ToolError(
      "TOOL_ACCEPTED_INVALID",
      `${tool.name} answered that its remote accepted the call, but 'accepted.checkAfterMs' must be a ` +
        `positive integer of milliseconds: current value is ${describeValue(ms)}`,
      { transient: false },
    );
  }
  return new Date(now.getTime() + ms);
}

/**
 * The failure of a call whose remote had not finished the job by the call's
 * deadline (`deadlineAt`: its tool's `waitDeadlineMs` after the first
 * accepted answer): permanent, so the model is shown it.
 */
export function waitExpired(tool: Tool, key: string, deadlineAt: Date): ToolError {
  return new ToolError(
    "TOOL_WAIT_EXPIRED",
    `${tool.name}: the remote accepted call ${key} but had not finished it by its deadline ` +
      `${deadlineAt.toISOString()} (waitDeadlineMs ${tool.waitDeadlineMs} after it first accepted it)`,
    { transient: false },
  );
}

/**
 * The time a call its remote accepted is asked again: what the remote asked
 * for, but no sooner than the tool's floor for a call asked `polls` times
 * (`minCheckAfterMs`, doubled per poll, at most `floorMaxMs`). Returns the
 * time and whether the floor raised it.
 */
export function checkAtWithFloor(
  tool: Tool,
  outcome: ToolAccepted,
  polls: number,
  floorMaxMs: number,
  now: Date,
): { at: Date; raised: boolean; floorMs: number } {
  const asked = checkAtOf(tool, outcome, now);
  const floorMs = Math.min(
    Math.max(tool.minCheckAfterMs, floorMaxMs),
    tool.minCheckAfterMs * 2 ** Math.min(Math.max(0, polls), 30),
  );
  const floor = new Date(now.getTime() + floorMs);
  return asked >= floor ? { at: asked, raised: false, floorMs } : { at: floor, raised: true, floorMs };
}
