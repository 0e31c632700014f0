/**
 * One run's fenced writes: what a worker holding a run's epoch writes as it
 * decides and acts (journal intent, refusal and confirm; tool-call intent,
 * confirm, settle and denial; an approval request; the run's end), its lease
 * (heartbeat, release), and why a write was refused. Each write is one
 * statement with the fence inside its own `where` clause: the row is written
 * only while the run is still `running` under the writer's epoch. The fence
 * takes a `for share` lock on the run row, so a concurrent claim (which
 * updates that row) and a fenced write are serialised: a write either commits
 * before the claim or sees the new epoch and writes nothing.
 *
 * Every write returns the row it wrote, which is what the worker then knows
 * of it. Where the statement sends no rows back, the row is built here from
 * the row the worker held and the very values the statement was given (its
 * one `now` included), as the statement computes them: #11 measured
 * `returning *` at 40 to 60 µs a statement on PGlite. store_test.ts checks
 * each built row against the row as `loadHistory` reads it back.
 *
 * @module
 */

import { MAX_ROW_TOKENS } from "../base/values.ts";
import { FencedError } from "../base/errors.ts";
import type { Json } from "../base/values.ts";
import type { ModelParams } from "../model/transcript.ts";
import type { SqlClient } from "./driver.ts";
import { readRun } from "./reads.ts";
import type {
  ApprovalAsk,
  ApprovalRow,
  Decision,
  Fence,
  JournalRow,
  Rejection,
  RunRow,
  SideEffectRow,
  TokenSettlement,
} from "./rows.ts";
import { CALL_OF_RUN, FENCE, jsonParam, queryRows, RUNNING_AT, runWrite, statement } from "./sql.ts";
import { type Statement, textParam, ts } from "./sql.ts";
import type { GroupCommit, GroupedWrite } from "./group_commit.ts";
import { freshEffectRow, freshJournalRow } from "./fresh_rows.ts";

const NO_TOKENS: TokenSettlement = Object.freeze({ released: 0, spent: 0 });

// The texts of the statements a step and a run send, built once: a text built
// per call is a new string each time, which a driver's cache of prepared
// statements must flatten and hash again before it finds its entry (#11).
const HEARTBEAT = statement(
  "heartbeat",
  `update runs set heartbeat_at = $3::timestamptz
        where run_id = $1 and ${RUNNING_AT("$2")}`,
);
const JOURNAL_INTENT_TEXT =
  `insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at, reserved_tokens, params)
       select $1, $3, 'intent', 1, $2, $4::timestamptz, $5, $6::text::jsonb where ${FENCE}`;
const JOURNAL_INTENT = statement("journal-intent", JOURNAL_INTENT_TEXT);
const JOURNAL_INTENT_UPSERT = statement(
  "journal-intent-upsert",
  `${JOURNAL_INTENT_TEXT}
       on conflict (run_id, seq) do update
          set llm_attempts = journal.llm_attempts + 1, epoch = excluded.epoch, intent_at = excluded.intent_at,
              reserved_tokens = journal.reserved_tokens + excluded.reserved_tokens, params = excluded.params
        where journal.status = 'intent'
       returning *`,
);
// An answer settled: its reservation ($n) released, what it counts ($n + 1) added.
const SETTLE_TOKENS = (n: number) =>
  `reserved_tokens = greatest(0, reserved_tokens - $${n}),
              spent_tokens = least(${MAX_ROW_TOKENS}, spent_tokens::bigint + $${n + 1})::int`;
const JOURNAL_REJECT = statement(
  "journal-reject",
  `update journal set rejections = rejections || jsonb_build_array($4::text::jsonb),
              usage = case when $5::text is null then usage else $5::text::jsonb end,
              ${SETTLE_TOKENS(6)}
        where run_id = $1 and seq = $3 and status = 'intent' and ${FENCE}`,
);
const JOURNAL_CONFIRM = statement(
  "journal-confirm",
  `update journal set status = 'confirmed', decision = $4::text::jsonb, usage = $5::text::jsonb,
              confirmed_at = $6::timestamptz, ${SETTLE_TOKENS(7)}
        where run_id = $1 and seq = $3 and status = 'intent' and ${FENCE}`,
);
const EFFECT_INTENT_TEXT =
  `insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
       select $3, $1, $4, $5, $6::text::jsonb, 'intent', 1, $2, $7::timestamptz where ${FENCE}`;
