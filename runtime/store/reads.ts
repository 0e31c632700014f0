/**
 * Reads of one run's rows, shared by every audience: its `runs` row (a
 * refused write explains itself with it), its history (a worker resumes from
 * it, an operator inspects it), one tool call, and its approval requests.
 *
 * @module
 */

import type { SqlClient } from "./driver.ts";
import type {
  ApprovalRow,
  Decision,
  EffectStatus,
  JournalRow,
  Rejection,
  RunRow,
  RunStatus,
  SideEffectRow,
} from "./rows.ts";
import { queryRows, statement } from "./sql.ts";
import type { Json } from "../base/values.ts";
import type { ModelParams } from "../model/transcript.ts";

const READ_RUN = statement("read-run", `select * from runs where run_id = $1`);

// Both tables in one `union all` (#11: it was two statements), each row tagged
// with its table, the other table's columns null. Columns stay typed (no
// `to_jsonb`), so timestamps come back as `Date` on both drivers. `from` is
// an extra condition on `seq` (each table's key begins `run_id, seq`, so it
// is a range of that key).
const historyText = (from: string) =>
  `select 'j' as tbl, run_id, seq, status, epoch, intent_at, confirmed_at, failures, failing_since, error,
              decision, llm_attempts, usage, rejections, reserved_tokens, spent_tokens, params,
              null::text as idempotency_key, null::text as tool, null::jsonb as args, null::jsonb as result,
              null::text as remote, null::int as attempts,
              null::text as resolved_by, null::timestamptz as resolved_at, null::int as attempts_at_reopen,
              null::timestamptz as check_at, null::timestamptz as wait_deadline_at, null::int as polls,
              null::text as wait_signal, null::int as signals_seen
         from journal where run_id = $1${from}
       union all
       select 'e', run_id, seq, status, epoch, intent_at, confirmed_at, failures, failing_since, error,
              null, null, null, null, null, null, null,
              idempotency_key, tool, args, result, remote, attempts, resolved_by, resolved_at,
              attempts_at_reopen, check_at, wait_deadline_at, polls, wait_signal, signals_seen
         from side_effects where run_id = $1${from}
       order by tbl desc, seq`;
const READ_HISTORY = statement("read-history", historyText(""));

/**
 * A watcher's later reads (watch.ts): the rows at or after the lowest step
 * whose rows may still change or appear ($2), not the whole history again.
 * The body of `read_history_from` (schema.sql, migration 22; reads_test.ts
 * holds them equal), which keeps one generic plan per session: sent as a
 * statement, it was planned at every read once the tables had statistics.
 * Its rows are sorted again outside: SQL promises no order from a function.
 */
export const HISTORY_FROM_QUERY = historyText(" and seq >= $2");
const READ_HISTORY_FROM = statement(
  "read-history-from",
  `select * from read_history_from($1, $2::int) order by tbl desc, seq`,
);

// What a watcher follows of the run's own row, and nothing longer: `output`
// (a final answer of any size) and `input` are not read on every poll.
const WATCH_RUN = statement(
  "watch-run",
  `select status, epoch, error, (status = 'waiting' and idle_since is not null) as idle
     from runs where run_id = $1`,
);

const READ_EFFECT = statement("read-effect", `select * from side_effects where idempotency_key = $1`);
const READ_APPROVAL = statement("read-approval", `select * from approvals where idempotency_key = $1`);
const LIST_APPROVALS = statement("list-approvals", `select * from approvals where run_id = $1 order by seq`);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const READ_STATEMENTS = [
  READ_RUN,
  READ_HISTORY,
  READ_HISTORY_FROM,
  WATCH_RUN,
  READ_EFFECT,
  READ_APPROVAL,
  LIST_APPROVALS,
] as const;

/** A row of {@link RunReads.loadHistory}'s one statement: either table's columns, tagged with its table. */
interface HistoryRow {
  tbl: "j" | "e";
  run_id: string;
  seq: number;
  status: string;
  epoch: number;
  intent_at: Date;
  confirmed_at: Date | null;
  failures: number;
  failing_since: Date | null;
  decision: Json | null;
  llm_attempts: number | null;
  usage: Json | null;
  rejections: Rejection[] | null;
  reserved_tokens: number | null;
  spent_tokens: number | null;
  params: ModelParams | null;
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
  check_at: Date | null;
  wait_deadline_at: Date | null;
  polls: number | null;
  wait_signal: string | null;
  signals_seen: number | null;
}

