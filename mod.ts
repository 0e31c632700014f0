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
 * The surface: {@link defineTool} and {@link defineAgent} describe an agent
 * (a tool's HTTP helpers and {@link ToolError} beside them); {@link connect}
 * gives a {@link Client} that starts runs, waits for them and steers them,
 * and hosts a worker in the process ({@link Client.startWorker}). A model is
 * any {@link Planner}: asked with a neutral transcript ({@link DecideRequest}),
 * it answers with a {@link PlannerDecision}; {@link OpenAIPlanner} speaks the
 * OpenAI-compatible chat-completions protocol. Then the clocks, the error
 * classes with their codes, and the crash points `CRASH_AT` names.
 *
 * The package's other paths serve other audiences: `./testing` is the kit
 * users test their agents with (mock model, mock cloud, simulator, fuzzer);
 * `./store` is for a store driver's author and whoever reads below the
 * client (the store, its rows and named statements, counting wrappers);
 * `./display` is for a page or a terminal that shows runs (the display rule
 * and the client's page reads); `./planners/openai` is the chat-completions
 * mapping, for a planner of one's own on that wire.
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

// Defining agents and tools.
export {
  type Agent,
  type AgentContext,
  type AgentModel,
  type AgentSpec,
  defineAgent,
  type ModelEndpoint,
} from "./runtime/agent/agent.ts";
export { type AgentTool, agentTool, type AgentToolOptions } from "./runtime/agent/agent_tool.ts";
export {
  type ArgsSchema,
  type ChildRunInfo,
  type ChildRuns,
  defineTool,
  type Json,
  type ReconcileContext,
  type Reconciliation,
  type Tool,
  type ToolAccepted,
  type ToolContext,
  type ToolDescription,
  type ToolDone,
  type ToolGiveUp,
  type ToolOutcome,
  type ToolRetry,
  type ToolSpec,
} from "./runtime/agent/tools.ts";
export {
  idempotencyKeyHeader,
  isTransientStatus,
  parseRetryAfter,
  serverErrorMessage,
} from "./runtime/base/http.ts";
export { traceHeaders } from "./runtime/base/trace.ts";
export type { Budget } from "./runtime/agent/budget.ts";

// The client, and the worker it hosts.
export { Client, connect } from "./runtime/client/client.ts";
export { ClientError } from "./runtime/base/errors.ts";
export {
  type ConnectOptions,
  type PruneResult,
  type Resolution,
  type RunCallOptions,
  type RunInfo,
  type RunRecord,
  type Settlement,
} from "./runtime/client/shapes.ts";
export {
  type AnsweredApproval,
  type ApprovalRow,
  type FlaggedFilter,
  type JournalRow,
  RUN_STATUSES,
  type RunFilter,
  type RunRow,
  type RunStatus,
  type RunSummary,
  type SideEffectRow,
} from "./runtime/store/rows.ts";
export { WorkerHost, type WorkerOptions } from "./runtime/host/host.ts";
export type { AgentOptions, ProcessSettings, RetryPolicy } from "./runtime/run/deps.ts";
export {
  type LogFields,
  type LogFormat,
  Logger,
  type LoggerOptions,
  type LogLevel,
  type LogSink,
} from "./runtime/base/log.ts";

// Planners: the interface, the neutral conversation it is asked with, and the one that ships.
export type { Planner } from "./runtime/model/planner.ts";
export type {
  AnswerCall,
  AssistantMessage,
  DecideRequest,
  LegacyModelAnswer,
  ModelAnswer,
  ModelParams,
  PlannerDecision,
  ReasoningEffort,
  SystemMessage,
  ToolCall,
  ToolResultMessage,
  TranscriptMessage,
  Usage,
  UserMessage,
} from "./runtime/model/transcript.ts";
export { type FetchLike, OpenAIPlanner, type OpenAIPlannerOptions } from "./runtime/model/openai.ts";

// Clocks, errors and their codes, crash points.
export { type Clock, ManualClock, SystemClock } from "./runtime/base/clock.ts";
export {
  type CodeOf,
  ConfigError,
  ERROR_CODES,
  type ErrorCode,
  ModelError,
  type OwnCode,
  ownCode,
  RuntimeError,
  StoreError,
  ToolError,
} from "./runtime/base/errors.ts";
export { CRASH_POINTS, type CrashPoint } from "./runtime/base/crashpoints.ts";
