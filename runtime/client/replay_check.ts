/**
 * The replay check: before a deploy (and in CI), read the journals of an
 * agent's runs against a new version of its module, calling no model and no
 * tool, and list each decided step the new version could not carry: a tool
 * it has neither by name nor by `replaces`, or arguments its schema refuses
 * (`run/carry.ts`, the same check a worker makes when a run moves to it).
 * It reads the open runs, and on request a sample of the finished ones (their
 * steps show what runs decide, though none of them will move). `deno task
 * replay-check --agent <module>` prints it; `testing.ts` exports it.
 *
 * @module
 */

import { type PreparedAgent, preparedVersion } from "../agent/agent.ts";
import { type CarryProblem, carryProblems } from "../run/carry.ts";
import { callsOf } from "../run/calls.ts";
import type { Store } from "../store/store.ts";

/** What {@link replayCheck} reads. */
export interface ReplayCheckOptions {
  /** The most open runs read, oldest first. Default 10 000. */
  open?: number;
  /** How many of the runs finished most recently are read too. Default 0. */
  finished?: number;
}

/** A decided step of a run that the checked version could not carry. */
export interface ReplayProblem extends CarryProblem {
  /** The run. */
  runId: string;
  /** The run's status. */
  status: string;
  /** The version the run is at (null: not started). */
  runVersion: string | null;
}

/** What {@link replayCheck} found. */
export interface ReplayReport {
  /** The agent. */
  agent: string;
  /** The version checked: the module's, as a worker of it would record it. */
  version: string;
  /** The runs read: open, and finished. */
  runs: { open: number; finished: number };
  /** The decided tool calls read. */
  calls: number;
  /** Each one the version could not carry; none when it could carry them all. */
  problems: ReplayProblem[];
}

/**
 * Reads the runs of `prepared`'s agent (its open runs, and the `finished`
 * latest) and checks every decided call of their journals against its tools,
 * calling nothing. A problem whose step is not `settled`, in an open run,
 * would stop the run from moving to this version (it would go back to its
 * own); a settled one is history, shown to the model only, but says that this
 * version could not have carried such a step.
 */
export async function replayCheck(
  store: Store,
  prepared: Pick<PreparedAgent, "agent" | "tools" | "version">,
  opts: ReplayCheckOptions = {},
): Promise<ReplayReport> {
  const agent = prepared.agent.name;
  const runs = await store.versions.runsToCheck(agent, {
    open: opts.open ?? 10_000,
    finished: opts.finished ?? 0,
  });
  const problems: ReplayProblem[] = [];
  let calls = 0;
  let finished = 0;
  for (const run of runs) {
    if (["done", "failed", "cancelled"].includes(run.status)) finished++;
    const { journal, effects } = await store.reads.loadHistory(run.run_id);
    for (const j of journal) {
      if (j.status === "confirmed" && j.decision) calls += callsOf(j.decision, j.seq).length;
    }
    const found = carryProblems(
      prepared.tools,
      { journal, effects: new Map(effects.map((e) => [e.seq, e])) },
      {
        settledToo: true,
      },
    );
    for (const p of found) {
      problems.push({ ...p, runId: run.run_id, status: run.status, runVersion: run.agent_version });
    }
  }
  return {
    agent,
    version: preparedVersion(prepared),
    runs: { open: runs.length - finished, finished },
    calls,
    problems,
  };
}
