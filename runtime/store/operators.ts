/**
 * The operators' reads and commands: the runs list, a person's answer to an
 * approval request, settling flagged tool calls (one, or many at once),
 * settling a call that waits on its remote from outside, cancelling and
 * reopening a run, and retention (prune). None of these is
 * fenced on an epoch: a person acts on a run whoever holds it, and every
 * worker's write is fenced against what they change.
 *
 * @module
 */

import type { SqlClient } from "./driver.ts";
import {
  type ApprovalAnswer,
  type ApprovalRow,
  type CallSettlement,
  type EffectResolution,
  type FlaggedFilter,
  type PrunedRows,
  RUN_ROW_TABLES,
  type RunFilter,
  type RunRow,
  type RunStatus,
  type RunSummary,
  type SettledCall,
  type SideEffectRow,
} from "./rows.ts";
import { jsonParam, OPEN_STATUSES, queryRows, statement, textParam, ts } from "./sql.ts";

// How a person's resolution rewrites a flagged call, for one call or many:
// $2 the action, $3 the result (JSON text), $4 the error, $5 who, $6 when.
const RESOLVE_SET =
  `set status = case $2 when 'result' then 'confirmed' when 'retry' then 'intent' else 'failed' end,
                result = case when $2 = 'result' then $3::text::jsonb else s.result end,
                remote = case when $2 = 'result' then 'resolved' else s.remote end,
                error = case $2 when 'fail' then $4 when 'retry' then null else s.error end,
                confirmed_at = case when $2 = 'retry' then null else $6::timestamptz end,
                resolved_by = $5, resolved_at = $6::timestamptz`;
// A blocked run released to the next worker once none of its calls is flagged ($6 when).
const UNBLOCK =
  `update runs set status = 'pending', error = null, heartbeat_at = null, updated_at = $6::timestamptz`;
// A flagged call `s` of a blocked run, of the tool and the run in the parameters named, when they
// are given. The run row is locked: a cancel waits for the resolve (or the resolve sees the run
// cancelled and leaves its call alone).
const flaggedMatch = (tool: string, run: string) =>
  `s.status = 'flagged' and (${tool}::text is null or s.tool = ${tool})
            and (${run}::text is null or s.run_id = ${run})
            and exists (select 1 from runs r where r.run_id = s.run_id and r.status = 'blocked' for update)`;
const FLAGGED_CALLS = statement(
  "flagged-calls",
  `select s.*, (count(*) over ())::int as total from side_effects s
        where ${flaggedMatch("$1", "$2")} order by s.idempotency_key limit $3`,
  { planEachTime: true },
);

// $1 the call's key; the resolution in $2 to $6.
const RESOLVE_ONE = statement(
  "resolve-one",
  `with e as (
         update side_effects s ${RESOLVE_SET}
          where s.idempotency_key = $1 and s.status = 'flagged'
            and exists (select 1 from runs r where r.run_id = s.run_id and r.status = 'blocked' for update)
          returning s.*
       ), u as (
         ${UNBLOCK}
          where run_id = (select run_id from e) and status = 'blocked'
            and not exists (select 1 from side_effects x
                             where x.run_id = runs.run_id and x.status = 'flagged' and x.idempotency_key <> $1)
          returning 1
       )
       select e.*, (select count(*) from u)::int as unblocked from e`,
);
/** The most flagged calls one {@link Operators.resolveEffects} settles. */
export const RESOLVE_BATCH_MAX = 1000;

// $1 the count confirmed; the resolution in $2 to $6; the filter in $7 (tool) and $8 (run).
const RESOLVE_MANY = statement(
  "resolve-many",
  `with picked as (
         select s.idempotency_key, s.run_id from side_effects s
          where ${flaggedMatch("$7", "$8")}
          order by s.idempotency_key
          limit ${RESOLVE_BATCH_MAX + 1}
          for update of s
       ), n as (
         select count(*)::int as matched from picked
       ), e as (
         update side_effects s ${RESOLVE_SET}
          where s.idempotency_key in (select idempotency_key from picked)
            and (select matched from n) = $1
          returning s.*
       ), u as (
         ${UNBLOCK}
          where run_id in (select run_id from e) and status = 'blocked'
            and not exists (select 1 from side_effects x
                             where x.run_id = runs.run_id and x.status = 'flagged'
                               and x.idempotency_key not in (select idempotency_key from e))
          returning run_id
       )
       select n.matched, e.*, e.run_id in (select run_id from u) as released
         from n left join e on true
        order by e.idempotency_key`,
  { planEachTime: true },
);

