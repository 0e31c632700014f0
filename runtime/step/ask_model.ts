/**
 * One request to the model, and what it came to: an answer, an answer
 * refused as unusable (too many calls, none), or a failure an outage
 * explains. Within the model's timeout; a watched answer streams its text to
 * the channel as it is written.
 *
 * @module
 */

import { deadline } from "../base/clock.ts";
import { type RunDeps, type RunState, telemetryOf } from "../run/context.ts";
import { AbortedError, ModelError } from "../base/errors.ts";
import type { DecideRequest, PlannerDecision } from "../model/transcript.ts";
import type { JournalRow, Rejection } from "../store/store.ts";
import { DeltaPublisher } from "../run/deltas.ts";

/** An answer refused as unusable: recorded (it was paid for), and the model asked again. */
export interface Refused {
  kind: "refused";
  rejection: Rejection;
  usage: unknown;
}

/** What one request to the model came to. */
export type Asked =
  | { kind: "answer"; answer: PlannerDecision }
  | Refused
  | { kind: "outage"; error: ModelError };

/**
 * Asks the model once, within the model's timeout; a watched answer streams
 * (STREAM_DELTAS), its text to the channel as it is written, every piece
 * before the answer is journaled. Returns the answer, an answer refused as
 * unusable, or a failure an outage explains; throws any other failure.
 */
export async function ask(
  deps: RunDeps,
  state: RunState,
  intent: JournalRow,
  question: DecideRequest,
): Promise<Asked> {
  const { clock, log } = deps;
  const { seq, llm_attempts: attempt } = intent;
  const deltas = deps.streamDeltas
    ? new DeltaPublisher({
      notify: (payload) => deps.store.stream.notify(payload),
      clock,
      log,
      call: { runId: state.fence.runId, epoch: state.fence.epoch, seq, attempt },
    })
    : undefined;
  const ms = deps.retry.modelTimeoutMs;
  const timeout = deadline(
    clock,
    state.signal,
    ms,
    () => new ModelError("MODEL_TIMEOUT", `The model did not answer within ${ms}ms`, { transient: true }),
  );
  try {
    const answer = await telemetryOf(deps).modelCall(deps.planner.model, async () =>
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
    if (answer.warnings && answer.warnings.length > 0) {
      log.warn("model-warning", {
        run: state.fence.runId,
        seq,
        attempt,
        warnings: answer.warnings.join("; "),
      });
    }
    return { kind: "answer", answer };
  } catch (err) {
    const e = asModelError(err, timeout.expired(), state.signal);
    if (e.badAnswer) {
      return { kind: "refused", rejection: { code: e.code, message: e.message }, usage: e.usage };
    }
    if (!e.transient) throw e;
    return { kind: "outage", error: e };
  } finally {
    timeout.cancel();
    await deltas?.close();
  }
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

function asModelError(err: unknown, timedOut: Error | undefined, stop: AbortSignal): ModelError {
  if (stop.aborted) throw stop.reason ?? new AbortedError("The worker is stopping");
  if (timedOut instanceof ModelError) return timedOut;
  if (err instanceof ModelError) return err;
  throw err;
}
