/**
 * Below the client: the store every statement goes through, for a store
 * driver's author and whoever reads or measures the runtime's database.
 *
 * A driver implements {@link SqlClient} (parameterised statements, each sent
 * with the name it is declared under, and scripts); {@link Store} runs every
 * statement of the runtime through one, and `new Client(new Store(driver))`
 * (`Client` from the package's root) puts the whole client on it. Every
 * statement has a name ({@link STATEMENTS}, {@link StatementName}), so
 * {@link CountingClient} and {@link TapClient} count and time them by name.
 * Here too: the rows and statuses the store reads and writes, the check every
 * stored JSON value passes ({@link toStorable}), and a PostgreSQL schema of
 * one's own to test against ({@link createSandbox}).
 *
 * @example Count the statements the client sends, by name
 * ```ts
 * import { Client, connect } from "./mod.ts";
 * import { CountingClient, isStatementName, Store } from "./store.ts";
 *
 * const embedded = await connect({ memory: true });
 * const counting = new CountingClient(embedded.store.client);
 * const client = new Client(new Store(counting));
 * await client.reads.list();
 * if (counting.total === 0) throw new Error("nothing counted");
 * for (const name of counting.counts.keys()) {
 *   if (!isStatementName(name)) throw new Error(`a statement without a name: ${name}`);
 * }
 * await client.close();
 * ```
 *
 * @module
 */

// The store and the driver interface it speaks through.
export {
  type JournalIntent,
  type Leases,
  type Operators,
  RESOLVE_BATCH_MAX,
  type RunHistory,
  type RunReads,
  type RunWrites,
  Store,
  type StoreAudiences,
  type StoreOptions,
  type WatchedRun,
} from "./runtime/store/store.ts";
// Which version of its agent drives each run, the moves between versions, and the takes by version.
export type { KnownVersion, RunToCheck, Versions } from "./runtime/store/versions.ts";
export type { ClaimVersion, TakeVersions, WorkerRow } from "./runtime/store/leases.ts";
// Limits shared by the fleet: reservations taken under a key, released, waited for, shown.
export type {
  LimitAsk,
  LimitKeyView,
  LimitRefusal,
  LimitRelease,
  Limits,
  LimitTake,
} from "./runtime/store/store.ts";
// Runs that call runs: a child created, a family's spend, a family member closed, a cancel with its subtree.
export type { ChildRow, Families, FamilyMember, NewChildRun } from "./runtime/store/families.ts";
// Forks and dry runs (docs/fork.md): a fork's one statement, a dry run with no original, the original's calls.
export type { DryAnswerRow, Forks, ForkWritten, NewDryRun, NewFork } from "./runtime/store/forks.ts";
// The chat chunk log (docs/chat.md): a chat turn's UI message stream chunks, appended in batches and read by index.
export type { ChatChunks } from "./runtime/store/chat_chunks.ts";
// Conversations: messages sent and answered, and how an agent converses (defineAgent's `conversation`).
export type {
  AnswerOutcome,
  Conversations,
  MemoRow,
  MessageRow,
  MessageWithAnswer,
  SentMessage,
} from "./runtime/store/conversations.ts";
// Signals: named events sent to a run, and a call's take of one.
export type { SentSignal, SignalRow, Signals, SignalTake } from "./runtime/store/signals.ts";
export type {
  ConversationOptions,
  ConversationState,
  HistoryContext,
  HistoryHook,
} from "./runtime/agent/conversation_options.ts";
export type { ParkedConversation } from "./runtime/conversations/turns.ts";
// Schedules: written and listed, and the tickers' due reads and ticks (runtime/schedules/ decides them).
export {
  CATCH_UP_RULES,
  type DueSchedule,
  type NewSchedule,
  OVERLAP_RULES,
  type ScheduledRun,
  type ScheduleRow,
  type Schedules,
  type ScheduleTick,
  type ScheduleView,
} from "./runtime/store/schedules.ts";
export { type ConversationTurn, MESSAGE_CHARS_MAX, type SendResult } from "./runtime/client/shapes.ts";
export type { MigrationResult } from "./runtime/store/migrate.ts";
export { listenThrough, type QueryOptions, type SqlClient } from "./runtime/store/driver.ts";
// Group commit: the happy path's writes and closes of many runs in one statement (GROUP_COMMIT_MS).
export {
  GROUP_COMMIT_MS_MAX,
  type GroupCommit,
  type GroupCommitOptions,
  type GroupCommitStats,
  type GroupedEffectConfirm,
  type GroupedEffectIntent,
  type GroupedFence,
  type GroupedJournalConfirm,
  type GroupedJournalIntent,
  type GroupedRunFinish,
  type GroupedWrite,
} from "./runtime/store/group_commit.ts";

// Its rows and statuses.
export {
  type AnsweredApproval,
  type ApprovalAnswer,
  type ApprovalAsk,
  type ApprovalRow,
  type DecidedCall,
  type Decision,
  type EffectResolution,
  type Fence,
  type FlaggedFilter,
  type JournalRow,
  type NewRun,
  type PrunedRows,
  type Rejection,
  RUN_ROW_TABLES,
  type RunFilter,
  type RunRow,
  type RunSummary,
  type SideEffectRow,
  type TakenRun,
  type TokenSettlement,
} from "./runtime/store/rows.ts";
// A call waiting on its remote, settled from outside.
export type { CallSettlement, SettledCall } from "./runtime/store/rows.ts";
export {
  APPROVAL_STATUSES,
  type ApprovalStatus,
  EFFECT_STATUSES,
  type EffectStatus,
  isRunStatus,
  JOURNAL_STATUSES,
  type JournalStatus,
  REMOTE_OUTCOMES,
  type RemoteOutcome,
  RUN_STATUSES,
  type RunStatus,
} from "./runtime/store/statuses.ts";

// Its statements, by name, and the wrappers that count and show them.
export {
  isStatementName,
  type StatementName,
  statementName,
  STATEMENTS,
} from "./runtime/store/statements.ts";
export type { Statement } from "./runtime/store/sql.ts";
export {
  CountingClient,
  type Tap,
  TapClient,
  type TappedStatement,
  UNNAMED,
} from "./runtime/store/counting.ts";

// The refusal of a fenced write, what it can store, and a schema of one's own to test against.
export { FencedError } from "./runtime/base/errors.ts";
export {
  MAX_JSON_BYTES,
  MAX_JSON_DEPTH,
  storableJson,
  type StorableOptions,
  type StorableValue,
  toStorable,
  type UnstorableKind,
  type UnstorableValue,
  ValueUnstorableError,
} from "./runtime/base/storable.ts";
export { createSandbox, type SchemaSandbox } from "./runtime/store/sandbox.ts";

// Answers that stream: the notification channel, what travels on it, and a watcher's state (`client.stream`).
export { PAYLOAD_TEXT_MAX, StreamChannel } from "./runtime/store/notify.ts";
export {
  decodeDelta,
  type Delta,
  encodeDelta,
  type FollowedRun,
  STREAM_END_STATUSES,
  type StreamEvent,
  StreamFollower,
  type TextGap,
} from "./runtime/run/stream.ts";
export { DELTA_BATCH_MS, DeltaPublisher, type DeltaPublisherOptions } from "./runtime/run/deltas.ts";
export { type WatchOptions, watchRun } from "./runtime/client/watch.ts";
