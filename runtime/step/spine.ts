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
 *    settled from outside meanwhile: then the step goes on with its rows.
 *
 * However it ends, a step ends in one {@link StepEnd}. The stages still say
 * some ends by throwing (a fence refused, a call waiting for a person, a run
 * failed); {@link stepEnd} is the one place that reads those errors as ends,
 * so the driver switches over one union instead of a ladder of classes.
 *
 * @module
 */

import { applyRow, llmCallsOf, type RunState, telemetryOf, type WorkerDeps } from "../run/context.ts";
import { type Ended, failed, finished } from "../run/ended.ts";
import type { TracedStep } from "../run/telemetry.ts";
import { FencedError, hasCode, ModelError, ToolError } from "../base/errors.ts";
import { ValueUnstorableError } from "../base/storable.ts";
import { BudgetError } from "../agent/budget.ts";
import { closeRun, ParentClosedError } from "../families/family.ts";
import { afterAnswer, type ConversationState, type ParkedConversation } from "../conversations/turns.ts";
import { decide, RetryingError } from "./decide.ts";
import { act, BlockedError, SleepingError, WaitingError } from "./act.ts";

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
 * Reads an error a stage threw as the end it says, or undefined for an error
 * no stage throws on purpose (an agent's code, a statement the database
 * refused): the driver lets the run go with it, for another worker.
 */
export function stepEnd(err: unknown): TurnEnd | undefined {
  if (err instanceof FencedError) return { kind: "fenced", error: err };
  // The stage that threw these already set the run to waiting and let it go.
  if (err instanceof WaitingError || err instanceof SleepingError || err instanceof RetryingError) {
    return { kind: "waiting", reason: err.message };
  }
  if (err instanceof ParentClosedError) {
    return { kind: "cancelled", ancestor: err.ancestor, reason: err.message };
  }
  if (err instanceof BlockedError) return { kind: "blocked", key: err.key, reason: err.message };
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
 * {@link StepEnd} and the rows it wrote; an error no stage throws on purpose
 * ends it as `failed` of {@link Ended}, for the driver to read.
 */
export async function runStep(deps: WorkerDeps, state: RunState, at: TracedStep): Promise<Ended<StepEnd>> {
  const tel = telemetryOf(deps);
  const { seq } = at;
  const decided = await tel.decide({ ...at, before: state.journal.get(seq) }, () => decide(deps, state, seq));
  if (!decided.ok) return decided;
  const { decision, checked } = decided.value;
  const journal = decided.rows.journal;
  if ("done" in decision) {
    try {
      return finished(await answer(deps, state, seq, decision.message), { journal });
    } catch (error) {
      return failed(error, { journal });
    }
  }
  // Bounded: each pass after the first follows a call settled from outside while the run was let go.
  for (;;) {
    const acted = await tel.act(at, () => act(deps, state, seq, { decision, checked }));
    const rows = { journal, effect: acted.rows.effect, effects: acted.rows.effects };
    if (acted.ok) return finished({ kind: "next" }, rows);
    try {
      if (await sleep(deps, state, seq, acted.error)) continue;
    } catch (e) {
      return failed(e, rows);
    }
    return failed(acted.error, rows);
  }
}

/** The model answered: a conversation records it and waits for its next message; any other run closes. */
async function answer(deps: WorkerDeps, state: RunState, seq: number, output: string): Promise<StepEnd> {
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
      }
      : undefined;
    return { kind: "answered", output, status: next, ...(parked ? { parked } : {}) };
  }
  await closeRun(deps, state, { status: "done", error: null, output });
  deps.log.info("done", { run: state.fence.runId, steps: seq, llm_calls: llmCallsOf(state), output });
  return { kind: "done", output };
}

/**
 * After the calls could not all settle: a run whose calls wait on their
 * remotes sleeps until the first is due, holding no worker, unless one of
 * them was settled from outside meanwhile: then the rows are read again and
 * it returns true, for the step to go on. A step waiting for a person and,
 * in the same step, on a remote is taken again at the remote's time too.
 */
async function sleep(
  deps: WorkerDeps,
  state: RunState,
  seq: number,
  err: unknown,
): Promise<boolean> {
  if (err instanceof SleepingError) {
    if (await deps.store.waitRun(state.fence, err.wakeAt, deps.clock.now(), err.message)) {
      deps.log.info("sleeping", { run: state.fence.runId, seq, keys: err.keys.join(","), until: err.wakeAt });
      return false;
    }
    const { effects } = await deps.store.loadHistory(state.fence.runId);
    for (const e of effects) applyRow(state, e);
    return true;
  }
  if (err instanceof WaitingError && err.wakeAt) {
    await deps.store.waitRun(state.fence, err.wakeAt, deps.clock.now());
  }
  return false;
}
