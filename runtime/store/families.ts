/**
 * Runs that call runs (agent_tool.ts): a run's tool call starts a child run,
 * which answers that call when it ends. This file holds the statements of a
 * family of runs: a child created under its parent's fence, a family's spend
 * read for the budget, a family member closed (waking the parent that waits
 * on it and cancelling the descendants it leaves behind), and a run's
 * children listed for the operators.
 *
 * The rows: a child names its parent (`parent_run_id`), the call it answers
 * (`parent_key`), and its family's first run (`root_run_id`, set on every run
 * of a family: on the root too once it has a child). A run with no family has
 * all three null, and nothing here runs for it.
 *
 * Lock order. Every statement that locks rows of one family locks an ancestor
 * before a descendant, and a run's row before its calls' rows, as the fenced
 * writes (FENCE: the run's row, then the call's), WAIT_RUN (the run's row,
 * then its waiting calls) and SETTLE_CALL do: so on PostgreSQL two of them
 * wait for each other instead of deadlocking. Where a statement must judge by
 * a row another transaction may have changed since its snapshot, it judges by
 * what a locking read returned (the latest row), as the comment at
 * REQUEST_APPROVAL in run_writes.ts explains.
 *
 * @module
 */

import type { SqlClient } from "./driver.ts";
import { readRun } from "./reads.ts";
import type { Fence, RunRow, RunStatus } from "./rows.ts";
import { FencedError } from "../base/errors.ts";
import { jsonParam, OPEN_STATUSES, queryRows, RUNNING_AT, statement, textParam, ts } from "./sql.ts";
import type { Budget } from "../base/values.ts";
import type { Json } from "../base/values.ts";

/** The deepest a family goes, as the cascades count it: a run id of 64 characters holds at most 32 levels. */
export const FAMILY_DEPTH_MAX = 32;

/**
 * The closing of the run `run` (a CTE of the statement that closes it, which
 * refers to `parent`, so the parent's row is locked first) and what follows
 * from it in one family, as CTEs of one statement:
 *
 * - `me`, `parent`: the closed run's parent (read from its row; those columns
 *   never change), locked before the run itself;
 * - `call`, `called`: the parent's call the run answers is marked due now
 *   (`check_at`), whether it waits or is being asked right now (`intent`: the
 *   answer then follows the remote's accepted one, see EFFECT_WAITING);
 * - `woken`: a parent waiting on a timer is woken now;
 * - `tree`, `doomed`, `cancelled`: the run's open descendants are cancelled,
 *   locked in depth order (an ancestor before a descendant) first.
 *
 * `$now` and `$reason` name the parameters of the time and of the error the
 * descendants are cancelled with.
 */
function closeInFamily(closeRun: string, p: { run: string; now: string; reason: string }): string {
  const now = `${p.now}::timestamptz`;
  return `with recursive me as (
         select parent_run_id, parent_key from runs where run_id = ${p.run}),
       parent as (
         select run_id, status, wake_at from runs where run_id = (select parent_run_id from me)
            for no key update),
       r as (${closeRun}),
       call as (
         select status from side_effects
          where idempotency_key = (select parent_key from me) and exists (select 1 from r)
            for no key update),
       called as (
         update side_effects set check_at = ${now}
          where idempotency_key = (select parent_key from me) and (select status from call) in ('intent', 'waiting')
         returning 1),
       woken as (
         update runs set wake_at = ${now}
          where run_id = (select run_id from parent) and exists (select 1 from r)
            and (select status from parent) = 'waiting' and (select wake_at from parent) > ${now}
         returning 1),
       ${cascade({ from: p.run, when: "exists (select 1 from r)", now: p.now, reason: p.reason })}`;
}

/**
 * The CTEs `tree`, `doomed` and `cancelled` that cancel the open descendants
 * of the run `from` when `when` holds: found through `parent_run_id` (bounded
 * by {@link FAMILY_DEPTH_MAX}), locked in depth order, then closed.
 */
