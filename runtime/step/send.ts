/**
 * One tool call, sent: the path every call takes, from the first request to
 * the row this worker leaves it at. The intent (counting the attempt) is
 * committed before each request, which goes out under the idempotency key
 * `<run_id>:<seq>`; the outcome is committed after it: confirmed with the
 * result, failed for good, or waiting on a remote that accepted it. A failure
 * an outage explains is recorded on the row and sent again under the same
 * key after a backoff, until the retry horizon from its first failure (the
 * run let go between tries longer than a moment). A request whose outcome is
 * unknown goes to `unknown.ts`: sent again, found by the tool's `reconcile`,
 * or flagged for a person.
 *
 * @module
 */

import { childRunsFor, familyCeilings } from "../families/family.ts";
import { type CallWaits, callWaitsFor } from "../signals/call_waits.ts";
import { deadline } from "../base/clock.ts";
import { applyRow, type RunDeps, type RunState, telemetryOf } from "../run/context.ts";
import { type Ended, failed, finished } from "../run/ended.ts";
import { AbortedError, describeError, hasCode, ToolError } from "../base/errors.ts";
import { SimulatedKill } from "../base/crashpoints.ts";
import { humanMs, nextTry } from "../base/retry.ts";
import { toStorable } from "../base/storable.ts";
import type { SideEffectRow } from "../store/store.ts";
import { isAccepted, type ToolOutcome } from "../agent/tools.ts";
import { waitExpired } from "../agent/accepted.ts";
import { accepted, confirm, decidedName, failCall, flag, type PreparedCall, toolPolicy } from "./settle.ts";
import { giveUp, unknownOutcome, unknownRequests, type Verdict } from "./unknown.ts";
import { type Limited, releaseLimits, takeLimits } from "./limited.ts";
import { toolAsks } from "../agent/limit_asks.ts";
import { answerDry, staysDry } from "./dry_run.ts";

/**
 * How one call's sending ended for this worker: with its row as its last
 * write left it, or refused by a limit shared by the fleet before its request
 * went (its row as it was, if it has one).
 */
export type CallEnd = SideEffectRow | Limited;

/**
 * Sends a call (first attempt, re-send after a crash, or retry) until it is
 * confirmed, failed or flagged, or a limit refuses its next request. Each
 * attempt is counted in its intent row before the request goes out. Ends
 * with the call's row as its last write left it: settled, or with the error
 * that stopped it.
 */
export function send(deps: RunDeps, state: RunState, call: PreparedCall): Promise<Ended<CallEnd>> {
  return telemetryOf(deps).toolCall(
    {
      fence: state.fence,
      key: call.key,
      seq: call.seq,
      tool: call.tool.name,
      before: state.effects.get(call.seq),
    },
    () => sendCall(deps, state, call),
  );
}

/**
 * A call's path in this worker, top to bottom: a call an earlier worker left
 * at `intent` is sent again only if it may be ({@link unknownOutcome}); a
 * call its remote accepted is failed, unsent, past its deadline; then one
 * {@link request} after another until one leaves the call settled, flagged,
 * or asleep until its `check_at`. Bounded: by the tool's `maxAttempts`
 * (requests with no recorded outcome, counted across restarts by the row), a
 * call its remote accepted by its deadline (a poll counts no attempt), and a
 * failure an outage explains by the retry horizon.
 */
async function sendCall(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
): Promise<Ended<CallEnd>> {
  const left = (row: SideEffectRow) => finished(row, { effect: row });
  try {
    // A dry run's call of a tool that acts on the world is answered here, never sent (dry_run.ts).
    if (staysDry(state, call)) return left(await answerDry(deps, state, call));
    const row = state.effects.get(call.seq);
    if (call.resumed && row) {
      const unknown = { attempts: row.attempts, unrecorded: unknownRequests(row), ...call.resumed };
      const verdict = await unknownOutcome(deps, state, call, unknown);
      if (verdict !== "send") return left(await notSent(deps, state, row, verdict));
    }
    if (
      row?.status === "waiting" && row.wait_deadline_at && deps.clock.now() >= new Date(row.wait_deadline_at)
    ) {
      const expired = waitExpired(call.tool, call.key, new Date(row.wait_deadline_at));
      return left(await failCall(deps, state, row, expired));
    }
    for (;;) {
      const next = await request(deps, state, call);
      if (next === "again") continue;
      if ("kind" in next) return finished(next, { effect: state.effects.get(call.seq) });
      return left(next);
    }
  } catch (error) {
    return failed(error, { effect: state.effects.get(call.seq) });
  }
}

