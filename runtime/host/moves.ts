/**
 * A run between versions of its agent, as the worker that holds it sees it
 * (docs/versions.md). Three moments:
 *
 * - **A claim that moved the run** (the take handed it to this version from
 *   another): before anything else, this version checks that it can carry
 *   the run's decided step (`run/carry.ts`). If it cannot, the run goes back
 *   to the version it came from, pending for a worker of it, with the reason;
 *   nothing is sent.
 * - **A decision boundary with a move asked for** (an operator's `move`, or a
 *   newer version's worker marking a run that may move; heard in the
 *   heartbeat, or on the row the claim read): the worker lets the run go,
 *   pending, for a worker of that version. A decided step is carried out
 *   first: the move waits for the next decision.
 * - **A single claim** (`run`, a worker started on one run by hand): which
 *   version it may claim the run at ({@link versionForClaim}), or why not.
 *
 * @module
 */

import { llmCallsOf, type RunDeps, type RunState, toolCallsOf } from "../run/context.ts";
import { carryProblems } from "../run/carry.ts";
import { RuntimeError } from "../base/errors.ts";
import { takeKey, versionLabel } from "../agent/version.ts";
import type { RunRow } from "../store/store.ts";
import type { RunOutcome } from "./outcome.ts";

/** The outcome of a turn that ended with the run let go for (or sent back to) another version. */
function moved(state: RunState, error?: string): RunOutcome {
  return {
    runId: state.fence.runId,
    status: "moved",
    runStatus: "pending",
    alreadyClosed: false,
    toolCalls: toolCallsOf(state),
    llmCalls: llmCallsOf(state),
    ...(error ? { error } : {}),
  };
}

/**
 * After a claim of a run moved here from `movedFrom` (by this claim when
 * `justMoved`, else by an earlier one, whose worker may have died before
 * this check; calls written under an epoch before `movedEpoch` were sent by
 * `movedFrom`): undefined when this version can carry every decided call not
 * yet settled; else the run is sent back to `from` (fenced) and the turn
 * ends, the reason logged and kept on it.
 */
export async function refuseMove(
  deps: RunDeps,
  state: RunState,
  claim: { movedFrom?: string; justMoved?: boolean; movedEpoch?: number },
): Promise<RunOutcome | undefined> {
  const runId = state.fence.runId;
  const from = claim.movedFrom!;
  const justMoved = claim.justMoved === true;
  // Only calls sent before the move are the old version's; those sent since are this version's own.
  const problems = carryProblems(deps.tools, { journal: state.journal.values(), effects: state.effects }, {
    sentBy: from,
    ...(claim.movedEpoch === undefined ? {} : { sentBefore: claim.movedEpoch }),
  });
  if (problems.length === 0) {
    if (justMoved) deps.log.info("moved", { run: runId, from, to: deps.version });
    return undefined;
  }
  const reason =
    `${versionLabel(deps.agent, deps.version)} cannot carry the decided step of this run, moved ` +
    `to it from ${from}: ${problems.map((p) => `seq ${p.seq} (${p.tool}): ${p.problem}`).join("; ")}. ` +
    `Nothing was sent; the run went back to version ${from} and waits for a worker of it ` +
    `('deno task replay-check --agent <module>' lists what a version cannot carry)`;
  const back = await deps.store.versions.moveBack(state.fence, from, deps.version, reason, deps.clock.now());
  if (!back) throw await deps.store.writes.refusal(state.fence, "move back");
  deps.log.warn("move-refused", { run: runId, from, to: deps.version, reason });
  return moved(state, reason);
}

/**
 * Before the decision at `seq`: undefined to go on here; else the run is let
 * go (fenced) for a worker of the version it is to move to, and the turn
 * ends. A step already decided is carried out here first.
 */
export async function moveAtDecision(
  deps: RunDeps,
  state: RunState,
  seq: number,
  moveTo: (() => string | null | undefined) | undefined,
): Promise<RunOutcome | undefined> {
  const to = moveTo?.();
  if (!to || to === deps.version || state.journal.get(seq)?.status === "confirmed") return undefined;
  const now = deps.clock.now();
  if (!(await deps.store.versions.releaseForMove(state.fence, now))) {
    throw await deps.store.writes.refusal(state.fence, "release for a move");
  }
  deps.log.info("moving", { run: state.fence.runId, seq, from: deps.version, to });
  return moved(state);
}

/**
 * The version a single claim (the `run` command) may take `run` at: this
 * process's, when the run is not started yet, is at it, is to move to it,
 * or may move and stands at an older version. Else `VERSION_MISMATCH`, saying
 * what would take it. A run at this version that is to move elsewhere is
 * claimed as it is: its decided step is carried out, then it is let go.
 */
export async function versionForClaim(
  deps: Pick<RunDeps, "agent" | "version" | "store" | "clock">,
  run: Pick<RunRow, "run_id" | "agent_version" | "may_move" | "move_to" | "move_refused">,
): Promise<void> {
  const mine = deps.version;
  const at = run.agent_version ?? null;
  if (at === mine) return;
  const to = run.move_to ?? null;
  // Not started yet: the claim starts it at this version, and writes the version down (SEEN_AT_CLAIM).
  if (to === mine || (at === null && to === null)) return;
  if (at !== null && to === null && run.may_move && run.move_refused !== mine) {
    const known = await deps.store.versions.register([takeKey(deps.agent, mine)], deps.clock.now());
    const order = (v: string) => known.find((k) => k.version === v)?.seen_order ?? -1;
    if (order(mine) > order(at)) return;
  }
  const wanted = to ?? at!;
  throw new RuntimeError(
    "VERSION_MISMATCH",
    `Run ${run.run_id} ${at === null ? "is to start" : `is at version ${at}`} of agent ${deps.agent}${
      to !== null && at !== null ? `, to move to ${to}` : ""
    }, and this process has version ${mine}${
      run.may_move ? "" : " (the run stays on its version: onNewVersion is 'stay')"
    }. Start it with the module of version ${wanted}, or move it: ` +
      `deno task move --agent-name ${deps.agent} --to ${mine} --run ${run.run_id}`,
  );
}
