/**
 * What one worker incarnation holds while it drives one run: its process's
 * and its agent's dependencies side by side (each built in deps.ts), and the
 * run's state as read back from the database at claim time and extended only
 * by rows this worker has committed since.
 *
 * @module
 */

import type { Budget, ToolCallReservation } from "../agent/budget.ts";
import { invariant } from "../base/assert.ts";
import type { ConversationState } from "../agent/conversation_options.ts";
import type { AgentDeps, ProcessDeps } from "./deps.ts";
import type { Fence, JournalRow, MessageRow, SideEffectRow } from "../store/store.ts";
import type { Telemetry } from "./telemetry.ts";
import type { ModelParams } from "../model/transcript.ts";
import { toolCallsIn } from "./calls.ts";
import { JournalRows } from "./tallied.ts";
import type { SettledTranscript } from "./tallied.ts";

// Where they were declared before process and agent came apart (deps.ts): importers keep working.
export { DEFAULT_MAX_CLAIMS_WITHOUT_PROGRESS, DEFAULT_RETRY, type RetryPolicy } from "./deps.ts";
export { backoffMs, retryDelayMs } from "../base/retry.ts";

/**
 * What the loop's functions read while a worker drives a run: its process's
 * {@link ProcessDeps} and its agent's {@link AgentDeps} side by side, built
 * once per agent with {@link runDepsFor} (`extends` checks that no name
 * belongs to both).
 */
export interface RunDeps extends ProcessDeps, AgentDeps {
}

/** The deps of a worker in the process `proc` driving runs of `agent`. */
export function runDepsFor(proc: ProcessDeps, agent: AgentDeps): RunDeps {
  return { ...proc, ...agent };
}

/** The worker's telemetry. */
export function telemetryOf(deps: RunDeps): Telemetry {
  return deps.telemetry;
}

/** The run as this worker knows it. */
export interface RunState {
  /** The run and the epoch this worker holds. */
  fence: Fence;
  /** The run's goal, sent to the model. */
  goal: string;
  /** Journal rows by `seq`. */
  journal: Map<number, JournalRow>;
  /** Tool calls by `seq`. */
  effects: Map<number, SideEffectRow>;
  /** Aborts when this worker must stop (fenced, lease lost, done). */
  signal: AbortSignal;
  /** The run's ceilings, if any. */
  budget?: Budget;
  /** The run's own model request parameters (over its agent's), if any. */
  modelParams?: ModelParams;
  /** Tool requests held for the step's calls not yet sent, against the tool-call ceiling (budget.ts). */
  reservation: ToolCallReservation;
  /**
   * Where the run stands in a family of runs (family.ts): set for a child run
   * and for a run that has started one; undefined for a run in no family,
   * whose requests never read a family's spend.
   */
  family?: FamilyPlace;
  /**
   * The run's `error` column as the claim read it, like its goal: why its
   * last worker let it go (kept while claims find no progress), if it said.
   * Read, never written, by the step: a limit reached names it as the likely
   * cause.
   */
  errorAtClaim?: string;
  /** For a run that converses: its messages, and the one being answered. */
  conversation?: ConversationState;
  /**
   * The transcript of the run's settled steps, as the last step built it
   * (step/history.ts): each step adds its own steps to it, not the run's
   * whole history again.
   */
  transcript?: SettledTranscript;
  /**
   * The stretch of settled steps the run started with, as this worker's take
   * walked it (`settledSteps` from seq 0: where it ends, and how many steps).
   * Its rows never change again, so a host that parks the run hands it to
   * the next take, which walks on from there (#39: every take walked the
   * whole run).
   */
  settledAhead?: { seq: number; steps: number };
  /** The labels the run was started with, which limits may key on. */
  labels?: Readonly<Record<string, string>>;
  /**
   * Set for a dry run (a fork that is not live, an evaluation's case): its
   * calls of tools that act on the world are never sent, but answered from
   * `forkedFrom`'s record, a stub, or flagged (`step/dry_run.ts`).
   */
  dryRun?: { forkedFrom: string | null };
}

