/**
 * One tool call, made durable: validate the arguments, commit the intent row,
 * send the request under the idempotency key `<run_id>:<seq>`, commit the
 * confirm with the result and whether the remote created something or
 * recognised the key. Transient failures are re-sent under the same key with
 * backoff, each attempt counted before it goes out, at most the tool's
 * `maxAttempts` across restarts; a tool that cannot take a key is never
 * re-sent after an unknown outcome unless its `reconcile` says the call did
 * not happen: it is flagged for a human.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { checkToolRequest } from "./budget.ts";
import { deadline } from "./clock.ts";
import {
  applyRow,
  idempotencyKey,
  type RunState,
  telemetryOf,
  waitToRetry,
  type WorkerDeps,
} from "./context.ts";
import { type Ended, failed, finished } from "./ended.ts";
import { AbortedError, describeError, RuntimeError, ToolError } from "./errors.ts";
import { SimulatedKill } from "./crashpoints.ts";
import { askRemote } from "./reconcile.ts";
import { toStorable } from "./store/storable.ts";
import type { Decided, ToolDecision } from "./journal.ts";
import type { SideEffectRow } from "./store/store.ts";
import type { Json, Tool, ToolOutcome } from "./tools.ts";

/** The run cannot go on until a human resolves a flagged tool call. */
export class BlockedError extends RuntimeError {
  /** The flagged call's idempotency key. */
  readonly key: string;
  /** Creates a blocked marker for `key`. */
  constructor(key: string, reason: string) {
    super(
      "BLOCKED",
      `Tool call ${key} needs a human: ${reason}. Check the remote, then run ` +
        `'deno task resolve ${key} --result <json>' if it happened, '--retry' to send it again, or '--fail'`,
    );
    this.name = "BlockedError";
    this.key = key;
  }
}

/** The run waits for a person to approve a tool call; the worker lets it go. */
export class WaitingError extends RuntimeError {
  /** The call's idempotency key. */
  readonly key: string;
  /** Creates the marker for a call waiting on `key`. */
  constructor(key: string, tool: string) {
    super(
      "WAITING_FOR_APPROVAL",
      `Tool call ${key} (${tool}) waits for a person: 'deno task approve ${key}' or 'deno task deny ${key} --reason TEXT'`,
    );
    this.name = "WaitingError";
    this.key = key;
  }
}

/**
 * sha-256 of the canonical JSON (keys sorted at every level) of `value`, in
 * hex. Computed in this thread (node:crypto): `crypto.subtle.digest` answers
 * from a worker thread a macrotask later, which the simulator's schedules
 * (microtasks only) could not order.
 */
export function argsHash(value: Json): Promise<string> {
  const canonical = (v: Json): string =>
    v === null || typeof v !== "object"
      ? JSON.stringify(v)
      : Array.isArray(v)
      ? `[${v.map(canonical).join(",")}]`
      : `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`;
  return Promise.resolve(createHash("sha256").update(canonical(value)).digest("hex"));
}

