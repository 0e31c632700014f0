/**
 * Every status a row can hold, declared once as a constant with its type
 * derived from it: the run's, a step's (journal), a tool call's, an approval
 * request's, and what the remote said of a call. The `check` constraints of
 * schema.sql list the same values (statuses_test.ts compares them with the
 * database's own catalog).
 *
 * @module
 */

/** Every status a run can be in, in the order a run moves through them (`runs_status_check`). */
export const RUN_STATUSES = [
  "pending",
  "running",
  "waiting",
  "blocked",
  "done",
  "failed",
  "cancelled",
] as const;

/** Status of a run. */
export type RunStatus = typeof RUN_STATUSES[number];

/** True when `value` is one of {@link RUN_STATUSES}. */
export function isRunStatus(value: unknown): value is RunStatus {
  return (RUN_STATUSES as readonly unknown[]).includes(value);
}

/** The statuses of a run still going on: it can be cancelled, and its waiting calls answered. */
export const OPEN_RUN_STATUSES: readonly RunStatus[] = ["pending", "running", "waiting", "blocked"];

/** Every status of a step's journal row: its decision asked for, then committed. */
export const JOURNAL_STATUSES = ["intent", "confirmed"] as const;

/** Status of a journal row. */
export type JournalStatus = typeof JOURNAL_STATUSES[number];

/**
 * Every status of a tool call: `intent` (the outcome is unknown), `waiting`
 * (the remote accepted the work and will finish it later: the call is re-sent
 * under its key at its `check_at` to ask how the job stands), `confirmed`
 * (the remote answered), `flagged` (a person must settle it), `failed`.
 */
export const EFFECT_STATUSES = ["intent", "waiting", "confirmed", "flagged", "failed"] as const;

/** Status of a tool call. */
export type EffectStatus = typeof EFFECT_STATUSES[number];

/** Every status of a request for a person's approval. */
export const APPROVAL_STATUSES = ["pending", "approved", "denied"] as const;

/** Status of an approval request. */
export type ApprovalStatus = typeof APPROVAL_STATUSES[number];

/**
 * What a confirmed tool call's remote did: `created` (the work, for this
 * request), `already_done` (an earlier request with the key did it),
 * `reconciled` (the tool's `reconcile` found it had happened), `resolved`
 * (a person settled a flagged call); in a fork (docs/fork.md), never sent:
 * `original` (the original run's recorded result: a step copied, or a call
 * with the same tool and arguments), `stub` (the tool's stub answered).
 */
export const REMOTE_OUTCOMES = [
  "created",
  "already_done",
  "reconciled",
  "resolved",
  "original",
  "stub",
] as const;

/** What a tool call's remote did. */
export type RemoteOutcome = typeof REMOTE_OUTCOMES[number];