/** Where a run stands in its family of runs, as its worker knows it. */
export interface FamilyPlace {
  /** The family's first run. */
  rootRunId: string;
  /** Its parent; null for the root. */
  parentRunId: string | null;
}

/**
 * Model requests paid for across the whole run: the sum of its journal rows'
 * `llm_attempts`, derived from the rows rather than counted beside them, so
 * it cannot drift from what the database holds.
 */
export function llmCallsOf(state: Pick<RunState, "journal">): number {
  if (state.journal instanceof JournalRows) return state.journal.llmAttempts;
  let n = 0;
  for (const row of state.journal.values()) n += row.llm_attempts;
  return n;
}

/**
 * Tool calls decided across the whole run, from its journal's decisions
 * ({@link toolCallsIn}), derived from the rows like {@link llmCallsOf}: a
 * decision of three calls counts three, an answer none.
 */
export function toolCallsOf(state: Pick<RunState, "journal">): number {
  if (state.journal instanceof JournalRows) return state.journal.toolCalls;
  return toolCallsIn(state.journal.values());
}

/**
 * Applies a row a write returned to the run's state: the one way a worker's
 * knowledge of a step changes after the claim. The row replaces the step's
 * journal row, or its tool call (one with an idempotency key). Asserts what
 * no write may break ({@link invariant}): the row is this run's, at a
 * whole seq, and a confirmed row is never replaced by one that is not (a
 * decision or a result once recorded stays recorded).
 */
export function applyRow(
  state: Pick<RunState, "journal" | "effects" | "fence">,
  row: JournalRow | SideEffectRow,
): void {
  const runId = state.fence.runId;
  invariant(row.run_id === runId, runId, () => `a row of run ${row.run_id} applied to its state`);
  invariant(Number.isInteger(row.seq) && row.seq >= 0, runId, () => `a row at seq ${row.seq}`);
  const rows: Map<number, JournalRow | SideEffectRow> = "idempotency_key" in row
    ? state.effects
    : state.journal;
  const before = rows.get(row.seq);
  invariant(
    before?.status !== "confirmed" || row.status === "confirmed",
    runId,
    () =>
      `the confirmed ${
        "idempotency_key" in row ? "tool call" : "decision"
      } at seq ${row.seq} replaced by one ${row.status}`,
  );
  rows.set(row.seq, row);
}

/**
 * Applies message rows a read or a write returned to a conversing run's
 * state, the way {@link applyRow} applies a step's rows: each replaces the
 * message at its seq or comes next after the last; `turn`, when given, is
 * the message now being answered. The conversation is replaced, never
 * changed in place, so a copy kept elsewhere (a parked conversation) stays
 * as it was. Asserts that the messages stay numbered 0, 1, 2, ... and that
 * the turn is one of them.
 */
export function applyMessages(
  state: Pick<RunState, "fence" | "conversation">,
  rows: readonly MessageRow[],
  turn?: number,
): void {
  const runId = state.fence.runId;
  const conv = state.conversation;
  invariant(conv !== undefined, runId, () => "messages applied to a run that does not converse");
  const messages = [...conv.messages];
  for (const row of rows) {
    invariant(row.run_id === runId, runId, () => `a message of run ${row.run_id} applied to its state`);
    invariant(
      Number.isInteger(row.seq) && row.seq >= 0 && row.seq <= messages.length,
      runId,
      () => `message ${row.seq} applied after ${messages.length} messages`,
    );
    messages[row.seq] = row;
  }
  const next = turn ?? conv.turn;
  invariant(next >= 0 && next < messages.length, runId, () => `turn ${next} of ${messages.length} messages`);
  state.conversation = { ...conv, messages, turn: next };
}

/** The idempotency key of the call at `seq` of run `runId` (calls.ts: the calls of a step own consecutive seqs). */
export function idempotencyKey(runId: string, seq: number): string {
  return `${runId}:${seq}`;
}
