/**
 * The rows a fresh intent's plain insert writes, built from the values the
 * statement was given rather than read back (`run_writes.ts`: a fresh intent
 * is a plain insert, and the worker goes on with the row it wrote). A column
 * added to `journal` or `side_effects` is added here with the default the
 * schema gives it; `fresh_rows_test.ts` holds the two to the rows the
 * database reads back.
 *
 * @module
 */

import type { Json } from "../base/values.ts";
import type { ModelParams } from "../model/transcript.ts";
import type { Fence, JournalRow, SideEffectRow } from "./rows.ts";

/**
 * The journal row a fresh model request's plain insert writes (`journal-intent`),
 * from the very values the statement was given: `now` is the `intent_at`
 * written, the other columns the schema's defaults.
 */
export function freshJournalRow(
  f: Fence,
  seq: number,
  now: Date,
  reserveTokens: number,
  params: ModelParams | null,
): JournalRow {
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
    params,
    failures: 0,
    failing_since: null,
    error: null,
  };
}

/** The tool call's row a fresh request's plain insert writes (`effect-intent`), as {@link freshJournalRow}. */
export function freshEffectRow(
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
    check_at: null,
    wait_deadline_at: null,
    polls: 0,
    failures: 0,
    failing_since: null,
    wait_signal: null,
    signals_seen: null,
  };
}
