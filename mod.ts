/**
 * agent-runtime: a Deno runtime for AI agents that survive crashes.
 *
 * An agent asks a model what to do, then does it; the process can die
 * between any two lines. Every external call (model or tool) goes through an
 * intent row, the call, and a confirm row in PostgreSQL (or embedded PGlite).
 * A restart replays recorded decisions instead of asking the model again, and
 * re-sends stranded tool calls under the same idempotency key
 * (`<run_id>:<seq>`), so the remote answers with what it did the first time.
 *
 * The surface: {@link defineTool} and {@link defineAgent} describe an agent;
 * {@link connect} gives a {@link Client} that starts runs, waits for them and
 * steers them, and hosts a worker in the process ({@link Client.startWorker}).
 * A model is any {@link Planner}: asked with a neutral transcript
 * ({@link DecideRequest}), it answers with a {@link PlannerDecision};
 * {@link OpenAIPlanner} speaks the OpenAI-compatible chat-completions
 * protocol. What users test their agents with (mock model, mock cloud,
 * simulator) is in `testing.ts`.
 *
 * @example An agent with one tool, run durably on an in-memory database
 * ```ts
 * import { z } from "zod";
 * import { connect, defineAgent, defineTool, type Planner } from "./mod.ts";
 *
 * const sent: string[] = [];
 * const sendEmail = defineTool({
 *   name: "send_email",
 *   description: "Send an email.",
 *   args: z.strictObject({ to: z.string(), body: z.string() }),
 *   // A real tool sends ctx.idempotencyKey to its remote (an Idempotency-Key header).
 *   run: (args, ctx) => {
 *     sent.push(`${ctx.idempotencyKey} ${args.to}`);
 *     return Promise.resolve({ result: { queued: true } });
 *   },
 * });
 *
 * // Any Planner can decide: it reads req.transcript (neutral messages) and req.tools.
 * // A real agent names an OpenAI-compatible endpoint instead.
 * const model: Planner = {
 *   describe: "two-step script",
 *   decide: (req) =>
 *     Promise.resolve(
 *       req.transcript.some((m) => m.role === "tool")
 *         ? { kind: "done", text: "Sent one email." }
 *         : {
 *           kind: "tool_calls",
 *           calls: [{ name: "send_email", args: { to: "ada@example.test", body: "Hello" } }],
 *         },
 *     ),
 * };
 *
 * const mailer = defineAgent({ name: "mailer", instructions: "Send the email asked for.", tools: [sendEmail], model });
 * const client = await connect({ memory: true });
 * const worker = await client.startWorker([mailer]);
 * const run = await client.start(mailer, { runId: "welcome-ada", input: "Welcome Ada" });
 * const finished = await client.wait(run.runId, { timeoutMs: 30_000 });
 * await worker.stop();
 * await client.close();
 * if (finished.output !== "Sent one email." || sent[0] !== "welcome-ada:0 ada@example.test") {
 *   throw new Error(`unexpected: ${JSON.stringify(finished)} ${sent}`);
 * }
 * ```
 *
 * @module
 */

