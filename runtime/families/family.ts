/**
 * Runs that call runs, as a worker sees them: the id of the child run a call
 * starts, what a call may do with runs (`ToolContext.runs`, filled in by the
 * executor), the ceilings a run of a family is held to besides its own, and
 * the close of a family member. A run in no family (no parent, no child)
 * never reaches this module's reads: it pays nothing for it.
 *
 * Ids. The call with key `<run>:<seq>` owns one child, `<run>.<seq>`, a valid
 * run id as long as it fits 64 characters (a child of `run42` at seq 3 is
 * `run42.3`; its child at seq 0 is `run42.3.0`). The id comes from the key,
 * never from the order calls finish in, so a re-sent call (after a crash, or
 * to ask how its child stands) finds the child it started. A run under that
 * id that is not this call's child (a person's run with the same name) is
 * refused, never reused.
 *
 * Budgets. Before each model or tool request, a run of a family reads its
 * family's spend (one statement, through the root) and is held to its own
 * ceilings, to its own counting its descendants, and to every ancestor's
 * counting that ancestor's whole subtree: a ceiling on a parent stops its
 * children too. The read is not a lock, so runs of one family that ask at
 * the same moment each see the others' spend as it was: with `k` of them
 * asking at once, a ceiling can be passed by at most `k - 1` requests (a model
 * request counted at the worst case it reserved, a tool request as one).
 *
 * @module
 */

import { RUN_ID_PATTERN } from "../base/ids.ts";
import { type FamilyCeiling, NO_FAMILY, type Spend } from "../agent/budget.ts";
import type { FamilyPlace, RunDeps, RunState } from "../run/context.ts";
import { RuntimeError, ToolError } from "../base/errors.ts";
import type { FamilyMember, Fence, RunRow } from "../store/store.ts";
import type { ChildRunInfo, ChildRuns } from "../agent/tools.ts";

/** A run's place in its family from its row, or undefined for a run in no family. */
export function familyOf(run: Pick<RunRow, "root_run_id" | "parent_run_id">): FamilyPlace | undefined {
  return run.root_run_id ? { rootRunId: run.root_run_id, parentRunId: run.parent_run_id ?? null } : undefined;
}

/**
 * The id of the child run started by the call at `seq` of run `runId`:
 * `<runId>.<seq>`. Throws a permanent `AGENT_CHILD_ID_TOO_LONG` when that is
 * not a valid run id (longer than 64 characters: a family that deep, or a
 * parent whose id is long, must start its runs with shorter ids).
 */
export function childRunId(runId: string, seq: number): string {
  const id = `${runId}.${seq}`;
  if (!RUN_ID_PATTERN.test(id)) {
    throw new ToolError(
      "AGENT_CHILD_ID_TOO_LONG",
      `Cannot start a child run for call ${runId}:${seq}: its id ${JSON.stringify(id)} is ${id.length} ` +
        `characters, and a run id is at most 64. Give the parent run a shorter id`,
      { transient: false },
    );
  }
  return id;
}

/**
 * A run of a family that cannot go on: an ancestor is closed (cancelled,
 * failed or done), so nobody waits for its answer. The run is cancelled.
 */
export class ParentClosedError extends RuntimeError {
  /** The closed ancestor. */
  readonly ancestor: string;
  /** Creates the marker for the ancestor `ancestor`, in `status`. */
  constructor(runId: string, ancestor: string, status: string) {
    super(
      "PARENT_CLOSED",
      `cancelled: run ${runId} answers run ${ancestor}, which is ${status}; nobody waits for its answer`,
    );
    this.name = "ParentClosedError";
    this.ancestor = ancestor;
  }
}

/** A run as a call is shown it. */
function childInfo(run: RunRow): ChildRunInfo {
  return {
    runId: run.run_id,
    agent: run.agent,
    status: run.status,
    output: run.output,
    error: run.error,
    parentRunId: run.parent_run_id ?? null,
    parentKey: run.parent_key ?? null,
  };
}

/**
 * What the call `call` of the run `state` holds may do with runs: start its
 * child (created under the run's fence, found again by a re-send), and look
 * a run up. Once a child exists the run knows it is in a family
 * (`state.family`), so its later requests are held to the family's ceilings.
 */
export function childRunsFor(
  deps: Pick<RunDeps, "store" | "clock" | "log">,
  state: Pick<RunState, "fence" | "family" | "dryRun">,
  call: { key: string; seq: number },
): ChildRuns {
  const fence: Fence = state.fence;
  return {
    startChild: async (agent, given, opts = {}) => {
      const runId = childRunId(fence.runId, call.seq);
      const { run, created } = await deps.store.families.createChild(fence, {
        runId,
        agent,
        goal: given.goal,
        input: given.input,
        budget: opts.budget,
        parentKey: call.key,
        ...(state.dryRun?.forkedFrom ? { originalChild: childRunId(state.dryRun.forkedFrom, call.seq) } : {}),
      }, deps.clock.now());
      if (run.parent_key !== call.key || run.agent !== agent) {
        throw new ToolError(
          "AGENT_CHILD_CONFLICT",
          `Cannot start the child run of call ${call.key}: run ${runId} exists already and is not its child ` +
            `(agent ${run.agent}, ${
              run.parent_key ? `started by call ${run.parent_key}` : "started by a person"
            }). Rename that run's owner's runs, or start this parent under another id`,
          { transient: false },
        );
      }
      state.family ??= { rootRunId: run.root_run_id ?? fence.runId, parentRunId: null };
      if (created) {
        deps.log.info("child-started", {
          run: fence.runId,
          seq: call.seq,
          key: call.key,
          child: runId,
          agent,
        });
      }
      return childInfo(run);
    },
    get: async (runId) => {
      const run = await deps.store.reads.getRun(runId);
      return run ? childInfo(run) : undefined;
    },
  };
}

