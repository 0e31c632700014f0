/**
 * agent-runtime: a Deno runtime for AI agents that survive crashes.
 *
 * Every external call (model or tool) goes through intent row -> call ->
 * confirm row in PostgreSQL (or embedded PGlite). A restart replays recorded
 * decisions instead of asking the model again, and re-sends stranded tool
 * calls under the same idempotency key (`<run_id>:<seq>`).
 *
 * @example Define a tool and run one worker on an embedded database
 * ```ts ignore
 * import { z } from "zod";
 * import {
 *   CrashPoints, DEFAULT_RETRY, defineTool, Logger, OpenAIPlanner, openPglite, runWorker,
 *   Store, SystemClock, ToolRegistry,
 * } from "./mod.ts";
 *
 * const clock = new SystemClock();
 * const log = new Logger({ clock });
 * const store = new Store(await openPglite(".data/pglite"));
 * await store.applySchema();
 * const tools = new ToolRegistry([
 *   defineTool({
 *     name: "send_invoice",
 *     description: "Send an invoice.",
 *     args: z.strictObject({ customer: z.string(), cents: z.number().int() }),
 *     run: async (args, ctx) => {
 *       const res = await fetch("https://billing.example/invoices", {
 *         method: "POST",
 *         headers: { "idempotency-key": ctx.idempotencyKey },
 *         body: JSON.stringify(args),
 *         signal: ctx.signal,
 *       });
 *       return { result: await res.json(), remote: res.status === 201 ? "created" : "already_done" };
 *     },
 *   }),
 * ]);
 * const outcome = await runWorker({
 *   store, tools, clock, log,
 *   planner: new OpenAIPlanner({ url: "https://api.example/v1", model: "m", apiKey: "..." }),
 *   crash: CrashPoints.none({ log, clock }),
 *   owner: "worker-1", maxSteps: 12, heartbeatMs: 3_000, leaseMs: 12_000,
 *   retry: DEFAULT_RETRY, random: Math.random,
 * }, "invoice-42", "Invoice ACME for March");
 * console.log(outcome.status);
 * ```
 *
 * @module
 */

export { type Clock, ManualClock, SystemClock } from "./runtime/clock.ts";
export { DEFAULT_GOAL, loadSettings, RUN_ID_PATTERN, type Settings } from "./runtime/config.ts";
export {
  backoffMs,
  DEFAULT_RETRY,
  idempotencyKey,
  type RetryPolicy,
  type RunState,
  type WorkerDeps,
} from "./runtime/context.ts";
export {
  CRASH_POINTS,
  type CrashPlan,
  type CrashPoint,
  CrashPoints,
  isCrashPoint,
  type KillFn,
  type StallFn,
} from "./runtime/crashpoints.ts";
export {
  AbortedError,
  ConfigError,
  FencedError,
  ModelError,
  RuntimeError,
  SimulatedKill,
  StoreError,
  ToolError,
} from "./runtime/errors.ts";
export { BlockedError } from "./runtime/executor.ts";
export {
  arraySink,
  type LogFields,
  type LogFormat,
  Logger,
  type LogLevel,
  type LogSink,
} from "./runtime/log.ts";
export { exitCodeOf, type RunOutcome, runWorker, type WorkerStatus } from "./runtime/loop.ts";
export {
  type ChatMessage,
  type ChatToolCall,
  type DecideRequest,
  type FetchLike,
  type ModelAnswer,
  OpenAIPlanner,
  type OpenAIPlannerOptions,
  type Planner,
  type Usage,
} from "./runtime/planner.ts";
export { openPglite, PgliteClient } from "./runtime/store/pglite.ts";
export { openPostgres, PostgresClient, type PostgresOptions } from "./runtime/store/postgres.ts";
export {
  type Decision,
  type EffectStatus,
  type Fence,
  type JournalRow,
  type Rejection,
  type RunRow,
  type RunStatus,
  type RunSummary,
  SCHEMA_SQL,
  type SideEffectRow,
  type SqlClient,
  Store,
} from "./runtime/store/store.ts";
export {
  type ArgsSchema,
  type CheckedCall,
  defineTool,
  type Json,
  type OpenAITool,
  type Tool,
  type ToolContext,
  type ToolOutcome,
  ToolRegistry,
  type ToolSpec,
} from "./runtime/tools.ts";
export { demoTools, type DemoToolsOptions } from "./mock/demo_tools.ts";
export {
  type CloudFaultSpec,
  type CloudRequestCounts,
  type CreatedResource,
  MockCloud,
  type MockCloudOptions,
  type ResourceKind,
} from "./mock/cloud.ts";
export {
  MockModel,
  type MockModelOptions,
  type ModelCallCounts,
  type ModelFaultMode,
  type ModelFaultSpec,
} from "./mock/model.ts";
