/**
 * What a version of an agent can carry of a run's history. A run that moves
 * to another version (docs/versions.md) keeps its journal: its settled steps
 * are history the model is shown, and a decided step whose calls are not all
 * settled must be carried out by the new version's tools. Such a call is
 * carried by the tool of the name it was decided for, or by the tool that
 * says it `replaces` that name, its arguments checked against that tool's
 * schema (defaults applied) before any intent row. A call already sent and
 * not settled is settled by the version that sent it: the request must be the
 * same under its key, and another version's tool may send another. Only when
 * no live worker hosts that version does a run with such a call reach a new
 * version (store/claims.ts), which settles it only if it would send the same
 * request: a tool of the same name, its arguments taken as they are.
 *
 * The worker of the new version checks this before it goes on with a moved
 * run (and sends the run back when a call cannot be carried); the replay
 * check (`client/replay_check.ts`) checks every decided step of the runs it
 * reads, calling nothing.
 *
 * @module
 */

import type { Json, ToolRegistry } from "../agent/tools.ts";
import { canonicalJson } from "../agent/version.ts";
import type { JournalRow, SideEffectRow } from "../store/rows.ts";
import { callsOf } from "./calls.ts";

/** A decided call a version cannot carry, and why. */
export interface CarryProblem {
  /** The call's seq (its key is `<run>:<seq>`). */
  seq: number;
  /** The tool it was decided for. */
  tool: string;
  /** True when the step's calls are all settled: history only, shown to the model, never carried out again. */
  settled: boolean;
  /** Why it cannot be carried, in a sentence. */
  problem: string;
}

/**
 * True when this version would send a call already sent as `tool` with
 * `args` as the same request: a tool of that very name (not one that
 * replaces it), whose schema takes the arguments as they are (no default
 * added, nothing changed). Else why not. (What its `run` makes of them is
 * code no check can read: a tool whose request changes keeps its name only
 * if it keeps its request.)
 */
function sameRequest(tools: ToolRegistry, tool: string, args: Json): true | string {
  const checked = tools.check(tool, args);
  if (!checked.ok) return checked.message;
  if (canonicalJson(checked.args) !== canonicalJson(args)) {
    return `its schema makes the arguments ${canonicalJson(checked.args)}`;
  }
  return true;
}

/** A call's row that needs nothing more: its outcome is recorded. */
function isSettled(row: SideEffectRow | undefined): boolean {
  return row?.status === "confirmed" || row?.status === "failed";
}

/**
 * The decided calls of a run (its confirmed journal rows and their calls'
 * rows) that the version whose tools are `tools` cannot carry: a call not
 * yet sent whose tool it has neither by name nor by `replaces`, or whose
 * arguments that tool's schema refuses; a call sent and not settled
 * (`sentBy`, the version that sent it, names who settles it; with
 * `sentBefore`, only a call whose row was written under an earlier epoch,
 * the others being this version's own). With
 * `settledToo`, the steps already settled are checked as well (a replay
 * check's report; a worker only carries out the unsettled ones), by tool and
 * schema.
 */
export function carryProblems(
  tools: ToolRegistry,
  rows: { journal: Iterable<JournalRow>; effects: ReadonlyMap<number, SideEffectRow> },
  opts: { settledToo?: boolean; sentBy?: string; sentBefore?: number } = {},
): CarryProblem[] {
  const problems: CarryProblem[] = [];
  for (const step of rows.journal) {
    if (step.status !== "confirmed" || !step.decision) continue;
    const calls = callsOf(step.decision, step.seq);
    const settled = calls.every((c) => isSettled(rows.effects.get(c.seq)));
    if (settled && !opts.settledToo) continue;
    for (const c of calls) {
      const row = rows.effects.get(c.seq);
      const sentByThem = opts.sentBefore === undefined || (row?.epoch ?? 0) < opts.sentBefore;
      if (row && !isSettled(row) && opts.sentBy !== undefined && sentByThem) {
        const same = sameRequest(tools, c.tool, row.args);
        if (same !== true) {
          problems.push({
            seq: c.seq,
            tool: c.tool,
            settled,
            problem:
              `its call ${row.idempotency_key} was sent by version ${opts.sentBy} and is ${row.status}, ` +
              `and this version would not send the same request under its key (${same}): the version that sent ` +
              "it settles it",
          });
        }
        continue;
      }
      const checked = tools.check(c.tool, c.args, { carried: true });
      if (!checked.ok) problems.push({ seq: c.seq, tool: c.tool, settled, problem: checked.message });
    }
  }
  return problems.sort((a, b) => a.seq - b.seq);
}