function cascade(p: { from: string; when: string; now: string; reason: string }): string {
  return `tree (run_id, depth) as (
         select run_id, 1 from runs where parent_run_id = ${p.from} and ${p.when}
         union all
         select c.run_id, t.depth + 1 from runs c join tree t on c.parent_run_id = t.run_id
          where t.depth < ${FAMILY_DEPTH_MAX}),
       doomed as (
         select x.run_id from runs x join tree t on t.run_id = x.run_id
          where x.status in ${OPEN_STATUSES}
          order by t.depth, x.run_id
            for no key update of x),
       cancelled as (
         update runs set status = 'cancelled', error = ${p.reason}, updated_at = ${p.now}::timestamptz,
                wake_at = null
          where run_id in (select run_id from doomed)
         returning run_id)`;
}

const CANCELLED_LIST = `coalesce((select array_agg(run_id order by run_id) from cancelled), '{}'::text[])`;

// A child run created under its parent's fence ($1 parent, $2 its epoch): the parent must be running
// under this worker, so a cancelled (or taken over) parent starts nothing. The parent's row is locked
// as the child is inserted (a cancel of the parent waits, then finds the child: see Operators.cancelRun),
// and a root gets its own id as root_run_id with its first child. A child carries its parent's labels
// (a tenant's child run is the tenant's).
// $3 child id, $4 agent, $5 goal, $6 input, $7 now, $8 budget, $9 the parent's call key.
const CREATE_CHILD = statement(
  "create-child-run",
  `with parent as (
         select coalesce(root_run_id, run_id) as root, labels, dry_run from runs where run_id = $1 and ${
    RUNNING_AT("$2")
  }
            for no key update),
       -- A dry run's child is one too, a fork (at step 0) of $10, the original's child of the same call, if any.
       original as (select o.run_id from runs o where o.run_id = $10),
       created as (
         insert into runs (run_id, agent, goal, input, budget, status, epoch, created_at, updated_at,
                           parent_run_id, parent_key, root_run_id, labels, dry_run, forked_from, forked_at_seq)
         select $3, $4, $5, $6::text::jsonb, $8::text::jsonb, 'pending', 0, $7::timestamptz, $7::timestamptz,
                $1, $9, parent.root, parent.labels, parent.dry_run,
                case when parent.dry_run then (select run_id from original) end,
                case when parent.dry_run and exists (select 1 from original) then 0 end
           from parent
         on conflict (run_id) do nothing
         returning 1),
       rooted as (
         update runs set root_run_id = $1
          where run_id = $1 and (select root from parent) = $1 and exists (select 1 from created)
         returning 1)
       select exists (select 1 from parent) as held, exists (select 1 from created) as created`,
);

// Every run of the family rooted at $1 with what it has spent, as the budget counts it (budget.ts
// spendOf): through the root index, one row per run.
const READ_FAMILY = statement(
  "read-family",
  `select r.run_id, r.parent_run_id, r.status, r.budget,
              coalesce((select sum(j.spent_tokens + j.reserved_tokens) from journal j where j.run_id = r.run_id), 0)::float8
                as tokens,
              coalesce((select sum(j.llm_attempts) from journal j where j.run_id = r.run_id), 0)::int as model_calls,
              coalesce((select sum(e.attempts) from side_effects e where e.run_id = r.run_id), 0)::int as tool_calls
         from runs r where r.root_run_id = $1
        order by r.run_id`,
);

// A family member closed by the worker holding it ($1 run, $2 epoch, $3 status, $4 error, $5 now,
// $6 output, $7 the error its open descendants are cancelled with): FINISH_RUN (run_writes.ts) and
// what follows from it in the family (closeInFamily). `(select count(*) from parent) <= 1` always
// holds: it makes the close refer to the parent, so the parent's row is locked first.
const FINISH_IN_FAMILY = statement(
  "finish-family-run",
  `${
    closeInFamily(
      `update runs set status = $3, error = $4, updated_at = $5::timestamptz, output = $6
        where run_id = $1 and ${RUNNING_AT("$2")} and (select count(*) from parent) <= 1
       returning run_id`,
      { run: "$1", now: "$5", reason: "$7" },
    )
  }
       select (select count(*) from r)::int as written, exists (select 1 from woken) as woken,
              ${CANCELLED_LIST} as cancelled`,
);

