/**
 * Every SQL statement the runtime runs, in one place, the same text on both
 * drivers (PGlite and postgres.js). Each write to run state is one statement
 * with the fence inside its own `where` clause: the row is written only while
 * the run is still `running` under the writer's epoch. The fence takes a
 * `for share` lock on the run row, so a concurrent claim (which updates that
 * row) and a fenced write are serialised: a write either commits before the
 * claim or sees the new epoch and writes nothing.
 *
 * @module
 */

import SCHEMA_SQL from "../../schema.sql" with { type: "text" };
import { isoTimestamp } from "../clock.ts";
import type { PlantedDefects } from "../defects.ts";
import { FencedError, StoreError } from "../errors.ts";
import { type Budget, MAX_ROW_TOKENS } from "../budget_types.ts";
import {
  assertNotNewer,
  migrate,
  type MigrationResult,
  readVersion,
  SCHEMA_VERSION,
  targetSchema,
} from "./migrate.ts";
import type { Json } from "../tools.ts";
import { storableJson } from "./storable.ts";
import type { QueryOptions, SqlClient } from "./sql_client.ts";
import {
  type ApprovalStatus,
  type EffectStatus,
  type JournalStatus,
  OPEN_RUN_STATUSES,
  type RemoteOutcome,
  type RunStatus,
} from "./statuses.ts";

export { SCHEMA_SQL };
export type { QueryOptions, SqlClient };
// The statuses are declared in statuses.ts; every import of them from here keeps working.
export * from "./statuses.ts";

/**
 * The tables whose rows belong to a run (each has a foreign key to `runs`),
 * with the name under which {@link Store.pruneRuns} counts what it deleted
 * from each. A table added to schema.sql with a key to runs belongs here, or
 * prune could delete no run that has such a row (tests/prune_pg_test.ts compares
 * this list with the foreign keys in the catalog).
 */
export const RUN_ROW_TABLES = {
  journal: "journal",
  side_effects: "effects",
  approvals: "approvals",
} as const;

/** Rows deleted (or that would be) with pruned runs, per table of {@link RUN_ROW_TABLES}. */
export type PrunedRows = { -readonly [T in keyof typeof RUN_ROW_TABLES as typeof RUN_ROW_TABLES[T]]: number };

/** A row of `runs`. */
export interface RunRow {
  /** The run. */
  run_id: string;
  /** The agent whose tools and model drive it. */
  agent: string;
  /** What the model is told to do: the input text, or the input as JSON text. */
  goal: string;
  /** The input as given. */
  input: Json | null;
  /** The model's final answer, once the run is done. */
  output: string | null;
  /** Where the row stands. */
  status: RunStatus;
  /** The fencing epoch of the claim that last wrote it. */
  epoch: number;
  /** The worker that claimed it last. */
  owner: string | null;
  /** The lease: when the owner last proved it is alive. */
  heartbeat_at: Date | null;
  /** Why it failed, was flagged or was blocked. */
  error: string | null;
  /** When it was created. */
  created_at: Date;
  /** When its status last changed. */
  updated_at: Date;
  /** Claims in a row (this one included) that found no progress since the claim before. */
  stuck_claims: number;
  /** Confirmed decisions plus settled tool calls at the last claim. */
  progress_mark: number;
  /** The run's ceilings, if any. */
  budget: Budget | null;
}

/** A decision: a tool call, or done. */
export type Decision =
  | { tool: string; args: Json }
  | { done: true; message: string };

/** An answer the runtime refused, kept so a re-ask (and a restart) can tell the model why. */
export interface Rejection {
  /** Why, as a stable code such as `UNKNOWN_TOOL`. */
  code: string;
  /** Why, in words the model can act on. */
  message: string;
}

/** A row of `journal`. */
export interface JournalRow {
  /** The run. */
  run_id: string;
  /** The step number, from 0. */
  seq: number;
  /** Where the row stands. */
  status: JournalStatus;
  /** The committed decision, once confirmed. */
  decision: Decision | null;
  /** Model requests paid for this step. */
  llm_attempts: number;
  /** Token usage the model reported for the deciding answer. */
  usage: Json | null;
  /** Answers refused for this step. */
  rejections: Rejection[];
  /** The fencing epoch of the claim that last wrote it. */
  epoch: number;
  /** When the (last) intent was written. */
  intent_at: Date;
  /** When the outcome was written. */
  confirmed_at: Date | null;
  /** Tokens reserved by requests of this step whose answers are not settled. */
  reserved_tokens: number;
  /** Tokens this step's settled answers count against the budget (budget.ts `answerTokens`). */
  spent_tokens: number;
}

/** A row of `side_effects`. */
export interface SideEffectRow {
  /** `<run_id>:<seq>`. */
  idempotency_key: string;
  /** The run. */
  run_id: string;
  /** The step number, from 0. */
  seq: number;
  /** The tool called. */
  tool: string;
  /** The arguments as decided. */
  args: Json;
  /** Where the row stands. */
  status: EffectStatus;
  /** What the remote answered. */
  result: Json | null;
  /**
   * `created`, `already_done`, `reconciled` (the tool's `reconcile` found
   * that it had happened), or `resolved` by a human.
   */
  remote: RemoteOutcome | null;
  /** Why it failed, was flagged or was blocked. */
  error: string | null;
  /** Requests sent (or about to be) under the key. */
  attempts: number;
  /** The fencing epoch of the claim that last wrote it. */
  epoch: number;
  /** When the (last) intent was written. */
  intent_at: Date;
  /** When the outcome was written. */
  confirmed_at: Date | null;
  /** Who resolved a flagged call. */
  resolved_by: string | null;
  /** When a flagged call was resolved. */
  resolved_at: Date | null;
  /**
   * `attempts` when a person last reopened the run with this call at
   * `intent`: while `attempts` still equals it, one request more than the
   * tool's `maxAttempts` is allowed. Null: never reopened so.
   */
  attempts_at_reopen: number | null;
}

/** A row of `approvals`: a person's yes or no to one tool call, bound to its key and exact arguments. */
export interface ApprovalRow {
  /** The call's idempotency key. */
  idempotency_key: string;
  /** The run. */
  run_id: string;
  /** The step. */
  seq: number;
  /** The tool. */
  tool: string;
  /** The arguments asked about. */
  args: Json;
  /** sha-256 of their canonical JSON. */
  args_hash: string;
  /** Where the request stands. */
  status: ApprovalStatus;
  /** Why it was denied. */
  reason: string | null;
  /** When it was asked. */
  requested_at: Date;
  /** Who answered. */
  decided_by: string | null;
  /** When. */
  decided_at: Date | null;
  /** The epoch of the worker that asked. */
  epoch: number;
}

/** An approval request just answered, with its run's status after the answer. */
export interface AnsweredApproval extends ApprovalRow {
  /** The run's status after the answer: `pending` when it released a waiting run. */
  run_status: RunStatus;
}

/** What {@link Store.decideApproval} found and did. */
export interface ApprovalAnswer {
  /** The request as it stands after the statement; undefined when there is none for the key. */
  approval: ApprovalRow | undefined;
  /** True when this statement answered it (it was pending and its run open). */
  decided: boolean;
  /** The run's status after the statement (`pending` when the answer released a waiting run). */
  runStatus: RunStatus | undefined;
}

