/**
 * The waits a tool call may make holding no worker's slot, as its `run` is
 * given them (`ctx.waitForSignal`, `ctx.sleepUntil`, `ctx.sleepFor`), built
 * on the calls that wait on their remote: a wait that cannot end now answers
 * as a remote that accepted the work would (`ToolAccepted`), so the call is
 * `waiting`, the run asleep with no lease, and the call is sent again under
 * its key when it is due. For a signal the store is the remote: the call's
 * take writes its key on the signal, so a re-send gets the same one
 * (`signals.ts`), and a send of the name marks the call due and wakes the run.
 * When a wait ends (its deadline, the time it sleeps until) is fixed by the
 * first request that waits: it is kept in the call's waiting answer, which a
 * re-send reads from the call's row.
 *
 * @module
 */

import { describeValue, ToolError } from "../base/errors.ts";
import { isSignalName, SIGNAL_NAME_SHAPE } from "../base/ids.ts";
import type { Json } from "../base/values.ts";
import type {
  ReceivedSignal,
  SignalWait,
  SleepWait,
  ToolContext,
  WaitingOutcome,
} from "../agent/tool_context.ts";
import type { Tool } from "../agent/tools.ts";
import { applyRow, type RunDeps, type RunState } from "../run/context.ts";
import type { SignalRow } from "../store/signals.ts";

/** The waits of one call: what `ctx` gives its tool's `run`. */
export type CallWaits = Required<Pick<ToolContext, "waitForSignal" | "sleepUntil" | "sleepFor">>;

/** What a call's waiting answer keeps, so a re-send under its key knows when its wait ends. */
interface KeptWait {
  /** The signal waited for. */
  waiting_for_signal?: string;
  /** When a wait for a signal times out (ISO), or null for one bounded only by the tool. */
  until?: string | null;
  /** When a sleep ends (ISO). */
  sleeping_until?: string;
}

/** The waits of the call `call` of the run `state` holds. */
export function callWaitsFor(
  deps: Pick<RunDeps, "store" | "clock" | "log">,
  state: Pick<RunState, "fence" | "effects" | "journal">,
  call: { key: string; seq: number; tool: Tool },
): CallWaits {
  /** What the call's row kept from its last waiting answer (read at this request's intent). */
  const kept = (): KeptWait => {
    const result = state.effects.get(call.seq)?.result;
    return result !== null && typeof result === "object" && !Array.isArray(result) ? result as KeptWait : {};
  };
  const sleepTo = (target: Date): SleepWait => {
    const now = deps.clock.now();
    if (now >= target) return { kind: "woke", at: target };
    const outcome = waiting({ sleeping_until: target.toISOString() }, target.getTime() - now.getTime());
    return { kind: "waiting", outcome, until: target };
  };
  return {
    waitForSignal: async (name, opts = {}) => {
      const deadlineMs = checkSignalWait(call.tool, name, opts.deadlineMs);
      const now = deps.clock.now();
      const before = kept();
      const until = before.waiting_for_signal === name && typeof before.until === "string"
        ? new Date(before.until)
        : deadlineMs === undefined
        ? undefined
        : new Date(now.getTime() + deadlineMs);
      const row = state.effects.get(call.seq);
      if (row === undefined) {
        throw new RangeError(`call ${call.key} waits for a signal with no row of its own`);
      }
      const took = await deps.store.signals.take(state.fence, row, name, now);
      // The call's row records what it waits for: the state holds it as written.
      if (took.kind === "none") applyRow(state, took.row);
      const log = { run: state.fence.runId, seq: call.seq, key: call.key, signal: name };
      if (took.kind === "taken") {
        const { signal_id, seq } = took.signal;
        deps.log.info("signal-taken", { ...log, signal_id, signal_seq: seq, again: took.again || undefined });
        return { kind: "received", signal: received(took.signal), again: took.again };
      }
      if (until !== undefined && now >= until) {
        deps.log.info("signal-timed-out", { ...log, deadline: until.toISOString() });
        return { kind: "timed-out", name, deadline: until } satisfies SignalWait;
      }
      deps.log.info("signal-waiting", { ...log, until: until?.toISOString() ?? "its tool's waitDeadlineMs" });
      const keep: KeptWait = { waiting_for_signal: name, until: until?.toISOString() ?? null };
      // With no deadline of its own, the tool's waitDeadlineMs bounds it (the step asks no later).
      const afterMs = until ? until.getTime() - now.getTime() : call.tool.waitDeadlineMs;
      return { kind: "waiting", outcome: waiting(keep, afterMs) };
    },
    sleepUntil: (time, opts = {}) =>
      Promise.resolve(sleepTo(checkSleepTime(call.tool, time, deps.clock.now(), opts.maxMs))),
    sleepFor: (ms) => {
      checkSleepMs(call.tool, ms);
      const before = kept().sleeping_until;
      const target = typeof before === "string"
        ? new Date(before)
        : new Date(deps.clock.now().getTime() + ms);
      return Promise.resolve(sleepTo(target));
    },
  };
}