/**
 * One request of the call: a keyless call due again after a failure is
 * looked up first; then the tool-call budget, the limits shared by the fleet
 * (their reservations held from before the intent to the answer), the
 * intent, the request, and its outcome written. Returns the row this worker
 * leaves the call at, "again" for one more request (a short wait already
 * slept here), or the limit that refused it.
 */
async function request(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
): Promise<SideEffectRow | "again" | Limited> {
  const { log, crash } = deps;
  const { key, seq, tool } = call;
  const row = state.effects.get(seq);
  if (!tool.idempotent && row?.status === "intent" && row.check_at !== null) {
    const looked = await lookUpFirst(deps, state, call, row);
    if (looked !== "send") return looked;
  }
  state.reservation.take(state, row === undefined, await familyCeilings(deps, state));
  const asks = toolAsks(deps.limits, tool.name, state.labels);
  const limit = await takeLimits(deps, state, seq, asks, `call ${key} (${tool.name})`);
  if (limit.kind === "limited") return limit;
  const intent = await intentOrSettled(deps, state, call, row);
  if (intent.status === "confirmed" || intent.status === "failed") {
    await releaseLimits(deps, state, limit.held);
    return intent;
  }
  const attempt = intent.attempts;
  const poll = intent.polls > 0 ? intent.polls : undefined;
  log.info("intent", { run: state.fence.runId, seq, key, tool: tool.name, attempt, poll });
  await crash.hit("after_intent", seq);
  log.info("calling", { run: state.fence.runId, seq, key, tool: tool.name, attempt, poll });
  let outcome: ToolOutcome;
  try {
    outcome = storedOutcome(await callTool(deps, state, call, intent), call);
  } catch (err) {
    // A worker that is stopping (or whose process died) lets the lease end what it held.
    if (!state.signal.aborted) await releaseLimits(deps, state, limit.held, { error: err });
    return await afterFailure(deps, state, call, state.effects.get(seq) ?? intent, err);
  }
  await releaseLimits(deps, state, limit.held);
  await crash.hit("after_call", seq);
  // The row as the state holds it: a wait the tool made may have written to it (what it waits for).
  const held = state.effects.get(seq) ?? intent;
  if (isAccepted(outcome)) return await accepted(deps, state, call, held, outcome);
  const confirmed = await confirm(deps, state, held, outcome.result, outcome.remote ?? "created");
  await crash.hit("after_confirm", seq);
  return confirmed;
}

/**
 * A call of a tool that takes no key, due again after a failure: its last
 * request's outcome is unknown, so its remote is asked first, just before
 * the call would go. A lookup that cannot be made now is tried again later,
 * within the retry horizon, rather than flagged during an outage. Returns
 * "send", "again", or the row the call is left at.
 */
async function lookUpFirst(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
  row: SideEffectRow,
): Promise<SideEffectRow | "again" | "send"> {
  // The failure recorded (`CODE: message`) is the last request's error.
  const [, code = "TOOL_THREW", message = row.error ?? "its request failed"] =
    /^([A-Z][A-Z0-9_]*): ([\s\S]*)$/.exec(row.error ?? "") ?? [];
  const seen = {
    attempts: row.attempts,
    unrecorded: unknownRequests(row),
    error: new ToolError(code, message, { transient: true }),
    approved: false,
    reopened: false,
  };
  const verdict = await unknownOutcome(deps, state, call, seen, { canWait: true });
  if (verdict === "send") return "send";
  if (!("later" in verdict)) return await notSent(deps, state, row, verdict);
  const lookup = new ToolError("TOOL_THREW", verdict.later, { transient: true });
  const again = await scheduleAgain(deps, state, call, row, lookup);
  if (again.next === "give-up") {
    return await notSent(deps, state, again.row, {
      flag: `its outcome is unknown, ${call.tool.name} takes no idempotency key, and ${verdict.later} for ` +
        `${humanMs(again.failingForMs)} (the retry horizon)`,
    });
  }
  return again.next === "hold" ? "again" : again.row;
}

