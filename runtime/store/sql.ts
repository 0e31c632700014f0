/**
 * What the store's statements are made of: a statement declared with its
 * name, the conditions several statements share (the fence, a run running at
 * an epoch, a run a claim may take), and the parameter helpers every write
 * goes through. Each condition is stated once, with the measured plan it
 * avoids written beside it.
 *
 * @module
 */

import { isoTimestamp } from "../base/clock.ts";
import type { QueryOptions, SqlClient } from "./driver.ts";
import { OPEN_RUN_STATUSES } from "./rows.ts";
import { storableJson } from "../base/storable.ts";

/** A statement: its name, stable however its text is formatted, its text, and what it is sent with. */
export interface Statement<N extends string = string> {
  /** The name counting, the fuzzer and the bench know it by. */
  readonly name: N;
  /** The SQL, the same on both drivers. */
  readonly text: string;
  /** Sent with every execution: the name, and whether to plan it each time. */
  readonly options: Readonly<QueryOptions>;
}

/** Declares a statement under `name` (the options object is built once, not per execution). */
export function statement<const N extends string>(
  name: N,
  text: string,
  opts: { planEachTime?: boolean } = {},
): Statement<N> {
  return Object.freeze({ name, text, options: Object.freeze({ name, ...opts }) });
}

/** Sends `s` and returns its rows. */
export function queryRows<T>(client: SqlClient, s: Statement, params: unknown[]): Promise<T[]> {
  return client.query<T>(s.text, params, s.options);
}

/** Sends the write `s` and returns how many rows it wrote (no rows come back). */
export function runWrite(client: SqlClient, s: Statement, params: unknown[]): Promise<number> {
  return client.run(s.text, params, s.options);
}

// A runs row still `running` under `epoch`, as one boolean test rather than
// two comparisons, so no index on status can serve it: a statement finding its
// run by id must use the primary key. Written as plain comparisons, the generic
// plan of a prepared statement made while the tables were small (PGlite never
// analyses them; a fresh PostgreSQL table has no statistics until autovacuum)
// picked an index on status and walked every run in flight: measured with 3,000
// runs in flight, each fenced write visited 3,001 index entries (plans_test.ts).
/** The condition "the runs row (of `table`) is `running` under `epoch`". */
export const RUNNING_AT = (epoch: string, table = "runs"): string =>
  `(${table}.epoch = ${epoch} and ${table}.status = 'running') is true`;

// A runs row a claim may take from `epoch`, as one boolean test for the same
// reason: written as plain comparisons, `status in ('pending', 'running')`
// matches the predicate of the partial take-order index, and a generic plan
// made without statistics used that index for the run id (not its first
// column), reading the whole index to find one run: measured with 6,000 runs
// open, 31 pages on PGlite and 51 on PostgreSQL for each claim, and a claim
// on PGlite cost about 400 µs against 120 µs for an insert (plans_test.ts).
/**
 * The condition "a claim may take the run from `epoch`": pending or running,
 * or, given the claim's `now`, waiting on its calls' remotes with its wake
 * time come (a run waiting only for a person has none, and is never claimed).
 */
export const CLAIMABLE_AT = (epoch: string, now?: string): string =>
  now === undefined
    ? `(epoch = ${epoch} and status in ('pending', 'running')) is true`
    : `(epoch = ${epoch} and (status in ('pending', 'running') or (status = 'waiting' and wake_at <= ${now}))) is true`;

// `for share` makes a racing claim wait for this statement (or this statement
// see the claim's new epoch), instead of both reading one snapshot.
/** The fence, as a condition on the runs row of $1 at epoch $2. */
export const FENCE = `exists (select 1 from runs where run_id = $1 and ${RUNNING_AT("$2")} for share)`;

/**
 * A call's row by its key ($3), of run $1: found through the primary key, its
 * run checked on the row found. Written as one boolean test so no index can
 * take the run's condition: as a plain `run_id = $1`, a generic plan made on
 * a fresh database (both indexes alike on a table that small) went through
 * the (run_id, seq) index and filtered every call of the run, and kept doing
 * so as the run grew (#39: a tool confirm at step 10,000 read 9,998 rows,
 * 2.3 ms; claim_length_test.ts).
 */
export const CALL_OF_RUN = `idempotency_key = $3 and (run_id = $1) is true`;

/** {@link OPEN_RUN_STATUSES} as an SQL list. */
export const OPEN_STATUSES = `(${OPEN_RUN_STATUSES.map((s) => `'${s}'`).join(", ")})`;

/**
 * A JSON parameter. Every JSON value is written through storable.ts's one
 * check: what jsonb would refuse or change throws a ValueUnstorableError
 * naming the value before any statement is sent, and NUL characters and lone
 * surrogates are written out as the text of their escapes. Callers that must
 * refuse those instead (a model's answer, a run's input) check first, with the
 * same function.
 */
export const jsonParam = (value: unknown, what: string): string =>
  storableJson(value, what, { writeOut: true });

/**
 * A text parameter as the database stores it: any NUL character written out
 * as `\u0000`, and a lone surrogate as U+FFFD, which is what encoding the
 * text as UTF-8 sends for it anyway. So the value sent is the value a read
 * gives back: what a write's returned row holds (run_writes.ts).
 */
export const textParam = (value: string | null): string | null =>
  value === null ? null : value.replaceAll("\0", "\\u0000").toWellFormed();

/** A timestamp parameter (sent as text, cast with `::timestamptz`). */
export const ts: (d: Date) => string = isoTimestamp;
