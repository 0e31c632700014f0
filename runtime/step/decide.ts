/**
 * Decisions: one step's question to the model, made durable. A confirmed
 * journal row is replayed (no model call); otherwise the intent row (and the
 * model-spend counter) is committed before the request goes out, and the
 * decision is committed before anything acts on it. {@link decide} reads top
 * to bottom as the stages of one request: prepare, intend, ask, then check
 * and confirm, refuse, or wait out an outage.
 *
 * @module
 */

import { applyRow, llmCallsOf, type RunDeps, type RunState } from "../run/context.ts";
import { type Ended, failed, finished } from "../run/ended.ts";
import { ModelError } from "../base/errors.ts";
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
import type { Decision, JournalRow } from "../store/store.ts";
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
import { ask, type Asked, type Refused } from "./ask_model.ts";
import { type HeldLimits, type Limited, releaseLimits, takeLimits, waitForLimit } from "./limited.ts";
import { modelAsks } from "../agent/limit_asks.ts";
import type { LimitAsk } from "../store/store.ts";

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
 * How deciding a step ended, when nothing failed the run: with its decision,
 * or with the run let go until its model may be asked again after a request
 * that failed as in an outage, or until a limit shared by the fleet lets its
 * request go (`limited`); either way the run is waiting, no lease, no slot.
 */
export type DecideEnd =
  | { kind: "decided" } & Decided
  | { kind: "retrying"; wakeAt: Date; reason: string }
  | Limited;

/** A request as it will be sent, with the tokens its intent reserves. */
interface Request {
  question: DecideRequest;
  /** The parameters recorded on the intent row. */
  sent?: ModelParams;
  /** Tokens reserved for the request's worst case (0 without a budget). */
  reserve: number;
  /** What it asks of the limits shared by the fleet, one per key it falls under (none without limits). */
  asks: readonly LimitAsk[];
}

/**
 * The decision for step `seq`, top to bottom: replayed if confirmed;
 * otherwise, each pass one paid request, the request prepared (budget,
 * family ceilings, parameters), its intent committed, the model asked once,
 * the answer checked and its decision committed, or the refusal recorded and
 * the model asked again, or an outage recorded and the request tried again
 * later. Ends with the step's journal row as its last write left it.
 */
export async function decide(deps: RunDeps, state: RunState, seq: number): Promise<Ended<DecideEnd>> {
  const rows = () => ({ journal: state.journal.get(seq) });
  try {
    const row = state.journal.get(seq);
    if (row?.status === "confirmed" && row.decision) {
      const llmCalls = llmCallsOf(state);
      deps.log.info("replayed", {
        run: state.fence.runId,
        seq,
        ...describeDecision(row.decision),
        llm_calls: llmCalls,
      });
      return finished({ kind: "decided", decision: row.decision }, rows());
    }
    await deps.crash.hit("before_decide", seq);
    // Bounded: each pass is one paid request, and the limits count the durable totals (across restarts),
    // not this process's share of them: requests that got no usable answer for a reason an outage does
    // not explain (refused, or lost with a worker that stopped) by `maxModelAttempts`, failures a worker
    // recorded by the retry horizon.
    for (;;) {
      giveUpIfSpent(deps, state, seq);
      const request = await prepare(deps, state, seq);
      const limit = await takeLimits(deps, state, seq, request.asks, `the model's request for step ${seq}`);
      if (limit.kind === "limited") {
        await waitForLimit(deps, state, limit);
        return finished(limit, rows());
      }
      const intent = await intend(deps, state, seq, request);
      const asked = await askHolding(deps, state, { intent, question: request.question }, limit.held);
      if (asked.kind === "answer") await deps.crash.hit("after_decide_before_journal", seq);
      if (asked.kind === "outage") {
        const after = await afterOutage(deps, state, intent, asked.error, request.reserve);
        if (after === "again") continue;
        return finished(after, rows());
      }
      const checked = asked.kind === "answer" ? checkAnswer(deps, seq, asked.answer) : asked;
      if (checked.kind === "refused") {
        await refuse(deps, state, intent, checked, request.reserve);
        continue;
      }
      const paid = { usage: checked.usage, reserve: request.reserve };
      return finished(await confirmDecision(deps, state, intent, checked, paid), rows());
    }
  } catch (error) {
    return failed(error, rows());
  }
}

