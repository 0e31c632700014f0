/**
 * Signals: named events sent to a run from outside (`client.signal`), each
 * kept as a `signals` row until one of the run's tool calls takes it. The
 * send numbers the signal by `runs.signals_sent`, which it bumps in the
 * statement that inserts the row, and wakes the run when it sleeps on calls
 * that wait for that name. A call takes the oldest signal of its name no call
 * has taken, writing its own key on it; a re-send under that key gets the same
 * signal back, so none is taken twice and a crash between the take and the
 * confirm loses none (the key is what a remote's idempotency key is to any
 * other call).
 *
 * A send may race a call that looks and finds nothing: the look records on
 * the call's row the `signals_sent` it saw, and the statement that lets the
 * run sleep (WAIT_RUN, run_writes.ts) compares it with the run's count, which
 * it reads under the run's row lock that the send's update takes too, so one
 * of the two sees the other: the send wakes a run asleep on its name, or the
 * sleep finds a send it had not seen and wakes the run at once.
 *
 * @module
 */

import { FencedError } from "../base/errors.ts";
import type { Json } from "../base/values.ts";
import type { SqlClient } from "./driver.ts";
import { readRun } from "./reads.ts";
import type { Fence, SideEffectRow } from "./rows.ts";
import { CALL_OF_RUN, jsonParam, OPEN_STATUSES, queryRows, RUNNING_AT, statement, ts } from "./sql.ts";

/** A row of `signals`: one named event sent to a run. */
export interface SignalRow {
  /** The run it was sent to. */
  run_id: string;
  /** Its place among the run's signals: 1, 2, ... in the order they came. */
  seq: number;
  /** The sender's id for it: a retried send with it is one signal. */
  signal_id: string;
  /** What happened: calls wait for signals by name. */
  name: string;
  /** What the sender said with it; null when it said nothing. */
  payload: Json | null;
  /** When it was sent. */
  sent_at: Date;
  /** The key of the call that took it; null while none has. */
  consumed_by: string | null;
  /** When it was taken. */
  consumed_at: Date | null;
}

/** What a send did: the signal as stored, and whether an earlier send with its id had stored it. */
export interface SentSignal {
  /** The signal (the earlier one for a duplicate). */
  signal: SignalRow;
  /** True when a send with this id had stored it already: nothing was written. */
  duplicate: boolean;
  /** True when the run slept on calls waiting for this name, and was woken now. */
  woken: boolean;
}

/** What a call's look for a signal found. */
export type SignalTake =
  /** The signal the call now holds; `again` when an earlier request under its key had taken it. */
  | { kind: "taken"; signal: SignalRow; again: boolean }
  /** None: the call's row now records the name it waits for and the count it saw (`row`, as written). */
  | { kind: "none"; row: SideEffectRow };

// $1 run, $2 name, $3 signal id, $4 payload, $5 now. A duplicate id (committed before this statement's
// snapshot) writes nothing and returns the stored row; a racing duplicate fails the insert (23505), the
// whole statement with it (the count too), and the caller sends again, finding it. The count is bumped on
// the run's row whatever the run is doing: a worker that lets the run sleep reads it under the same row
// lock (see the module's comment). A run asleep at the epoch it slept on calls waiting for this name is
// woken now; the waiting calls it can see are marked due (WAIT_RUN marks any it could not).
const SEND_SIGNAL = statement(
  "send-signal",
  `with dup as (select * from signals where run_id = $1 and signal_id = $3),
       run as (
         update runs set signals_sent = signals_sent + 1,
                wake_at = case when status = 'waiting' and signal_waits_epoch = epoch and $2 = any(signal_waits)
                               then least(coalesce(wake_at, $5::timestamptz), $5::timestamptz) else wake_at end
          where run_id = $1 and status in ${OPEN_STATUSES} and not exists (select 1 from dup)
         returning signals_sent,
                   (status = 'waiting' and signal_waits_epoch = epoch and $2 = any(signal_waits)) is true as woken),
       s as (
         insert into signals (run_id, seq, signal_id, name, payload, sent_at)
         select $1, run.signals_sent, $3, $2, $4::text::jsonb, $5::timestamptz from run
         returning *),
       due as (
         update side_effects set check_at = $5::timestamptz
          where run_id = $1 and status = 'waiting' and wait_signal = $2 and check_at > $5::timestamptz
            and exists (select 1 from s)
         returning 1)
  select s.*, false as duplicate, (select woken from run) as woken from s
  union all
  select dup.*, true, false from dup`,
);