/** A run to create. */
export interface NewRun {
  /** Its id. */
  runId: string;
  /** The agent that drives it. */
  agent: string;
  /** The text the model is given. */
  goal: string;
  /** The input as given; defaults to `goal`. */
  input?: Json;
  /** Ceilings on its spend. */
  budget?: Budget;
}

/**
 * How a journal write settles an answer's tokens: the reservation it releases
 * and what the answer counts (budget.ts `answerTokens`).
 */
export interface TokenSettlement {
  /** Tokens of the step's reservation this answer releases. */
  released: number;
  /** Tokens the answer counts against the budget. */
  spent: number;
}

const NO_TOKENS: TokenSettlement = Object.freeze({ released: 0, spent: 0 });

/** A run a worker host has just taken: the row after its claim, and who held it before. */
export interface TakenRun extends RunRow {
  /** The owner before this take. */
  previous_owner: string | null;
  /** The heartbeat before this take. */
  previous_heartbeat_at: Date | null;
}

/** Filters and paging of {@link Store.listRuns}. */
export interface RunFilter {
  /** Only runs in this status. */
  status?: RunStatus;
  /** Only runs of this agent. */
  agent?: string;
  /** Only run ids containing this text. */
  search?: string;
  /** Page size. Default 50. */
  limit?: number;
  /** Rows to skip (newest first). Default 0. */
  offset?: number;
}

/** Who may write: a run and the epoch its claim produced. */
export interface Fence {
  /** The run. */
  runId: string;
  /** The fencing epoch of the claim that last wrote it. */
  epoch: number;
}

/** A row of {@link Store.loadHistory}'s one statement: either table's columns, tagged with its table. */
interface HistoryRow {
  tbl: "j" | "e";
  run_id: string;
  seq: number;
  status: string;
  epoch: number;
  intent_at: Date;
  confirmed_at: Date | null;
  decision: Json | null;
  llm_attempts: number | null;
  usage: Json | null;
  rejections: Rejection[] | null;
  reserved_tokens: number | null;
  spent_tokens: number | null;
  idempotency_key: string | null;
  tool: string | null;
  args: Json | null;
  result: Json | null;
  remote: SideEffectRow["remote"];
  error: string | null;
  attempts: number | null;
  resolved_by: string | null;
  resolved_at: Date | null;
  attempts_at_reopen: number | null;
}

/** A run with its step counts, for listings. */
export interface RunSummary extends RunRow {
  /** Journal rows (decided or being decided). */
  steps: number;
  /** Model requests paid for across the run. */
  llm_calls: number;
  /** Tool calls waiting for a human. */
  flagged: number;
  /** Model tokens spent or reserved (what the token budget counts). */
  tokens: number;
  /** Tool requests sent, re-sends included. */
  tool_calls: number;
}

// A runs row still `running` under `epoch`, as one boolean test rather than
// two comparisons, so no index on status can serve it: a statement finding its
// run by id must use the primary key. Written as plain comparisons, the generic
// plan of a prepared statement made while the tables were small (PGlite never
// analyses them; a fresh PostgreSQL table has no statistics until autovacuum)
// picked an index on status and walked every run in flight: measured with 3,000
// runs in flight, each fenced write visited 3,001 index entries (plans_test.ts).
const RUNNING_AT = (epoch: string, table = "runs") =>
  `(${table}.epoch = ${epoch} and ${table}.status = 'running') is true`;

// A runs row a claim may take from `epoch`, as one boolean test for the same
// reason: written as plain comparisons, `status in ('pending', 'running')`
// matches the predicate of the partial take-order index, and a generic plan
// made without statistics used that index for the run id (not its first
// column), reading the whole index to find one run: measured with 6,000 runs
// open, 31 pages on PGlite and 51 on PostgreSQL for each claim, and a claim
// on PGlite cost about 400 µs against 120 µs for an insert (plans_test.ts).
const CLAIMABLE_AT = (epoch: string) => `(epoch = ${epoch} and status in ('pending', 'running')) is true`;

// The fence, as a condition on the runs row of $1 at epoch $2. `for share`
// makes a racing claim wait for this statement (or this statement see the
// claim's new epoch), instead of both reading one snapshot.
const FENCE = `exists (select 1 from runs where run_id = $1 and ${RUNNING_AT("$2")} for share)`;

// The texts of the statements a step and a run send, built once: a text built
// per call is a new string each time, which a driver's cache of prepared
// statements (and the bench's counter) must flatten and hash again before it
// finds its entry (#11).
const CLAIM_FIRST = `update runs set epoch = 1, owner = $2, status = 'running',
                heartbeat_at = $3::timestamptz, updated_at = $3::timestamptz,
                stuck_claims = 1, progress_mark = 0
          where run_id = $1 and ${CLAIMABLE_AT("0")}`;
const HEARTBEAT = (ignoreFence: boolean) =>
  `update runs set heartbeat_at = $3::timestamptz
        where run_id = $1 and ${
    ignoreFence ? "$2::int is not null and (status = 'running') is true" : RUNNING_AT("$2")
  }`;
const HEARTBEAT_FENCED = HEARTBEAT(false);
const JOURNAL_INTENT =
  `insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at, reserved_tokens)
       select $1, $3, 'intent', 1, $2, $4::timestamptz, $5 where ${FENCE}`;
const JOURNAL_INTENT_UPSERT = `${JOURNAL_INTENT}
       on conflict (run_id, seq) do update
          set llm_attempts = journal.llm_attempts + 1, epoch = excluded.epoch, intent_at = excluded.intent_at,
              reserved_tokens = journal.reserved_tokens + excluded.reserved_tokens
        where journal.status = 'intent'
       returning *`;
// An answer settled: its reservation ($n) released, what it counts ($n + 1) added.
const SETTLE_TOKENS = (n: number) =>
  `reserved_tokens = greatest(0, reserved_tokens - $${n}),
              spent_tokens = least(${MAX_ROW_TOKENS}, spent_tokens::bigint + $${n + 1})::int`;
const JOURNAL_CONFIRM =
  `update journal set status = 'confirmed', decision = $4::text::jsonb, usage = $5::text::jsonb,
              confirmed_at = $6::timestamptz, ${SETTLE_TOKENS(7)}
        where run_id = $1 and seq = $3 and status = 'intent' and ${FENCE}`;
const EFFECT_INTENT =
  `insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
       select $3, $1, $4, $5, $6::text::jsonb, 'intent', 1, $2, $7::timestamptz where ${FENCE}`;
const EFFECT_INTENT_UPSERT = `${EFFECT_INTENT}
       on conflict (idempotency_key) do update
          set attempts = side_effects.attempts + 1, epoch = excluded.epoch, intent_at = excluded.intent_at
        where side_effects.status = 'intent'
       returning *`;
const EFFECT_CONFIRM = (skipFence: boolean) =>
  `update side_effects set status = 'confirmed', result = $4::text::jsonb, remote = $5,
              confirmed_at = $6::timestamptz, error = null
        where idempotency_key = $3 and run_id = $1 and status = 'intent'
          and ${skipFence ? "$2::int is not null" : FENCE}`;
const EFFECT_CONFIRM_FENCED = EFFECT_CONFIRM(false);
const FINISH_RUN = `update runs set status = $3, error = $4, updated_at = $5::timestamptz, output = $6
        where run_id = $1 and ${RUNNING_AT("$2")}`;

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
const FLAGGED_CALLS = `select s.*, (count(*) over ())::int as total from side_effects s
        where ${flaggedMatch("$1", "$2")} order by s.idempotency_key limit $3`;

