/**
 * The tools the MCP server lists: one per agent (its name the agent's, its
 * input schema the agent's input schema, or `{ goal }` for an agent that
 * takes text), and the tools that steer a run once started: `get_run`,
 * `send_message`, `cancel_run`, `approve_call`, `deny_call`. Each run tool's
 * arguments are checked here, every problem named by its field.
 *
 * @module
 */

import { z } from "npm:zod@4.6.7";
import type { Agent } from "../agent/agent.ts";
import { RuntimeError } from "../base/errors.ts";

/** A tool as `tools/list` shows it. */
export interface ListedTool {
  /** Its name. */
  name: string;
  /** What it does. */
  description: string;
  /** The JSON Schema of its arguments (an object). */
  inputSchema: { type: "object"; [key: string]: unknown };
  /** Hints for the client. */
  annotations: {
    title?: string;
    readOnlyHint?: boolean;
    destructiveHint?: boolean;
    idempotentHint?: boolean;
  };
  /** Task support: an agent's tool may be called as a task. */
  execution?: { taskSupport: "optional" | "forbidden" };
  /** Index signature of the protocol's tool type. */
  [key: string]: unknown;
}

/** The names of the tools that steer a run, which no agent may take. */
export const RUN_TOOL_NAMES = ["get_run", "send_message", "cancel_run", "approve_call", "deny_call"] as const;
/** One of {@link RUN_TOOL_NAMES}. */
export type RunToolName = typeof RUN_TOOL_NAMES[number];

/** How an agent's tool call's arguments become the run's input. */
export interface AgentEntry {
  /** The agent. */
  agent: Agent;
  /** Its tool. */
  tool: ListedTool;
  /** The run's input from the call's arguments. */
  inputOf(args: Record<string, unknown>): unknown;
}

function agentSchema(agent: Agent): { schema: ListedTool["inputSchema"]; wrapped: boolean } {
  if (!agent.input) {
    const goal = { type: "string", minLength: 1, description: "What the agent is to do, in words" };
    return {
      schema: {
        type: "object",
        properties: { goal },
        ...(agent.defaultInput === undefined ? { required: ["goal"] } : {}),
      },
      wrapped: false,
    };
  }
  let schema: Record<string, unknown>;
  try {
    schema = z.toJSONSchema(agent.input as unknown as z.ZodType, { io: "input" }) as Record<string, unknown>;
  } catch (err) {
    throw new RuntimeError(
      "MCP_SERVER_INVALID",
      `Cannot serve agent ${agent.name} over MCP: its input schema cannot be expressed as JSON Schema (${
        (err as Error).message
      })`,
      { cause: err },
    );
  }
  delete schema.$schema;
  if (schema.type === "object") return { schema: schema as ListedTool["inputSchema"], wrapped: false };
  // A tool's arguments are an object: any other input is its one field.
  return { schema: { type: "object", properties: { input: schema }, required: ["input"] }, wrapped: true };
}

/** The tool of each agent, refusing (`MCP_SERVER_INVALID`) two agents of one name or one named as a run tool. */
export function agentEntries(agents: readonly Agent[], answerWaitMs: number): Map<string, AgentEntry> {
  const out = new Map<string, AgentEntry>();
  for (const agent of agents) {
    if (out.has(agent.name) || (RUN_TOOL_NAMES as readonly string[]).includes(agent.name)) {
      throw new RuntimeError(
        "MCP_SERVER_INVALID",
        `Cannot serve agent ${agent.name} over MCP: ${
          out.has(agent.name) ? "two agents have that name" : "the server's own tool has that name"
        }; serve agents of distinct names, none of ${RUN_TOOL_NAMES.join(", ")}`,
      );
    }
    const { schema, wrapped } = agentSchema(agent);
    const seconds = Math.round(answerWaitMs / 100) / 10;
    const tool: ListedTool = {
      name: agent.name,
      description:
        `Starts a run of the agent ${agent.name}: answers with its final answer when it finishes ` +
        `within ${seconds} s, otherwise with the run's id and status (then call get_run with the id). A call ` +
        `retried with the same _meta["agent-runtime/idempotency-key"] (or the same arguments within a short ` +
        `window) is the same run. ${agent.instructions.slice(0, 300)}`,
      inputSchema: schema,
      annotations: {
        title: `Agent ${agent.name}`,
        readOnlyHint: false,
        destructiveHint: true,
        idempotentHint: true,
      },
      execution: { taskSupport: "optional" },
    };
    const inputOf = (args: Record<string, unknown>) =>
      wrapped ? args.input : agent.input ? args : (args.goal as unknown);
    out.set(agent.name, { agent, tool, inputOf });
  }
  return out;
}

