/**
 * The catalogue of the store's statements: every one the runtime sends,
 * each declared once beside its text (in the file of the audience it serves)
 * under a name that travels with it to the driver ({@link QueryOptions.name}).
 * Counting, the fuzzer's fault positions and the bench's figures go by these
 * names, so reformatting a statement cannot relabel it.
 *
 * @module
 */

import type { QueryOptions } from "./driver.ts";
import { CHAT_CHUNK_STATEMENTS } from "./chat_chunks.ts";
import { CONVERSATION_STATEMENTS } from "./conversations.ts";
import { FAMILY_STATEMENTS } from "./families.ts";
import { FORK_STATEMENTS } from "./forks.ts";
import { GROUP_COMMIT_STATEMENTS } from "./group_commit.ts";
import { LEASE_STATEMENTS } from "./leases.ts";
import { LIMIT_STATEMENTS } from "./limits.ts";
import { MIGRATE_STATEMENTS } from "./migrate.ts";
import { NOTIFY_STATEMENTS } from "./notify.ts";
import { OPERATOR_STATEMENTS } from "./operators.ts";
import { OVERVIEW_STATEMENTS } from "./overview.ts";
import { READ_STATEMENTS } from "./reads.ts";
import { RUN_WRITE_STATEMENTS } from "./run_writes.ts";
import { SCHEMA_CHECK_STATEMENTS } from "./schema_check.ts";
import { SCHEDULE_STATEMENTS } from "./schedules.ts";
import { SIGNAL_STATEMENTS } from "./signals.ts";
import type { Statement } from "./sql.ts";
import { VERSION_STATEMENTS } from "./versions.ts";

/**
 * The name of one of the store's statements. Spelt out here as well as
 * beside each statement because a published type must be written out (JSR
 * refuses types inferred from calls); the module does not compile while the
 * two lists differ, so a statement added, renamed or dropped is changed in
 * both.
 */
export type StatementName =
  // runWrites
  | "heartbeat"
  | "journal-intent"
  | "journal-intent-upsert"
  | "journal-reject"
  | "journal-confirm"
  | "effect-intent"
  | "effect-intent-upsert"
  | "effect-confirm"
  | "effect-settle"
  | "effect-denied"
  | "finish-run"
  | "release-run"
  | "approval-request"
  | "effect-waiting"
  | "wait-run"
  | "journal-failure"
  | "effect-failure"
  | "retry-run"
  | "group-write"
  // reads
  | "read-run"
  | "read-history"
  | "read-history-from"
  | "watch-run"
  | "read-effect"
  | "read-approval"
  | "list-approvals"
  // leases
  | "insert-run"
  | "create-or-read"
  | "first-claim"
  | "claim"
  | "take-runs"
  | "take-family"
  | "heartbeat-many"
  | "remove-worker"
  | "release-owner-runs"
  | "frozen-workers"
  | "hosted-agents"
  // operators
  | "list-runs"
  | "count-runs"
  | "approval-decide"
  | "flagged-calls"
  | "resolve-one"
  | "resolve-many"
  | "reopen-run"
  | "prune-dry-run"
  | "prune"
  | "settle-call"
  // families
  | "create-child-run"
  | "read-family"
  | "finish-family-run"
  | "cancel-run"
  | "cancel-descendants"
  | "list-children"
  // conversations
  | "send-message"
  | "answer-message"
  | "end-idle-conversation"
  | "end-conversation"
  | "read-messages"
  | "list-answers"
  | "memo-intent"
  | "memo-confirm"
  // signals
  | "send-signal"
  | "take-signal"
  | "list-signals"
  | "read-signal"
  // overview
  | "count-by-status"
  | "agents-with-runs"
  | "tokens-by-run"
  | "run-view"
  | "steps-journal"
  | "steps-effects"
  | "steps-approvals"
  | "whole-value-input"
  | "whole-value-output"
  | "whole-value-error"
  | "whole-value-decision-args"
  | "whole-value-decision-message"
  | "whole-value-decision-rejections"
  | "whole-value-call-args"
  | "whole-value-call-result"
  | "whole-value-call-error"
  | "whole-value-approval-args"
  | "whole-value-approval-reason"
  // schedules
  | "schedule-put"
  | "schedule-list"
  | "schedule-pause"
  | "schedule-resume"
  | "schedule-remove"
  | "schedules-due"
  | "schedules-next"
  | "schedule-tick"
  | "schedules-channel"
  // versions
  | "register-versions"
  | "mark-moves"
  | "request-move"
  | "move-back"
  | "release-for-move"
  | "live-take-keys"
  | "version-order"
  | "runs-to-check"
  // schema
  | "search-path"
  | "schema-version-table"
  | "schema-version"
  | "schema-columns"
  // stream
  | "stream-channel"
  | "notify-stream"
  // limits
  | "limit-take"
  | "limit-release"
  | "limit-wait-run"
  | "list-limits"
  | "limit-waiting-for"
  // forks
  | "fork-run"
  | "start-dry-run"
  | "original-call"
  | "dry-answer"
  // chat
  | "chat-chunks-append"
  | "chat-chunks-read";

