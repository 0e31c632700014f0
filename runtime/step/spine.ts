/**
 * A step, top to bottom. The run driver (`host/run_driver.ts`) calls
 * {@link runStep} once per decision; each stage it calls lives in a file of
 * its own, in the order it runs:
 *
 * 1. **decide** (`decide.ts`): replay the step's confirmed decision, or commit
 *    the intent, ask the model once, check the answer, commit the decision.
 * 2. **answer**: a decision with no call closes the run with its answer
 *    (`families/family.ts` `closeRun`, which wakes a parent), or, for a
 *    conversation, records the answer and waits for the next message
 *    (`conversations/turns.ts` `afterAnswer`).
 * 3. **act** (`act.ts`): the decision's calls, checked, budgeted, approved
 *    together, and sent at once, each through intent, call and confirm.
 * 4. **sleep**: calls a remote accepted, or that failed as in an outage, let
 *    the run go until the first is due (`waitRun`), unless one of them was
 *    settled from outside meanwhile: then the step goes on with its rows. A
 *    request a limit shared by the fleet refused (`limited.ts`) lets the run
 *    go until the limit may let it (`limited`), the model's from decide.
 *
 * However it ends, a step ends in one {@link StepEnd}, and each stage in a
 * value of its own (`DecideEnd`, `ActEnd`): a run that waits, sleeps or is
 * blocked is an outcome, not an exception. What fails or loses the run (a
 * fence refused, a model or tool given up on) is carried as the `failed` of
 * an {@link Ended}; {@link stepEnd} reads those errors as ends, so the driver
 * switches over one union instead of a ladder of classes.
 *
 * @module
 */

import {
  applyRow,
  llmCallsOf,
  type RunDeps,
  type RunState,
  telemetryOf,
  toolCallsOf,
} from "../run/context.ts";
import { type Ended, failed, finished } from "../run/ended.ts";
import type { TracedStep } from "../run/telemetry.ts";
import { FencedError, hasCode, ModelError, ToolError } from "../base/errors.ts";
import { ValueUnstorableError } from "../base/storable.ts";
import { BudgetError } from "../agent/budget.ts";
import { closeRun, ParentClosedError } from "../families/family.ts";
import { afterAnswer, type ConversationState, type ParkedConversation } from "../conversations/turns.ts";
import { decide } from "./decide.ts";
import { act, type ActEnd } from "./act.ts";
import { type Limited, waitForLimit } from "./limited.ts";

/** How a step, or the run's turn at it, ended: the one value the run driver reads. */
export type StepEnd =
  /** The step is settled: the driver goes on to the next decision. */
  | { kind: "next" }
  /** The model answered and the run is closed with that answer. */
  | { kind: "done"; output: string }
  /** A conversation answered its message and waits for the next (`waiting`), or ended idle (`done`). */
  | { kind: "answered"; output: string; status: "waiting" | "done"; parked?: ParkedConversation }
  /** The run was let go to wait: for a person's answer, a remote's job, or the next try after an outage. */
  | { kind: "waiting"; reason: string }
  /** The run was let go until a limit shared by the fleet lets its request go (`key`, at `wakeAt` or sooner). */
  | Limited
  /** A call's outcome is unknown and not safely knowable: the run waits for a person to resolve `key`. */
  | { kind: "blocked"; key: string; reason: string }
  /** The run fails: the model, a tool or the budget gave up on it, or a value the database cannot store. */
  | { kind: "failed"; error: unknown }
  /** The run it answers (`ancestor`) is closed: nobody waits for its answer. */
  | { kind: "cancelled"; ancestor: string; reason: string }
  /** A fenced write was refused: another worker holds the run, or it was closed under this one. */
  | { kind: "fenced"; error: FencedError };

/** A step's end that ends the worker's turn too: every end but `next`. */
export type TurnEnd = Exclude<StepEnd, { kind: "next" }>;

/**
 * Reads an error a stage ended with as the end it says, or undefined for an
 * error no stage ends with on purpose (an agent's code, a statement the
 * database refused): the driver lets the run go with it, for another worker.
 */
export function stepEnd(err: unknown): TurnEnd | undefined {
  if (err instanceof FencedError) return { kind: "fenced", error: err };
  if (err instanceof ParentClosedError) {
    return { kind: "cancelled", ancestor: err.ancestor, reason: err.message };
  }
  // A value the store refused to write (storable.ts) fails the run where it is: no outage, and another
  // worker would meet the same value.
  if (
    err instanceof ModelError || err instanceof ToolError || err instanceof BudgetError ||
    err instanceof ValueUnstorableError || hasCode(err, "DECISION_INVALID")
  ) {
    return { kind: "failed", error: err };
  }
  return undefined;
}