// An operator's cancel ($1 run, $2 its error, $3 now, $4 the error of its descendants): the run, its
// open descendants, and a wake for the parent that waits on it (closeInFamily). The same for a run
// with no family: its parent and descendants are none.
const CANCEL_RUN = statement(
  "cancel-run",
  `${
    closeInFamily(
      `update runs set status = 'cancelled', error = $2, updated_at = $3::timestamptz, wake_at = null
        where run_id = $1 and status in ${OPEN_STATUSES} and (select count(*) from parent) <= 1
       returning *`,
      { run: "$1", now: "$3", reason: "$4" },
    )
  }
       select r.*, ${CANCELLED_LIST} as cancelled from r`,
);

// The open descendants of the cancelled run $1 ($2 their error, $3 now). Run after CANCEL_RUN: a child
// whose creation committed after that statement's snapshot was taken (its insert held the parent's
// row, which the cancel then waited for) is invisible to it, and visible to this later statement,
// while no child can be created under a parent that is no longer running.
const CANCEL_DESCENDANTS = statement(
  "cancel-descendants",
  `with recursive ${cascade({ from: "$1", when: "true", now: "$3", reason: "$2" })}
       select ${CANCELLED_LIST} as cancelled`,
);

// A run's children, in the order they were started.
const LIST_CHILDREN = statement(
  "list-children",
  `select run_id, agent, status, parent_key, error, created_at, updated_at from runs
        where parent_run_id = $1 order by created_at, run_id`,
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const FAMILY_STATEMENTS = [
  CREATE_CHILD,
  READ_FAMILY,
  FINISH_IN_FAMILY,
  CANCEL_RUN,
  CANCEL_DESCENDANTS,
  LIST_CHILDREN,
] as const;

/** A child run to create, for the tool call `parentKey` of the run this worker holds. */
export interface NewChildRun {
  /** Its id (agent_tool.ts derives it from the call's key). */
  runId: string;
  /** The agent that drives it. */
  agent: string;
  /** The text its model is given. */
  goal: string;
  /** The input as given. */
  input: Json;
  /** Ceilings on its own spend. */
  budget?: Budget;
  /** The idempotency key of the call it answers. */
  parentKey: string;
  /**
   * For a dry run's child: the original run's child of the same call, which
   * this one is a fork of (at step 0) when it exists.
   */
  originalChild?: string;
}

/** One run of a family, with what it has spent (what the budget counts). */
export interface FamilyMember {
  /** The run. */
  run_id: string;
  /** Its parent; null for the root. */
  parent_run_id: string | null;
  /** Where it stands. */
  status: RunStatus;
  /** Its own ceilings. */
  budget: Budget | null;
  /** Tokens spent or reserved. */
  tokens: number;
  /** Model requests made. */
  model_calls: number;
  /** Tool requests made. */
  tool_calls: number;
}

/** A run's child, as the operators are shown it. */
export type ChildRow = Pick<
  RunRow,
  "run_id" | "agent" | "status" | "parent_key" | "error" | "created_at" | "updated_at"
>;

/** The statements of families of runs. */
export class Families {
  readonly #client: SqlClient;

  /** Sends its statements through `client`. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /**
   * Creates the child run `child` of the run this worker holds (fenced on
   * `parent`) unless a run with its id exists, and returns the run under that
   * id as it is now, with whether this statement created it: a re-sent call
   * finds the child it started. The caller checks that the run found is that
   * call's child ({@link RunRow.parent_key}). Throws {@link FencedError} when
   * the parent is no longer running under this worker.
   */
  async createChild(
    parent: Fence,
    child: NewChildRun,
    now: Date,
  ): Promise<{ run: RunRow; created: boolean }> {
    const [seen] = await queryRows<{ held: boolean; created: boolean }>(this.#client, CREATE_CHILD, [
      parent.runId,
      parent.epoch,
      child.runId,
      child.agent,
      textParam(child.goal),
      jsonParam(child.input, "child run input"),
      ts(now),
      jsonParam(child.budget ?? null, "child run budget"),
      child.parentKey,
      child.originalChild ?? null,
    ]);
    if (!seen?.held) {
      const run = await readRun(this.#client, parent.runId);
      throw new FencedError(
        run && run.epoch === parent.epoch ? "RUN_CLOSED" : "FENCED",
        `Child run ${child.runId} not started: run ${parent.runId} is ${
          run ? `${run.status} at epoch ${run.epoch}` : "gone"
        }, and this worker holds epoch ${parent.epoch}`,
      );
    }
    const run = await readRun(this.#client, child.runId);
    if (!run) throw new RangeError(`Child run ${child.runId} was neither created nor found`);
    return { run, created: seen.created };
  }

  /** Every run of the family rooted at `rootRunId`, with what each has spent, by run id. */
  async readFamily(rootRunId: string): Promise<FamilyMember[]> {
    return await queryRows<FamilyMember>(this.#client, READ_FAMILY, [rootRunId]);
  }

  /**
   * Closes (or blocks) a run of a family that this worker holds, as
   * `RunWrites.finishRun` closes any run, and in the same statement: marks
   * the parent's call it answers due now and wakes that parent if it waits
   * on a timer, and cancels the run's open descendants with `orphaned` as
   * their error. Returns whether the parent was woken and the runs
   * cancelled; throws {@link FencedError} (through `refusal`) when refused.
   */
  async finish(
    f: Fence,
    end: {
      status: "done" | "failed" | "blocked" | "cancelled";
      error: string | null;
      output: string | null;
      orphaned: string;
    },
    now: Date,
    refusal: (f: Fence, what: string) => Promise<FencedError>,
  ): Promise<{ woken: boolean; cancelled: string[] }> {
    const [row] = await queryRows<{ written: number; woken: boolean; cancelled: string[] }>(
      this.#client,
      FINISH_IN_FAMILY,
      [f.runId, f.epoch, end.status, textParam(end.error), ts(now), textParam(end.output), end.orphaned],
    );
    if (!row || row.written === 0) throw await refusal(f, `finish ${end.status}`);
    return { woken: row.woken, cancelled: row.cancelled };
  }

  /**
   * Cancels a run that is not closed yet, with its open descendants, and
   * wakes the parent that waits on it: two statements, the second catching a
   * child whose creation the first could not see (see CANCEL_DESCENDANTS).
   * Returns the run as it is now and the descendants cancelled, or undefined
   * when it was already closed or missing.
   */
  async cancel(
    runId: string,
    reason: string,
    now: Date,
  ): Promise<{ run: RunRow; cancelled: string[] } | undefined> {
    // Texts as stored (a NUL written out, a lone surrogate as U+FFFD): a person's reason may hold either.
    const orphaned = textParam(`cancelled with ${runId}: ${reason}`);
    const [row] = await queryRows<RunRow & { cancelled: string[] }>(this.#client, CANCEL_RUN, [
      runId,
      textParam(reason),
      ts(now),
      orphaned,
    ]);
    if (!row) return undefined;
    const { cancelled, ...run } = row;
    const [late] = await queryRows<{ cancelled: string[] }>(this.#client, CANCEL_DESCENDANTS, [
      runId,
      orphaned,
      ts(now),
    ]);
    return { run: run as RunRow, cancelled: [...cancelled, ...(late?.cancelled ?? [])].sort() };
  }

  /** The children of `runId`, in the order they were started. */
  async children(runId: string): Promise<ChildRow[]> {
    return await queryRows<ChildRow>(this.#client, LIST_CHILDREN, [runId]);
  }
}