export {
  type Agent,
  type AgentContext,
  type AgentModel,
  type AgentSpec,
  defineAgent,
  type ModelEndpoint,
  type PreparedAgent,
} from "./runtime/agent.ts";
export {
  Client,
  ClientError,
  connect,
  type ConnectOptions,
  type FlaggedFilter,
  LIST_LIMIT_MAX,
  type PruneResult,
  type Resolution,
  RESOLVE_BATCH_MAX,
  type RunInfo,
  type RunRecord,
  type RunTimeline,
  type StepRange,
} from "./runtime/client.ts";
export { answerTokens, type Budget, BudgetError } from "./runtime/budget.ts";
export { type Clock, ManualClock, SystemClock } from "./runtime/clock.ts";
export type { RetryPolicy, WorkerDeps, WorkerDepsOptions } from "./runtime/context.ts";
export type { AgentDeps, AgentOptions, ProcessDeps, ProcessDepsOptions } from "./runtime/deps.ts";
export {
  displayJson,
  displayJsonParts,
  type DisplayOptions,
  displayParts,
  displayScript,
  displayText,
  escapeCodePoint,
  type Hidden,
  hiddenIn,
} from "./runtime/display.ts";
export { CRASH_POINTS, type CrashPlan, type CrashPoint, type CrashPoints } from "./runtime/crashpoints.ts";
export {
  type CodeOf,
  ConfigError,
  ERROR_CODES,
  type ErrorCode,
  FencedError,
  ModelError,
  type OwnCode,
  ownCode,
  RuntimeError,
  StoreError,
  ToolError,
} from "./runtime/errors.ts";
export { DEFAULT_RUNS_PER_WORKER, WorkerHost, type WorkerHostOptions } from "./runtime/host.ts";
export { type LogFields, type LogFormat, Logger, type LogLevel, type LogSink } from "./runtime/log.ts";
export { type RunOutcome, WORKER_STATUSES, type WorkerStatus } from "./runtime/loop.ts";
export type { MigrationResult } from "./runtime/store/migrate.ts";
export {
  idempotencyKeyHeader,
  isTransientStatus,
  parseRetryAfter,
  serverErrorMessage,
} from "./runtime/http.ts";
export {
  type AnswerCall,
  type AssistantMessage,
  chatCompletionsUrl,
  type ChatMessage,
  chatMessages,
  type ChatToolCall,
  type DecideRequest,
  type FetchLike,
  type LegacyModelAnswer,
  MAX_TOKENS_FIELDS,
  type MaxTokensField,
  type ModelAnswer,
  OpenAIPlanner,
  type OpenAIPlannerOptions,
  type OpenAITool,
  openAITools,
  type Planner,
  type PlannerDecision,
  type SystemMessage,
  type ToolCall,
  type ToolResultMessage,
  type TranscriptMessage,
  type Usage,
  type UserMessage,
} from "./runtime/planner.ts";
export type {
  ApprovalView,
  Clipped,
  EffectView,
  JournalView,
  RunTokens,
  RunView,
  StepsView,
  WholeValueField,
} from "./runtime/store/overview.ts";
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
} from "./runtime/store/storable.ts";
export type {
  AnsweredApproval,
  ApprovalAnswer,
  ApprovalRow,
  Decision,
  EffectResolution,
  EffectStatus,
  Fence,
  JournalRow,
  Leases,
  NewRun,
  Operators,
  PrunedRows,
  QueryOptions,
  Rejection,
  RunFilter,
  RunReads,
  RunRow,
  RunStatus,
  RunSummary,
  RunWrites,
  SideEffectRow,
  SqlClient,
  Store,
  TakenRun,
  TokenSettlement,
} from "./runtime/store/store.ts";
export {
  APPROVAL_STATUSES,
  type ApprovalStatus,
  EFFECT_STATUSES,
  isRunStatus,
  JOURNAL_STATUSES,
  type JournalStatus,
  REMOTE_OUTCOMES,
  type RemoteOutcome,
  RUN_ROW_TABLES,
  RUN_STATUSES,
} from "./runtime/store/store.ts";
export {
  type ArgsSchema,
  type CheckedCall,
  defineTool,
  type Json,
  type ReconcileContext,
  type Reconciliation,
  type Tool,
  type ToolContext,
  type ToolDescription,
  type ToolOutcome,
  type ToolRegistry,
  type ToolSpec,
} from "./runtime/tools.ts";
export {
  NO_TELEMETRY,
  OtelTelemetry,
  runTraceId,
  type Telemetry,
  telemetryFromEnv,
  type TracedAttempt,
  type TracedState,
  traceHeaders,
} from "./runtime/telemetry.ts";
export type {
  Ended,
  Failed,
  Finished,
  StepRows,
  TracedCall,
  TracedDecision,
  TracedRecovery,
  TracedStep,
} from "./runtime/telemetry.ts";
