/**
 * Journal and effect rows as a worker reads them back, for tests that build
 * a run's state by hand (the transcript from rows, the wire it becomes).
 *
 * @module
 */

import type { Decision, JournalRow, Rejection, SideEffectRow } from "../store/store.ts";
import type { Json } from "../agent/tools.ts";

const AT = new Date("2030-01-02T03:04:05Z");

/** Step `seq`'s journal row: confirmed with `decision`, or at intent (with the answers refused so far). */
export function journalRow(
  runId: string,
  seq: number,
  decision: Decision | null,
  rejections: Rejection[] = [],
): JournalRow {
  return {
    run_id: runId,
    seq,
    status: decision ? "confirmed" : "intent",
    decision,
    llm_attempts: 1 + rejections.length,
    usage: null,
    rejections,
    epoch: 1,
    intent_at: AT,
    confirmed_at: decision ? AT : null,
    reserved_tokens: 0,
    spent_tokens: 0,
    params: null,
    failures: 0,
    failing_since: null,
    error: null,
  };
}

/** Step `seq`'s tool call, confirmed unless `row` says otherwise. */
export function effectRow(
  runId: string,
  seq: number,
  call: { tool: string; args: Json },
  row: Partial<SideEffectRow>,
): SideEffectRow {
  return {
    idempotency_key: `${runId}:${seq}`,
    run_id: runId,
    seq,
    tool: call.tool,
    args: call.args,
    status: "confirmed",
    result: null,
    remote: null,
    error: null,
    attempts: 1,
    epoch: 1,
    intent_at: AT,
    confirmed_at: AT,
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
    ...row,
  };
}
