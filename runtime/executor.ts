/**
 * One tool call, made durable: validate the arguments, commit the intent row,
 * send the request under the idempotency key `<run_id>:<seq>`, commit the
 * confirm with the result and whether the remote created something or
 * recognised the key. Transient failures are re-sent under the same key with
 * backoff, each attempt counted before it goes out; a tool that cannot take a
 * key is never re-sent after an unknown outcome: it is flagged for a human.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { checkToolRequest } from "./budget.ts";
import { deadline } from "./clock.ts";
import { idempotencyKey, retryDelayMs, type RunState, telemetryOf, type WorkerDeps } from "./context.ts";
import { AbortedError, describeError, RuntimeError, SimulatedKill, ToolError } from "./errors.ts";
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
}

/** Carries out the decided tool call of step `seq`, unless it already happened. */
export async function act(
  deps: WorkerDeps,
  state: RunState,
  seq: number,
  decision: { tool: string; args: Json },
): Promise<void> {
  const runId = state.fence.runId;
  const key = idempotencyKey(runId, seq);
  const existing = state.effects.get(seq);
  if (existing?.status === "confirmed" || existing?.status === "failed") {
    deps.log.info("skipped", {
      run: runId,
      seq,
      key,
      status: existing.status,
      remote: existing.remote ?? undefined,
    });
    return;
  }
  if (existing?.status === "flagged") throw new BlockedError(key, existing.error ?? "its outcome is unknown");
  // Arguments are checked before any intent row exists: bad arguments never reach a remote.
  // A decision this worker has just made was checked by decide() (#11: not parsed twice).
  const fresh = state.checked?.decision === decision ? state.checked : undefined;
  state.checked = undefined;
  const checked = fresh
    ? { ok: true as const, tool: fresh.tool, args: fresh.args }
    : deps.tools.check(decision.tool, decision.args);
  if (!checked.ok) {
    throw new RuntimeError(
      "DECISION_INVALID",
      `The decision of step ${seq} cannot be carried out: ${checked.message}`,
    );
  }
  if (checked.tool.needsApproval(checked.args) && !(await approved(deps, state, key, seq, decision))) return;
  await deps.crash.hit("before_intent", seq);
  await send(deps, state, { key, seq, tool: checked.tool, rawArgs: decision.args, args: checked.args });
}

/**
 * Sends a call (first attempt, re-send after a crash, or retry) until it is
 * confirmed, failed or flagged. Each attempt is counted in its intent row
 * before the request goes out.
 */
export function send(deps: WorkerDeps, state: RunState, call: PreparedCall): Promise<void> {
  return telemetryOf(deps).toolCall(
    state,
    { ...call, tool: call.tool.name },
    () => sendCall(deps, state, call),
  );
}

