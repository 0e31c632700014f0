/**
 * Decisions: one step's question to the model, made durable. A confirmed
 * journal row is replayed (no model call); otherwise the intent row (and the
 * model-spend counter) is committed before the request goes out, and the
 * decision is committed before anything acts on it.
 *
 * @module
 */

import { deadline } from "../base/clock.ts";
import { applyRow, llmCallsOf, type RunState, telemetryOf, type WorkerDeps } from "../run/context.ts";
import { type Ended, failed, finished } from "../run/ended.ts";
import { AbortedError, ModelError, RuntimeError } from "../base/errors.ts";
import { humanMs, nextTry } from "../base/retry.ts";
import { buildTranscript } from "./history.ts";
import { remember } from "../conversations/turns.ts";
import type { Planner } from "../model/planner.ts";
import {
  type DecideRequest,
  type ModelParams,
  type PlannerDecision,
  type TranscriptMessage,
} from "../model/transcript.ts";
import { mergeModelParams } from "../model/params.ts";
import type { Decision, JournalRow, Rejection } from "../store/store.ts";
import type { Json, Tool } from "../agent/tools.ts";
import { callsOf, decisionOf } from "../run/calls.ts";
import { addUsage } from "../model/usage.ts";
import {
  answerCap,
  answerTokens,
  checkModelRequest,
  reservationBudget,
  worstCaseTokens,
} from "../agent/budget.ts";
import { familyCeilings } from "../families/family.ts";
import { toStorable } from "../base/storable.ts";
import { DeltaPublisher } from "../run/stream.ts";

/**
 * The characters a request's prompt carries (messages and tool schemas), as its planner sends them:
 * the basis of its token estimate.
 */
function promptChars(planner: Planner, question: Pick<DecideRequest, "transcript" | "tools">): number {
  return planner.promptChars?.(question) ??
    JSON.stringify(question.transcript).length + JSON.stringify(question.tools).length;
}

/**
 * The answer as the loop takes it: tool calls (one or more, at most
 * `maxCalls`), or done. Every planner's answer passes here, inside the model
 * call, so a refused one is counted and re-asked like any unusable answer.
 */
function callCount(answer: PlannerDecision, maxCalls: number): PlannerDecision {
  if (answer.kind !== "tool_calls") return answer;
  const usage = answer.usage as Record<string, unknown> | undefined;
  if (answer.calls.length === 0) {
    throw new ModelError(
      "MODEL_EMPTY",
      "The model's answer lists no tool calls: call a tool, or say what was done",
      { badAnswer: true, usage },
    );
  }
  if (answer.calls.length > maxCalls) {
    throw new ModelError(
      "MODEL_TOO_MANY_CALLS",
      `The model asked for ${answer.calls.length} tool calls at once; at most ${maxCalls} per step are allowed`,
      { badAnswer: true, usage },
    );
  }
  return answer;
}

/** What `act` needs of a step's decision. */
export interface Decided {
  /** The decision, as stored (what the tools receive, live and on replay). */
  decision: Decision;
  /**
   * For tool calls this worker has just decided: each call's tool and
   * arguments as the schema parsed them, by the call's place in the decision,
   * so `act` does not parse them a second time (#11). A replayed decision has
   * none, and `act` checks each call.
   */
  checked?: readonly { tool: Tool; args: unknown }[];
}

/**
 * Returns the decision for step `seq`: replayed if confirmed, otherwise asked
 * for and committed; with the step's journal row as its last write left it
 * (or as it was), whether it ended with a decision or an error.
 */
