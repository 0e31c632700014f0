/**
 * What a fault aimed at a store statement hits, by the name the statement is
 * declared under (`runtime/store/statements.ts`), never by its text: the
 * fuzzer's transcripts (`stmt#17 journal-confirm (w1)`), its count of
 * distinct positions, and its check that no fenced worker writes all go by
 * it. Variants of one write (a fresh insert and its upsert) are one position.
 *
 * @module
 */

import type { QueryOptions } from "../../runtime/store/driver.ts";
import { type StatementName, statementName } from "../../runtime/store/statements.ts";

/** A position a statement fault can hit. */
export type Position =
  | "journal-intent"
  | "journal-reject"
  | "journal-failure"
  | "tool-failure"
  | "journal-confirm"
  | "tool-intent"
  | "tool-confirm"
  | "tool-settle"
  | "tool-waiting"
  | "wait"
  | "claim"
  | "first-claim"
  | "heartbeat"
  | "finish"
  | "child-create"
  | "create-or-get"
  | "read-history"
  | "read-tool"
  | "read-run"
  | "approval-request"
  | "approval-read"
  /** A call's look for a signal sent to its run (it takes one, or records what it waits for). */
  | "signal-take"
  /** One statement carrying the writes of several runs, or of one run's parallel calls (group commit). */
  | "group-write"
  /** A reservation taken under a limit shared by the fleet (fenced: it writes only for the run's holder). */
  | "limit-take"
  /** Reservations released: not fenced (a reservation is its holder's by id, and a fenced one holds nothing). */
  | "limit-release"
  | "other"
  /** A statement sent without one of the store's names: nothing the runtime sends is. */
  | "unnamed";

/**
 * The position of every statement of the store. A statement added to the
 * store must be placed here (the record is checked to be complete), so a new
 * write cannot slip past {@link isWrite}.
 */