const EFFECT_INTENT = statement("effect-intent", EFFECT_INTENT_TEXT);
const EFFECT_INTENT_UPSERT = statement(
  "effect-intent-upsert",
  `${EFFECT_INTENT_TEXT}
       on conflict (idempotency_key) do update
          set attempts = side_effects.attempts + case when side_effects.status = 'waiting' then 0 else 1 end,
              polls = side_effects.polls + case when side_effects.status = 'waiting' then 1 else 0 end,
              status = 'intent', check_at = null, epoch = excluded.epoch, intent_at = excluded.intent_at
        where side_effects.status in ('intent', 'waiting')
       returning *`,
);
const EFFECT_CONFIRM = statement(
  "effect-confirm",
  `update side_effects set status = 'confirmed', result = $4::text::jsonb, remote = $5,
              confirmed_at = $6::timestamptz, error = null
        where ${CALL_OF_RUN} and status = 'intent'
          and ${FENCE}`,
);
const EFFECT_SETTLE = statement(
  "effect-settle",
  `update side_effects set status = $4, error = $5, confirmed_at = $6::timestamptz, check_at = null
        where ${CALL_OF_RUN} and status in ('intent', 'waiting') and ${FENCE}`,
);
const EFFECT_DENIED = statement(
  "effect-denied",
  `insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at,
                                 confirmed_at, error)
       select $3, $1, $4, $5, $6::text::jsonb, 'failed', 0, $2, $7::timestamptz, $7::timestamptz, $8 where ${FENCE}
       returning *`,
);
const FINISH_RUN = statement(
  "finish-run",
  `update runs set status = $3, error = $4, updated_at = $5::timestamptz, output = $6
        where run_id = $1 and ${RUNNING_AT("$2")}`,
);
const RELEASE_RUN = statement(
  "release-run",
  `update runs set heartbeat_at = null, updated_at = $3::timestamptz, error = $4
        where run_id = $1 and ${RUNNING_AT("$2")}`,
);

