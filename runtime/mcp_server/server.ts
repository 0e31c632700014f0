/**
 * One MCP server connection (a stdio process, or one streamable-HTTP
 * session): the SDK's low-level `Server` with the agents' tools and the run
 * tools (tool_calls.ts), and the tasks extension over runs: an agent's tool called
 * as a task answers at once with the task that is its run (the task's id the
 * run's), which `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel`
 * read and steer through the same client.
 *
 * @module
 */

// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/server/index"
import { Server } from "npm:@modelcontextprotocol/sdk@1.32.2/server/index.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/types"
import {
  CallToolRequestSchema,
  ElicitResultSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
} from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/experimental/tasks"
import type { TaskStore } from "npm:@modelcontextprotocol/sdk@1.32.2/experimental/tasks";
import { ClientError, hasCode, RuntimeError } from "../base/errors.ts";
import { type McpCalls } from "./tool_calls.ts";
import type { Caller } from "./bounded_wait.ts";
import { type PendingApproval, runAnswer, runResult, type RunTask, runTask } from "./run_results.ts";

/** How often a client is told to poll a task, in ms. */
const TASK_POLL_MS = 1_000;
/** Runs a `tasks/list` page holds. */
const TASKS_PAGE = 50;

/** What the server says of itself in `initialize`. */
export interface ServerInfo {
  /** Its name. Default `agent-runtime`. */
  name?: string;
  /** Its version. Default `0.1.0`. */
  version?: string;
}

const INSTRUCTIONS =
  "Each agent is a tool: a call starts a run and answers with the run's final answer when " +
  "it finishes soon, otherwise with the run's id and status. Then call get_run with that id (it waits a " +
  "bounded time), send_message for a conversation's next message, cancel_run, and approve_call or deny_call " +
  "for a tool call the run waits for a person to approve. Put an idempotency key in a call's " +
  '_meta["agent-runtime/idempotency-key"] so a retried call is the same run.';

/** The task a run is, or null for no such run. */
async function taskOf(calls: McpCalls, runId: string): Promise<RunTask | null> {
  const run = await calls.client.get(runId).catch((err) => {
    if (hasCode(err, "BAD_RUN_ID")) return undefined;
    throw err;
  });
  if (!run) return null;
  const approvals = run.status === "waiting" ? (await calls.answerOf(runId)).approvals : [];
  return runTask(runAnswer(run, approvals), run, TASK_POLL_MS);
}

/** The tasks extension's store over runs: a task is a run, kept as long as the run is. */
export function runTaskStore(calls: McpCalls): TaskStore {
  return {
    createTask: () => {
      // An agent's tool answers with its run as the task (createMcpServer): nothing else creates one.
      return Promise.reject(new McpError(ErrorCode.InvalidParams, "Only an agent's tool runs as a task"));
    },
    getTask: (taskId) => taskOf(calls, taskId),
    // A run keeps its own result; nothing else stores one.
    storeTaskResult: () => Promise.resolve(),
    getTaskResult: async (taskId) => runResult(await calls.answerOf(taskId)),
    updateTaskStatus: async (taskId, status) => {
      if (status === "cancelled") {
        await calls.client.operators.cancel(taskId, { by: "mcp", reason: "task cancelled" });
      }
    },
    listTasks: async (cursor) => {
      const offset = cursor === undefined ? 0 : Number(cursor);
      if (!Number.isSafeInteger(offset) || offset < 0) {
        throw new McpError(
          ErrorCode.InvalidParams,
          `A tasks cursor is a page offset: current value is ${cursor}`,
        );
      }
      const { runs, total } = await calls.client.reads.list({ limit: TASKS_PAGE, offset });
      const tasks = (await Promise.all(runs.map((r) => taskOf(calls, r.run_id)))).filter((t) => t !== null);
      const next = offset + runs.length;
      return { tasks: tasks as RunTask[], ...(next < total ? { nextCursor: String(next) } : {}) };
    },
  } as TaskStore;
}

/** The question a person is asked about a tool call the run waits for. */
function approvalQuestion(approval: PendingApproval, runId: string) {
  return {
    mode: "form" as const,
    message: `Run ${runId} asks to call ${approval.tool} with ${JSON.stringify(approval.args)}. Approve?`,
    requestedSchema: {
      type: "object" as const,
      properties: {
        approve: { type: "boolean" as const, title: "Approve", description: `Let ${approval.tool} run` },
        reason: { type: "string" as const, title: "Reason", description: "Why not (shown to the model)" },
      },
      required: ["approve"],
    },
  };
}

/** Builds one connection's server over `calls`. */
export function createMcpServer(calls: McpCalls, info: ServerInfo = {}): Server {
  const server = new Server(
    { name: info.name ?? "agent-runtime", version: info.version ?? "0.1.0" },
    {
      capabilities: { tools: {}, tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
      instructions: INSTRUCTIONS,
      taskStore: runTaskStore(calls),
    },
  );
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: calls.tools() }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const { name, _meta: meta, task } = request.params;
    const args = (request.params.arguments ?? {}) as Record<string, unknown>;
    if (!calls.hasTool(name)) {
      throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}; tools/list lists the tools`);
    }
    const caller: Caller = { client: server.getClientVersion()?.name ?? "", signal: extra.signal };
    const token = meta?.progressToken;
    if (token !== undefined) {
      caller.progress = (progress, total, message) =>
        extra.sendNotification({
          method: "notifications/progress",
          params: { progressToken: token, progress, total, message },
        });
    }
    if (server.getClientCapabilities()?.elicitation) {
      caller.askApproval = async (approval, runId, timeoutMs) => {
        const said = await extra.sendRequest(
          { method: "elicitation/create", params: approvalQuestion(approval, runId) },
          ElicitResultSchema,
          { timeout: timeoutMs },
        ).catch(() => undefined); // no answer in time, or the client refused to ask: the approval stays pending
        if (said?.action === "accept") {
          return {
            approved: said.content?.approve === true,
            reason: said.content?.reason as string | undefined,
          };
        }
        if (said?.action === "decline") return { approved: false, reason: "declined through the MCP client" };
        return undefined;
      };
    }
    if (!task) return await calls.call(name, args, meta, caller);
    if (!calls.isAgentTool(name)) {
      throw new McpError(
        ErrorCode.InvalidParams,
        `Tool ${name} does not run as a task: only an agent's tool does`,
      );
    }
    try {
      const { run } = await calls.startRun(name, args, meta, caller);
      return { task: (await taskOf(calls, run.runId))! };
    } catch (err) {
      if (err instanceof ClientError || hasCode(err, "INPUT_INVALID")) {
        throw new McpError(
          ErrorCode.InvalidParams,
          `${(err as RuntimeError).code}: ${(err as Error).message}`,
        );
      }
      throw err;
    }
  });
  return server;
}