/** A run's journal and tool-call rows, by `seq`. */
export interface RunHistory {
  /** Its decisions. */
  journal: JournalRow[];
  /** Its tool calls. */
  effects: SideEffectRow[];
}

/** What a watcher reads of a run's own row on each poll (`watch.ts`). */
export interface WatchedRun {
  /** Where it stands. */
  status: RunStatus;
  /** The epoch of its latest claim. */
  epoch: number;
  /** Why it failed, was blocked or cancelled. */
  error: string | null;
  /** True for a conversation waiting for its next message. */
  idle: boolean;
}

/** The rows of the history statements, split by table. */
function splitHistory(rows: HistoryRow[]): RunHistory {
  const journal: JournalRow[] = [];
  const effects: SideEffectRow[] = [];
  for (const r of rows) {
    const { run_id, seq, status, epoch, intent_at, confirmed_at, failing_since, error } = r;
    const failures = r.failures ?? 0;
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
        params: r.params ?? null,
        failures,
        failing_since,
        error,
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
        error,
        attempts: r.attempts!,
        epoch,
        intent_at,
        confirmed_at,
        resolved_by: r.resolved_by,
        resolved_at: r.resolved_at,
        attempts_at_reopen: r.attempts_at_reopen,
        check_at: r.check_at,
        wait_deadline_at: r.wait_deadline_at,
        polls: r.polls ?? 0,
        failures,
        wait_signal: r.wait_signal,
        signals_seen: r.signals_seen,
        failing_since,
      });
    }
  }
  return { journal, effects };
}

/** One run, if it exists: the read a refused write explains itself with, and create-or-read falls back on. */
export async function readRun(client: SqlClient, runId: string): Promise<RunRow | undefined> {
  return (await queryRows<RunRow>(client, READ_RUN, [runId]))[0];
}

/** The reads of one run's rows. */
export class RunReads {
  readonly #client: SqlClient;

  /** Reads through `client`. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /** One run, if it exists. */
  async getRun(runId: string): Promise<RunRow | undefined> {
    return await readRun(this.#client, runId);
  }

  /**
   * Everything needed to resume: the journal and the tool calls of a run, by
   * `seq`, in one statement (one snapshot for both is also the more honest read).
   */
  async loadHistory(runId: string): Promise<RunHistory> {
    return splitHistory(await queryRows<HistoryRow>(this.#client, READ_HISTORY, [runId]));
  }

  /**
   * The journal and tool-call rows of a run at step `fromSeq` or later, as
   * {@link RunReads.loadHistory} reads them all: what a watcher reads again
   * after its first read (`watch.ts`).
   */
  async historyFrom(runId: string, fromSeq: number): Promise<RunHistory> {
    return splitHistory(await queryRows<HistoryRow>(this.#client, READ_HISTORY_FROM, [runId, fromSeq]));
  }

  /** What a watcher follows of a run's row (no input, no output), if the run exists. */
  async watchRun(runId: string): Promise<WatchedRun | undefined> {
    return (await queryRows<WatchedRun>(this.#client, WATCH_RUN, [runId]))[0];
  }

  /** One tool call by its idempotency key, if it exists. */
  async getEffect(key: string): Promise<SideEffectRow | undefined> {
    return (await queryRows<SideEffectRow>(this.#client, READ_EFFECT, [key]))[0];
  }

  /** The approval request of a tool call, if one was made. */
  async getApproval(key: string): Promise<ApprovalRow | undefined> {
    return (await queryRows<ApprovalRow>(this.#client, READ_APPROVAL, [key]))[0];
  }

  /** Every approval request of a run, by step. */
  async listApprovals(runId: string): Promise<ApprovalRow[]> {
    return await queryRows<ApprovalRow>(this.#client, LIST_APPROVALS, [runId]);
  }
}