export async function decide(deps: WorkerDeps, state: RunState, seq: number): Promise<Ended<Decided>> {
  const { log, store, clock, crash } = deps;
  const runId = state.fence.runId;
  let row = state.journal.get(seq);
  try {
    if (row?.status === "confirmed" && row.decision) {
      const calls = llmCallsOf(state);
      log.info("replayed", { run: runId, seq, ...describeDecision(row.decision), llm_calls: calls });
      return finished({ decision: row.decision }, { journal: row });
    }
    await crash.hit("before_decide", seq);
    // Bounded: each pass is one paid request, and the limits count the durable
    // totals (across restarts), not this process's share of them: requests that
    // got no usable answer for a reason an outage does not explain (refused, or
    // lost with a worker that stopped) by `maxModelAttempts`, failures a worker
    // recorded by the retry horizon.
    for (;;) {
      const paid = row?.llm_attempts ?? 0;
      if (unexplained(row) >= deps.retry.maxModelAttempts) {
        const last = row?.rejections.at(-1);
        throw new ModelError(
          "MODEL_GAVE_UP",
          `The model was asked ${paid} times for step ${seq} (at most ${deps.retry.maxModelAttempts} without a ` +
            `usable answer for a reason other than an outage, counted across restarts) without a usable answer${
              last ? `; last refused: ${last.code}: ${last.message}` : ""
            }${state.lastWorkerError ? `; its last worker stopped at: ${state.lastWorkerError}` : ""}`,
        );
      }
      // A run of a family is held to its family's ceilings too (one read; none for any other run).
      const family = await familyCeilings(deps, state);
      const budget = reservationBudget(state.budget, family);
      // The agent's parameters under the run's; the answer's cap is the smaller of theirs and the budget's.
      const { maxOutputTokens: paramsCap, ...params } =
        mergeModelParams(deps.modelParams, state.modelParams) ?? {};
      const maxOutputTokens = smaller(paramsCap, answerCap(budget));
      const hasParams = Object.keys(params).length > 0;
      const sentParams: ModelParams | undefined = hasParams || maxOutputTokens !== undefined
        ? { ...params, ...(maxOutputTokens === undefined ? {} : { maxOutputTokens }) }
        : undefined;
      const question: DecideRequest = {
        runId,
        seq,
        agent: deps.agent,
        transcript: await sentHistory(deps, state, seq),
        tools: deps.tools.descriptions(),
        maxOutputTokens,
        ...(hasParams ? { params } : {}),
      };
      // With a budget, the request's worst case is reserved in the intent's own write,
      // and the answer is asked to stay within it.
      const reserve = budget ? worstCaseTokens(budget, promptChars(deps.planner, question)) : 0;
      checkModelRequest(state, reserve, family);
      const current = await store.journalIntentRow(state.fence, seq, clock.now(), {
        reserveTokens: reserve,
        fresh: row === undefined,
        params: sentParams,
      });
      row = current;
      applyRow(state, current);
      const attempt = current.llm_attempts;
      log.info("deciding", { run: runId, seq, attempt, llm_calls: llmCallsOf(state) });
      // A refused answer is recorded (it was paid for: its usage and tokens count), and re-asked below the limit.
      const refuse = async (rejection: Rejection, usage: unknown): Promise<void> => {
        row = await reject(deps, state, current, { rejection, attempt, usage, reserve });
        if (unexplained(row) >= deps.retry.maxModelAttempts) {
          throw new ModelError(
            "MODEL_GAVE_UP",
            `The model gave no usable answer for step ${seq} in ${attempt} requests; last: ${rejection.code}: ${rejection.message}`,
          );
        }
      };

      let answer: PlannerDecision;
      // Watched answers stream (STREAM_DELTAS): their text goes to the channel as it is written.
      const deltas = deps.streamDeltas
        ? new DeltaPublisher({
          notify: (payload) => store.stream.notify(payload),
          clock,
          log,
          call: { runId, epoch: state.fence.epoch, seq, attempt },
        })
        : undefined;
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
        answer = await telemetryOf(deps).modelCall(deps.planner.model, async () =>
          callCount(
            await deps.planner.decide({
              ...question,
              ...(deltas ? { onDelta: deltas.push } : {}),
              // Read only by a planner that uses it: the deadline arms its timer then (see deadline()).
              get signal() {
                return timeout.signal;
              },
            }),
            deps.maxCallsPerStep,
          ));
      } catch (err) {
        const e = asModelError(err, timeout.expired(), state.signal);
        if (e.badAnswer) {
          await refuse({ code: e.code, message: e.message }, e.usage);
          continue;
        }
        if (!e.transient) throw e;
        // Recorded first, so the horizon holds across restarts; then asked again after a backoff (a server
        // that says when to come back, 429 or 503, knows better than ours), or given up past the horizon.
        const now = clock.now();
        const failure = await store.journalFailure(
          state.fence,
          current,
          // An error status from the server is an answer that cost nothing: its reservation goes back.
          { error: `${e.code}: ${e.message}`, released: e.code === "MODEL_HTTP" ? reserve : 0 },
          now,
        );
        row = failure;
        applyRow(state, failure);
        const next = nextTry(
          deps.retry,
          {
            failures: failure.failures,
            failingSince: failure.failing_since ?? now,
            retryAfterMs: e.retryAfterMs,
          },
          now,
          deps.random,
        );
        if (next.kind === "give-up") {
          throw new ModelError(
            "MODEL_GAVE_UP",
            `The model failed ${failure.failures} requests for step ${seq} over ${
              humanMs(next.failingForMs)
            } (the retry horizon is ${
              humanMs(deps.retry.horizonMs)
            }, counted from the first failure, across restarts); last error: ${e.code}: ${e.message}`,
            { cause: e },
          );
        }
        log.warn("model-retry", {
          run: runId,
          seq,
          attempt,
          failures: failure.failures,
          code: e.code,
          error: e.message,
          delay_ms: next.waitMs,
          retry_after_ms: e.retryAfterMs,
          at: next.hold ? undefined : next.at,
          gives_up_at: next.givesUpAt,
        });
        if (next.hold) {
          await clock.sleep(next.waitMs, state.signal);
          continue;
        }
        // A longer wait holds no slot: the run is let go until it is due.
        const reason =
          `the model's request for step ${seq} failed ${failure.failures} time${
            failure.failures === 1 ? "" : "s"
          } since ${failure.failing_since?.toISOString()} (last: ${e.code}: ${e.message}); asked again at ${next.at.toISOString()}, ` +
          `given up at ${next.givesUpAt.toISOString()}`;
        const waiting = new RetryingError(next.at, reason);
        await store.retryRun(state.fence, next.at, waiting.message, now);
        throw waiting;
      } finally {
        timeout.cancel();
        // Every piece is sent before the answer is journaled: a watcher sees the text, then the answer.
        await deltas?.close();
      }
      if (answer.warnings && answer.warnings.length > 0) {
        log.warn("model-warning", { run: runId, seq, attempt, warnings: answer.warnings.join("; ") });
      }
      await crash.hit("after_decide_before_journal", seq);

      // What cannot be stored as it is (a lone surrogate, a NUL, a number JSON
      // cannot hold, nesting too deep: storable.ts) could never be confirmed, or
      // would reach the tool as something other than what is stored: refused
      // (and re-asked) like any other bad answer, before the tool's schema sees it.
      // The answer's parts (reasoning and its signature, provider metadata) go with it when the planner kept
      // them, and only then: a decision of a planner that keeps none is stored as it always was.
      const parts = answer.parts !== undefined && answer.parts.length > 0 ? { parts: answer.parts } : {};
      const stored = toStorable(
        answer.kind === "done"
          ? { done: true, message: answer.text, ...parts }
          : { ...decisionOf(answer.calls.map((c) => ({ tool: c.name, args: c.args as Json }))), ...parts },
      );
      if (!stored.ok) {
        await refuse({
          code: "MODEL_UNSTORABLE",
          message: `The answer cannot be stored: it holds ${stored.reason}; answer again without it`,
        }, answer.usage);
        continue;
      }
      // The answer as the database will give it back: what the tools receive, live and on replay.
      const decision = stored.value as unknown as Decision;
      // Every call is checked before the decision is confirmed: one bad call refuses the whole answer,
      // so no call of a step is sent on an answer the model must give again.
      const checked: { tool: Tool; args: unknown }[] = [];
      let refused: Rejection | undefined;
      const calls = callsOf(decision, seq);
      for (const c of calls) {
        const check = deps.tools.check(c.tool, c.args);
        if (!check.ok) {
          const which = calls.length > 1 ? `call ${c.index + 1} of ${calls.length}: ` : "";
          refused = { code: check.code, message: which + check.message };
          break;
        }
        checked.push({ tool: check.tool, args: check.args });
      }
      if (refused) {
        await refuse(refused, answer.usage);
        continue;
      }
      // Every answer this step paid for counts, refused ones included.
      const usage = addUsage(current.usage, answer.usage);
      const tokens = { released: reserve, spent: answerTokens(answer.usage, reserve) };
      const confirmed = await store.journalConfirm(
        state.fence,
        current,
        { decision, usage, tokens },
        clock.now(),
      );
      row = confirmed;
      applyRow(state, confirmed);
      log.info("decided", { run: runId, seq, ...describeDecision(decision), llm_calls: llmCallsOf(state) });
      await crash.hit("after_decide", seq);
      return finished({ decision, checked: calls.length > 0 ? checked : undefined }, { journal: confirmed });
    }
  } catch (error) {
    return failed(error, { journal: row });
  }
}