export const POSITIONS: Readonly<Record<StatementName, Position>> = {
  "journal-intent": "journal-intent",
  "journal-intent-upsert": "journal-intent",
  "journal-reject": "journal-reject",
  "journal-confirm": "journal-confirm",
  "effect-intent": "tool-intent",
  "effect-intent-upsert": "tool-intent",
  "effect-denied": "tool-intent",
  "effect-confirm": "tool-confirm",
  "effect-settle": "tool-settle",
  "effect-waiting": "tool-waiting",
  // It lets the run go, as an approval request may: its own position, a fenced write.
  "wait-run": "wait",
  // A run let go until its model may be asked again after an outage: a wait too.
  "retry-run": "wait",
  // A request that failed as in an outage, recorded on its row before it is asked again.
  "journal-failure": "journal-failure",
  "effect-failure": "tool-failure",
  "claim": "claim",
  "first-claim": "first-claim",
  "heartbeat": "heartbeat",
  // They write the lease's column, as the heartbeat does: one position with it.
  "release-run": "heartbeat",
  "release-owner-runs": "heartbeat",
  // A run let go for a worker of the version it moves to, or sent back to its own: the lease's column too.
  "release-for-move": "heartbeat",
  "move-back": "heartbeat",
  "finish-run": "finish",
  // A conversation's answer lets the run wait for its next message; its idle end closes it.
  "answer-message": "wait",
  "end-idle-conversation": "finish",
  "send-message": "other",
  "end-conversation": "other",
  "read-messages": "other",
  "list-answers": "other",
  "memo-intent": "journal-intent",
  // A signal sent from outside; a call's look for one, a fenced write of the call's worker inside its request.
  "send-signal": "other",
  "take-signal": "signal-take",
  "list-signals": "other",
  "read-signal": "other",
  "memo-confirm": "journal-confirm",
  // A family member's close is its finish (with its parent woken and its descendants cancelled).
  "finish-family-run": "finish",
  // A child run created under its parent's fence: a fenced write of the parent's worker.
  "create-child-run": "child-create",
  "read-family": "other",
  "cancel-descendants": "other",
  "list-children": "other",
  "create-or-read": "create-or-get",
  "read-history": "read-history",
  // A watcher's reads (client.stream): no worker sends them.
  "read-history-from": "other",
  "watch-run": "other",
  "read-effect": "read-tool",
  "read-run": "read-run",
  "approval-request": "approval-request",
  "group-write": "group-write",
  "read-approval": "approval-read",
  "list-approvals": "approval-read",
  "insert-run": "other",
  "take-runs": "other",
  "take-family": "other",
  "heartbeat-many": "other",
  "remove-worker": "other",
  "frozen-workers": "other",
  "hosted-agents": "other",
  "register-versions": "other",
  "mark-moves": "other",
  "request-move": "other",
  "live-take-keys": "other",
  "version-order": "other",
  "runs-to-check": "other",
  "list-runs": "other",
  "count-runs": "other",
  "approval-decide": "other",
  "flagged-calls": "other",
  "resolve-one": "other",
  "resolve-many": "other",
  "cancel-run": "other",
  "reopen-run": "other",
  "prune-dry-run": "other",
  "prune": "other",
  "settle-call": "other",
  "count-by-status": "other",
  "agents-with-runs": "other",
  "tokens-by-run": "other",
  "run-view": "other",
  "steps-journal": "other",
  "steps-effects": "other",
  "steps-approvals": "other",
  "whole-value-input": "other",
  "whole-value-output": "other",
  "whole-value-error": "other",
  "whole-value-decision-args": "other",
  "whole-value-decision-message": "other",
  "whole-value-decision-rejections": "other",
  "whole-value-call-args": "other",
  "whole-value-call-result": "other",
  "whole-value-call-error": "other",
  "whole-value-approval-args": "other",
  "whole-value-approval-reason": "other",
  "search-path": "other",
  "schema-version-table": "other",
  "schema-version": "other",
  "schema-columns": "other",
  // Streamed text is no state: a fault there costs watchers a piece, never the run anything.
  "stream-channel": "other",
  "notify-stream": "other",
  // Schedules: the tickers' and the schedule commands' statements, none a run's fenced write.
  "schedule-put": "other",
  "schedule-list": "other",
  "schedule-pause": "other",
  "schedule-resume": "other",
  "schedule-remove": "other",
  "schedules-due": "other",
  "schedules-next": "other",
  "schedule-tick": "other",
  "schedules-channel": "other",
  "limit-take": "limit-take",
  "limit-release": "limit-release",
  // It lets the run go while it waits for a limit: a fenced write, as wait-run is.
  "limit-wait-run": "wait",
  "list-limits": "other",
  "limit-waiting-for": "other",
  // A fork written by a person (client.fork), and the original's call a dry run looks its call up in.
  "fork-run": "other",
  "start-dry-run": "other",
  "original-call": "read-tool",
  "dry-answer": "tool-confirm",
  // A chat handler's log of the chunks it streamed (runtime/chat/): not the run's, never fenced.
  "chat-chunks-append": "other",
  "chat-chunks-read": "other",
};

/** The position of a statement sent with `opts`. */
export function positionOf(opts: QueryOptions | undefined): Position {
  const name = statementName(opts);
  return name === undefined ? "unnamed" : POSITIONS[name];
}

const WRITES: ReadonlySet<Position> = new Set<Position>([
  "journal-intent",
  "group-write",
  "journal-reject",
  "journal-failure",
  "tool-failure",
  "journal-confirm",
  "tool-intent",
  "tool-confirm",
  "tool-settle",
  "tool-waiting",
  "wait",
  "heartbeat",
  "finish",
  "child-create",
  "approval-request",
  "limit-take",
]);

/** True for a position where a worker writes its run under its epoch: a fenced worker must write none. */
export function isWrite(position: Position): boolean {
  return WRITES.has(position);
}