async function sendCall(deps: WorkerDeps, state: RunState, call: PreparedCall): Promise<void> {
  const { log, store, clock, crash } = deps;
  const runId = state.fence.runId;
  const { key, seq, tool } = call;
  // Bounded by the tool's maxAttempts (counted across restarts by the row).
  for (;;) {
    checkToolRequest(state);
    const row = await store.effectIntentRow(
      state.fence,
      { key, seq, tool: tool.name, args: call.rawArgs },
      clock.now(),
      !state.effects.has(seq),
    );
    // The row as the write left it is what this worker now knows of the call.
    state.effects.set(seq, row);
    const attempt = row.attempts;
    log.info("intent", { run: runId, seq, key, tool: tool.name, attempt });
    await crash.hit("after_intent", seq);
    log.info("calling", { run: runId, seq, key, tool: tool.name, attempt });

    let outcome: ToolOutcome;
    try {
      outcome = await callTool(deps, state, call, attempt);
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
        if (!tool.idempotent) {
          await flag(
            deps,
            state,
            { key, seq, toolName: tool.name },
            `it failed with an unknown outcome (${e.message}) and ${tool.name} takes no idempotency key`,
          );
        }
        if (attempt >= tool.maxAttempts) {
          log.error("gave-up", {
            run: runId,
            seq,
            key,
            tool: tool.name,
            attempts: attempt,
            code: e.code,
            error: e.message,
          });
          throw new ToolError(
            "TOOL_GAVE_UP",
            `Tool call ${key} (${tool.name}) failed ${attempt} times; last error: ${e.message}`,
            { transient: false, cause: e },
          );
        }
        // A remote that says when to come back (409 in progress, 429, 503) knows better than our backoff.
        const delay = retryDelayMs(deps.retry, attempt, deps.random, e.retryAfterMs);
        log.warn("retrying", {
          run: runId,
          seq,
          key,
          attempt,
          code: e.code,
          error: e.message,
          delay_ms: delay,
          retry_after_ms: e.retryAfterMs,
        });
        await clock.sleep(delay, state.signal);
        continue;
      }
      // A permanent failure is an answer too: record it and let the model see it.
      await store.effectSettle(state.fence, key, "failed", e.message, clock.now());
      settle(state, seq, { status: "failed", error: e.message });
      log.warn("tool-failed", { run: runId, seq, key, tool: tool.name, code: e.code, error: e.message });
      return;
    }
    await crash.hit("after_call", seq);
    const remote = outcome.remote ?? "created";
    await store.effectConfirm(state.fence, key, outcome.result, remote, clock.now());
    settle(state, seq, { status: "confirmed", result: outcome.result, remote });
    log.info("confirmed", { run: runId, seq, key, result: outcome.result, remote });
    await crash.hit("after_confirm", seq);
    return;
  }
}

/**
 * The approval gate, before any intent row: a call that needs a person's yes
 * is asked about with its exact arguments, and the run waits (holding no
 * worker) until then. True: approved, go on. False: denied, recorded as the
 * tool's result. Throws {@link WaitingError} while it waits.
 *
 * The read is only a shortcut: an answer for these arguments is final (see
 * the comment at REQUEST_APPROVAL in the store), so it is used at once.
 * Anything else (no request, one for other arguments, one still pending when
 * read) goes through `requestApproval`, whose one statement decides from the
 * request as it stands then: a person may have answered since the read, and
 * the worker goes on with that answer instead of waiting on it.
 */
async function approved(
  deps: WorkerDeps,
  state: RunState,
  key: string,
  seq: number,
  decision: { tool: string; args: Json },
): Promise<boolean> {
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
    state.effects.set(seq, denied);
    deps.log.warn("denied", {
      run: state.fence.runId,
      seq,
      key,
      tool: decision.tool,
      by: approval.decided_by ?? undefined,
      reason: approval.reason ?? undefined,
    });
    return false;
  }
  deps.log.info("approved", {
    run: state.fence.runId,
    seq,
    key,
    tool: decision.tool,
    by: approval.decided_by ?? undefined,
  });
  return true;
}

/** Marks a call whose outcome cannot be known safely as `flagged`, and blocks the run. */
export async function flag(
  deps: WorkerDeps,
  state: RunState,
  call: { key: string; seq: number; toolName: string },
  reason: string,
): Promise<never> {
  await deps.store.effectSettle(state.fence, call.key, "flagged", reason, deps.clock.now());
  settle(state, call.seq, { status: "flagged", error: reason });
  deps.log.warn("flagged", {
    run: state.fence.runId,
    seq: call.seq,
    key: call.key,
    tool: call.toolName,
    reason,
  });
  throw new BlockedError(call.key, reason);
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
      // The planted bug (a test seam, off in production) keys re-sends by their attempt.
      idempotencyKey: deps.defects?.keyFromAttempt && attempt > 1 ? `${call.key}:${attempt}` : call.key,
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

function settle(state: RunState, seq: number, change: Partial<SideEffectRow>): void {
  const row = state.effects.get(seq);
  if (row) state.effects.set(seq, { ...row, ...change });
}