const ZERO: Spend = Object.freeze({ tokens: 0, modelCalls: 0, toolCalls: 0 });

/**
 * The ceilings the run `state` holds is held to besides its own
 * ({@link FamilyCeiling}), from one read of its family's spend: its own,
 * counting its descendants, when it has any; and each ancestor's with a
 * budget, counting that ancestor's subtree. Throws {@link ParentClosedError}
 * when an ancestor is closed. None for a run in no family (no statement).
 */
export async function familyCeilings(
  deps: Pick<RunDeps, "store">,
  state: Pick<RunState, "fence" | "family" | "budget">,
): Promise<readonly FamilyCeiling[]> {
  if (!state.family) return NO_FAMILY;
  const self = state.fence.runId;
  const members = await deps.store.families.readFamily(state.family.rootRunId);
  const byId = new Map(members.map((m) => [m.run_id, m]));
  const children = new Map<string, FamilyMember[]>();
  for (const m of members) {
    if (m.parent_run_id !== null) {
      children.set(m.parent_run_id, [...(children.get(m.parent_run_id) ?? []), m]);
    }
  }
  // What each member's subtree has spent, itself included: a member's sum is its own plus its children's.
  const subtree = new Map<string, Spend>();
  const sum = (id: string, depth: number): Spend => {
    const known = subtree.get(id);
    if (known) return known;
    const m = byId.get(id);
    let total: Spend = m ? { tokens: m.tokens, modelCalls: m.model_calls, toolCalls: m.tool_calls } : ZERO;
    // Bounded by the family's depth (a run id holds at most 32 levels); a cycle cannot be written.
    if (depth < 64) {
      for (const c of children.get(id) ?? []) total = add(total, sum(c.run_id, depth + 1));
    }
    subtree.set(id, total);
    return total;
  };
  const mine = byId.get(self);
  const ownSpend: Spend = mine
    ? { tokens: mine.tokens, modelCalls: mine.model_calls, toolCalls: mine.tool_calls }
    : ZERO;
  const others = (id: string) => minus(sum(id, 0), ownSpend);
  const out: FamilyCeiling[] = [];
  if (state.budget && (children.get(self)?.length ?? 0) > 0) {
    out.push({ runId: self, of: "own", budget: state.budget, others: others(self) });
  }
  // Up the chain of parents, bounded as above.
  let at = mine?.parent_run_id ?? state.family.parentRunId;
  for (let depth = 0; at && depth < 64; depth++) {
    const a = byId.get(at);
    if (!a) break;
    if (a.status === "cancelled" || a.status === "failed" || a.status === "done") {
      throw new ParentClosedError(self, a.run_id, a.status);
    }
    if (a.budget) out.push({ runId: a.run_id, of: "ancestor", budget: a.budget, others: others(a.run_id) });
    at = a.parent_run_id;
  }
  return out;
}

function add(a: Spend, b: Spend): Spend {
  return {
    tokens: a.tokens + b.tokens,
    modelCalls: a.modelCalls + b.modelCalls,
    toolCalls: a.toolCalls + b.toolCalls,
  };
}

function minus(a: Spend, b: Spend): Spend {
  return {
    tokens: Math.max(0, a.tokens - b.tokens),
    modelCalls: Math.max(0, a.modelCalls - b.modelCalls),
    toolCalls: Math.max(0, a.toolCalls - b.toolCalls),
  };
}

/**
 * Closes (or blocks) the run `state` holds: with `FINISH_RUN` for a run in no
 * family (and for any run it blocks), or, for a family member it closes, with
 * the statement that also wakes its waiting parent and cancels its open
 * descendants (store/family.ts). Returns
 * the status written; throws `FencedError` when refused.
 */
export async function closeRun(
  deps: Pick<RunDeps, "store" | "clock" | "log">,
  state: Pick<RunState, "fence" | "family">,
  end: { status: "done" | "failed" | "blocked" | "cancelled"; error: string | null; output?: string | null },
): Promise<void> {
  const { store, clock } = deps;
  const output = end.output ?? null;
  // A blocked run is not closed: it waits for a person, and its family with it.
  if (!state.family || end.status === "blocked") {
    await store.writes.finishRun(state.fence, end.status, end.error, clock.now(), output);
    return;
  }
  const done = await store.families.finish(
    state.fence,
    {
      status: end.status,
      error: end.error,
      output,
      orphaned: `cancelled with run ${state.fence.runId}, which ended ${end.status}`,
    },
    clock.now(),
    (f, what) => store.writes.refusal(f, what),
  );
  if (done.woken || done.cancelled.length > 0) {
    deps.log.info("family-closed", {
      run: state.fence.runId,
      status: end.status,
      parent_woken: done.woken || undefined,
      cancelled: done.cancelled.length > 0 ? done.cancelled.join(",") : undefined,
    });
  }
}
