/**
 * How a worker's turn at a run ends: its {@link RunOutcome}, the process exit
 * code it gives, and {@link endTurn}, the one switch from the step's end to
 * the outcome (the run closed, let go or lost).
 *
 * @module
 */

import { llmCallsOf, type RunDeps, type RunState, toolCallsOf } from "../run/context.ts";
import { describeError, FencedError } from "../base/errors.ts";
import { closeRun } from "../families/family.ts";
import { parkedAt, type ParkedRun } from "../run/parked.ts";
import type { TurnEnd } from "../step/spine.ts";
import type { RunStatus } from "../store/store.ts";

/** Every way a worker's turn on a run can end. */
export const WORKER_STATUSES = [
  "done",
  "failed",
  "waiting",
  "blocked",
  "cancelled",
  "fenced",
  "stalled",
  "lost_claim",
  "moved",
] as const;

/** How a worker's turn on a run ended. */
export type WorkerStatus = typeof WORKER_STATUSES[number];

/** The end of a worker's turn on a run. */
export interface RunOutcome {
  /** The run. */
  runId: string;
  /** How this worker's turn ended. */
  status: WorkerStatus;
  /** The run's status in the database as this worker last saw it. */
  runStatus?: RunStatus;
  /** True when the run was already closed before this worker started. */
  alreadyClosed: boolean;
  /**
   * Tool calls decided across the run so far, from its journal's decisions: a
   * decision (a step) of three calls counts three, an answer none.
   */
  toolCalls: number;
  /** Model requests paid for across the whole run. */
  llmCalls: number;
  /** Why the run failed, was blocked, or was lost. */
  error?: string;
  /** The model's final answer, for a done run. */
  output?: string;
  /** A run let go to wait (a conversation for its next message): its rows, for the host that takes it again (host.ts). */
  parked?: ParkedRun;
}

/**
 * The process exit code for an outcome, one of `EXIT_CODES` (exit_codes.ts, where every code is listed): 0 done,
 * 1 failed, 3 fenced or lost (or let go for a worker of another version: moved), 4 blocked or waiting for an approval (a person must act), 5 cancelled. (2 is settings
 * that cannot work, 6 the supervisor gone, 7 the database away and 8 an error the loop does not classify
 * ({@link WorkerError}): those never reach an outcome.)
 */
export function exitCodeOf(outcome: RunOutcome): number {
  switch (outcome.status) {
    case "done":
      return 0;
    case "failed":
      return 1;
    case "blocked":
    case "waiting":
      return 4;
    case "cancelled":
      return 5;
    default:
      return 3;
  }
}

/** The worker's turn ends as the step did: the run closed, let go or lost, in one switch over the end. */
export async function endTurn(
  deps: RunDeps,
  state: RunState,
  seq: number,
  end: TurnEnd,
): Promise<RunOutcome> {
  const { log } = deps;
  const runId = state.fence.runId;
  const outcome = (status: WorkerStatus, error?: string): RunOutcome => ({
    runId,
    status,
    alreadyClosed: false,
    toolCalls: toolCallsOf(state),
    llmCalls: llmCallsOf(state),
    error,
  });
  // Closes the run after a failure; a refused close means another worker has it.
  const close = async (status: "failed" | "blocked" | "cancelled", error: string) => {
    try {
      await closeRun(deps, state, { status, error });
      return undefined;
    } catch (e) {
      if (e instanceof FencedError) return fenced(deps, state, e, seq);
      throw e;
    }
  };
  switch (end.kind) {
    case "done":
      return { ...outcome("done"), runStatus: "done", output: end.output };
    case "answered":
      return {
        ...outcome("done"),
        status: end.status,
        runStatus: end.status,
        output: end.output,
        ...(end.parked ? { parked: end.parked } : {}),
      };
    case "fenced":
      return fenced(deps, state, end.error, seq);
    case "waiting":
    case "limited": {
      // The stage that ended it already set the run to waiting and let it go; its host keeps its rows.
      const parked = parkedAt(state, seq);
      return { ...outcome("waiting", end.reason), runStatus: "waiting", ...(parked ? { parked } : {}) };
    }
    case "cancelled": {
      const lost = await close("cancelled", end.reason);
      if (lost) return lost;
      log.warn("cancelled", { run: runId, seq, parent: end.ancestor, reason: end.reason });
      return { ...outcome("cancelled", end.reason), runStatus: "cancelled" };
    }
    case "blocked": {
      const lost = await close("blocked", end.reason);
      if (lost) return lost;
      log.warn("blocked", { run: runId, key: end.key, reason: end.reason });
      return { ...outcome("blocked", end.reason), runStatus: "blocked" };
    }
    case "failed": {
      // A conversation that fails keeps its history: the person is told how to take it up again.
      const error = describeError(end.error) +
        (state.conversation
          ? `. The conversation keeps its history: 'deno task reopen ${runId}' takes it up again`
          : "");
      const lost = await close("failed", error);
      if (lost) return lost;
      log.error("failed", { run: runId, seq, error, llm_calls: llmCallsOf(state) });
      return { ...outcome("failed", error), runStatus: "failed" };
    }
  }
}

export function fenced(deps: RunDeps, state: RunState, err: FencedError, seq: number): RunOutcome {
  const event = err.code === "FENCED" ? "fenced" : err.code === "STALLED" ? "stalled" : "stopped";
  deps.log.warn(event, { run: state.fence.runId, seq, epoch: state.fence.epoch, reason: err.message });
  const status: WorkerStatus = err.code === "FENCED"
    ? "fenced"
    : err.code === "STALLED"
    ? "stalled"
    : "cancelled";
  return {
    runId: state.fence.runId,
    status,
    alreadyClosed: false,
    toolCalls: toolCallsOf(state),
    llmCalls: llmCallsOf(state),
    error: err.message,
  };
}
