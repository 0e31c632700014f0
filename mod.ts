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
 * The surface is what someone writing and running agents uses:
 * {@link defineTool} and {@link defineAgent} describe an agent ({@link ToolError}
 * beside them, for a tool's failures); {@link connect} gives a
 * {@link Client}, whose {@link Client.run} runs an agent and waits for its
 * answer, hosting it in this process when no worker does; the limits an agent
 * and a run set; the logger; the error classes a caller branches on.
 *
 * The package's other paths serve other audiences: `./tools` is for a tool's
 * author going further (the helpers for calling an HTTP remote under the
 * idempotency key, each outcome and option by name, reconciling, child runs,
 * a program's own error codes); `./planner` is for a model
 * of one's own (the `Planner` interface, the neutral transcript it is asked
 * with, the chat-completions planner that ships); `./client` holds the
 * client's other parts (`client.operators`, `client.reads`,
 * `client.conversations`) and what their calls take and return; `./testing` is the kit users
 * test their agents with (mock model, mock cloud, clocks, simulator, fuzzer);
 * `./store` is for a store driver's author and whoever reads below the client
 * (the store, its rows and named statements); `./display` is for a page or a
 * terminal that shows runs.
 *
 * @example An agent with one tool, run durably on an in-memory database
 * ```ts
 * import { z } from "zod";
 * import { connect, defineAgent, defineTool } from "./mod.ts";
 * import type { Planner } from "./runtime/model/planner.ts"; // the package's "/planner" path
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
 * const finished = await client.run(mailer, "Welcome Ada", { runId: "welcome-ada" });
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
} from "./runtime/agent/agent.ts";
export type { ModelEndpoint } from "./runtime/model/endpoint.ts";
export { type AgentTool, agentTool } from "./runtime/agent/agent_tool.ts";
export {
  type ArgsSchema,
  defineTool,
  type Json,
  type Tool,
  type ToolContext,
  type ToolOutcome,
  type ToolSpec,
} from "./runtime/agent/tools.ts";

// The limits an agent and a run set.
export type { Budget } from "./runtime/agent/budget.ts";
export type { ModelParams, ReasoningEffort } from "./runtime/model/transcript.ts";
export type { AgentOptions, ProcessSettings, RetryPolicy } from "./runtime/run/deps.ts";

// Running agents: the client, and the worker it hosts.
export { Client, connect } from "./runtime/client/client.ts";
export type { ConnectOptions, RunCallOptions, RunInfo } from "./runtime/client/shapes.ts";
export { WorkerHost, type WorkerOptions } from "./runtime/host/host.ts";
export {
  type LogFields,
  type LogFormat,
  Logger,
  type LoggerOptions,
  type LogLevel,
  type LogSink,
} from "./runtime/base/log.ts";

// The errors a caller branches on, and their codes.
export {
  ClientError,
  ConfigError,
  ERROR_CODES,
  type ErrorCode,
  ModelError,
  RuntimeError,
  StoreError,
  ToolError,
} from "./runtime/base/errors.ts";