// $1 the call's key; the resolution in $2 to $6.
const RESOLVE_ONE = `with e as (
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
       select e.*, (select count(*) from u)::int as unblocked from e`;
/** The most flagged calls one {@link Store.resolveEffects} settles. */
export const RESOLVE_BATCH_MAX = 1000;

// $1 the count confirmed; the resolution in $2 to $6; the filter in $7 (tool) and $8 (run).
const RESOLVE_MANY = `with picked as (
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
        order by e.idempotency_key`;

/** Which flagged calls a bulk resolve takes: those matching every field given. */
export interface FlaggedFilter {
  /** Calls of this tool. */
  tool?: string;
  /** Calls of this run. */
  runId?: string;
}

/** How a person settles a flagged call, as the store writes it. */
export type EffectResolution =
  | { action: "result"; result: Json }
  | { action: "retry" }
  | { action: "fail"; error: string };

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

// OPEN_RUN_STATUSES as an SQL list.
const OPEN_STATUSES = `(${OPEN_RUN_STATUSES.map((s) => `'${s}'`).join(", ")})`;

// Approvals and liveness. A run may be `waiting` only on a request that is
// still `pending`: nothing else wakes it. Two statements change what that
// depends on: REQUEST_APPROVAL (a worker; the only statement that sets
// `waiting`) and DECIDE_APPROVAL (a person; the only one that answers a
// request). Both lock the run's row first (`for no key update`, the lock an
// update takes), then the request's, as prune does (runs first), so on
// PostgreSQL the two run one after the other for a run, and cannot deadlock.
// Under READ COMMITTED a statement's snapshot may predate the other's commit
// (taken before it waited for the lock), so neither judges by its snapshot:
// the locking read gives the run's latest row; the request's latest row comes
// from `on conflict do update` (which acts on the latest version) or from a
// locking read; and each update finds its row by key alone, its conditions the
// values those reads returned (an update whose snapshot row is out of date
// re-reads the latest, which this statement holds). Each later step of a
// statement refers to the earlier one's result, which fixes their order: a
// lock taken after this statement updated the row would skip it. On PGlite
// every statement runs alone: the serial case.
//
// So, for one run, in either order:
// - request, then decide: the request left the run waiting on a pending
//   request; the decision sees `waiting` and puts the run back to `pending`.
// - decide, then request: the decision saw the run running (or pending) and
//   left it; the request finds the answer, does not wait, and the worker goes
//   on with it (its run still `running` under its epoch).
// Nothing else sets `waiting` or answers a request. A cancel closes the run (a
// waiting run's request stays pending, and a decision for a closed run is
// refused), reopen and claim make it pending and running, and a stale worker's
// request is refused (its epoch is in the lock's condition). A request for
// other arguments than the stored one replaces it (pending again) instead of
// using an answer given for those. An answer is final for its arguments: the
// request of a step's key always carries the arguments of the step's confirmed
// decision, which never changes, so a worker that reads an answer for its
// arguments may use it without this statement (executor.ts).
const APPROVAL_COLUMNS_RENEWED = [
  "tool",
  "args",
  "args_hash",
  "status",
  "reason",
  "decided_by",
  "decided_at",
  "requested_at",
  "epoch",
];
const REQUEST_APPROVAL = `with run as (
         select 1 from runs where run_id = $1 and ${RUNNING_AT("$2")} for no key update),
       a as (
         insert into approvals (idempotency_key, run_id, seq, tool, args, args_hash, status, requested_at, epoch)
         select $3, $1, $4, $5, $6::text::jsonb, $7, 'pending', $8::timestamptz, $2 where exists (select 1 from run)
         on conflict (idempotency_key) do update set ${
  APPROVAL_COLUMNS_RENEWED.map((c) =>
    `${c} = case when approvals.args_hash = excluded.args_hash then approvals.${c} else excluded.${c} end`
  ).join(",\n             ")
}
         returning *),
       w as (
         update runs set status = 'waiting', heartbeat_at = null, updated_at = $8::timestamptz
          where run_id = $1 and ${RUNNING_AT("$2")} and exists (select 1 from a where a.status = 'pending')
         returning 1)
       select a.*, exists (select 1 from w) as waiting from a`;
const DECIDE_APPROVAL = `with target as (
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
         update runs set status = 'pending', heartbeat_at = null, updated_at = $5::timestamptz
          where run_id = (select run_id from a) and (select status from run) = 'waiting'
         returning 1)
       select x.*, exists (select 1 from a) as decided,
              case when exists (select 1 from r) then 'pending' else (select status from run) end as run_status
         from (select * from a union all select * from cur where not exists (select 1 from a)) x`;

// Every column a statement here reads or writes, by table: checked at start-up
// so an older database is refused before a tool acts, not at its confirm.
const REQUIRED_COLUMNS: Record<string, string[]> = {
  runs: [
    "run_id",
    "agent",
    "goal",
    "input",
    "output",
    "status",
    "epoch",
    "owner",
    "heartbeat_at",
    "error",
    "created_at",
    "updated_at",
    "stuck_claims",
    "progress_mark",
    "budget",
  ],
  journal: [
    "run_id",
    "seq",
    "status",
    "decision",
    "llm_attempts",
    "usage",
    "rejections",
    "epoch",
    "intent_at",
    "confirmed_at",
    "reserved_tokens",
    "spent_tokens",
  ],
  side_effects: [
    "idempotency_key",
    "run_id",
    "seq",
    "tool",
    "args",
    "status",
    "result",
    "remote",
    "error",
    "attempts",
    "epoch",
    "intent_at",
    "confirmed_at",
    "resolved_by",
    "resolved_at",
    "attempts_at_reopen",
  ],
  workers: ["name", "agents", "capacity", "started_at", "heartbeat_at"],
  approvals: [
    "idempotency_key",
    "run_id",
    "seq",
    "tool",
    "args",
    "args_hash",
    "status",
    "decided_by",
    "epoch",
  ],
};

// A run's progress: confirmed decisions plus settled tool calls. Every claim
// compares it with the mark the claim before left, to count claims that found
// no progress (a run whose workers keep dying is stopped at a bound).
const progressOf = (runId: string) =>
  `((select count(*) from journal j where j.run_id = ${runId} and j.status = 'confirmed')
  + (select count(*) from side_effects e where e.run_id = ${runId} and e.status <> 'intent'))::int`;

// A claim's marks, from the progress `source.progress` counted: one more claim
// without progress if it matches the mark the claim before left, else the first.
// The error a worker left on the running run (releaseRun) is kept while claims
// find no progress, so the bound on them can name it, and cleared by progress.
const claimMarks = (source: string) =>
  `stuck_claims = case when ${source}.progress = runs.progress_mark then runs.stuck_claims + 1 else 1 end,
       error = case when ${source}.progress = runs.progress_mark then runs.error end,
       progress_mark = ${source}.progress`;

// Every JSON value is written through storable.ts's one check: what jsonb
// would refuse or change throws a ValueUnstorableError naming the value
// before any statement is sent, and NUL characters and lone surrogates are
// written out as the text of their escapes. Callers that must refuse those
// instead (a model's answer, a run's input) check first, with the same function.
const jsonParam = (value: unknown, what: string): string => storableJson(value, what, { writeOut: true });
// A new pending run ($1 run_id, $2 agent, $3 goal, $4 input, $5 now, $6 budget):
// the one insert that createRun and createOrGetRun share.
const INSERT_RUN =
  `insert into runs (run_id, agent, goal, input, budget, status, epoch, created_at, updated_at)
  values ($1, $2, $3, $4::text::jsonb, $6::text::jsonb, 'pending', 0, $5::timestamptz, $5::timestamptz)
  on conflict (run_id) do nothing`;