/**
 * Stops a step whose model got no usable answer `maxModelAttempts` times for
 * a reason an outage does not explain: the run fails `MODEL_GAVE_UP`, naming
 * the last refusal and why its last worker let it go, if it did.
 */
function giveUpIfSpent(deps: RunDeps, state: RunState, seq: number): void {
  const row = state.journal.get(seq);
  if (unexplained(row) < deps.retry.maxModelAttempts) return;
  const last = row?.rejections.at(-1);
  throw new ModelError(
    "MODEL_GAVE_UP",
    `The model was asked ${
      row?.llm_attempts ?? 0
    } times for step ${seq} (at most ${deps.retry.maxModelAttempts} ` +
      `without a usable answer for a reason other than an outage, counted across restarts) without a usable answer${
        last ? `; last refused: ${last.code}: ${last.message}` : ""
      }${state.errorAtClaim ? `; its last worker stopped at: ${state.errorAtClaim}` : ""}`,
  );
}

/**
 * The request for step `seq`: the transcript and tools, the agent's
 * parameters under the run's, and the answer's cap, the smaller of theirs
 * and the budget's; with a budget (the run's, held to its family's ceilings
 * too), the request's worst case, to be reserved in the intent's own write.
 */
async function prepare(deps: RunDeps, state: RunState, seq: number): Promise<Request> {
  // A run of a family is held to its family's ceilings too (one read; none for any other run).
  const family = await familyCeilings(deps, state);
  const budget = reservationBudget(state.budget, family);
  const { maxOutputTokens: paramsCap, ...params } = mergeModelParams(deps.modelParams, state.modelParams) ??
    {};
  const maxOutputTokens = smaller(paramsCap, answerCap(budget));
  const hasParams = Object.keys(params).length > 0;
  const sent: ModelParams | undefined = hasParams || maxOutputTokens !== undefined
    ? { ...params, ...(maxOutputTokens === undefined ? {} : { maxOutputTokens }) }
    : undefined;
  const question: DecideRequest = {
    runId: state.fence.runId,
    seq,
    agent: deps.agent,
    transcript: await sentHistory(deps, state, seq),
    tools: deps.tools.descriptions(),
    maxOutputTokens,
    ...(hasParams ? { params } : {}),
  };
  const reserve = budget ? worstCaseTokens(budget, promptChars(deps.planner, question)) : 0;
  checkModelRequest(state, reserve, family);
  // Limits shared by the fleet: the prompt estimated as the budget estimates it (read only with limits).
  const asks = deps.limits.length === 0 ? [] : modelAsks(deps.limits, {
    model: deps.planner.model,
    provider: deps.planner.provider,
    labels: state.labels,
    inputTokens: Math.ceil(promptChars(deps.planner, question) / 4),
    maxOutputTokens,
  });
  return { question, sent, reserve, asks };
}

/**
 * Asks the model once ({@link ask}) while the request holds its limits'
 * reservations, and releases them however it ends: settled to the answer's
 * usage, or holding the provider's keys for the whole fleet when it answered
 * when to come back.
 */
async function askHolding(
  deps: RunDeps,
  state: RunState,
  request: { intent: JournalRow; question: DecideRequest },
  held: HeldLimits,
): Promise<Asked> {
  if (held.ids.length === 0) return await ask(deps, state, request.intent, request.question);
  let asked: Asked;
  try {
    asked = await ask(deps, state, request.intent, request.question);
  } catch (err) {
    // A worker that is stopping (or whose process died) lets the lease end what it held.
    if (!state.signal.aborted) await releaseLimits(deps, state, held, { error: err });
    throw err;
  }
  await releaseLimits(deps, state, held, {
    usage: asked.kind === "answer" ? asked.answer.usage : asked.kind === "refused" ? asked.usage : undefined,
    error: asked.kind === "outage" ? asked.error : undefined,
  });
  return asked;
}