/** The parameters $2 to $6 of {@link RESOLVE_SET}. */
function resolutionParams(r: EffectResolution, by: string, now: Date): unknown[] {
  return [
    r.action,
    jsonParam(r.action === "result" ? r.result : null, "resolved result"),
    r.action === "fail" ? textParam(r.error) : null,
    by,
    ts(now),
  ];
}

// A person's answer to an approval request. With REQUEST_APPROVAL (run_writes.ts: read the comment
// there) the only statement that changes what a waiting run depends on; it locks the run's row
// first, then the request's, as that one does.
const DECIDE_APPROVAL = statement(
  "approval-decide",
  `with target as (
         select run_id from approvals where idempotency_key = $1),
       run as (
         select status from runs where run_id = (select run_id from target) for no key update),
       cur as (
         select * from approvals where idempotency_key = $1 and exists (select 1 from run) for no key update),
       a as (
         update approvals set status = $2, decided_by = $3, reason = $4, decided_at = $5::timestamptz
          where idempotency_key = $1 and (select status from cur) = 'pending'
            and (select status from run) in ${OPEN_STATUSES}
         returning *),
       r as (
         update runs set status = 'pending', heartbeat_at = null, updated_at = $5::timestamptz, wake_at = null
          where run_id = (select run_id from a) and (select status from run) = 'waiting'
         returning 1)
       select x.*, exists (select 1 from a) as decided,
              case when exists (select 1 from r) then 'pending' else (select status from run) end as run_status
         from (select * from a union all select * from cur where not exists (select 1 from a)) x`,
);

// A call waiting on its remote settled from outside ($1 its key; $2 'result' or 'error', $3 the
// result as JSON text, $4 the error, $5 who, $6 when). Like DECIDE_APPROVAL it locks the run's row
// first, then the call's, and judges by what those locking reads return, not by its snapshot:
// a worker's fenced writes lock the run's row too (FENCE), and WAIT_RUN (run_writes.ts) locks it
// and then reads the calls that still wait, so for one call and its run, in either order:
// - settle, then the worker's re-send of the call: the re-send's intent finds the row settled and
//   is refused (STALLED); the worker reads it back and goes on with it.
// - the re-send, then settle: the call is at `intent` (the remote is being asked): refused, try again.
// - settle, then WAIT_RUN: no call of the run waits (if this was its last), so the run is not let
//   go; the worker goes on.
// - WAIT_RUN, then settle: the run waits on a timer; settle moves its wake time to now.
// A run waiting only for a person (no wake time) is left waiting: the answer wakes it.
const SETTLE_CALL = statement(
  "settle-call",
  `with target as (
         select run_id from side_effects where idempotency_key = $1),
       run as (
         select status, wake_at from runs where run_id = (select run_id from target) for no key update),
       cur as (
         select * from side_effects where idempotency_key = $1 and exists (select 1 from run) for no key update),
       e as (
         update side_effects
            set status = case when $2 = 'result' then 'confirmed' else 'failed' end,
                result = case when $2 = 'result' then $3::text::jsonb else result end,
                remote = case when $2 = 'result' then 'resolved' end,
                error = case when $2 = 'error' then $4 end,
                confirmed_at = $6::timestamptz, check_at = null, resolved_by = $5, resolved_at = $6::timestamptz
          where idempotency_key = $1 and (select status from cur) = 'waiting'
            and (select status from run) in ${OPEN_STATUSES}
         returning *),
       r as (
         update runs set wake_at = $6::timestamptz
          where run_id = (select run_id from e) and (select status from run) = 'waiting'
            and (select wake_at from run) > $6::timestamptz
         returning 1)
       select x.*, exists (select 1 from e) as settled, (select status from run) as run_status,
              exists (select 1 from r) as woken
         from (select * from e union all select * from cur where not exists (select 1 from e)) x`,
);

const PRUNED_FROM = Object.entries(RUN_ROW_TABLES) as [keyof typeof RUN_ROW_TABLES, keyof PrunedRows][];
// A run of a family is pruned with its root, never before it: only roots are picked (a run with no
// family is its own root), each once every run of its family is finished and old enough.
const PRUNE_PICK = `select run_id from runs p
                     where status in ('done', 'failed', 'cancelled') and updated_at < $1::timestamptz
                       and parent_run_id is null
                       and not exists (select 1 from runs d where d.root_run_id = p.run_id and d.run_id <> p.run_id
                                         and (d.status not in ('done', 'failed', 'cancelled')
                                              or d.updated_at >= $1::timestamptz))
                     order by updated_at, run_id limit $2`;