/** {@link INSERT_RUN}, saying whether it wrote the row and, if not, the epoch its snapshot saw. */
const CREATE_OR_READ = `with created as (${INSERT_RUN} returning 1)
       select exists (select 1 from created) as created,
              (select epoch from runs where run_id = $1 and not exists (select 1 from created)) as epoch`;

/** The parameters of {@link INSERT_RUN}. */
function newRunParams(run: NewRun, now: Date): unknown[] {
  return [
    run.runId,
    run.agent,
    textParam(run.goal),
    jsonParam(run.input ?? run.goal, "run input"),
    ts(now),
    jsonParam(run.budget ?? null, "run budget"),
  ];
}

/**
 * The row {@link INSERT_RUN} writes, from the values it was given: the JSON
 * columns and the goal as stored (NUL escapes written out), the rest the schema's defaults.
 */
function newRunRow(run: NewRun, now: Date): RunRow {
  return {
    run_id: run.runId,
    agent: run.agent,
    goal: textParam(run.goal)!,
    input: JSON.parse(jsonParam(run.input ?? run.goal, "run input")),
    output: null,
    status: "pending",
    epoch: 0,
    owner: null,
    heartbeat_at: null,
    error: null,
    created_at: now,
    updated_at: now,
    stuck_claims: 0,
    progress_mark: 0,
    budget: JSON.parse(jsonParam(run.budget ?? null, "run budget")),
  };
}

/** A text parameter with any NUL character written out as `\u0000`. */
const textParam = (value: string | null): string | null =>
  value === null ? null : value.replaceAll("\0", "\\u0000");
const ts = isoTimestamp;

// The rows a fresh intent's plain insert writes, from the very values the
// statement was given (no placeholder: `now` is the `intent_at` written, the
// defaults are the schema's). Sent back instead of read back (#11: on PGlite,
// `returning *` cost 40 to 60 µs a statement, a fifth of it); store_test.ts
// checks each against the row as loadHistory reads it.
function freshJournalRow(f: Fence, seq: number, now: Date, reserveTokens: number): JournalRow {
  return {
    run_id: f.runId,
    seq,
    status: "intent",
    decision: null,
    llm_attempts: 1,
    usage: null,
    rejections: [],
    epoch: f.epoch,
    intent_at: now,
    confirmed_at: null,
    reserved_tokens: reserveTokens,
    spent_tokens: 0,
  };
}

function freshEffectRow(
  f: Fence,
  e: { key: string; seq: number; tool: string; args: Json },
  now: Date,
): SideEffectRow {
  return {
    idempotency_key: e.key,
    run_id: f.runId,
    seq: e.seq,
    tool: e.tool,
    args: e.args,
    status: "intent",
    result: null,
    remote: null,
    error: null,
    attempts: 1,
    epoch: f.epoch,
    intent_at: now,
    confirmed_at: null,
    resolved_by: null,
    resolved_at: null,
    attempts_at_reopen: null,
  };
}

const PRUNED_FROM = Object.entries(RUN_ROW_TABLES) as [keyof typeof RUN_ROW_TABLES, keyof PrunedRows][];
const PRUNE_PICK = `select run_id from runs
                     where status in ('done', 'failed', 'cancelled') and updated_at < $1::timestamptz
                     order by updated_at, run_id limit $2`;
/** What {@link Store.pruneRuns} would delete: the runs it picks, and their rows in each table. */
const PRUNE_DRY_RUN = `select p.run_id, ${
  PRUNED_FROM.map(([t, as]) => `(select count(*) from ${t} x where x.run_id = p.run_id)::int as ${as}`).join(
    ", ",
  )
} from (${PRUNE_PICK}) p order by p.run_id`;
/**
 * The delete of {@link Store.pruneRuns}. The run is re-checked as it is
 * deleted (`for update`): one reopened in the meantime is no longer finished
 * and stays. Its rows in every table that references runs go in the same
 * statement, so no foreign key refuses the batch.
 */
const PRUNE = `with picked as materialized (${PRUNE_PICK} for update skip locked),
  ${
  PRUNED_FROM.map(([t, as]) =>
    `d_${as} as (delete from ${t} where run_id in (select run_id from picked) returning run_id)`
  ).join(",\n  ")
},
  r as (delete from runs where run_id in (select run_id from picked) returning run_id)
select r.run_id, ${
  PRUNED_FROM.map(([, as]) => `(select count(*) from d_${as} d where d.run_id = r.run_id)::int as ${as}`)
    .join(", ")
} from r order by r.run_id`;

/** Every statement the runtime runs. */
export class Store {
  /** The driver underneath. */
  readonly client: SqlClient;
  /** Test seams only (the fuzzer's planted bugs); empty in production. */
  readonly defects: PlantedDefects;

  /** Wraps a driver. `defects` plants bugs for the fuzzer's tests; never set it in production. */
  constructor(client: SqlClient, opts: { defects?: PlantedDefects } = {}) {
    this.client = client;
    this.defects = opts.defects ?? {};
  }

  /** Where the data lives, for logs. */
  get describe(): string {
    return this.client.describe;
  }

  /**
   * Brings the tables up to this program's schema version (creating them in
   * an empty database), or refuses with `SCHEMA_NEWER`; see `migrate.ts`.
   * Every process does this at start.
   */
  async migrate(): Promise<MigrationResult> {
    return await migrate(this.client);
  }

  /** The same as {@link Store.migrate}, for callers that only want the tables there. */
  async applySchema(): Promise<void> {
    await this.migrate();
  }

  /**
   * Fails with `SCHEMA_MISSING` when the tables are not there,
   * `SCHEMA_OUTDATED` when they are older than this program (naming the
   * version, or the missing columns), and `SCHEMA_NEWER` when a newer program
   * migrated them: before anything acts on a run.
   */
  async checkSchema(): Promise<void> {
    const schema = await targetSchema(this.client);
    const version = await readVersion(this.client, schema);
    assertNotNewer(version, this.describe);
    const rows = await this.client.query<{ table_name: string; column_name: string }>(
      `select table_name::text, column_name::text from information_schema.columns
        where table_schema = $2 and table_name = any ($1::text[])`,
      [Object.keys(REQUIRED_COLUMNS), schema],
    );
    if (!rows.some((r) => r.table_name === "runs")) {
      throw new StoreError(
        "SCHEMA_MISSING",
        `The database at ${this.describe} has no agent-runtime tables in schema ${schema}. ` +
          `Create them with: deno task migrate (every process also does it at start)`,
      );
    }
    const have = new Set(rows.map((r) => `${r.table_name}.${r.column_name}`));
    const missing = Object.entries(REQUIRED_COLUMNS).flatMap(([table, columns]) =>
      columns.map((c) => `${table}.${c}`).filter((c) => !have.has(c))
    );
    if (version < SCHEMA_VERSION) {
      throw new StoreError(
        "SCHEMA_OUTDATED",
        `The agent-runtime tables in schema ${schema} at ${this.describe} are at version ${version}, older ` +
          `than this program's ${SCHEMA_VERSION}${
            missing.length > 0 ? ` (they lack ${missing.join(", ")})` : ""
          }. Upgrade them in place with: deno task migrate`,
      );
    }
    if (missing.length > 0) {
      // The version is current, yet a column is gone: changed by hand. Refused
      // before anything acts, rather than discovered at a confirm.
      throw new StoreError(
        "SCHEMA_OUTDATED",
        `The agent-runtime tables in schema ${schema} at ${this.describe} are at version ${version} but lack ` +
          `${missing.join(", ")} (changed by hand?). Restore them, or load a fresh schema`,
      );
    }
  }