/**
 * The request failed. An error the tool did not classify says nothing about
 * whether the remote acted, so it is an unknown outcome: sent again under
 * the same key (or flagged), never recorded as a failure that might hide a
 * resource. A permanent failure is an answer too: recorded, and the model
 * sees it. Returns "again", or the row the call is left at.
 */
async function afterFailure(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
  intent: SideEffectRow,
  err: unknown,
): Promise<SideEffectRow | "again"> {
  if (err instanceof SimulatedKill) throw err; // the (simulated) process is gone
  if (state.signal.aborted) throw state.signal.reason ?? err;
  const e = err instanceof ToolError
    ? err
    : new ToolError("TOOL_THREW", describeError(err), { transient: true, cause: err });
  if (!e.transient) return await failCall(deps, state, intent, e);
  // May it be sent again at all? A tool that takes a key: below its limit on requests with no recorded
  // outcome (this one's is known, a failure). One that takes none and cannot look a call up is flagged;
  // one that can is asked just before it would be sent again (lookUpFirst).
  if (call.tool.idempotent || !call.tool.reconcile) {
    const unknown = {
      attempts: intent.attempts,
      unrecorded: Math.max(0, unknownRequests(intent) - 1),
      error: e,
      approved: false,
      reopened: false,
    };
    const verdict = await unknownOutcome(deps, state, call, unknown);
    if (verdict !== "send") return await notSent(deps, state, intent, verdict);
  }
  const again = await scheduleAgain(deps, state, call, intent, e);
  if (again.next === "give-up") return await giveUp(deps, state, call, again.row, e, again.failingForMs);
  // A longer wait holds no slot: the step's other calls settle, then the run sleeps until it is due.
  return again.next === "hold" ? "again" : again.row;
}

/**
 * A call not sent again: confirmed with what its remote says it returned, or
 * flagged (the step blocks the run once its other calls have settled).
 * (`later` comes only when asked for: a caller that cannot wait has the call
 * flagged.)
 */
async function notSent(
  deps: RunDeps,
  state: RunState,
  row: SideEffectRow,
  verdict: Verdict,
): Promise<SideEffectRow> {
  if ("reconciled" in verdict) {
    const confirmed = await confirm(deps, state, row, verdict.reconciled, "reconciled");
    await deps.crash.hit("after_confirm", row.seq);
    return confirmed;
  }
  return await flag(deps, state, row, "flag" in verdict ? verdict.flag : verdict.later);
}

/**
 * Writes the intent of the call's next request, and returns the row as the
 * write left it, applied to the run's state; or, when the call was asleep on its remote and a person or a
 * webhook settled it since this worker read it (`settle`), so the intent is
 * refused as the row is no longer as this worker left it, the call's row as
 * settled, applied to the run's state: the worker goes on with it instead of
 * stopping (SETTLE_CALL in the store's operators.ts describes the race).
 */
async function intentOrSettled(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
  row: SideEffectRow | undefined,
): Promise<SideEffectRow> {
  const { key, seq } = call;
  try {
    const intent = await deps.store.writes.effectIntentRow(
      state.fence,
      { key, seq, tool: decidedName(call), args: call.rawArgs },
      deps.clock.now(),
      row === undefined,
    );
    applyRow(state, intent);
    return intent;
  } catch (err) {
    if (row?.status !== "waiting" || !hasCode(err, "STALLED")) throw err;
    const now = await deps.store.reads.getEffect(key);
    if (now?.run_id !== state.fence.runId || (now.status !== "confirmed" && now.status !== "failed")) {
      throw err;
    }
    applyRow(state, now);
    deps.log.info("settled-meanwhile", {
      run: state.fence.runId,
      seq,
      key,
      status: now.status,
      by: now.resolved_by ?? undefined,
    });
    return now;
  }
}

/**
 * Records a failure of the call `row` (as the worker holds it, at `intent`)
 * that an outage explains, with when it may go again, so the count and the
 * horizon hold across restarts (a remote that says when to come back, 409,
 * 429 or 503, knows better than our backoff), and says what comes next: a
 * wait slept here holding the slot (`hold`, already slept when this returns),
 * one that lets the run go until the call is due (`park`), or the horizon
 * passed (`give-up`).
 */