// The runs picked and every run of their families.
const PRUNE_FAMILIES = (picked: string) =>
  `select run_id from ${picked}
    union select d.run_id from runs d where d.root_run_id in (select run_id from ${picked})`;
/** What {@link Operators.pruneRuns} would delete: the runs it picks, and their rows in each table. */
const PRUNE_DRY_RUN = statement(
  "prune-dry-run",
  `select p.run_id, ${
    PRUNED_FROM.map(([t, as]) => `(select count(*) from ${t} x where x.run_id = p.run_id)::int as ${as}`)
      .join(
        ", ",
      )
  } from (${PRUNE_FAMILIES(`(${PRUNE_PICK}) picked`)}) p order by p.run_id`,
);
/**
 * The delete of {@link Operators.pruneRuns}. The run is re-checked as it is
 * deleted (`for update`): one reopened in the meantime is no longer finished
 * and stays. Its rows in every table that references runs go in the same
 * statement, so no foreign key refuses the batch.
 */
const PRUNE = statement(
  "prune",
  `with picked as materialized (${PRUNE_PICK} for update skip locked),
  family as materialized (${PRUNE_FAMILIES("picked")}),
  ${
    PRUNED_FROM.map(([t, as]) =>
      `d_${as} as (delete from ${t} where run_id in (select run_id from family) returning run_id)`
    ).join(",\n  ")
  },
  r as (delete from runs where run_id in (select run_id from family) returning run_id)
select r.run_id, ${
    PRUNED_FROM.map(([, as]) => `(select count(*) from d_${as} d where d.run_id = r.run_id)::int as ${as}`)
      .join(", ")
  } from r order by r.run_id`,
);

// The runs list's filter, $1 status, $2 agent, $3 text in the run id: one page of runs first, then
// counts for those runs only (not the whole table).
const LIST_WHERE = `($1::text is null or r.status = $1) and ($2::text is null or r.agent = $2)
                   and ($3::text is null or strpos(r.run_id, $3) > 0)`;