  /** Creates a pending run; false when a run with that id exists already. */
  async createRun(run: NewRun, now: Date): Promise<boolean> {
    return (await this.client.run(INSERT_RUN, newRunParams(run, now))) === 1;
  }

  /**
   * Creates the run as `pending` unless it exists, and returns it as it is
   * now, with the epoch the claim must start from. A new run costs one
   * statement, and its row is the one the insert wrote ({@link newRunRow}):
   * the statement sends back two values, not the row (#11: on PGlite each
   * returned column is decoded in JavaScript). An existing run costs one read
   * more; its epoch is the one the insert's own statement saw, so two
   * starters of one new run both claim from epoch 0 and exactly one wins (a
   * read after the insert could already see the winner's claim, and take the
   * run over). When another process inserts the same run at the same moment,
   * the statement's snapshot sees neither row, and the read gives the epoch.
   */
  async createOrGetRun(run: NewRun, now: Date): Promise<RunRow> {
    const [seen] = await this.client.query<{ created: boolean; epoch: number | null }>(
      CREATE_OR_READ,
      newRunParams(run, now),
    );
    if (seen?.created) return newRunRow(run, now);
    const row = await this.getRun(run.runId);
    if (!row) throw new StoreError("RUN_MISSING", `Run ${run.runId} could be neither created nor read`);
    return seen?.epoch === null || seen?.epoch === undefined ? row : { ...row, epoch: seen.epoch };
  }

  /** One run, if it exists. */
  async getRun(runId: string): Promise<RunRow | undefined> {
    const rows = await this.client.query<RunRow>(`select * from runs where run_id = $1`, [runId]);
    return rows[0];
  }

  /**
   * Claims a run: a compare-and-swap on the epoch read before. Returns the new
   * epoch, or undefined when someone else claimed it first or it is closed.
   */
  async claim(runId: string, seenEpoch: number, owner: string, now: Date): Promise<number | undefined> {
    return (await this.claimRun(runId, seenEpoch, owner, now))?.epoch;
  }

  /**
   * {@link Store.claim}, also returning how many claims in a row (this one
   * included) found no progress since the claim before.
   */
  async claimRun(
    runId: string,
    seenEpoch: number,
    owner: string,
    now: Date,
  ): Promise<{ epoch: number; stuck_claims: number } | undefined> {
    if (seenEpoch === 0) {
      // A run at epoch 0 was never claimed: every journal, tool-call and
      // approval row is written under a claimed epoch, and only a claim moves
      // the marks, so its progress and marks are 0 and this claim is its first
      // without progress, as the general statement below would count (#11:
      // without its two counts). What it writes is known, so nothing is sent
      // back (#11: on PGlite, decoding a returned row is JavaScript work).
      const written = await this.client.run(CLAIM_FIRST, [runId, owner, ts(now)]);
      return written === 1 ? { epoch: 1, stuck_claims: 1 } : undefined;
    }
    // The run's progress is counted once, in `p` (#11: set as two columns, it
    // was counted twice); same snapshot, same values.
    const rows = await this.client.query<{ epoch: number; stuck_claims: number }>(
      `update runs set epoch = epoch + 1, owner = $3, status = 'running',
              heartbeat_at = $4::timestamptz, updated_at = $4::timestamptz,
              ${claimMarks("p")}
         from (select ${progressOf("$1")} as progress) p
        where run_id = $1 and ${CLAIMABLE_AT("$2")}
        returning epoch, stuck_claims`,
      [runId, seenEpoch, owner, ts(now)],
    );
    return rows[0];
  }

  /**
   * Everything needed to resume: the journal and the tool calls of a run, by
   * `seq`. One statement (#11: it was two): both tables in one `union all`,
   * each row tagged with its table, the other table's columns null. One
   * snapshot for both is also the more honest read. Columns stay typed (no
   * `to_jsonb`), so timestamps come back as `Date` on both drivers.
   */
  async loadHistory(runId: string): Promise<{ journal: JournalRow[]; effects: SideEffectRow[] }> {
    const rows = await this.client.query<HistoryRow>(
      `select 'j' as tbl, run_id, seq, status, epoch, intent_at, confirmed_at,
              decision, llm_attempts, usage, rejections, reserved_tokens, spent_tokens,
              null::text as idempotency_key, null::text as tool, null::jsonb as args, null::jsonb as result,
              null::text as remote, null::text as error, null::int as attempts,
              null::text as resolved_by, null::timestamptz as resolved_at, null::int as attempts_at_reopen
         from journal where run_id = $1
       union all
       select 'e', run_id, seq, status, epoch, intent_at, confirmed_at,
              null, null, null, null, null, null,
              idempotency_key, tool, args, result, remote, error, attempts, resolved_by, resolved_at,
              attempts_at_reopen
         from side_effects where run_id = $1
       order by tbl desc, seq`,
      [runId],
    );
    const journal: JournalRow[] = [];
    const effects: SideEffectRow[] = [];
    for (const r of rows) {
      const { run_id, seq, status, epoch, intent_at, confirmed_at } = r;
      if (r.tbl === "j") {
        journal.push({
          run_id,
          seq,
          status: status as JournalRow["status"],
          decision: r.decision as Decision | null,
          llm_attempts: r.llm_attempts!,
          usage: r.usage,
          rejections: r.rejections!,
          epoch,
          intent_at,
          confirmed_at,
          reserved_tokens: r.reserved_tokens ?? 0,
          spent_tokens: r.spent_tokens ?? 0,
        });
      } else {
        effects.push({
          idempotency_key: r.idempotency_key!,
          run_id,
          seq,
          tool: r.tool!,
          args: r.args as Json,
          status: status as EffectStatus,
          result: r.result,
          remote: r.remote,
          error: r.error,
          attempts: r.attempts!,
          epoch,
          intent_at,
          confirmed_at,
          resolved_by: r.resolved_by,
          resolved_at: r.resolved_at,
          attempts_at_reopen: r.attempts_at_reopen,
        });
      }
    }
    return { journal, effects };
  }

  /** Refreshes the lease. False: the fence refused it. */
  async heartbeat(f: Fence, now: Date): Promise<boolean> {
    const written = await this.client.run(
      this.defects.heartbeatIgnoresFence ? HEARTBEAT(true) : HEARTBEAT_FENCED,
      [f.runId, f.epoch, ts(now)],
    );
    return written === 1;
  }

  /**
   * Records that a model request for step `seq` is about to be sent: inserts
   * the journal row at `intent`, or counts one more attempt on it. Returns the
   * step's `llm_attempts`, or throws {@link FencedError}.
   */
  async journalIntent(f: Fence, seq: number, now: Date, reserveTokens = 0): Promise<number> {
    return (await this.journalIntentRow(f, seq, now, reserveTokens)).llm_attempts;
  }

