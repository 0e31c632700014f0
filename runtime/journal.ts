/**
 * Decisions: one step's question to the model, made durable. A confirmed
 * journal row is replayed (no model call); otherwise the intent row (and the
 * model-spend counter) is committed before the request goes out, and the
 * decision is committed before anything acts on it.
 *
 * @module
 */

import { deadline } from "./clock.ts";
import { backoffMs, type RunState, type WorkerDeps } from "./context.ts";
import { AbortedError, ModelError } from "./errors.ts";
import { buildMessages } from "./history.ts";
import type { ModelAnswer } from "./planner.ts";
import type { Decision, JournalRow, Rejection } from "./store/store.ts";
import type { Json } from "./tools.ts";
import { addUsage } from "./usage.ts";

/** Returns the decision for step `seq`: replayed if confirmed, otherwise asked for and committed. */
export async function decide(deps: WorkerDeps, state: RunState, seq: number): Promise<Decision> {
  const { log, store, clock, crash } = deps;
  const runId = state.fence.runId;
  const row = state.journal.get(seq);
  if (row?.status === "confirmed" && row.decision) {
    log.info("replayed", { run: runId, seq, ...describeDecision(row.decision), llm_calls: state.llmCalls });
    return row.decision;
  }
  await crash.hit("before_decide", seq);
  // Bounded: each pass is one paid request, and the limit counts the durable
  // total (across restarts), not this process's share of it.
  for (;;) {
    const paid = state.journal.get(seq)?.llm_attempts ?? 0;
    if (paid >= deps.retry.maxModelAttempts) {
      const last = state.journal.get(seq)?.rejections.at(-1);
      throw new ModelError(
        "MODEL_GAVE_UP",
        `The model was asked ${paid} times for step ${seq} (the limit is ${deps.retry.maxModelAttempts}, counted ` +
          `across restarts) without a usable answer${
            last ? `; last refused: ${last.code}: ${last.message}` : ""
          }`,
      );
    }
    const llmAttempts = await store.journalIntent(state.fence, seq, clock.now());
    const attempt = llmAttempts;
    state.llmCalls += 1;
    const current = rememberIntent(state, seq, llmAttempts);
    log.info("deciding", { run: runId, seq, attempt: llmAttempts, llm_calls: state.llmCalls });

    let answer: ModelAnswer;
    const timeout = deadline(
      clock,
      state.signal,
      deps.retry.modelTimeoutMs,
      () =>
        new ModelError("MODEL_TIMEOUT", `The model did not answer within ${deps.retry.modelTimeoutMs}ms`, {
          transient: true,
        }),
    );
    try {
      answer = await deps.planner.decide({
        runId,
        seq,
        messages: buildMessages(state, seq, deps.instructions),
        agent: deps.agent,
        tools: deps.tools.toOpenAI(),
        signal: timeout.signal,
      });
    } catch (err) {
      const e = asModelError(err, timeout.expired(), state.signal);
      if (e.badAnswer) {
        await reject(deps, state, current, { code: e.code, message: e.message }, attempt, e.usage);
        continue;
      }
      if (!e.transient) throw e;
      if (attempt >= deps.retry.maxModelAttempts) {
        throw new ModelError(
          "MODEL_GAVE_UP",
          `The model failed ${attempt} requests for step ${seq} (the limit, counted across restarts); ` +
            `last error: ${e.code}: ${e.message}`,
          { cause: e },
        );
      }
      const delay = backoffMs(deps.retry, attempt, deps.random);
      log.warn("model-retry", {
        run: runId,
        seq,
        attempt: llmAttempts,
        code: e.code,
        error: e.message,
        delay_ms: delay,
      });
      await clock.sleep(delay, state.signal);
      continue;
    } finally {
      timeout.cancel();
    }
    await crash.hit("after_decide_before_journal", seq);

    let decision: Decision;
    if (answer.kind === "done") {
      decision = { done: true, message: answer.message };
    } else {
      const checked = deps.tools.check(answer.tool, answer.args);
      if (!checked.ok) {
        await reject(
          deps,
          state,
          current,
          { code: checked.code, message: checked.message },
          attempt,
          answer.usage,
        );
        continue;
      }
      decision = { tool: answer.tool, args: answer.args as Json };
      state.checked = { decision, tool: checked.tool, args: checked.args };
    }
    // PostgreSQL cannot store a NUL character in text or jsonb: such an answer
    // could never be confirmed, so it is refused (and re-asked) like any other.
    if (hasNul(decision)) {
      await reject(
        deps,
        state,
        current,
        {
          code: "MODEL_UNSTORABLE",
          message: "The answer contains a NUL character (\\u0000), which cannot be stored; answer without it",
        },
        attempt,
        answer.usage,
      );
      continue;
    }
    // Every answer this step paid for counts, refused ones included.
    const usage = addUsage(current.usage, answer.usage);
    await store.journalConfirm(state.fence, seq, decision, usage, clock.now());
    state.journal.set(seq, { ...current, status: "confirmed", decision, usage, confirmed_at: clock.now() });
    log.info("decided", { run: runId, seq, ...describeDecision(decision), llm_calls: state.llmCalls });
    await crash.hit("after_decide", seq);
    return decision;
  }
}

/** True when `value` holds a NUL character anywhere (PostgreSQL text and jsonb refuse it). */
export function hasNul(value: unknown): boolean {
  return (JSON.stringify(value) ?? "").includes("\\u0000");
}

/** Log fields of a decision. */
export function describeDecision(decision: Decision): Record<string, unknown> {
  return "tool" in decision ? { tool: decision.tool, args: decision.args } : { done: true };
}

function rememberIntent(state: RunState, seq: number, llmAttempts: number): JournalRow {
  const previous = state.journal.get(seq);
  const row: JournalRow = previous ? { ...previous, llm_attempts: llmAttempts, epoch: state.fence.epoch } : {
    run_id: state.fence.runId,
    seq,
    status: "intent",
    decision: null,
    llm_attempts: llmAttempts,
    usage: null,
    rejections: [],
    epoch: state.fence.epoch,
    intent_at: new Date(0),
    confirmed_at: null,
  };
  state.journal.set(seq, row);
  return row;
}

async function reject(
  deps: WorkerDeps,
  state: RunState,
  row: JournalRow,
  rejection: Rejection,
  attempt: number,
  answerUsage: unknown,
): Promise<void> {
  const usage = answerUsage === undefined ? undefined : addUsage(row.usage, answerUsage);
  await deps.store.journalReject(state.fence, row.seq, rejection, usage);
  row.rejections = [...row.rejections, rejection];
  if (usage !== undefined) row.usage = usage;
  deps.log.warn("rejected", {
    run: state.fence.runId,
    seq: row.seq,
    code: rejection.code,
    reason: rejection.message,
    attempt,
    llm_calls: state.llmCalls,
  });
  if (attempt >= deps.retry.maxModelAttempts) {
    throw new ModelError(
      "MODEL_GAVE_UP",
      `The model gave no usable answer for step ${row.seq} in ${attempt} requests; last: ${rejection.code}: ${rejection.message}`,
    );
  }
}

function asModelError(err: unknown, timedOut: Error | undefined, stop: AbortSignal): ModelError {
  if (stop.aborted) throw stop.reason ?? new AbortedError("The worker is stopping");
  if (timedOut instanceof ModelError) return timedOut;
  if (err instanceof ModelError) return err;
  throw err;
}
