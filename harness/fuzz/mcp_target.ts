/**
 * An MCP-backed agent as a fuzz target: the demo's three cloud tools served
 * by an MCP server (the SDK's low-level `Server`, in the process over its
 * `InMemoryTransport`), which sends each call to the cloud under the
 * idempotency key the call carries in `_meta`. The agent declares
 * `create_server` and `create_database` safe to re-send by name and trusts
 * the server's `idempotentHint` on `create_dns_record`, so every tool is
 * re-sent after an unknown outcome and the run ends done.
 *
 * Each simulated process connects and lists the tools itself (a kill, a
 * restart, a thief: each lists again), and its connection closes when it
 * dies. The cloud's faults and the kills at cloud requests land where the
 * server calls the cloud: a 5xx, a dropped or garbled answer becomes a JSON-RPC
 * error of the call (an unknown outcome to the client), a hung one a call the
 * client's timeout ends. What `deno task fuzz --target mcp` fuzzes.
 *
 * @module
 */

import { Server } from "npm:@modelcontextprotocol/sdk@1.32.2/server";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/inMemory"
import { InMemoryTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/inMemory.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/types"
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
} from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import { DEMO_GOAL } from "../../examples/provision/agent.ts";
import { demoTools, type DemoToolsOptions } from "../../examples/provision/tools.ts";
import { type Agent, defineAgent } from "../../runtime/agent/agent.ts";
import { describeError, ToolError } from "../../runtime/base/errors.ts";
import { IDEMPOTENCY_KEY_META, mcpTools, REPLAYED_META } from "../../runtime/mcp/mcp.ts";
import type { AgentFactory } from "./run.ts";
import { SIM_CLOUD_URL } from "../sim.ts";

/**
 * An MCP server whose tools are the demo's (`create_server`,
 * `create_database`, `create_dns_record`), each sent to the cloud of `opts`
 * under the key in the call's `_meta`. The cloud's answer is the result (the
 * resource's id, with `_meta` saying when the cloud replayed it); a failure
 * a re-send may mend is a JSON-RPC error, one it may not an `isError` result.
 */
export function cloudMcpServer(opts: DemoToolsOptions): Server {
  const tools = demoTools(opts);
  const server = new Server({ name: "sim-cloud", version: "1.0.0" }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: tools.map((t) => ({
      name: t.name,
      description: t.description,
      inputSchema: t.parameters as { type: "object" },
      // A DNS record under one key is made once: the server says so, and the agent trusts it.
      ...(t.name === "create_dns_record" ? { annotations: { idempotentHint: true } } : {}),
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const tool = tools.find((t) => t.name === req.params.name);
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `Tool ${req.params.name} not found`);
    const key = req.params._meta?.[IDEMPOTENCY_KEY_META];
    if (typeof key !== "string") {
      return { content: [{ type: "text", text: `no ${IDEMPOTENCY_KEY_META} in _meta` }], isError: true };
    }
    const args = tool.args.safeParse(req.params.arguments);
    if (!args.success) throw new McpError(ErrorCode.InvalidParams, `bad arguments for ${tool.name}`);
    const [runId, seq] = [key.slice(0, key.lastIndexOf(":")), Number(key.slice(key.lastIndexOf(":") + 1))];
    try {
      const out = await tool.run(args.data, {
        idempotencyKey: key,
        runId,
        seq,
        attempt: 1,
        signal: extra.signal,
        traceHeaders: () => ({}),
      });
      return {
        content: [{ type: "text", text: String(out.result) }],
        ...(out.remote === "already_done" ? { _meta: { [REPLAYED_META]: true } } : {}),
      };
    } catch (err) {
      if (err instanceof ToolError && !err.transient) {
        return { content: [{ type: "text", text: err.message }], isError: true };
      }
      // A JSON-RPC error (code -32603): the client cannot know whether the cloud acted, and asks again.
      throw new Error(`the cloud failed: ${describeError(err)}`);
    }
  });
  return server;
}

/** The MCP-backed agent as a fuzz target: the demo's tools through {@link cloudMcpServer}, in-process. */
export const mcpAgent: AgentFactory = (fetch): Agent =>
  defineAgent({
    name: "mcp-provision",
    instructions: "You are an agent that completes the user's goal by calling tools, one call per answer. " +
      "When the goal is complete, answer with a short summary and no tool call.",
    tools: mcpTools({
      name: "sim-cloud",
      transport: () => {
        const [client, server] = InMemoryTransport.createLinkedPair();
        void cloudMcpServer({ cloudUrl: SIM_CLOUD_URL, fetch }).connect(server);
        return client;
      },
      safeToResend: ["create_server", "create_database"],
      trustHints: true,
    }),
    maxSteps: 12,
    defaultInput: DEMO_GOAL,
  });