  /**
   * {@link Store.journalIntent}, returning the row as the write left it (the
   * worker keeps it in memory). `fresh`: the worker holds no row for `seq`, so
   * a plain insert does (no `on conflict` arbitration, #11); should the row
   * exist after all, the insert fails on the key and the upsert runs instead.
   */
  async journalIntentRow(
    f: Fence,
    seq: number,
    now: Date,
    reserveTokens = 0,
    fresh = false,
  ): Promise<JournalRow> {
    const params = [f.runId, f.epoch, seq, ts(now), reserveTokens];
    const row = await this.#freshOr(
      fresh,
      async () =>
        (await this.client.run(JOURNAL_INTENT, params)) === 1
          ? freshJournalRow(f, seq, now, reserveTokens)
          : undefined,
      async () => (await this.client.query<JournalRow>(JOURNAL_INTENT_UPSERT, params))[0],
    );
    if (row === undefined) throw await this.refusal(f, `journal intent seq=${seq}`);
    return row;
  }

  /**
   * Runs `plain` when `fresh`, else `upsert`; and `upsert` too when the plain
   * insert finds the row there after all (a unique violation, 23505).
   */
  async #freshOr<T>(fresh: boolean, plain: () => Promise<T>, upsert: () => Promise<T>): Promise<T> {
    if (!fresh) return await upsert();
    try {
      return await plain();
    } catch (err) {
      if ((err as { code?: unknown }).code !== "23505") throw err;
      return await upsert();
    }
  }

  /**
   * Records an answer the runtime refused for step `seq`, so a re-ask can say
   * why. `usage`, when given, replaces the step's usage (the refused answer
   * was paid for too: the caller passes the step's running total); `tokens`
   * settles the answer's reservation against what it counts.
   */
  async journalReject(
    f: Fence,
    seq: number,
    rejection: Rejection,
    usage?: Json,
    tokens: TokenSettlement = NO_TOKENS,
  ): Promise<void> {
    const written = await this.client.run(
      `update journal set rejections = rejections || jsonb_build_array($4::text::jsonb),
              usage = case when $5::text is null then usage else $5::text::jsonb end,
              ${SETTLE_TOKENS(6)}
        where run_id = $1 and seq = $3 and status = 'intent' and ${FENCE}`,
      [
        f.runId,
        f.epoch,
        seq,
        jsonParam(rejection, "refusal"),
        usage === undefined ? null : jsonParam(usage, "token usage"),
        tokens.released,
        tokens.spent,
      ],
    );
    if (written === 0) throw await this.refusal(f, `journal reject seq=${seq}`);
  }

  /**
   * Commits the decision of step `seq`, settling its answer's reservation
   * against what the answer counts. Throws {@link FencedError} when refused.
   */
  async journalConfirm(
    f: Fence,
    seq: number,
    decision: Decision,
    usage: Json | undefined,
    now: Date,
    tokens: TokenSettlement = NO_TOKENS,
  ): Promise<void> {
    const written = await this.client.run(
      JOURNAL_CONFIRM,
      [
        f.runId,
        f.epoch,
        seq,
        jsonParam(decision, "decision"),
        jsonParam(usage ?? null, "token usage"),
        ts(now),
        tokens.released,
        tokens.spent,
      ],
    );
    if (written === 0) throw await this.refusal(f, `journal confirm seq=${seq}`);
  }

  /**
   * Records that a tool request under `key` is about to be sent: inserts the
   * row at `intent`, or counts one more attempt on an `intent` row. Returns
   * the attempt number, or throws {@link FencedError}.
   */
  async effectIntent(
    f: Fence,
    e: { key: string; seq: number; tool: string; args: Json },
    now: Date,
  ): Promise<number> {
    return (await this.effectIntentRow(f, e, now)).attempts;
  }

  /**
   * {@link Store.effectIntent}, returning the row as the write left it (the
   * worker keeps it in memory). `fresh`: the worker holds no row for the
   * call, so a plain insert does, as for {@link Store.journalIntentRow}.
   */
  async effectIntentRow(
    f: Fence,
    e: { key: string; seq: number; tool: string; args: Json },
    now: Date,
    fresh = false,
  ): Promise<SideEffectRow> {
    const params = [f.runId, f.epoch, e.key, e.seq, e.tool, jsonParam(e.args, "tool arguments"), ts(now)];
    const row = await this.#freshOr(
      fresh,
      async () =>
        (await this.client.run(EFFECT_INTENT, params)) === 1 ? freshEffectRow(f, e, now) : undefined,
      async () => (await this.client.query<SideEffectRow>(EFFECT_INTENT_UPSERT, params))[0],
    );
    if (row === undefined) throw await this.refusal(f, `tool intent key=${e.key}`);
    return row;
  }

  /** Commits a tool call's outcome. Throws {@link FencedError} when refused. */
  async effectConfirm(
    f: Fence,
    key: string,
    result: Json,
    remote: "created" | "already_done" | "reconciled",
    now: Date,
  ): Promise<void> {
    const written = await this.client.run(
      this.defects.confirmSkipsFence ? EFFECT_CONFIRM(true) : EFFECT_CONFIRM_FENCED,
      [f.runId, f.epoch, key, jsonParam(result, "tool result"), remote, ts(now)],
    );
    if (written === 0) throw await this.refusal(f, `tool confirm key=${key}`);
  }

  /** Marks a call `failed` (a permanent error) or `flagged` (unknown, needs a human). */
  async effectSettle(
    f: Fence,
    key: string,
    status: "failed" | "flagged",
    error: string,
    now: Date,
  ): Promise<void> {
    const written = await this.client.run(
      `update side_effects set status = $4, error = $5, confirmed_at = $6::timestamptz
        where idempotency_key = $3 and run_id = $1 and status = 'intent' and ${FENCE}`,
      [f.runId, f.epoch, key, status, textParam(error), ts(now)],
    );
    if (written === 0) throw await this.refusal(f, `tool ${status} key=${key}`);
  }

  /**
   * Closes (or blocks) the run this worker holds, with the final answer when
   * it is done. Throws {@link FencedError} when refused.
   */
  async finishRun(
    f: Fence,
    status: "done" | "failed" | "blocked",
    error: string | null,
    now: Date,
    output: string | null = null,
  ): Promise<void> {
    const written = await this.client.run(
      FINISH_RUN,
      [f.runId, f.epoch, status, textParam(error), ts(now), textParam(output)],
    );
    if (written === 0) throw await this.refusal(f, `finish ${status}`);
  }

  /** Explains a refused write: the epoch moved (fenced), the run was closed, or the row was not as expected. */
  async refusal(f: Fence, what: string): Promise<FencedError> {
    const run = await this.getRun(f.runId);
    if (!run || run.epoch !== f.epoch) {
      return new FencedError(
        "FENCED",
        `Write refused (${what}): run ${f.runId} is at epoch ${
          run?.epoch ?? "none"
        }, this worker holds ${f.epoch}`,
      );
    }
    if (run.status !== "running") {
      return new FencedError("RUN_CLOSED", `Write refused (${what}): run ${f.runId} is ${run.status}`);
    }
    return new FencedError(
      "STALLED",
      `Write refused (${what}): the row is not in the state this worker left it in (epoch ${f.epoch} unchanged)`,
    );
  }
  /**
   * Worker host: takes and claims, in one statement, up to `limit` runs of
   * the given agents that are `pending` or whose lease expired (no heartbeat
   * since `staleBefore`): each gets a new epoch, `owner`, status `running`
   * and a fresh heartbeat. `skip locked` lets racing hosts pass each other
   * instead of queueing, and the epoch bump fences whoever held a run before.
   */
  async takeRuns(
    owner: string,
    agents: readonly string[],
    staleBefore: Date,
    now: Date,
    limit: number,
  ): Promise<TakenRun[]> {
    return await this.client.query<TakenRun>(
      // The pick is a materialized CTE: as an `in (subquery)` the planner may run
      // the limited subquery more than once and take more than `limit` runs.
      // Each taken run's progress is counted once (#11: it was counted twice, once per column
      // set), and not at all for a run at epoch 0: never claimed, it has none (see claimRun).
      `with picked as materialized (
         select run_id, epoch as picked_epoch, owner as previous_owner, heartbeat_at as previous_heartbeat_at
           from runs
          where status in ('pending', 'running') and agent = any($2::text[])
            and (heartbeat_at is null or heartbeat_at < $3::timestamptz)
            -- A run whose claims keep finding no progress waits longer each time.
            and (stuck_claims < 2
                 or updated_at < $4::timestamptz - least(60000, 500 * 2 ^ (stuck_claims - 2)) * interval '1 ms')
          order by coalesce(heartbeat_at, created_at), run_id
          limit $5
            for update skip locked),
       counted as (
         select picked.*, case when picked_epoch = 0 then 0 else ${
        progressOf("picked.run_id")
      } end as progress
           from picked)
       update runs set epoch = runs.epoch + 1, owner = $1, status = 'running',
              heartbeat_at = $4::timestamptz, updated_at = $4::timestamptz,
              ${claimMarks("counted")}
         from counted
        where runs.run_id = counted.run_id
        returning runs.*, counted.previous_owner, counted.previous_heartbeat_at`,
      [owner, agents, ts(staleBefore), ts(now), limit],
    );
  }

  /**
   * Worker host: renews, in one statement, the lease of every run it holds
   * (each fenced on its own epoch) and its own row in `workers`. Returns the
   * runs whose lease was renewed; any other was taken over, closed or cancelled.
   */
  async heartbeatMany(
    worker: { name: string; agents: readonly string[]; capacity: number; startedAt: Date },
    fences: readonly Fence[],
    now: Date,
  ): Promise<string[]> {
    const rows = await this.client.query<{ run_id: string }>(
      `with w as (
         insert into workers (name, agents, capacity, started_at, heartbeat_at)
         values ($1, $2::text[], $3, $4::timestamptz, $5::timestamptz)
         -- A name is reused by a worker restarted under it (--worker NAME): the row then
         -- describes the process that heartbeats now, its agents included.
         on conflict (name) do update set agents = excluded.agents, capacity = excluded.capacity,
                                          started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at
         returning 1)
       update runs set heartbeat_at = $5::timestamptz
        where run_id = any($6::text[])
          and ${RUNNING_AT("($7::int[])[array_position($6::text[], runs.run_id)]")}
          and exists (select 1 from w)
        returning runs.run_id`,
      [
        worker.name,
        worker.agents,
        worker.capacity,
        ts(worker.startedAt),
        ts(now),
        fences.map((f) => f.runId),
        fences.map((f) => f.epoch),
      ],
      // Once per heartbeat for up to a host's worth of runs: planned for the ids it holds each
      // time, since a generic plan made on a small table scans all of it (plans_test.ts, PostgreSQL).
      { planEachTime: true },
    );
    return rows.map((r) => r.run_id);
  }

  /**
   * Lets go of a run this worker holds after an error the loop could not
   * classify: its lease cleared, so the next take retries it at once (the
   * bound on claims without progress stops one that keeps failing), and the
   * error kept on it, so that bound can name the cause. Fenced on the epoch:
   * false when the run is no longer this worker's to release.
   */
  async releaseRun(f: Fence, error: string, now: Date): Promise<boolean> {
    const written = await this.client.run(
      `update runs set heartbeat_at = null, updated_at = $3::timestamptz, error = $4
        where run_id = $1 and ${RUNNING_AT("$2")}`,
      [f.runId, f.epoch, ts(now), textParam(error)],
    );
    return written === 1;
  }

  /** Worker host: removes its row from `workers` as it stops. */
  async removeWorker(name: string): Promise<void> {
    await this.client.query(`delete from workers where name = $1`, [name]);
  }

  /**
   * Supervisor: makes the open runs held by a worker it saw die takeable at
   * once (their lease cleared), without waiting out the lease: a reaped
   * process cannot write again. The epoch is left alone; the next taker bumps
   * it. Returns the runs released.
   */
  async releaseRuns(owner: string, now: Date): Promise<string[]> {
    const rows = await this.client.query<{ run_id: string }>(
      `update runs set heartbeat_at = null, updated_at = $2::timestamptz
        where owner = $1 and status = 'running'
        returning run_id`,
      [owner, ts(now)],
    );
    return rows.map((r) => r.run_id).sort();
  }

  /**
   * Supervisor: the workers among `names` whose own heartbeat (their row in
   * `workers`, renewed by every {@link Store.heartbeatMany}) is older than
   * `staleBefore`, with when it was last renewed: frozen processes. A run's
   * stale lease says nothing about its worker (a run that failed is let go
   * while its worker goes on), and a worker that has not written its row yet
   * holds no run.
   */
  async frozenWorkers(
    names: readonly string[],
    staleBefore: Date,
  ): Promise<{ name: string; heartbeat_at: Date }[]> {
    return await this.client.query<{ name: string; heartbeat_at: Date }>(
      `select name, heartbeat_at from workers where name = any($1::text[]) and heartbeat_at < $2::timestamptz
        order by name`,
      [names, ts(staleBefore)],
    );
  }

  /** The agents hosted by a worker whose heartbeat is newer than `staleBefore`. */
  async hostedAgents(staleBefore: Date): Promise<string[]> {
    const rows = await this.client.query<{ agent: string }>(
      `select distinct unnest(agents) as agent from workers where heartbeat_at >= $1::timestamptz`,
      [ts(staleBefore)],
    );
    return rows.map((r) => r.agent).sort();
  }

  /**
   * Runs, newest first, one page at a time, with their step, model-call and
   * flagged-call counts and the number of runs matching the filter.
   */
  async listRuns(filter: RunFilter = {}): Promise<{ runs: RunSummary[]; total: number }> {
    const limit = filter.limit ?? 50;
    const offset = filter.offset ?? 0;
    const params = [filter.status ?? null, filter.agent ?? null, filter.search ?? null, limit, offset];
    const where = `($1::text is null or r.status = $1) and ($2::text is null or r.agent = $2)
                   and ($3::text is null or strpos(r.run_id, $3) > 0)`;
    const runs = await this.client.query<RunSummary>(
      // One page of runs first, then counts for those runs only (not the whole table).
      `with page as (select * from runs r where ${where}
                       order by r.created_at desc, r.run_id desc limit $4 offset $5)
       select r.*, coalesce(j.steps, 0)::int as steps, coalesce(j.llm_calls, 0)::int as llm_calls,
              coalesce(j.tokens, 0)::float8 as tokens, coalesce(e.tool_calls, 0)::int as tool_calls,
              coalesce(e.flagged, 0)::int as flagged
         from page r
         left join (select run_id,
                           (count(*) filter (where status = 'confirmed' and decision ? 'tool'))::int as steps,
                           sum(llm_attempts)::int as llm_calls,
                           -- What the budget counts (budget.ts rowTokens): the columns, not usage.
                           sum(spent_tokens + reserved_tokens)::float8 as tokens
                      from journal where run_id in (select run_id from page) group by run_id) j on j.run_id = r.run_id
         left join (select run_id, (count(*) filter (where status = 'flagged'))::int as flagged,
                           sum(attempts)::int as tool_calls
                      from side_effects where run_id in (select run_id from page) group by run_id) e
                on e.run_id = r.run_id
        order by r.created_at desc, r.run_id desc`,
      params,
    );
    const count = await this.client.query<{ n: number }>(
      `select count(*)::int as n from runs r where ${where}`,
      params.slice(0, 3),
    );
    return { runs, total: count[0]?.n ?? 0 };
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
    const rows = await this.client.query<{ run_id: string } & PrunedRows>(dryRun ? PRUNE_DRY_RUN : PRUNE, [
      ts(before),
      limit,
    ]);
    const out = { runs: rows.map((r) => r.run_id) } as { runs: string[] } & PrunedRows;
    for (const [, as] of PRUNED_FROM) out[as] = rows.reduce((n, r) => n + r[as], 0);
    return out;
  }

  /** The approval request of a tool call, if one was made. */
  async getApproval(key: string): Promise<ApprovalRow | undefined> {
    const rows = await this.client.query<ApprovalRow>(`select * from approvals where idempotency_key = $1`, [
      key,
    ]);
    return rows[0];
  }

  /** Every approval request of a run, by step. */
  async listApprovals(runId: string): Promise<ApprovalRow[]> {
    return await this.client.query<ApprovalRow>(`select * from approvals where run_id = $1 order by seq`, [
      runId,
    ]);
  }

  /**
   * Asks a person to approve a call, or finds their answer, in one fenced
   * statement: the request for these exact arguments is written as `pending`
   * unless it exists already (one for other arguments is replaced), and the
   * run goes to `waiting` with its lease cleared (holding no worker) only if
   * the request is pending after the write. Returns the request as it stands:
   * `approved` or `denied` means a person answered before this statement,
   * and the run is still `running` under this worker, which goes on with the
   * answer. Throws {@link FencedError} when refused. The comment at
   * REQUEST_APPROVAL in this file says why no interleaving with
   * {@link Store.decideApproval} leaves the run waiting on an answered request.
   */
  async requestApproval(
    f: Fence,
    call: { key: string; seq: number; tool: string; args: Json; hash: string },
    now: Date,
  ): Promise<{ approval: ApprovalRow; waiting: boolean }> {
    const rows = await this.client.query<ApprovalRow & { waiting: boolean }>(
      REQUEST_APPROVAL,
      [
        f.runId,
        f.epoch,
        call.key,
        call.seq,
        call.tool,
        jsonParam(call.args, "tool arguments"),
        call.hash,
        ts(now),
      ],
    );
    const row = rows[0];
    if (!row) throw await this.refusal(f, `approval request key=${call.key}`);
    const { waiting, ...approval } = row;
    return { approval, waiting };
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
   * REQUEST_APPROVAL in this file.
   */
  async decideApproval(
    key: string,
    decision: "approved" | "denied",
    by: string,
    reason: string | null,
    now: Date,
  ): Promise<ApprovalAnswer> {
    const rows = await this.client.query<ApprovalRow & { decided: boolean; run_status: RunStatus }>(
      DECIDE_APPROVAL,
      [key, decision, by, textParam(reason), ts(now)],
    );
    const row = rows[0];
    if (!row) return { approval: undefined, decided: false, runStatus: undefined };
    const { decided, run_status, ...approval } = row;
    return { approval, decided, runStatus: run_status };
  }

  /**
   * Records a denied call as that tool's result: a `failed` row that was never
   * sent (attempts 0), so the model sees the refusal. Throws {@link FencedError}
   * when refused.
   */
  async effectDenied(
    f: Fence,
    e: { key: string; seq: number; tool: string; args: Json },
    error: string,
    now: Date,
  ): Promise<SideEffectRow> {
    const rows = await this.client.query<SideEffectRow>(
      `insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at,
                                 confirmed_at, error)
       select $3, $1, $4, $5, $6::text::jsonb, 'failed', 0, $2, $7::timestamptz, $7::timestamptz, $8 where ${FENCE}
       returning *`,
      [
        f.runId,
        f.epoch,
        e.key,
        e.seq,
        e.tool,
        jsonParam(e.args, "tool arguments"),
        ts(now),
        textParam(error),
      ],
    );
    if (rows.length === 0) throw await this.refusal(f, `tool denied key=${e.key}`);
    return rows[0];
  }

  /** One tool call by its idempotency key, if it exists. */
  async getEffect(key: string): Promise<SideEffectRow | undefined> {
    const rows = await this.client.query<SideEffectRow>(
      `select * from side_effects where idempotency_key = $1`,
      [key],
    );
    return rows[0];
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
    const rows = await this.client.query<SideEffectRow & { unblocked: number }>(
      RESOLVE_ONE,
      [key, ...resolutionParams(resolution, by, now)],
    );
    const row = rows[0];
    if (!row) return undefined;
    const { unblocked, ...effect } = row;
    return { effect: effect as SideEffectRow, unblocked: unblocked > 0 };
  }

  /**
   * The flagged calls of blocked runs matching `filter` (every field given),
   * by key, at most `limit`, with how many match in all: what
   * {@link Store.resolveEffects} would settle.
   */
  async flaggedCalls(
    filter: FlaggedFilter,
    limit: number,
  ): Promise<{ calls: SideEffectRow[]; total: number }> {
    const rows = await this.client.query<SideEffectRow & { total: number }>(
      FLAGGED_CALLS,
      [filter.tool ?? null, filter.runId ?? null, limit],
      { planEachTime: true },
    );
    return { calls: rows.map(({ total: _, ...call }) => call as SideEffectRow), total: rows[0]?.total ?? 0 };
  }

  /**
   * {@link Store.resolveEffect} for every flagged call of a blocked run that
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
    const rows = await this.client.query<
      Partial<SideEffectRow> & { matched: number; released: boolean | null }
    >(
      RESOLVE_MANY,
      [
        opts.expect,
        ...resolutionParams(resolution, opts.by, opts.now),
        filter.tool ?? null,
        filter.runId ?? null,
      ],
      { planEachTime: true },
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
   * Cancels a run that is not closed yet. A worker holding it stops at its
   * next write (every fenced write requires `status = 'running'`). Returns
   * the run as it is now, or undefined when it was already closed or missing.
   */
  async cancelRun(runId: string, reason: string, now: Date): Promise<RunRow | undefined> {
    const rows = await this.client.query<RunRow>(
      `update runs set status = 'cancelled', error = $2, updated_at = $3::timestamptz
        where run_id = $1 and status in ${OPEN_STATUSES}
        returning *`,
      [runId, reason, ts(now)],
    );
    return rows[0];
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
    const rows = await this.client.query<RunRow>(
      `with r as (
         update runs set status = 'pending', error = null, heartbeat_at = null, updated_at = $2::timestamptz,
                stuck_claims = 0
          where run_id = $1 and status in ('failed', 'cancelled')
          returning *
       ), e as (
         update side_effects set attempts_at_reopen = attempts
          where run_id = (select run_id from r) and status = 'intent'
          returning 1
       )
       select * from r`,
      [runId, ts(now)],
    );
    return rows[0];
  }
}
