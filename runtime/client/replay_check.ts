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

import {
  type Agent,
  type AgentContext,
  buildTools,
  type PreparedAgent,
  preparedVersion,
} from "../agent/agent.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { readEnv } from "./checks.ts";
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
 * Reads the runs of `agent` in `store` (its open runs, and the `finished`
 * latest) and checks every decided call of their journals against the tools
 * of `agent` (the new module's), built as a worker builds them with
 * `opts.context` (default: this process's environment, `.data`, embedded),
 * calling nothing. A problem whose step is not `settled`, in an open run,
 * would stop the run from moving to this version (it would go back to its
 * own); a settled one is history, shown to the model only, but says that this
 * version could not have carried such a step.
 *
 * @example A rename without `replaces` is listed; with it, nothing is
 * ```ts
 * import { z } from "zod";
 * import { connect, defineAgent, defineTool } from "../../mod.ts";
 * import { replayCheck } from "../../testing.ts";
 *
 * const note = (name: string, replaces?: string[]) =>
 *   defineTool({
 *     name,
 *     description: "Saves a note.",
 *     args: z.strictObject({ title: z.string() }),
 *     replaces,
 *     run: () => Promise.resolve({ result: "ok" }),
 *   });
 * const client = await connect();
 * await client.store.leases.createRun({ runId: "r1", agent: "notes", goal: "g" }, new Date());
 * const claimed = await client.store.leases.claimRun("r1", 0, "w", new Date());
 * const f = { runId: "r1", epoch: claimed!.epoch };
 * const intent = await client.store.writes.journalIntentRow(f, 0, new Date());
 * const decision = { tool: "write_note", args: { title: "t" } }; // a step decided by the old module
 * await client.store.writes.journalConfirm(f, intent, { decision, usage: undefined }, new Date());
 * const renamed = await replayCheck(client.store, defineAgent({ name: "notes", tools: [note("save_note")] }));
 * const carried = await replayCheck(
 *   client.store,
 *   defineAgent({ name: "notes", tools: [note("save_note", ["write_note"])] }),
 * );
 * await client.close();
 * if (renamed.problems.length !== 1 || carried.problems.length !== 0) throw new Error("unexpected");
 * ```
 */
export async function replayCheck(
  store: Store,
  agent: Agent,
  opts: ReplayCheckOptions & { context?: Partial<AgentContext> } = {},
): Promise<ReplayReport> {
  const ctx: AgentContext = { env: readEnv(), dataDir: DEFAULTS.dataDir, embedded: true, ...opts.context };
  return await checkJournals(store, { agent, tools: await buildTools(agent, ctx) }, opts);
}

/** {@link replayCheck} with the agent's tools built already. */
export async function checkJournals(
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