const RUN_ID = { type: "string", description: "The run's id, as an agent's tool answered it" };
const WAIT_MS = (maxMs: number) => ({
  type: "integer",
  minimum: 0,
  maximum: maxMs,
  description: `How long to wait for the run to settle, in ms (at most ${maxMs})`,
});
const KEY = {
  type: "string",
  description: "The tool call's key, as the run's approvals list it (<run>:<seq>)",
};

/** The run tools, their waits bounded by `waitMaxMs`. */
export function runTools(waitMaxMs: number): ListedTool[] {
  const obj = (properties: Record<string, unknown>, required: string[]) => ({
    type: "object" as const,
    properties,
    required,
    additionalProperties: false,
  });
  return [
    {
      name: "get_run",
      description: "A run's status and, once done, its final answer; waits up to waitMs for it to settle.",
      inputSchema: obj({ runId: RUN_ID, waitMs: WAIT_MS(waitMaxMs) }, ["runId"]),
      annotations: { title: "Get a run", readOnlyHint: true },
    },
    {
      name: "send_message",
      description: "Sends a conversation's run its next message and answers with its reply (or its status, " +
        "after waitMs). A message retried with the same messageId is one message.",
      inputSchema: obj({
        runId: RUN_ID,
        message: { type: "string", minLength: 1, description: "The message" },
        messageId: { type: "string", description: "Your id for the message; default: derived from the call" },
        waitMs: WAIT_MS(waitMaxMs),
      }, ["runId", "message"]),
      annotations: {
        title: "Send a message",
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: true,
      },
    },
    {
      name: "cancel_run",
      description: "Cancels a run (and the runs it started); its worker stops at its next write.",
      inputSchema: obj({ runId: RUN_ID, reason: { type: "string", description: "Why, recorded" } }, [
        "runId",
      ]),
      annotations: {
        title: "Cancel a run",
        readOnlyHint: false,
        destructiveHint: true,
        idempotentHint: true,
      },
    },
    {
      name: "approve_call",
      description: "Approves a tool call a run waits for a person to approve; the run goes on.",
      inputSchema: obj({ key: KEY }, ["key"]),
      annotations: { title: "Approve a tool call", readOnlyHint: false, destructiveHint: true },
    },
    {
      name: "deny_call",
      description: "Denies a tool call a run waits for a person to approve; the model sees the refusal.",
      inputSchema: obj({ key: KEY, reason: { type: "string", description: "Why, shown to the model" } }, [
        "key",
      ]),
      annotations: { title: "Deny a tool call", readOnlyHint: false, destructiveHint: false },
    },
  ];
}

/** Arguments of a run tool, checked: a problem names the field. */
export interface RunToolArgs {
  /** The run (get, send, cancel). */
  runId?: string;
  /** How long to wait (get, send). */
  waitMs?: number;
  /** The message (send). */
  message?: string;
  /** The message's id (send). */
  messageId?: string;
  /** The call's key (approve, deny). */
  key?: string;
  /** Why (cancel, deny). */
  reason?: string;
}

/** The arguments of `tool`, or the problems with them (one sentence each). */
export function checkRunToolArgs(
  tool: RunToolName,
  raw: Record<string, unknown>,
  waitMaxMs: number,
): RunToolArgs | { problems: string[] } {
  const listed = runTools(waitMaxMs).find((t) => t.name === tool)!;
  const props = listed.inputSchema.properties as Record<string, { type: string }>;
  const required = listed.inputSchema.required as string[];
  const problems: string[] = [];
  for (const name of Object.keys(raw)) {
    if (!(name in props)) {
      problems.push(`'${name}' is not an argument of ${tool} (it takes ${Object.keys(props).join(", ")})`);
    }
  }
  for (const name of required) if (raw[name] === undefined) problems.push(`'${name}' is required`);
  for (const [name, spec] of Object.entries(props)) {
    const v = raw[name];
    if (v === undefined) continue;
    if (spec.type === "string" && (typeof v !== "string" || v === "")) {
      problems.push(
        `'${name}' must be a non-empty string: current value is ${JSON.stringify(v)?.slice(0, 80)}`,
      );
    }
    if (
      spec.type === "integer" && (!Number.isSafeInteger(v) || (v as number) < 0 || (v as number) > waitMaxMs)
    ) {
      problems.push(
        `'${name}' must be an integer from 0 to ${waitMaxMs}: current value is ${JSON.stringify(v)}`,
      );
    }
  }
  return problems.length > 0 ? { problems } : raw as RunToolArgs;
}