/**
 * The run waits for its model to be asked again after a request that failed
 * as in an outage: it is let go (waiting, no lease, no slot) until `wakeAt`,
 * the write done, and a worker takes it again then.
 */
export class RetryingError extends RuntimeError {
  /** When the model is asked again. */
  readonly wakeAt: Date;
  /** Creates the marker, `reason` saying what the run waits for. */
  constructor(wakeAt: Date, reason: string) {
    super("WAITING_TO_RETRY", `Waiting until ${wakeAt.toISOString()}: ${reason}`);
    this.name = "RetryingError";
    this.wakeAt = wakeAt;
  }
}

/**
 * Model requests of the step that got no usable answer for a reason an
 * outage does not explain: every request counts an attempt, and every
 * failure a worker saw is recorded, so the difference (refused answers, and
 * answers lost with a worker that stopped).
 */
function unexplained(row: JournalRow | undefined): number {
  return row === undefined ? 0 : Math.max(0, row.llm_attempts - row.failures);
}

/** Log fields of a decision. */
export function describeDecision(decision: Decision): Record<string, unknown> {
  if ("tool" in decision) return { tool: decision.tool, args: decision.args };
  if ("calls" in decision) {
    return { tools: decision.calls.map((c) => c.tool).join(","), calls: decision.calls.length };
  }
  return { done: true };
}