/**
 * One step at `at.seq`: its decision, then the run's close or its next
 * message when the model answers, else its tool calls. Ends with the step's
 * {@link StepEnd} and the rows it wrote; an error no stage ends with on
 * purpose ends it as `failed` of {@link Ended}, for the driver to read.
 */
export async function runStep(deps: RunDeps, state: RunState, at: TracedStep): Promise<Ended<StepEnd>> {
  const tel = telemetryOf(deps);
  const { seq } = at;
  const decided = await tel.decide({ ...at, before: state.journal.get(seq) }, () => decide(deps, state, seq));
  if (!decided.ok) return decided;
  const journal = decided.rows.journal;
  const d = decided.value;
  if (d.kind === "retrying") return finished({ kind: "waiting", reason: d.reason }, { journal });
  if (d.kind === "limited") return finished(d, { journal });
  if ("done" in d.decision) {
    try {
      return finished(await answer(deps, state, seq, d.decision.message), { journal });
    } catch (error) {
      return failed(error, { journal });
    }
  }
  // Bounded: each pass after the first follows a call settled from outside while the run was let go.
  for (;;) {
    const acted = await tel.act(at, () => act(deps, state, seq, d));
    const rows = { journal, effect: acted.rows.effect, effects: acted.rows.effects };
    if (!acted.ok) return failed(acted.error, rows);
    try {
      const end = await afterActing(deps, state, seq, acted.value);
      if (end) return finished(end, rows);
    } catch (e) {
      return failed(e, rows);
    }
  }
}

/** The model answered: a conversation records it and waits for its next message; any other run closes. */
async function answer(deps: RunDeps, state: RunState, seq: number, output: string): Promise<StepEnd> {
  if (state.conversation) {
    const conversing = state as RunState & { conversation: ConversationState };
    const next = await afterAnswer(deps, conversing, seq, output);
    if (next === "next") return { kind: "next" };
    const parked: ParkedConversation | undefined = next === "waiting"
      ? {
        epoch: state.fence.epoch,
        journal: state.journal,
        effects: state.effects,
        conversation: conversing.conversation,
        seq,
        ...(state.transcript ? { transcript: state.transcript } : {}),
      }
      : undefined;
    return { kind: "answered", output, status: next, ...(parked ? { parked } : {}) };
  }
  await closeRun(deps, state, { status: "done", error: null, output });
  deps.log.info("done", {
    run: state.fence.runId,
    tool_calls: toolCallsOf(state),
    llm_calls: llmCallsOf(state),
    output,
  });
  return { kind: "done", output };
}

/**
 * The step's end once its calls have gone as far as they go this turn, or
 * undefined to act again. A run whose calls wait on their remotes sleeps
 * until the first is due, holding no worker, unless one of them was settled
 * from outside meanwhile: then the rows are read again and the step goes on.
 * A step waiting for a person and, in the same step, on a remote is taken
 * again at the remote's time too.
 */
async function afterActing(
  deps: RunDeps,
  state: RunState,
  seq: number,
  end: ActEnd,
): Promise<StepEnd | undefined> {
  switch (end.kind) {
    case "settled":
      return { kind: "next" };
    case "blocked":
      return end;
    case "limited":
      // No call of the step waits on its remote past this: the run waits for the limit (or the earliest).
      await waitForLimit(deps, state, end);
      return end;
    case "approval":
      // The approval statement set the run to waiting and let it go.
      if (end.wakeAt) await deps.store.writes.waitRun(state.fence, end.wakeAt, deps.clock.now());
      return { kind: "waiting", reason: end.reason };
    case "asleep": {
      if (await deps.store.writes.waitRun(state.fence, end.wakeAt, deps.clock.now(), end.reason)) {
        deps.log.info("sleeping", {
          run: state.fence.runId,
          seq,
          keys: end.keys.join(","),
          until: end.wakeAt,
        });
        return { kind: "waiting", reason: end.reason };
      }
      const { effects } = await deps.store.reads.loadHistory(state.fence.runId);
      for (const e of effects) applyRow(state, e);
      return undefined;
    }
  }
}