// Calls that wait on their remote (HTTP 202). A call's request is written at
// `intent` as any other; the remote's accepted answer moves it to `waiting`
// (EFFECT_WAITING), and the re-send that asks how the job stands writes its
// intent again through EFFECT_INTENT_UPSERT, which moves a waiting row back
// to `intent` counting a poll, not an attempt: `maxAttempts` bounds requests
// that got no answer, and an accepted answer is one. The wait is bounded by
// `wait_deadline_at`, fixed by the first accepted answer. A call at `intent`
// whose `check_at` is set was marked due while it was being asked (a child
// run it started has ended, family.ts): the earlier time is kept, so the run
// is not let go past it (WAIT_RUN wakes it by its calls' own times).
const EFFECT_WAITING = statement(
  "effect-waiting",
  `update side_effects set status = 'waiting', result = $4::text::jsonb,
              check_at = least($5::timestamptz, check_at),
              wait_deadline_at = coalesce(wait_deadline_at, $6::timestamptz), error = null, failing_since = null
        where ${CALL_OF_RUN} and status = 'intent' and ${FENCE}`,
);
// Outages. A request that failed for a reason an outage explains is recorded
// on its row (one more failure, the first one's time kept, the message), and a
// tool call's next request is not sent before $6 (check_at: cleared by that
// request's intent, EFFECT_INTENT_UPSERT). A model request's reservation is
// released when the failure says no answer was written ($6): it was not paid.
const JOURNAL_FAILURE = statement(
  "journal-failure",
  `update journal set failures = failures + 1, failing_since = coalesce(failing_since, $4::timestamptz),
              error = $5, reserved_tokens = greatest(0, reserved_tokens - $6)
        where run_id = $1 and seq = $3 and status = 'intent' and ${FENCE}`,
);
const EFFECT_FAILURE = statement(
  "effect-failure",
  `update side_effects set failures = failures + 1, failing_since = coalesce(failing_since, $4::timestamptz),
              error = $5, check_at = $6::timestamptz
        where ${CALL_OF_RUN} and status = 'intent' and ${FENCE}`,
);
// A run let go until its model may be asked again (its last request failed as
// in an outage): no call of it waits, so nothing but the timer wakes it; $5
// says what it waits for (runs.error, shown by the runs list; the next claim
// clears it once it makes progress).
const RETRY_RUN = statement(
  "retry-run",
  `update runs set status = 'waiting', wake_at = $3::timestamptz, heartbeat_at = null,
              updated_at = $4::timestamptz, error = $5
        where run_id = $1 and ${RUNNING_AT("$2")}`,
);
// A run let go until its calls are due again (a call its remote accepted, or
// one at intent to be sent again after a failure: check_at set on both; $5
// says what the run waits for). It must still be this worker's:
// running under its epoch, or waiting under it (the worker released it for a
// person's answer in the same step, and nobody has taken it since: a claim
// moves the epoch, an answer makes it pending, a cancel closes it). It waits
// only while one of its calls is still `waiting`: a call settled from outside
// (SETTLE_CALL, operators.ts) since the worker last looked leaves it running.
// The run wakes at `wakeAt`, or earlier when a waiting call is due earlier as
// the locking read finds it: a call marked due since the worker read it (a
// child run it started has ended, family.ts) is not slept past.
// Both statements lock the run's row first, then the call's, so they run one
// after the other for a run; the call is read with a locking read, which sees
// its latest row, not this statement's snapshot (see REQUEST_APPROVAL below).
// Calls waiting for a signal (signals.ts): the run records their names and
// this epoch, so a send of one of them wakes it; and the run's signals_sent is
// read under the row lock a send's update takes too, so a send this worker's
// look missed is found here: the run then wakes at once, and the calls that
// looked before it are marked due.
const WAIT_RUN = statement(
  "wait-run",
  `with run as (
         select signals_sent from runs where run_id = $1 and (epoch = $2 and status in ('running', 'waiting')) is true
            for no key update),
       calls as (
         select e.status, e.check_at, e.wait_signal, e.signals_seen from side_effects e
          where e.run_id = $1 and (e.status = 'waiting' or (e.status = 'intent' and e.check_at is not null))
            and exists (select 1 from run)
            for share),
       heard as (
         select 1 from calls
          where status = 'waiting' and wait_signal is not null and signals_seen < (select signals_sent from run)),
       w as (
         update runs set status = 'waiting',
                wake_at = case when exists (select 1 from heard) then $4::timestamptz
                               else least($3::timestamptz, (select min(check_at) from calls)) end,
                signal_waits = (select array_agg(distinct wait_signal) from calls
                                 where status = 'waiting' and wait_signal is not null),
                signal_waits_epoch = $2,
                heartbeat_at = null,
                updated_at = $4::timestamptz, error = $5
          where run_id = $1 and (epoch = $2 and status in ('running', 'waiting')) is true
            and exists (select 1 from calls)
         returning 1),
       due as (
         update side_effects set check_at = $4::timestamptz
          where run_id = $1 and status = 'waiting' and wait_signal is not null
            and signals_seen < (select signals_sent from run) and exists (select 1 from w)
         returning 1)
       select exists (select 1 from run) as held, exists (select 1 from w) as waiting`,
);