/** A call ready to send: its row's identity and its parsed arguments. */
export interface PreparedCall {
  key: string;
  seq: number;
  tool: Tool;
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

/** What a person said about a call left at `intent` since its last request. */
export interface Resumed {
  /** `resolve --retry`: the person checked the remote and approved one more request. */
  approved: boolean;
  /** `reopen`: one more request than the tool's `maxAttempts` is allowed. */
  reopened: boolean;
}

/** What the worker knows of a call whose last request's outcome is unknown. */
interface Unknown {
  /** Requests sent under the key so far. */
  attempts: number;
  /** The last request's error; none when a worker stopped before writing its outcome. */
  error?: ToolError;
  /** See {@link Resumed}. */
  approved: boolean;
  /** See {@link Resumed}. */
  reopened: boolean;
}

/**
 * Carries out the decided tool call of step `seq`, unless it already happened;
 * with the call's row as its last write left it (or as it was), whether it
 * ended with the row settled or with an error.
 */
export async function act(
  deps: WorkerDeps,
  state: RunState,
  seq: number,
  decided: Decided<ToolDecision>,
): Promise<Ended<SideEffectRow>> {
  const { decision } = decided;
  const runId = state.fence.runId;
  const key = idempotencyKey(runId, seq);
  const existing = state.effects.get(seq);
  let call: PreparedCall;
  try {
    if (existing?.status === "confirmed" || existing?.status === "failed") {
      deps.log.info("skipped", {
        run: runId,
        seq,
        key,
        status: existing.status,
        remote: existing.remote ?? undefined,
      });
      return finished(existing, { effect: existing });
    }
    if (existing?.status === "flagged") {
      throw new BlockedError(key, existing.error ?? "its outcome is unknown");
    }
    // Arguments are checked before any intent row exists: bad arguments never reach a remote.
    // A decision this worker has just made was checked by decide() (#11: not parsed twice).
    const checked = decided.checked
      ? { ok: true as const, ...decided.checked }
      : deps.tools.check(decision.tool, decision.args);
    if (!checked.ok) {
      throw new RuntimeError(
        "DECISION_INVALID",
        `The decision of step ${seq} cannot be carried out: ${checked.message}`,
      );
    }
    if (checked.tool.needsApproval(checked.args)) {
      const denied = await approval(deps, state, key, seq, decision);
      if (denied) return finished(denied, { effect: denied });
    }
    await deps.crash.hit("before_intent", seq);
    call = { key, seq, tool: checked.tool, rawArgs: decision.args, args: checked.args };
  } catch (error) {
    return failed(error, { effect: existing });
  }
  return await send(deps, state, call);
}

/**
 * Sends a call (first attempt, re-send after a crash, or retry) until it is
 * confirmed, failed or flagged. Each attempt is counted in its intent row
 * before the request goes out. Ends with the call's row as its last write
 * left it: settled, or with the error that stopped it.
 */
export function send(deps: WorkerDeps, state: RunState, call: PreparedCall): Promise<Ended<SideEffectRow>> {
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

async function sendCall(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
): Promise<Ended<SideEffectRow>> {
  const { log, store, clock, crash } = deps;
  const runId = state.fence.runId;
  const { key, seq, tool } = call;
  let row = state.effects.get(seq);
  // A call not sent again: confirmed with what its remote says it returned, or flagged (and the run blocked).
  const carryOut = async (at: SideEffectRow, verdict: Verdict): Promise<Ended<SideEffectRow>> => {
    if ("reconciled" in verdict) {
      row = await confirm(deps, state, at, verdict.reconciled, "reconciled");
      await crash.hit("after_confirm", seq);
      return finished(row, { effect: row });
    }
    row = await flag(deps, state, at, verdict.flag);
    throw new BlockedError(key, verdict.flag);
  };
  try {
    // A call an earlier worker left at intent: may it be sent again, and is it known by now?
    if (call.resumed && row) {
      const unknown = { attempts: row.attempts, ...call.resumed };
      const verdict = await unknownOutcome(deps, state, call, unknown);
      if (verdict !== "send") return await carryOut(row, verdict);
    }
    // Bounded by the tool's maxAttempts (counted across restarts by the row): see unknownOutcome.
    for (;;) {
      checkToolRequest(state);
      const intent = await store.effectIntentRow(
        state.fence,
        { key, seq, tool: tool.name, args: call.rawArgs },
        clock.now(),
        row === undefined,
      );
      row = intent;
      applyRow(state, intent);
      const attempt = intent.attempts;
      log.info("intent", { run: runId, seq, key, tool: tool.name, attempt });
      await crash.hit("after_intent", seq);
      log.info("calling", { run: runId, seq, key, tool: tool.name, attempt });

      let outcome: ToolOutcome;
      try {
        outcome = storedOutcome(await callTool(deps, state, call, attempt), call);
      } catch (err) {
        if (err instanceof SimulatedKill) throw err; // the (simulated) process is gone
        if (state.signal.aborted) throw state.signal.reason ?? err;
        // An error the tool did not classify says nothing about whether the remote
        // acted, so it is treated as an unknown outcome: re-sent under the same key
        // (or flagged), never recorded as a failure that might hide a resource.
        const e = err instanceof ToolError
          ? err
          : new ToolError("TOOL_THREW", describeError(err), { transient: true, cause: err });
        if (e.transient) {
          const unknown = { attempts: attempt, error: e, approved: false, reopened: false };
          const verdict = await unknownOutcome(deps, state, call, unknown);
          if (verdict !== "send") return await carryOut(intent, verdict);
          // A remote that says when to come back (409 in progress, 429, 503) knows better than our backoff.
          await waitToRetry(deps, state, "retrying", { seq, key, attempt }, e);
          continue;
        }
        // A permanent failure is an answer too: record it and let the model see it.
        row = await store.effectSettle(
          state.fence,
          intent,
          { status: "failed", error: e.message },
          clock.now(),
        );
        applyRow(state, row);
        log.warn("tool-failed", { run: runId, seq, key, tool: tool.name, code: e.code, error: e.message });
        return finished(row, { effect: row });
      }
      await crash.hit("after_call", seq);
      row = await confirm(deps, state, intent, outcome.result, outcome.remote ?? "created");
      await crash.hit("after_confirm", seq);
      return finished(row, { effect: row });
    }
  } catch (error) {
    return failed(error, { effect: row });
  }
}

/**
 * What becomes of a call whose last request's outcome is unknown, when it is
 * not sent again: confirmed as `reconciled` with what the remote says it
 * returned, or flagged for a human, for the reason given.
 */
type Verdict = { reconciled: Json } | { flag: string };

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
async function unknownOutcome(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
  seen: Unknown,
): Promise<"send" | Verdict> {
  const { key, seq, tool } = call;
  if (seen.approved) return "send";
  const atLimit = seen.attempts >= tool.maxAttempts && !seen.reopened;
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
  const what = seen.error
    ? `failed ${seen.attempts} times; last error: ${seen.error.message}${lookup}`
    : `was sent ${seen.attempts} times (maxAttempts is ${tool.maxAttempts}) and no outcome was recorded: ` +
      `each worker stopped before it could write one${maybe}${lookup}. Check the remote, then ` +
      `'deno task reopen ${state.fence.runId}' sends it once more under its key`;
  throw new ToolError("TOOL_GAVE_UP", `Tool call ${key} (${tool.name}) ${what}`, {
    transient: false,
    cause: seen.error,
  });
}

/** Commits the outcome of the call `row` and returns the row as the write left it, applied to the run's state. */
async function confirm(
  deps: WorkerDeps,
  state: RunState,
  row: SideEffectRow,
  result: Json,
  remote: "created" | "already_done" | "reconciled",
): Promise<SideEffectRow> {
  const confirmed = await deps.store.effectConfirm(state.fence, row, { result, remote }, deps.clock.now());
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
 * The approval gate, before any intent row: a call that needs a person's yes
 * is asked about with its exact arguments, and the run waits (holding no
 * worker) until then. Undefined: approved, go on. A row: denied, recorded as
 * the tool's result (the row written). Throws {@link WaitingError} while it
 * waits.
 *
 * The read is only a shortcut: an answer for these arguments is final (see
 * the comment at REQUEST_APPROVAL in the store), so it is used at once.
 * Anything else (no request, one for other arguments, one still pending when
 * read) goes through `requestApproval`, whose one statement decides from the
 * request as it stands then: a person may have answered since the read, and
 * the worker goes on with that answer instead of waiting on it.
 */
async function approval(
  deps: WorkerDeps,
  state: RunState,
  key: string,
  seq: number,
  decision: ToolDecision,
): Promise<SideEffectRow | undefined> {
  const hash = await argsHash(decision.args);
  let approval = await deps.store.getApproval(key);
  if (!approval || approval.args_hash !== hash || approval.status === "pending") {
    const call = { key, seq, tool: decision.tool, args: decision.args, hash };
    const asked = await deps.store.requestApproval(state.fence, call, deps.clock.now());
    if (asked.waiting) {
      deps.log.warn("waiting-for-approval", {
        run: state.fence.runId,
        seq,
        key,
        tool: decision.tool,
        args: decision.args,
        asked_before: approval && approval.args_hash !== hash ? "for other arguments" : undefined,
      });
      throw new WaitingError(key, decision.tool);
    }
    approval = asked.approval;
    // The statement replaces a request for other arguments and waits on a pending one: what is left is an
    // answer for these arguments. Checked, since a call must never run on an answer given for others.
    if (approval.args_hash !== hash || approval.status === "pending") {
      throw new RuntimeError(
        "APPROVAL_INCONSISTENT",
        `The approval request for ${key} came back ${approval.status} for arguments ${approval.args_hash}, ` +
          `asked for ${hash}, without the run waiting: a bug in the store's approval statement`,
      );
    }
  }
  if (approval.status === "denied") {
    const error = `denied by ${approval.decided_by ?? "a person"}${
      approval.reason ? `: ${approval.reason}` : ""
    }`;
    const denied = await deps.store.effectDenied(
      state.fence,
      { key, seq, tool: decision.tool, args: decision.args },
      error,
      deps.clock.now(),
    );
    applyRow(state, denied);
    deps.log.warn("denied", {
      run: state.fence.runId,
      seq,
      key,
      tool: decision.tool,
      by: approval.decided_by ?? undefined,
      reason: approval.reason ?? undefined,
    });
    return denied;
  }
  deps.log.info("approved", {
    run: state.fence.runId,
    seq,
    key,
    tool: decision.tool,
    by: approval.decided_by ?? undefined,
  });
  return undefined;
}

/**
 * Marks the call `row`, whose outcome cannot be known safely, as `flagged`,
 * and returns the row as the write left it. The caller then blocks the run
 * ({@link BlockedError}).
 */
export async function flag(
  deps: WorkerDeps,
  state: RunState,
  row: SideEffectRow,
  reason: string,
): Promise<SideEffectRow> {
  const flagged = await deps.store.effectSettle(
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

async function callTool(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
  attempt: number,
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
  try {
    return await call.tool.run(call.args, {
      idempotencyKey: call.key,
      runId: state.fence.runId,
      seq: call.seq,
      attempt,
      // Read only by a tool that uses it: the deadline arms its timer then (see deadline()).
      get signal() {
        return timeout.signal;
      },
      traceHeaders: () => telemetryOf(deps).traceHeaders(),
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