const LIST_RUNS = statement(
  "list-runs",
  `with page as (select * from runs r where ${LIST_WHERE}
                       order by r.created_at desc, r.run_id desc limit $4 offset $5)
       select r.*, coalesce(j.tool_calls, 0)::int as tool_calls, coalesce(j.llm_calls, 0)::int as llm_calls,
              coalesce(j.tokens, 0)::float8 as tokens, coalesce(e.tool_requests, 0)::int as tool_requests,
              coalesce(e.flagged, 0)::int as flagged
         from page r
         left join (select run_id,
                           coalesce(sum(case when status <> 'confirmed' then 0 when decision ? 'tool' then 1
                                             when decision ? 'calls' then jsonb_array_length(decision->'calls')
                                             else 0 end), 0)::int as tool_calls,
                           sum(llm_attempts)::int as llm_calls,
                           -- What the budget counts (budget.ts rowTokens): the columns, not usage.
                           sum(spent_tokens + reserved_tokens)::float8 as tokens
                      from journal where run_id in (select run_id from page) group by run_id) j on j.run_id = r.run_id
         left join (select run_id, (count(*) filter (where status = 'flagged'))::int as flagged,
                           sum(attempts)::int as tool_requests
                      from side_effects where run_id in (select run_id from page) group by run_id) e
                on e.run_id = r.run_id
        order by r.created_at desc, r.run_id desc`,
);
const COUNT_RUNS = statement("count-runs", `select count(*)::int as n from runs r where ${LIST_WHERE}`);
// A cancel is a family's statement (families.ts CANCEL_RUN): it cancels the run's descendants too.
const REOPEN_RUN = statement(
  "reopen-run",
  `with r as (
         update runs set status = 'pending', error = null, heartbeat_at = null, updated_at = $2::timestamptz,
                stuck_claims = 0, wake_at = null
          where run_id = $1 and status in ('failed', 'cancelled')
          returning *
       ), e as (
         update side_effects set attempts_at_reopen = attempts, failing_since = null, check_at = null
          where run_id = (select run_id from r) and status = 'intent'
          returning 1
       ), j as (
         update journal set failing_since = null
          where run_id = (select run_id from r) and status = 'intent'
          returning 1
       )
       select * from r`,
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const OPERATOR_STATEMENTS = [
  LIST_RUNS,
  COUNT_RUNS,
  DECIDE_APPROVAL,
  FLAGGED_CALLS,
  RESOLVE_ONE,
  RESOLVE_MANY,
  REOPEN_RUN,
  PRUNE_DRY_RUN,
  PRUNE,
  SETTLE_CALL,
] as const;

/** What operators read and do: list runs, answer approvals, settle flagged calls, cancel, reopen, prune. */
export class Operators {
  readonly #client: SqlClient;

  /** Reads and writes through `client`. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /**
   * Runs, newest first, one page at a time, with their step, model-call and
   * flagged-call counts and the number of runs matching the filter.
   */
  async listRuns(filter: RunFilter = {}): Promise<{ runs: RunSummary[]; total: number }> {
    const limit = filter.limit ?? 50;
    const offset = filter.offset ?? 0;
    const params = [filter.status ?? null, filter.agent ?? null, filter.search ?? null, limit, offset];
    const runs = await queryRows<RunSummary>(this.#client, LIST_RUNS, params);
    const count = await queryRows<{ n: number }>(this.#client, COUNT_RUNS, params.slice(0, 3));
    return { runs, total: count[0]?.n ?? 0 };
  }

  /**
   * A person answers a pending approval request: approved or denied (with a
   * reason), recording who and when, while its run is open (pending,
   * running, waiting or blocked); in the same statement a waiting run goes
   * back to `pending`, so a worker takes it up at once. A request of a closed
   * run (cancelled, done, failed) is left pending: nobody may approve a call
   * for a run that is not going on, so a reopen never sends a call that was
   * approved while its run was closed. Returns the request as it stands after
   * the statement (undefined when there is none), whether this statement
   * answered it, and the run's status after it. See the comment at
   * REQUEST_APPROVAL in run_writes.ts.
   */
  async decideApproval(
    key: string,
    decision: "approved" | "denied",
    by: string,
    reason: string | null,
    now: Date,
  ): Promise<ApprovalAnswer> {
    const rows = await queryRows<ApprovalRow & { decided: boolean; run_status: RunStatus }>(
      this.#client,
      DECIDE_APPROVAL,
      [key, decision, by, textParam(reason), ts(now)],
    );
    const row = rows[0];
    if (!row) return { approval: undefined, decided: false, runStatus: undefined };
    const { decided, run_status, ...approval } = row;
    return { approval, decided, runStatus: run_status };
  }

  /**
   * A human settles a `flagged` call of a `blocked` run: `result` confirms it
   * with `remote = 'resolved'`, `retry` puts it back at `intent` (a worker
   * re-sends it), `fail` marks it failed. Records who and when, and in the
   * same statement sets the run back to `pending` (lease cleared) once no
   * flagged call is left. Returns undefined when the call is not flagged or
   * its run is not blocked.
   */
  async resolveEffect(
    key: string,
    resolution: EffectResolution,
    by: string,
    now: Date,
  ): Promise<{ effect: SideEffectRow; unblocked: boolean } | undefined> {
    const rows = await queryRows<SideEffectRow & { unblocked: number }>(this.#client, RESOLVE_ONE, [
      key,
      ...resolutionParams(resolution, by, now),
    ]);
    const row = rows[0];
    if (!row) return undefined;
    const { unblocked, ...effect } = row;
    return { effect: effect as SideEffectRow, unblocked: unblocked > 0 };
  }

  /**
   * The flagged calls of blocked runs matching `filter` (every field given),
   * by key, at most `limit`, with how many match in all: what
   * {@link Operators.resolveEffects} would settle.
   */
  async flaggedCalls(
    filter: FlaggedFilter,
    limit: number,
  ): Promise<{ calls: SideEffectRow[]; total: number }> {
    const rows = await queryRows<SideEffectRow & { total: number }>(this.#client, FLAGGED_CALLS, [
      filter.tool ?? null,
      filter.runId ?? null,
      limit,
    ]);
    return { calls: rows.map(({ total: _, ...call }) => call as SideEffectRow), total: rows[0]?.total ?? 0 };
  }

  /**
   * {@link Operators.resolveEffect} for every flagged call of a blocked run that
   * matches `filter`, in one statement, only when exactly `expect` of them
   * match as it runs (at most {@link RESOLVE_BATCH_MAX}): the count a person
   * confirmed after checking the remote, so a call flagged since is not
   * settled unchecked. Each is recorded with who and when, and each run left
   * with no flagged call goes back to `pending`. Returns how many matched
   * and, when that was `expect`, the calls as settled and the runs released.
   */
  async resolveEffects(
    filter: FlaggedFilter,
    resolution: EffectResolution,
    opts: { by: string; now: Date; expect: number },
  ): Promise<{ matched: number; effects: SideEffectRow[]; unblocked: string[] }> {
    const rows = await queryRows<Partial<SideEffectRow> & { matched: number; released: boolean | null }>(
      this.#client,
      RESOLVE_MANY,
      [
        opts.expect,
        ...resolutionParams(resolution, opts.by, opts.now),
        filter.tool ?? null,
        filter.runId ?? null,
      ],
    );
    const matched = rows[0]?.matched ?? 0;
    const settled = rows.filter((r) => r.idempotency_key !== null && r.idempotency_key !== undefined);
    return {
      matched,
      effects: settled.map(({ matched: _, released: __, ...effect }) => effect as SideEffectRow),
      unblocked: [...new Set(settled.filter((r) => r.released).map((r) => r.run_id!))],
    };
  }

  /**
   * Settles from outside a call whose remote accepted the work and has not
   * finished it (`waiting`): a webhook or a person reports how the job ended.
   * `{ result }` confirms it with `remote = 'resolved'`, `{ error }` fails it;
   * either records who and when. Its run must be open (pending, running,
   * waiting or blocked): a closed run's calls are not answered. In the same
   * statement a run waiting on a timer is woken (its wake time set to `now`),
   * so a worker takes it at its next look; a run waiting only for a person is
   * left waiting. Returns the call as it stands after the statement (undefined
   * when there is none), whether this statement settled it, its run's status,
   * and whether the run was woken. See the comment at SETTLE_CALL.
   */
  async settleCall(key: string, settlement: CallSettlement, by: string, now: Date): Promise<SettledCall> {
    const isResult = "result" in settlement;
    const rows = await queryRows<SideEffectRow & { settled: boolean; run_status: RunStatus; woken: boolean }>(
      this.#client,
      SETTLE_CALL,
      [
        key,
        isResult ? "result" : "error",
        jsonParam(isResult ? settlement.result : null, "settled result"),
        isResult ? null : textParam(settlement.error),
        by,
        ts(now),
      ],
    );
    const row = rows[0];
    if (!row) return { effect: undefined, settled: false, runStatus: undefined, woken: false };
    const { settled, run_status, woken, ...effect } = row;
    return { effect: effect as SideEffectRow, settled, runStatus: run_status, woken };
  }

  /**
   * Reopens a `failed` or `cancelled` run as `pending` (error and lease
   * cleared) so a worker resumes it where it stopped: its history is kept,
   * a call left at `intent` is re-sent under its key, an undecided step is
   * decided. A person's go-ahead: the count of claims without progress
   * starts again, and in the same statement each call left at `intent`
   * records its `attempts` (`attempts_at_reopen`), allowing one request past
   * the tool's `maxAttempts`. Returns the run as it is now, or undefined when
   * it was not failed or cancelled.
   */
  async reopenRun(runId: string, now: Date): Promise<RunRow | undefined> {
    return (await queryRows<RunRow>(this.#client, REOPEN_RUN, [runId, ts(now)]))[0];
  }

  /**
   * Retention: deletes up to `limit` finished runs (done, failed, cancelled)
   * last changed before `before`, with every row of theirs (each table of
   * {@link RUN_ROW_TABLES}), in one statement; never an open run. Returns the
   * runs deleted and the rows removed with them. With `dryRun` it deletes
   * nothing and reports what it would delete.
   */
  async pruneRuns(
    before: Date,
    limit: number,
    dryRun = false,
  ): Promise<{ runs: string[] } & PrunedRows> {
    const rows = await queryRows<{ run_id: string } & PrunedRows>(
      this.#client,
      dryRun ? PRUNE_DRY_RUN : PRUNE,
      [ts(before), limit],
    );
    const out = { runs: rows.map((r) => r.run_id) } as { runs: string[] } & PrunedRows;
    for (const [, as] of PRUNED_FROM) out[as] = rows.reduce((n, r) => n + r[as], 0);
    return out;
  }
}