// Approvals and liveness. A run may be `waiting` only on a request that is
// still `pending`: nothing else wakes it. Two statements change what that
// depends on: REQUEST_APPROVAL (a worker; the only statement that sets
// `waiting`) and DECIDE_APPROVAL (a person, operators.ts; the only one that answers a
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
// arguments may use it without this statement (step/act.ts).
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
const REQUEST_APPROVAL = statement(
  "approval-request",
  `with run as (
         select 1 from runs where run_id = $1 and ${RUNNING_AT("$2")} for no key update),
       a as (
         insert into approvals (idempotency_key, run_id, seq, tool, args, args_hash, status, requested_at, epoch)
         select c.k, $1, c.s, c.t, c.a::jsonb, c.h, 'pending', $8::timestamptz, $2
           from unnest($3::text[], $4::int[], $5::text[], $6::text[], $7::text[]) as c(k, s, t, a, h)
          where exists (select 1 from run)
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
       select a.*, exists (select 1 from w) as waiting from a order by a.seq`,
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const RUN_WRITE_STATEMENTS = [
  HEARTBEAT,
  JOURNAL_INTENT,
  JOURNAL_INTENT_UPSERT,
  JOURNAL_REJECT,
  JOURNAL_CONFIRM,
  EFFECT_INTENT,
  EFFECT_INTENT_UPSERT,
  EFFECT_CONFIRM,
  EFFECT_SETTLE,
  EFFECT_DENIED,
  FINISH_RUN,
  RELEASE_RUN,
  REQUEST_APPROVAL,
  EFFECT_WAITING,
  WAIT_RUN,
  JOURNAL_FAILURE,
  EFFECT_FAILURE,
  RETRY_RUN,
] as const;

/**
 * A JSON parameter and the value its text reads back as: what a row built
 * from the write holds (NUL characters and lone surrogates written out, as
 * the database has them). For the small values a step writes (usage, a
 * refusal); a decision or a result is kept as given (see the writes).
 */
function writtenJson(value: unknown, what: string): { text: string; value: Json } {
  const text = jsonParam(value, what);
  return { text, value: JSON.parse(text) };
}

/** A row's token columns after a write settled one answer, as SETTLE_TOKENS computes them. */
function settledTokens(
  row: JournalRow,
  tokens: TokenSettlement,
): Pick<JournalRow, "reserved_tokens" | "spent_tokens"> {
  return {
    reserved_tokens: Math.max(0, row.reserved_tokens - tokens.released),
    spent_tokens: Math.min(MAX_ROW_TOKENS, row.spent_tokens + tokens.spent),
  };
}

/**
 * `row`, checked to be of the fenced run: a write finds its row by the
 * fence's run and the row's seq or key, and builds the row it returns from
 * `row`, so the two must agree.
 */
function ofRun<R extends { run_id: string }>(f: Fence, row: R): R {
  if (row.run_id !== f.runId) {
    throw new RangeError(`A write for run ${f.runId} was given a row of run ${row.run_id}`);
  }
  return row;
}

/** How {@link RunWrites.journalIntentRow} writes a step's model request. */
export interface JournalIntent {
  /** Tokens the request reserves against the run's budget (default 0). */
  reserveTokens?: number;
  /**
   * The worker holds no row for the step, so a plain insert does (no `on
   * conflict` arbitration, #11); should the row exist after all, the insert
   * fails on the key and the upsert runs instead. Default false.
   */
  fresh?: boolean;
  /** The parameters the request is sent with, recorded on the row (replacing an earlier attempt's). */
  params?: ModelParams;
}

/** The fenced writes of the runs a worker holds, each refused unless the run is `running` under its epoch. */
export class RunWrites {
  readonly #client: SqlClient;
  readonly #group?: GroupCommit;

  /**
   * Sends its statements through `client`; with `group`, the writes a step's
   * happy path makes (a fresh journal or tool intent, a journal or tool
   * confirm) and a run's close ride group statements with other runs'
   * (group_commit.ts).
   */
  constructor(client: SqlClient, opts: { group?: GroupCommit } = {}) {
    this.#client = client;
    this.#group = opts.group;
  }

  /** The group commit the happy path's writes go through, if any. */
  get group(): GroupCommit | undefined {
    return this.#group;
  }

  /**
   * A fresh intent's plain insert: true when written. With grouping on it
   * rides a group statement, where a row already there is not written
   * (false, as the fence refusing it is): the caller's upsert then runs, as
   * it does after the plain insert's unique violation.
   */
  async #freshInsert(s: Statement, params: unknown[], grouped: GroupedWrite): Promise<boolean> {
    const alone = async () => (await runWrite(this.#client, s, params)) === 1;
    if (this.#group === undefined) return await alone();
    return await this.#group.write(grouped, async () => {
      try {
        return await alone();
      } catch (err) {
        if ((err as { code?: unknown }).code !== "23505") throw err;
        return false;
      }
    });
  }

  /** A confirm's (or a close's) update: true when written, through a group statement when grouping is on. */
  async #confirm(s: Statement, params: unknown[], grouped: GroupedWrite): Promise<boolean> {
    const alone = async () => (await runWrite(this.#client, s, params)) === 1;
    return this.#group === undefined ? await alone() : await this.#group.write(grouped, alone);
  }

  /** Refreshes the lease. False: the fence refused it. */
  async heartbeat(f: Fence, now: Date): Promise<boolean> {
    return (await runWrite(this.#client, HEARTBEAT, [f.runId, f.epoch, ts(now)])) === 1;
  }

  /**
   * Records that a model request for step `seq` is about to be sent: inserts
   * the journal row at `intent`, or counts one more attempt on it, and
   * returns the row as the write left it (the worker keeps it in memory), or
   * throws {@link FencedError}. See {@link JournalIntent} for the options.
   */
  async journalIntentRow(f: Fence, seq: number, now: Date, opts: JournalIntent = {}): Promise<JournalRow> {
    const { reserveTokens = 0, fresh = false } = opts;
    const sentText = opts.params === undefined ? null : jsonParam(opts.params, "model parameters");
    const sent = sentText === null ? null : JSON.parse(sentText) as ModelParams;
    const params = [f.runId, f.epoch, seq, ts(now), reserveTokens, sentText];
    const upsert = async () => (await queryRows<JournalRow>(this.#client, JOURNAL_INTENT_UPSERT, params))[0];
    const grouped: GroupedWrite = {
      kind: "journal-intent",
      runId: f.runId,
      epoch: f.epoch,
      seq,
      at: params[3] as string,
      reserveTokens,
      params: sentText,
    };
    const row = this.#group !== undefined && fresh
      ? (await this.#freshInsert(JOURNAL_INTENT, params, grouped)
        ? freshJournalRow(f, seq, now, reserveTokens, sent)
        : await upsert())
      : await freshOr(
        fresh,
        async () =>
          (await runWrite(this.#client, JOURNAL_INTENT, params)) === 1
            ? freshJournalRow(f, seq, now, reserveTokens, sent)
            : undefined,
        upsert,
      );
    if (row === undefined) throw await this.refusal(f, `journal intent seq=${seq}`);
    return row;
  }

  /**
   * Records an answer the runtime refused for step `row.seq`, so a re-ask can
   * say why, and returns the row as the write left it. `usage`, when given,
   * replaces the step's usage (the refused answer was paid for too: the
   * caller passes the step's running total); `tokens` settles the answer's
   * reservation against what it counts. `row` is the step's row as the
   * worker holds it (its last write's). Throws {@link FencedError} when refused.
   */
  async journalReject(
    f: Fence,
    row: JournalRow,
    refused: { rejection: Rejection; usage?: Json; tokens?: TokenSettlement },
  ): Promise<JournalRow> {
    const { usage, tokens = NO_TOKENS } = refused;
    const rejection = writtenJson(refused.rejection, "refusal");
    const usageWritten = usage === undefined ? undefined : writtenJson(usage, "token usage");
    const written = await runWrite(this.#client, JOURNAL_REJECT, [
      f.runId,
      f.epoch,
      ofRun(f, row).seq,
      rejection.text,
      usageWritten?.text ?? null,
      tokens.released,
      tokens.spent,
    ]);
    if (written === 0) throw await this.refusal(f, `journal reject seq=${row.seq}`);
    return {
      ...row,
      rejections: [...row.rejections, rejection.value as unknown as Rejection],
      usage: usageWritten === undefined ? row.usage : usageWritten.value,
      ...settledTokens(row, tokens),
    };
  }

  /**
   * Commits the decision of step `row.seq`, settling its answer's reservation
   * against what the answer counts, and returns the row as the write left it.
   * `decision` is stored as given: the runtime passes it as it reads back
   * (`toStorable`'s value). Throws {@link FencedError} when refused.
   */
  async journalConfirm(
    f: Fence,
    row: JournalRow,
    confirmed: { decision: Decision; usage: Json | undefined; tokens?: TokenSettlement },
    now: Date,
  ): Promise<JournalRow> {
    const { decision, tokens = NO_TOKENS } = confirmed;
    const usage = writtenJson(confirmed.usage ?? null, "token usage");
    const params = [
      f.runId,
      f.epoch,
      ofRun(f, row).seq,
      jsonParam(decision, "decision"),
      usage.text,
      ts(now),
      tokens.released,
      tokens.spent,
    ] as const;
    const written = await this.#confirm(JOURNAL_CONFIRM, [...params], {
      kind: "journal-confirm",
      runId: f.runId,
      epoch: f.epoch,
      seq: params[2],
      decision: params[3],
      usage: params[4],
      at: params[5],
      released: params[6],
      spent: params[7],
    });
    if (!written) throw await this.refusal(f, `journal confirm seq=${row.seq}`);
    return {
      ...row,
      status: "confirmed",
      decision,
      usage: usage.value,
      confirmed_at: now,
      ...settledTokens(row, tokens),
    };
  }

  /**
   * Records that a tool request under `key` is about to be sent: inserts the
   * row at `intent`, or counts one more attempt on an `intent` row, or moves a
   * `waiting` row back to `intent` counting one more poll (the re-send that
   * asks the remote how the job stands: `attempts` is left alone, and
   * `check_at` cleared), and returns the row as the write left it (the worker keeps it in memory), or
   * throws {@link FencedError}. `fresh`: the worker holds no row for the
   * call, so a plain insert does, as for {@link RunWrites.journalIntentRow}.
   */
  async effectIntentRow(
    f: Fence,
    e: { key: string; seq: number; tool: string; args: Json },
    now: Date,
    fresh = false,
  ): Promise<SideEffectRow> {
    const args = jsonParam(e.args, "tool arguments");
    const at = ts(now);
    const params = [f.runId, f.epoch, e.key, e.seq, e.tool, args, at];
    const upsert = async () =>
      (await queryRows<SideEffectRow>(this.#client, EFFECT_INTENT_UPSERT, params))[0];
    const grouped: GroupedWrite = {
      kind: "effect-intent",
      runId: f.runId,
      epoch: f.epoch,
      key: e.key,
      seq: e.seq,
      tool: e.tool,
      args,
      at,
    };
    const row = this.#group !== undefined && fresh
      ? (await this.#freshInsert(EFFECT_INTENT, params, grouped) ? freshEffectRow(f, e, now) : await upsert())
      : await freshOr(
        fresh,
        async () =>
          (await runWrite(this.#client, EFFECT_INTENT, params)) === 1 ? freshEffectRow(f, e, now) : undefined,
        upsert,
      );
    if (row === undefined) throw await this.refusal(f, `tool intent key=${e.key}`);
    return row;
  }

  /**
   * Commits the outcome of the tool call `row` (as the worker holds it) and
   * returns the row as the write left it. `result` is stored as given: the
   * runtime passes it as it reads back (`toStorable`'s value). Throws
   * {@link FencedError} when refused.
   */
  async effectConfirm(
    f: Fence,
    row: SideEffectRow,
    outcome: { result: Json; remote: "created" | "already_done" | "reconciled" | "original" | "stub" },
    now: Date,
  ): Promise<SideEffectRow> {
    const { result, remote } = outcome;
    const key = ofRun(f, row).idempotency_key;
    const resultText = jsonParam(result, "tool result");
    const at = ts(now);
    const written = await this.#confirm(EFFECT_CONFIRM, [f.runId, f.epoch, key, resultText, remote, at], {
      kind: "effect-confirm",
      runId: f.runId,
      epoch: f.epoch,
      key,
      result: resultText,
      remote,
      at,
    });
    if (!written) throw await this.refusal(f, `tool confirm key=${key}`);
    return { ...row, status: "confirmed", result, remote, confirmed_at: now, error: null };
  }

  /**
   * Marks the tool call `row` (as the worker holds it, at `intent` or
   * `waiting`) `failed` (a permanent error; a waiting call past its deadline)
   * or `flagged` (unknown, needs a human), and returns the row as the write
   * left it. Throws {@link FencedError} when refused.
   */
  async effectSettle(
    f: Fence,
    row: SideEffectRow,
    settled: { status: "failed" | "flagged"; error: string },
    now: Date,
  ): Promise<SideEffectRow> {
    const { status } = settled;
    const key = ofRun(f, row).idempotency_key;
    const error = textParam(settled.error);
    const written = await runWrite(this.#client, EFFECT_SETTLE, [
      f.runId,
      f.epoch,
      key,
      status,
      error,
      ts(now),
    ]);
    if (written === 0) throw await this.refusal(f, `tool ${status} key=${key}`);
    return { ...row, status, error, confirmed_at: now, check_at: null };
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
    const rows = await queryRows<SideEffectRow>(this.#client, EFFECT_DENIED, [
      f.runId,
      f.epoch,
      e.key,
      e.seq,
      e.tool,
      jsonParam(e.args, "tool arguments"),
      ts(now),
      textParam(error),
    ]);
    if (rows.length === 0) throw await this.refusal(f, `tool denied key=${e.key}`);
    return rows[0];
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
   * `Operators.decideApproval` leaves the run waiting on an answered request.
   */
  async requestApproval(
    f: Fence,
    call: ApprovalAsk,
    now: Date,
  ): Promise<{ approval: ApprovalRow; waiting: boolean }> {
    const { approvals, waiting } = await this.requestApprovals(f, [call], now);
    return { approval: approvals[0], waiting };
  }

  /**
   * Asks for the approval of every call in `calls` (the calls of one step
   * that need a person's yes), in one statement: each request is recorded
   * (or, for the same arguments, left as it stands), and the run is set to
   * `waiting` and released when any of them is still pending. Returns the
   * requests as they stand, in seq order, and whether the run now waits.
   * Throws {@link FencedError} when this worker no longer holds the run.
   */
  async requestApprovals(
    f: Fence,
    calls: readonly ApprovalAsk[],
    now: Date,
  ): Promise<{ approvals: ApprovalRow[]; waiting: boolean }> {
    const rows = await queryRows<ApprovalRow & { waiting: boolean }>(this.#client, REQUEST_APPROVAL, [
      f.runId,
      f.epoch,
      calls.map((c) => c.key),
      calls.map((c) => c.seq),
      calls.map((c) => c.tool),
      calls.map((c) => jsonParam(c.args, "tool arguments")),
      calls.map((c) => c.hash),
      ts(now),
    ]);
    if (rows.length !== calls.length) {
      throw await this.refusal(f, `approval request key=${calls.map((c) => c.key).join(",")}`);
    }
    const waiting = rows[0].waiting;
    return { approvals: rows.map(({ waiting: _, ...approval }) => approval), waiting };
  }

  /**
   * Closes (or blocks) the run this worker holds, with the final answer when
   * it is done, and returns the run's columns as the write left them. Throws
   * {@link FencedError} when refused.
   */
  async finishRun(
    f: Fence,
    status: "done" | "failed" | "blocked" | "cancelled",
    error: string | null,
    now: Date,
    output: string | null = null,
  ): Promise<Pick<RunRow, "run_id" | "epoch" | "status" | "error" | "updated_at" | "output">> {
    const written = { error: textParam(error), output: textParam(output) };
    const params = [f.runId, f.epoch, status, written.error, ts(now), written.output];
    const ok = await this.#confirm(FINISH_RUN, params, {
      kind: "run-finish",
      runId: f.runId,
      epoch: f.epoch,
      status,
      error: written.error,
      at: params[4] as string,
      output: written.output,
    });
    if (!ok) throw await this.refusal(f, `finish ${status}`);
    return { run_id: f.runId, epoch: f.epoch, status, ...written, updated_at: now };
  }

  /**
   * Lets go of a run this worker holds after an error the loop could not
   * classify: its lease cleared, so the next take retries it at once (the
   * bound on claims without progress stops one that keeps failing), and the
   * error kept on it, so that bound can name the cause. Fenced on the epoch:
   * false when the run is no longer this worker's to release.
   */
  async releaseRun(f: Fence, error: string, now: Date): Promise<boolean> {
    return (await runWrite(this.#client, RELEASE_RUN, [f.runId, f.epoch, ts(now), textParam(error)])) === 1;
  }

  /**
   * Records that the remote accepted the call `row` (as the worker holds it,
   * at `intent`) and will finish it later: the row goes to `waiting`, with the
   * accepted answer as its `result` (a job id), `checkAt` (when to re-send the
   * call under its key to ask how the job stands) and, unless an earlier
   * accepted answer fixed one, `deadlineAt` (when the call fails if the job is
   * not done). Returns the row as the write left it; throws
   * {@link FencedError} when refused. The re-send writes its intent with
   * {@link RunWrites.effectIntentRow}, which moves the row back to `intent`
   * and counts one more poll (`polls`), not an attempt.
   */
  async effectWaiting(
    f: Fence,
    row: SideEffectRow,
    waiting: { result: Json; checkAt: Date; deadlineAt: Date },
  ): Promise<SideEffectRow> {
    const key = ofRun(f, row).idempotency_key;
    const { result, checkAt, deadlineAt } = waiting;
    const written = await runWrite(this.#client, EFFECT_WAITING, [
      f.runId,
      f.epoch,
      key,
      jsonParam(result, "tool result"),
      ts(checkAt),
      ts(deadlineAt),
    ]);
    if (written === 0) throw await this.refusal(f, `tool waiting key=${key}`);
    return {
      ...row,
      status: "waiting",
      result,
      check_at: checkAt,
      wait_deadline_at: row.wait_deadline_at ?? deadlineAt,
      error: null,
    };
  }

  /**
   * Lets go of the run until `wakeAt` because its calls wait on their
   * remotes (or on a call to be sent again after a failure, its `check_at`
   * set by {@link RunWrites.effectFailure}): the run goes to `waiting` with
   * `wake_at` and `reason` as its error (what it waits for), its lease cleared
   * (holding no worker's slot), for a worker host's take (or a claim) to take
   * it again from then. The run must be this worker's: running under its
   * epoch, or waiting under it for a person's answer this worker asked for
   * in the same step (the timer is then added). Returns true when the run now
   * waits; false when none of its calls is `waiting` any more (one was
   * settled from outside since the worker read it): the run is left as it
   * was, still this worker's, and the worker goes on with the rows as they
   * are now. Throws {@link FencedError} when the run is not this worker's.
   */
  async waitRun(f: Fence, wakeAt: Date, now: Date, reason: string | null = null): Promise<boolean> {
    const rows = await queryRows<{ held: boolean; waiting: boolean }>(this.#client, WAIT_RUN, [
      f.runId,
      f.epoch,
      ts(wakeAt),
      ts(now),
      textParam(reason),
    ]);
    const row = rows[0];
    if (!row?.held) throw await this.refusal(f, `wait until ${ts(wakeAt)}`);
    return row.waiting;
  }

  /**
   * Records that the model request of step `row.seq` (as the worker holds it,
   * at `intent`) failed for a reason an outage explains: one more failure,
   * the first one's time kept, `error` as the last message, and `released`
   * tokens of its reservation given back (a request that got no answer was
   * not paid for). Returns the row as the write left it; throws
   * {@link FencedError} when refused.
   */
  async journalFailure(
    f: Fence,
    row: JournalRow,
    failure: { error: string; released: number },
    now: Date,
  ): Promise<JournalRow> {
    const error = textParam(failure.error);
    const released = Math.min(row.reserved_tokens, Math.max(0, failure.released));
    const written = await runWrite(this.#client, JOURNAL_FAILURE, [
      f.runId,
      f.epoch,
      ofRun(f, row).seq,
      ts(now),
      error,
      released,
    ]);
    if (written === 0) throw await this.refusal(f, `journal failure seq=${row.seq}`);
    return {
      ...row,
      failures: row.failures + 1,
      failing_since: row.failing_since ?? now,
      error,
      reserved_tokens: row.reserved_tokens - released,
    };
  }

  /**
   * Records that the request of the tool call `row` (as the worker holds it,
   * at `intent`) failed for a reason an outage explains: one more failure,
   * the first one's time kept, `error` as the last message, and `retryAt`
   * (`check_at`) as the earliest time it is sent again. Returns the row as the
   * write left it; throws {@link FencedError} when refused.
   */
  async effectFailure(
    f: Fence,
    row: SideEffectRow,
    failure: { error: string; retryAt: Date },
    now: Date,
  ): Promise<SideEffectRow> {
    const key = ofRun(f, row).idempotency_key;
    const error = textParam(failure.error);
    const written = await runWrite(this.#client, EFFECT_FAILURE, [
      f.runId,
      f.epoch,
      key,
      ts(now),
      error,
      ts(failure.retryAt),
    ]);
    if (written === 0) throw await this.refusal(f, `tool failure key=${key}`);
    return {
      ...row,
      failures: row.failures + 1,
      failing_since: row.failing_since ?? now,
      error,
      check_at: failure.retryAt,
    };
  }

  /**
   * Lets go of the run until `wakeAt`, when its model is asked again after a
   * request that failed as in an outage: the run goes to `waiting` with
   * `wake_at` and `reason` (what it waits for) as its error, holding no
   * worker. Throws {@link FencedError} when the run is not this worker's.
   */
  async retryRun(f: Fence, wakeAt: Date, reason: string, now: Date): Promise<void> {
    const written = await runWrite(this.#client, RETRY_RUN, [
      f.runId,
      f.epoch,
      ts(wakeAt),
      ts(now),
      textParam(reason),
    ]);
    if (written === 0) throw await this.refusal(f, `retry at ${ts(wakeAt)}`);
  }

  /** Explains a refused write: the epoch moved (fenced), the run was closed, or the row was not as expected. */
  async refusal(f: Fence, what: string): Promise<FencedError> {
    const run = await readRun(this.#client, f.runId);
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
}

/**
 * Runs `plain` when `fresh`, else `upsert`; and `upsert` too when the plain
 * insert finds the row there after all (a unique violation, 23505).
 */
async function freshOr<T>(fresh: boolean, plain: () => Promise<T>, upsert: () => Promise<T>): Promise<T> {
  if (!fresh) return await upsert();
  try {
    return await plain();
  } catch (err) {
    if ((err as { code?: unknown }).code !== "23505") throw err;
    return await upsert();
  }
}