/** The names the statements are declared under, as the compiler reads them beside their texts. */
type DeclaredName =
  | (typeof RUN_WRITE_STATEMENTS)[number]["name"]
  | (typeof GROUP_COMMIT_STATEMENTS)[number]["name"]
  | (typeof READ_STATEMENTS)[number]["name"]
  | (typeof LEASE_STATEMENTS)[number]["name"]
  | (typeof OPERATOR_STATEMENTS)[number]["name"]
  | (typeof FAMILY_STATEMENTS)[number]["name"]
  | (typeof CONVERSATION_STATEMENTS)[number]["name"]
  | (typeof SIGNAL_STATEMENTS)[number]["name"]
  | (typeof OVERVIEW_STATEMENTS)[number]["name"]
  | (typeof MIGRATE_STATEMENTS)[number]["name"]
  | (typeof SCHEMA_CHECK_STATEMENTS)[number]["name"]
  | (typeof NOTIFY_STATEMENTS)[number]["name"]
  | (typeof SCHEDULE_STATEMENTS)[number]["name"]
  | (typeof VERSION_STATEMENTS)[number]["name"]
  | (typeof LIMIT_STATEMENTS)[number]["name"]
  | (typeof FORK_STATEMENTS)[number]["name"]
  | (typeof CHAT_CHUNK_STATEMENTS)[number]["name"];

// A statement whose name is not listed in StatementName does not fit in STATEMENTS below; a listed name no
// statement is declared under makes this line fail to compile.
const everyNameDeclared: [StatementName] extends [DeclaredName] ? true : never = true;
void everyNameDeclared;

/** Every statement of the store, by audience. */
export const STATEMENTS: {
  /** One run's fenced writes (`run_writes.ts`), and the group statement that carries many runs' (`group_commit.ts`). */
  readonly runWrites: readonly Statement<StatementName>[];
  /** Reads of one run's rows (`reads.ts`). */
  readonly reads: readonly Statement<StatementName>[];
  /** Creating, claiming, taking, keeping and letting go of runs; the workers' rows (`leases.ts`). */
  readonly leases: readonly Statement<StatementName>[];
  /** The operators' reads and commands (`operators.ts`). */
  readonly operators: readonly Statement<StatementName>[];
  /** Runs that call runs (`families.ts`). */
  readonly families: readonly Statement<StatementName>[];
  /** Conversations: messages sent, answered, and the waits between them (`conversations.ts`). */
  readonly conversations: readonly Statement<StatementName>[];
  /** Signals: sent to a run, taken by its calls (`signals.ts`). */
  readonly signals: readonly Statement<StatementName>[];
  /** The web page's reads (`overview.ts`). */
  readonly overview: readonly Statement<StatementName>[];
  /** Which version drives each run, and the moves between versions (`versions.ts`). */
  readonly versions: readonly Statement<StatementName>[];
  /** The schema's version and columns (`migrate.ts`, `schema_check.ts`). */
  readonly schema: readonly Statement<StatementName>[];
  /** The stream channel's notifications (`notify.ts`). */
  readonly stream: readonly Statement<StatementName>[];
  /** Schedules, and the tickers' reads and ticks (`schedules.ts`). */
  readonly schedules: readonly Statement<StatementName>[];
  /** Limits shared by the fleet: reservations taken, released and waited for (`limits.ts`). */
  readonly limits: readonly Statement<StatementName>[];
  /** Forks and dry runs, and the original's calls a dry run looks up (`forks.ts`). */
  readonly forks: readonly Statement<StatementName>[];
  /** The chat chunk log: a chat turn's chunks appended and read by index (`chat_chunks.ts`). */
  readonly chat: readonly Statement<StatementName>[];
} = {
  runWrites: [...RUN_WRITE_STATEMENTS, ...GROUP_COMMIT_STATEMENTS],
  reads: READ_STATEMENTS,
  leases: LEASE_STATEMENTS,
  operators: OPERATOR_STATEMENTS,
  families: FAMILY_STATEMENTS,
  conversations: CONVERSATION_STATEMENTS,
  signals: SIGNAL_STATEMENTS,
  overview: OVERVIEW_STATEMENTS,
  versions: VERSION_STATEMENTS,
  schema: [...MIGRATE_STATEMENTS, ...SCHEMA_CHECK_STATEMENTS],
  stream: NOTIFY_STATEMENTS,
  schedules: SCHEDULE_STATEMENTS,
  limits: LIMIT_STATEMENTS,
  forks: FORK_STATEMENTS,
  chat: CHAT_CHUNK_STATEMENTS,
};

/** Every statement of the store, in one list. */
export const ALL_STATEMENTS: readonly Statement<StatementName>[] = Object.values(STATEMENTS).flat();

const NAMES: ReadonlySet<string> = new Set(ALL_STATEMENTS.map((s) => s.name));

/** True when `name` names one of the store's statements. */
export function isStatementName(name: unknown): name is StatementName {
  return typeof name === "string" && NAMES.has(name);
}

/**
 * The name a statement was sent under ({@link QueryOptions.name}), when it is
 * one of the store's; undefined for a statement the store did not declare
 * (a test's own, a script).
 */
export function statementName(opts: QueryOptions | undefined): StatementName | undefined {
  const name = opts?.name;
  return isStatementName(name) ? name : undefined;
}