async function scheduleAgain(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
  row: SideEffectRow,
  error: ToolError,
): Promise<
  { row: SideEffectRow; next: "hold" | "park" } | {
    row: SideEffectRow;
    next: "give-up";
    failingForMs: number;
  }
> {
  const now = deps.clock.now();
  const next = nextTry(
    toolPolicy(deps, call.tool),
    { failures: row.failures + 1, failingSince: row.failing_since ?? now, retryAfterMs: error.retryAfterMs },
    now,
    deps.random,
  );
  const failure = await deps.store.writes.effectFailure(
    state.fence,
    row,
    { error: `${error.code}: ${error.message}`, retryAt: next.kind === "again" ? next.at : now },
    now,
  );
  applyRow(state, failure);
  if (next.kind === "give-up") return { row: failure, next: "give-up", failingForMs: next.failingForMs };
  deps.log.warn("retrying", {
    run: state.fence.runId,
    seq: call.seq,
    key: call.key,
    attempt: row.attempts,
    failures: failure.failures,
    code: error.code,
    error: error.message,
    delay_ms: next.waitMs,
    retry_after_ms: error.retryAfterMs,
    at: next.hold ? undefined : next.at,
    gives_up_at: next.givesUpAt,
  });
  if (!next.hold) return { row: failure, next: "park" };
  await deps.clock.sleep(next.waitMs, state.signal);
  return { row: failure, next: "hold" };
}

async function callTool(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
  intent: SideEffectRow,
): Promise<ToolOutcome> {
  const timeout = deadline(
    deps.clock,
    state.signal,
    call.tool.timeoutMs,
    () =>
      new ToolError("TOOL_TIMEOUT", `${call.tool.name} did not answer within ${call.tool.timeoutMs}ms`, {
        transient: true,
      }),
  );
  // Built when a tool asks for a wait (a signal, a time): no other call pays for it.
  let waits: CallWaits | undefined;
  const waitsOf = () => waits ??= callWaitsFor(deps, state, call);
  try {
    return await call.tool.run(call.args, {
      idempotencyKey: call.key,
      runId: state.fence.runId,
      seq: call.seq,
      attempt: intent.attempts,
      polls: intent.polls ?? 0,
      // Read only by a tool that uses it: the deadline arms its timer then (see deadline()).
      get signal() {
        return timeout.signal;
      },
      traceHeaders: () => telemetryOf(deps).traceHeaders(),
      // Built when a tool asks for it (an agent used as a tool): no other call pays for it.
      get runs() {
        return childRunsFor(deps, state, call);
      },
      waitForSignal: (name, opts) => waitsOf().waitForSignal(name, opts),
      sleepUntil: (time, opts) => waitsOf().sleepUntil(time, opts),
      sleepFor: (ms) => waitsOf().sleepFor(ms),
    });
  } catch (err) {
    const timedOut = timeout.expired();
    if (timedOut && !state.signal.aborted) throw timedOut;
    if (state.signal.aborted) throw state.signal.reason ?? new AbortedError("The worker is stopping");
    throw err;
  } finally {
    timeout.cancel();
  }
}

/**
 * A tool's outcome with its result as the database will give it back (what
 * the model sees, live and on replay). A result that cannot be stored (a
 * cycle, a BigInt, NaN, nesting too deep: storable.ts) fails the call for
 * good with `TOOL_RESULT_UNSTORABLE`, rather than failing every write of it;
 * NUL characters and lone surrogates are written out as their escapes.
 */
function storedOutcome(outcome: ToolOutcome, call: PreparedCall): ToolOutcome {
  if (isAccepted(outcome)) return outcome;
  const stored = toStorable(outcome.result, { writeOut: true });
  if (stored.ok) return { ...outcome, result: stored.value };
  throw new ToolError(
    "TOOL_RESULT_UNSTORABLE",
    `${call.tool.name} answered, but its result cannot be stored: it holds ${stored.reason}. ` +
      `The call is failed for good, though the remote may have acted (key ${call.key}); ` +
      `the tool must return JSON`,
    { transient: false },
  );
}