/** Commits the request's intent (the attempt counted, its tokens reserved) and returns the row. */
async function intend(deps: RunDeps, state: RunState, seq: number, request: Request): Promise<JournalRow> {
  const intent = await deps.store.writes.journalIntentRow(state.fence, seq, deps.clock.now(), {
    reserveTokens: request.reserve,
    fresh: state.journal.get(seq) === undefined,
    params: request.sent,
  });
  applyRow(state, intent);
  const attempt = intent.llm_attempts;
  deps.log.info("deciding", { run: state.fence.runId, seq, attempt, llm_calls: llmCallsOf(state) });
  return intent;
}

/**
 * A request failed as in an outage: recorded first, so the horizon holds
 * across restarts; then asked again after a backoff held here ("again"; a
 * server that says when to come back, 429 or 503, knows better than ours),
 * or the run let go until then (a longer wait holds no slot), or given up
 * past the horizon (`MODEL_GAVE_UP`).
 */
async function afterOutage(
  deps: RunDeps,
  state: RunState,
  intent: JournalRow,
  e: ModelError,
  reserve: number,
): Promise<"again" | Extract<DecideEnd, { kind: "retrying" }>> {
  const { clock, log } = deps;
  const seq = intent.seq;
  const now = clock.now();
  // An error status from the server is an answer that cost nothing: its reservation goes back.
  const recorded = { error: `${e.code}: ${e.message}`, released: e.code === "MODEL_HTTP" ? reserve : 0 };
  const failure = await deps.store.writes.journalFailure(state.fence, intent, recorded, now);
  applyRow(state, failure);
  const seen = {
    failures: failure.failures,
    failingSince: failure.failing_since ?? now,
    retryAfterMs: e.retryAfterMs,
  };
  const next = nextTry(deps.retry, seen, now, deps.random);
  if (next.kind === "give-up") {
    throw new ModelError(
      "MODEL_GAVE_UP",
      `The model failed ${failure.failures} requests for step ${seq} over ${
        humanMs(next.failingForMs)
      } (the retry ` +
        `horizon is ${
          humanMs(deps.retry.horizonMs)
        }, counted from the first failure, across restarts); last error: ` +
        `${e.code}: ${e.message}`,
      { cause: e },
    );
  }
  log.warn("model-retry", {
    run: state.fence.runId,
    seq,
    attempt: intent.llm_attempts,
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
    return "again";
  }
  const times = `${failure.failures} time${failure.failures === 1 ? "" : "s"}`;
  const reason =
    `Waiting until ${next.at.toISOString()}: the model's request for step ${seq} failed ${times} ` +
    `since ${failure.failing_since?.toISOString()} (last: ${e.code}: ${e.message}); asked again at ` +
    `${next.at.toISOString()}, given up at ${next.givesUpAt.toISOString()}`;
  await deps.store.writes.retryRun(state.fence, next.at, reason, now);
  return { kind: "retrying", wakeAt: next.at, reason };
}

/**
 * The answer as it would be stored, checked before anything acts on it. What
 * cannot be stored as it is (a lone surrogate, a NUL, a number JSON cannot
 * hold, nesting too deep: storable.ts) could never be confirmed, or would
 * reach the tool as something other than what is stored; and every call is
 * checked against its tool's schema: one bad call refuses the whole answer,
 * so no call of a step is sent on an answer the model must give again.
 */
function checkAnswer(
  deps: RunDeps,
  seq: number,
  answer: PlannerDecision,
): Refused | { kind: "decided"; usage: unknown } & Decided {
  // The answer's parts (reasoning and its signature, provider metadata) go with it when the planner kept
  // them, and only then: a decision of a planner that keeps none is stored as it always was.
  const parts = answer.parts !== undefined && answer.parts.length > 0 ? { parts: answer.parts } : {};
  const stored = toStorable(
    answer.kind === "done"
      ? { done: true, message: answer.text, ...parts }
      : { ...decisionOf(answer.calls.map((c) => ({ tool: c.name, args: c.args as Json }))), ...parts },
  );
  const refused = (code: string, message: string): Refused => ({
    kind: "refused",
    rejection: { code, message },
    usage: answer.usage,
  });
  if (!stored.ok) {
    return refused(
      "MODEL_UNSTORABLE",
      `The answer cannot be stored: it holds ${stored.reason}; answer again without it`,
    );
  }
  // The answer as the database will give it back: what the tools receive, live and on replay.
  const decision = stored.value as unknown as Decision;
  const checked: { tool: Tool; args: unknown }[] = [];
  const calls = callsOf(decision, seq);
  for (const c of calls) {
    const check = deps.tools.check(c.tool, c.args);
    if (!check.ok) {
      return refused(
        check.code,
        (calls.length > 1 ? `call ${c.index + 1} of ${calls.length}: ` : "") + check.message,
      );
    }
    checked.push({ tool: check.tool, args: check.args });
  }
  return { kind: "decided", decision, checked: calls.length > 0 ? checked : undefined, usage: answer.usage };
}

/** Commits the decision (every answer the step paid for counts, refused ones included) and returns it. */
async function confirmDecision(
  deps: RunDeps,
  state: RunState,
  intent: JournalRow,
  { decision, checked }: Decided,
  paid: { usage: unknown; reserve: number },
): Promise<Extract<DecideEnd, { kind: "decided" }>> {
  const usage = addUsage(intent.usage, paid.usage);
  const tokens = { released: paid.reserve, spent: answerTokens(paid.usage, paid.reserve) };
  const confirmed = await deps.store.writes.journalConfirm(
    state.fence,
    intent,
    { decision, usage, tokens },
    deps.clock.now(),
  );
  applyRow(state, confirmed);
  const llmCalls = llmCallsOf(state);
  deps.log.info("decided", {
    run: state.fence.runId,
    seq: intent.seq,
    ...describeDecision(decision),
    llm_calls: llmCalls,
  });
  await deps.crash.hit("after_decide", intent.seq);
  return { kind: "decided", decision, ...(checked ? { checked } : {}) };
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
 * Records a refused answer to the intent row (it was paid for: its usage and
 * tokens count), to be asked again; at the limit on answers without a usable
 * one, the run fails `MODEL_GAVE_UP`.
 */
async function refuse(
  deps: RunDeps,
  state: RunState,
  intent: JournalRow,
  { rejection, usage: paid }: Refused,
  reserve: number,
): Promise<void> {
  const usage = paid === undefined ? undefined : addUsage(intent.usage, paid);
  const tokens = { released: reserve, spent: answerTokens(paid, reserve) };
  const rejected = await deps.store.writes.journalReject(state.fence, intent, { rejection, usage, tokens });
  applyRow(state, rejected);
  const attempt = intent.llm_attempts;
  deps.log.warn("rejected", {
    run: state.fence.runId,
    seq: intent.seq,
    code: rejection.code,
    reason: rejection.message,
    attempt,
    llm_calls: llmCallsOf(state),
  });
  if (unexplained(rejected) >= deps.retry.maxModelAttempts) {
    throw new ModelError(
      "MODEL_GAVE_UP",
      `The model gave no usable answer for step ${intent.seq} in ${attempt} requests; last: ${rejection.code}: ${rejection.message}`,
    );
  }
}

/**
 * The characters a request's prompt carries (messages and tool schemas), as its planner sends them:
 * the basis of its token estimate.
 */
export function promptChars(planner: Planner, question: Pick<DecideRequest, "transcript" | "tools">): number {
  return planner.promptChars?.(question) ??
    JSON.stringify(question.transcript).length + JSON.stringify(question.tools).length;
}

/** The smaller of two optional numbers; undefined when both are. */
function smaller(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? b : b === undefined ? a : Math.min(a, b);
}

/** The transcript for step `seq` as sent: rebuilt from the rows (the agent's `historySteps` of them), then through the conversation's history hook. */
async function sentHistory(
  deps: RunDeps,
  state: RunState,
  seq: number,
): Promise<TranscriptMessage[]> {
  const transcript = buildTranscript(state, seq, deps.instructions, deps.historySteps);
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
