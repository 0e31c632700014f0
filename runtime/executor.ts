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

import { deadline } from "./clock.ts";
import { backoffMs, idempotencyKey, type RunState, type WorkerDeps } from "./context.ts";
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
  await deps.crash.hit("before_intent", seq);
  await send(deps, state, { key, seq, tool: checked.tool, rawArgs: decision.args, args: checked.args });
}

/**
 * Sends a call (first attempt, re-send after a crash, or retry) until it is
 * confirmed, failed or flagged. Each attempt is counted in its intent row
 * before the request goes out.
 */
export async function send(deps: WorkerDeps, state: RunState, call: PreparedCall): Promise<void> {
  const { log, store, clock, crash } = deps;
  const runId = state.fence.runId;
  const { key, seq, tool } = call;
  // Bounded by the tool's maxAttempts (counted across restarts by the row).
  for (;;) {
    const attempt = await store.effectIntent(
      state.fence,
      { key, seq, tool: tool.name, args: call.rawArgs },
      clock.now(),
    );
    rememberIntent(state, call, attempt);
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
        const delay = backoffMs(deps.retry, attempt, deps.random);
        log.warn("retrying", {
          run: runId,
          seq,
          key,
          attempt,
          code: e.code,
          error: e.message,
          delay_ms: delay,
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
      idempotencyKey: call.key,
      runId: state.fence.runId,
      seq: call.seq,
      attempt,
      signal: timeout.signal,
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

function rememberIntent(state: RunState, call: PreparedCall, attempts: number): void {
  const previous = state.effects.get(call.seq);
  const row: SideEffectRow = previous ? { ...previous, attempts, epoch: state.fence.epoch } : {
    idempotency_key: call.key,
    run_id: state.fence.runId,
    seq: call.seq,
    tool: call.tool.name,
    args: call.rawArgs,
    status: "intent",
    result: null,
    remote: null,
    error: null,
    attempts,
    epoch: state.fence.epoch,
    intent_at: new Date(0),
    confirmed_at: null,
    resolved_by: null,
    resolved_at: null,
  };
  state.effects.set(call.seq, row);
}

function settle(state: RunState, seq: number, change: Partial<SideEffectRow>): void {
  const row = state.effects.get(seq);
  if (row) state.effects.set(seq, { ...row, ...change });
}