// $1 run, $2 epoch, $3 the call's key, $4 name, $5 now. Fenced: the run running at this worker's epoch
// (for share, as every fenced write) and the call at intent (its request under way). The signal this key
// took before, if any; else the oldest of the name no call has taken (skip locked: a call of the same
// step taking one at the same moment takes the next); else the call's row records the name and the
// count seen.
const TAKE_SIGNAL = statement(
  "take-signal",
  `with run as (
         select signals_sent from runs where run_id = $1 and ${RUNNING_AT("$2")} for share),
       call as (
         select 1 from side_effects
          where ${CALL_OF_RUN} and status = 'intent' and exists (select 1 from run)
            for no key update),
       mine as (
         select * from signals where consumed_by = $3 and run_id = $1 and name = $4
            and exists (select 1 from call)),
       next as (
         select seq from signals
          where run_id = $1 and name = $4 and consumed_by is null
            and exists (select 1 from call) and not exists (select 1 from mine)
          order by seq limit 1
            for update skip locked),
       took as (
         update signals set consumed_by = $3, consumed_at = $5::timestamptz
          where run_id = $1 and seq = (select seq from next) and consumed_by is null
         returning *),
       marked as (
         update side_effects set wait_signal = $4, signals_seen = (select signals_sent from run)
          where idempotency_key = $3 and exists (select 1 from call)
            and not exists (select 1 from mine) and not exists (select 1 from took)
         returning 1)
  select x.*, (select count(*) from call)::int as held, (select signals_sent from run) as seen
    from (select 1) one
    left join (select mine.*, true as again from mine union all select took.*, false as again from took) x on true`,
);

const LIST_SIGNALS = statement(
  "list-signals",
  `select * from signals where run_id = $1 and seq > $2 order by seq limit $3`,
);

const READ_SIGNAL = statement(
  "read-signal",
  `select * from signals where run_id = $1 and signal_id = $2`,
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const SIGNAL_STATEMENTS = [SEND_SIGNAL, TAKE_SIGNAL, LIST_SIGNALS, READ_SIGNAL] as const;

/** The statements of signals: a send, a call's take, and the reads. */
export class Signals {
  readonly #client: SqlClient;

  /** Wraps a driver. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /**
   * Stores a signal for a run that is not closed (pending, running, waiting
   * or blocked), numbering it and waking the run when it sleeps on calls
   * waiting for `name`, or finds the signal an earlier send with the same id
   * stored. Undefined when the run is missing or closed (the caller reads it
   * to say which). `payload` must be storable (the caller checks it).
   */
  async send(
    s: { runId: string; name: string; signalId: string; payload: Json | null },
    now: Date,
  ): Promise<SentSignal | undefined> {
    const params = [s.runId, s.name, s.signalId, jsonParam(s.payload, "signal payload"), ts(now)];
    let rows: (SignalRow & { duplicate: boolean; woken: boolean })[];
    try {
      rows = await queryRows(this.#client, SEND_SIGNAL, params);
    } catch (err) {
      // A send with the same id committed while this one waited for the run's row: it is the signal.
      if ((err as { code?: unknown }).code !== "23505") throw err;
      rows = await queryRows(this.#client, SEND_SIGNAL, params);
    }
    const [row] = rows;
    if (!row) return undefined;
    const { duplicate, woken, ...signal } = row;
    return { signal, duplicate, woken };
  }

  /**
   * The look of the call `row` (as this worker holds it, at `intent`, under
   * its fence `f`) for a signal named `name`: the one its key took before, or
   * the oldest not taken (taken now), or none (the call's row then records
   * what it waits for, and comes back as written). Throws
   * {@link FencedError} when the run is not this worker's (`FENCED`,
   * `RUN_CLOSED`) or the call is not at `intent` (`STALLED`).
   */
  async take(f: Fence, row: SideEffectRow, name: string, now: Date): Promise<SignalTake> {
    const key = row.idempotency_key;
    const [found] = await queryRows<
      Partial<SignalRow> & { again: boolean | null; held: number; seen: number | null }
    >(this.#client, TAKE_SIGNAL, [f.runId, f.epoch, key, name, ts(now)]);
    if (!found || found.held === 0 || row.run_id !== f.runId) throw await this.#refusal(f, key);
    const { again, held: _held, seen, ...signal } = found;
    if (signal.seq === null || signal.seq === undefined) {
      return { kind: "none", row: { ...row, wait_signal: name, signals_seen: seen } };
    }
    return { kind: "taken", signal: signal as SignalRow, again: again === true };
  }

  /** Up to `limit` signals of a run after `afterSeq` (0: from the first), in the order they came. */
  async list(runId: string, opts: { afterSeq?: number; limit?: number } = {}): Promise<SignalRow[]> {
    return await queryRows<SignalRow>(this.#client, LIST_SIGNALS, [
      runId,
      opts.afterSeq ?? 0,
      opts.limit ?? 1_000,
    ]);
  }

  /** The signal of a run with the sender's id `signalId`, if any. */
  async get(runId: string, signalId: string): Promise<SignalRow | undefined> {
    const [row] = await queryRows<SignalRow>(this.#client, READ_SIGNAL, [runId, signalId]);
    return row;
  }

  /** Why a take was refused: the run is another worker's or closed, or the call's row moved on. */
  async #refusal(f: Fence, key: string): Promise<FencedError> {
    const run = await readRun(this.#client, f.runId);
    const where = `run ${f.runId} is ${run ? `${run.status} at epoch ${run.epoch}` : "gone"}`;
    if (!run || run.epoch !== f.epoch) {
      return new FencedError("FENCED", `Signal not taken for ${key}: ${where}, this worker holds ${f.epoch}`);
    }
    if (run.status !== "running") {
      return new FencedError("RUN_CLOSED", `Signal not taken for ${key}: ${where}`);
    }
    return new FencedError(
      "STALLED",
      `Signal not taken for ${key}: the call is not at intent as this worker left it (${where})`,
    );
  }
}