/** The answer of a call whose wait goes on: `kept` stored on its row, asked again after `afterMs`. */
function waiting(kept: KeptWait, afterMs: number): WaitingOutcome {
  return { result: kept as Json, accepted: { checkAfterMs: Math.max(1, Math.ceil(afterMs)) } };
}

/** A signal's row as its tool is given it. */
function received(row: SignalRow): ReceivedSignal {
  return {
    name: row.name,
    signalId: row.signal_id,
    payload: row.payload,
    sentAt: new Date(row.sent_at),
    seq: row.seq,
  };
}

/** Refused for good: a wait a tool asked for that cannot be made. */
function invalid(code: "SIGNAL_WAIT_INVALID" | "SLEEP_INVALID", message: string): ToolError {
  return new ToolError(code, message, { transient: false });
}

/** The wait's deadline, checked: a positive integer below the tool's own bound, or none. */
function checkSignalWait(tool: Tool, name: unknown, deadlineMs: unknown): number | undefined {
  if (!isSignalName(name)) {
    throw invalid(
      "SIGNAL_WAIT_INVALID",
      `${tool.name} cannot wait for a signal named ${describeValue(name)}: a name is ${SIGNAL_NAME_SHAPE}`,
    );
  }
  if (deadlineMs === undefined) return undefined;
  if (typeof deadlineMs !== "number" || !Number.isSafeInteger(deadlineMs) || deadlineMs < 1) {
    throw invalid(
      "SIGNAL_WAIT_INVALID",
      `${tool.name} cannot wait for signal ${name} as 'deadlineMs' must be a positive integer of ` +
        `milliseconds: current value is ${describeValue(deadlineMs)}`,
    );
  }
  if (deadlineMs >= tool.waitDeadlineMs) {
    throw invalid(
      "SIGNAL_WAIT_INVALID",
      `${tool.name} cannot wait ${deadlineMs} ms for signal ${name}: its waitDeadlineMs (${tool.waitDeadlineMs}) ` +
        `would fail the call first; give the tool a larger waitDeadlineMs`,
    );
  }
  return deadlineMs;
}

/** A sleep's length, checked: a whole number of milliseconds below the tool's bound. */
function checkSleepMs(tool: Tool, ms: unknown): void {
  if (typeof ms !== "number" || !Number.isSafeInteger(ms) || ms < 0 || ms >= tool.waitDeadlineMs) {
    throw invalid(
      "SLEEP_INVALID",
      `${tool.name} cannot sleep for ${describeValue(ms)} ms: a sleep is a whole number of milliseconds ` +
        `from 0 to below the tool's waitDeadlineMs (${tool.waitDeadlineMs})`,
    );
  }
}

/** A time to sleep until, checked: a valid time less than the tool's bound (and `maxMs`) from now. */
function checkSleepTime(tool: Tool, time: unknown, now: Date, maxMs?: number): Date {
  const at = time instanceof Date ? time : typeof time === "string" ? new Date(time) : undefined;
  if (at === undefined || Number.isNaN(at.getTime())) {
    throw invalid(
      "SLEEP_INVALID",
      `${tool.name} cannot sleep until ${describeValue(time)}: give a Date or an ISO 8601 time`,
    );
  }
  if (maxMs !== undefined && at.getTime() - now.getTime() > maxMs) {
    throw invalid(
      "SLEEP_INVALID",
      `${tool.name} cannot sleep until ${at.toISOString()}: that is more than ${maxMs} ms from now ` +
        `(${now.toISOString()})`,
    );
  }
  if (at.getTime() - now.getTime() >= tool.waitDeadlineMs) {
    throw invalid(
      "SLEEP_INVALID",
      `${tool.name} cannot sleep until ${at.toISOString()}: that is more than its waitDeadlineMs ` +
        `(${tool.waitDeadlineMs}) from now (${now.toISOString()})`,
    );
  }
  return at;
}