/**
 * Records a refused answer to the intent row `row` (it was paid for: its
 * usage and tokens count) and returns the row as the write left it.
 */
async function reject(
  deps: WorkerDeps,
  state: RunState,
  row: JournalRow,
  refused: { rejection: Rejection; attempt: number; usage: unknown; reserve: number },
): Promise<JournalRow> {
  const { rejection, attempt, reserve } = refused;
  const usage = refused.usage === undefined ? undefined : addUsage(row.usage, refused.usage);
  const tokens = { released: reserve, spent: answerTokens(refused.usage, reserve) };
  const rejected = await deps.store.journalReject(state.fence, row, { rejection, usage, tokens });
  applyRow(state, rejected);
  deps.log.warn("rejected", {
    run: state.fence.runId,
    seq: row.seq,
    code: rejection.code,
    reason: rejection.message,
    attempt,
    llm_calls: llmCallsOf(state),
  });
  return rejected;
}

function asModelError(err: unknown, timedOut: Error | undefined, stop: AbortSignal): ModelError {
  if (stop.aborted) throw stop.reason ?? new AbortedError("The worker is stopping");
  if (timedOut instanceof ModelError) return timedOut;
  if (err instanceof ModelError) return err;
  throw err;
}

/** The smaller of two optional numbers; undefined when both are. */
function smaller(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? b : b === undefined ? a : Math.min(a, b);
}

/** The transcript for step `seq` as sent: rebuilt from the rows, then through the conversation's history hook. */
async function sentHistory(
  deps: WorkerDeps,
  state: RunState,
  seq: number,
): Promise<TranscriptMessage[]> {
  const transcript = buildTranscript(state, seq, deps.instructions);
  const hook = deps.conversation?.history;
  const conversation = state.conversation;
  if (!hook || !conversation) return transcript;
  return await hook(transcript, {
    runId: state.fence.runId,
    seq,
    messages: conversation.turn + 1,
    remember: (key, compute) => remember(deps, { fence: state.fence, conversation }, key, compute),
  });
}
