/**
 * Agents as an MCP server (the package's `./mcp-server` path): each agent is
 * a tool that starts a run and answers with its final answer when it
 * finishes within `answerWaitMs` (default 5 s), otherwise with the run's id
 * and status; `get_run` (waiting a bounded time), `send_message`,
 * `cancel_run`, `approve_call` and `deny_call` steer a run once started. A
 * call's idempotency key in `_meta["agent-runtime/idempotency-key"]` (or
 * `_meta.idempotencyKey`) is one run, so a retried call never starts a second;
 * without one, the same client, tool and arguments within `dedupeWindowMs`
 * (default 60 s) are one run. A client that takes elicitation is asked about
 * a tool call the run waits to have approved; an agent's tool called as a task
 * (the tasks extension) answers at once with the task that is its run.
 *
 * Served over stdio ({@link serveMcpStdio}, `deno task mcp`) or streamable
 * HTTP ({@link mcpHandler}, a fetch handler), through a client (`connect`): the
 * runs are driven by whatever workers host the agents.
 *
 * @example Serve two agents at /mcp beside a worker, on the embedded database
 * ```ts ignore
 * import { connect } from "@agent-runtime/agent-runtime";
 * import { mcpHandler } from "@agent-runtime/agent-runtime/mcp-server";
 * import notes from "./agent.ts";
 *
 * const client = await connect({ dataDir: ".data" });
 * await client.startWorker([notes]);
 * const mcp = mcpHandler({ client, agents: [notes] });
 * Deno.serve({ hostname: "127.0.0.1", port: 8790 }, (req) =>
 *   new URL(req.url).pathname === "/mcp" ? mcp(req) : new Response("not found", { status: 404 }));
 * ```
 *
 * @module
 */

import { McpCalls, type McpCallsOptions } from "./tool_calls.ts";
import { createMcpServer, type ServerInfo } from "./server.ts";
import { LineTransport } from "./line_transport.ts";

export { LOOPBACK_HOSTS, type McpHandler, mcpHandler, type McpHandlerOptions } from "./mcp_http.ts";
export { IDEMPOTENCY_KEY_FIELDS, IDEMPOTENCY_KEY_META } from "./run_ids.ts";
export type { PendingApproval, RunAnswer } from "./run_results.ts";
export type { McpCallsOptions, ServerInfo };

/** Options of {@link serveMcpStdio}. */
export interface McpStdioOptions extends McpCallsOptions, ServerInfo {
  /** Where requests are read from. Default: the process's stdin. */
  input?: ReadableStream<Uint8Array>;
  /** Where answers are written. Default: the process's stdout (so log to stderr). */
  output?: WritableStream<Uint8Array>;
}

/** A server on stdio, until its input ends or it is closed. */
export interface McpStdioServer {
  /** Settles when the input ended (the client quit) or {@link McpStdioServer.close} was called. */
  closed: Promise<void>;
  /** Stops serving. */
  close(): Promise<void>;
}

/** Serves the agents over stdio: one connection, for as long as the input stays open. */
export async function serveMcpStdio(opts: McpStdioOptions): Promise<McpStdioServer> {
  const transport = new LineTransport(opts.input ?? Deno.stdin.readable, opts.output ?? Deno.stdout.writable);
  const server = createMcpServer(new McpCalls(opts), opts);
  await server.connect(transport);
  return { closed: transport.closed, close: () => server.close() };
}
