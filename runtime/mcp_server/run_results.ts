/**
 * What the MCP server answers about a run: a tool result (its final answer
 * as text when done, else its id and status and what to call next, with the
 * same facts as `structuredContent` for a program) and, for a client that
 * made the call a task, the task the run is (its id the run's).
 *
 * @module
 */

import type { RunInfo } from "../client/shapes.ts";
import type { ApprovalRow, RunStatus } from "../store/store.ts";
import type { Json } from "../base/values.ts";

/** A tool call's approval a run waits for, as the server shows it. */
export interface PendingApproval {
  /** The call's idempotency key: what `approve_call` and `deny_call` take. */
  key: string;
  /** The tool the run asks to call. */
  tool: string;
  /** The arguments it asks to call it with. */
  args: Json;
}

/** What a run's tool result carries as `structuredContent`. */
export interface RunAnswer {
  /** The run's id: what `get_run`, `send_message` and `cancel_run` take. */
  runId: string;
  /** The agent. */
  agent: string;
  /** Where it stands. */
  status: RunStatus;
  /** Its final answer (a conversation's latest), once there is one. */
  answer: string | null;
  /** Why it failed, was blocked or cancelled. */
  error: string | null;
  /** True when it has settled: done, failed, cancelled, or waiting for a person or a next message. */
  settled: boolean;
  /** The approvals it waits for, if any. */
  approvals: PendingApproval[];
  /** For a conversation: whether it waits for its next message now (`send_message`). */
  conversation?: { messages: number; idle: boolean; ended: boolean };
  /** True when this call started the run; false when it found the run an earlier call started. */
  started?: boolean;
}

/** A tool result, in the protocol's shape. */
export interface ToolResult {
  /** What a person or a model reads. */
  content: { type: "text"; text: string }[];
  /** The same, for a program. */
  structuredContent: Record<string, unknown>;
  /** True for a run that failed or was cancelled, and for a refusal. */
  isError?: boolean;
  /** Index signature of the protocol's result type. */
  [key: string]: unknown;
}

/** The protocol's task statuses. */
export type TaskStatus = "working" | "input_required" | "completed" | "failed" | "cancelled";

/** A task, in the protocol's shape: the run it is. */
export interface RunTask {
  /** The run's id. */
  taskId: string;
  /** Where the run stands, as a task. */
  status: TaskStatus;
  /** What the run waits for or why it ended, in words. */
  statusMessage?: string;
  /** When the run was created. */
  createdAt: string;
  /** When its status last changed. */
  lastUpdatedAt: string;
  /** Runs are kept until pruned: no time to live. */
  ttl: null;
  /** How often to ask, in ms. */
  pollInterval?: number;
  /** Index signature of the protocol's task type. */
  [key: string]: unknown;
}

/** True when a run has settled as `client.wait` counts it: it will not change until something outside acts. */
export function isSettled(run: RunInfo): boolean {
  const settledStatus = run.status === "done" || run.status === "failed" || run.status === "cancelled" ||
    run.status === "blocked" || run.status === "waiting";
  return settledStatus && (run.wakeAt === null || run.conversation?.idle === true);
}

/** The approvals of `rows` still pending. */
export function pendingApprovals(rows: readonly ApprovalRow[]): PendingApproval[] {
  return rows.filter((r) => r.status === "pending").map((r) => ({
    key: r.idempotency_key,
    tool: r.tool,
    args: r.args,
  }));
}

/** The facts of a run a tool result carries. */
export function runAnswer(run: RunInfo, approvals: PendingApproval[], started?: boolean): RunAnswer {
  return {
    runId: run.runId,
    agent: run.agent,
    status: run.status,
    answer: run.output,
    error: run.error,
    settled: isSettled(run),
    approvals,
    ...(run.conversation
      ? {
        conversation: {
          messages: run.conversation.messages,
          idle: run.conversation.idle,
          ended: run.conversation.ended,
        },
      }
      : {}),
    ...(started === undefined ? {} : { started }),
  };
}

/** What a person reads of a run that is not done: where it stands and what to call next. */
function handleText(a: RunAnswer): string {
  const id = JSON.stringify(a.runId);
  if (a.approvals.length > 0) {
    const asks = a.approvals.map((p) => `${p.tool} ${JSON.stringify(p.args)} (key ${JSON.stringify(p.key)})`)
      .join("; ");
    return `Run ${id} waits for approval of ${asks}: call approve_call or deny_call with {"key": ...}.`;
  }
  if (a.status === "blocked") {
    return `Run ${id} is blocked: ${
      a.error ?? "a tool call's outcome is unknown"
    }. A person must resolve it ` +
      `('deno task resolve').`;
  }
  return `Run ${id} is ${a.status} and has not answered yet: call get_run with {"runId": ${id}} for its answer.`;
}

/** The tool result of a run: its answer when it has one now, else its handle. */
export function runResult(a: RunAnswer): ToolResult {
  const structuredContent = a as unknown as Record<string, unknown>;
  if (a.status === "failed" || a.status === "cancelled") {
    return {
      content: [{
        type: "text",
        text: `Run ${JSON.stringify(a.runId)} ${a.status}: ${a.error ?? "no reason given"}`,
      }],
      structuredContent,
      isError: true,
    };
  }
  const answered = a.status === "done" || (a.conversation?.idle === true && a.answer !== null);
  return { content: [{ type: "text", text: answered ? a.answer ?? "" : handleText(a) }], structuredContent };
}

/** A refusal as a tool result (`isError`), with its code. */
export function refusal(code: string, message: string): ToolResult {
  return {
    content: [{ type: "text", text: `${code}: ${message}` }],
    structuredContent: { code, message },
    isError: true,
  };
}

/** The task a run is. */
export function runTask(a: RunAnswer, run: RunInfo, pollMs: number): RunTask {
  let status: TaskStatus = "working";
  let statusMessage: string | undefined;
  if (a.status === "done" || (a.conversation?.idle === true && a.answer !== null)) status = "completed";
  else if (a.status === "failed") status = "failed";
  else if (a.status === "cancelled") status = "cancelled";
  else if (a.approvals.length > 0 || a.status === "blocked") {
    status = "input_required";
    statusMessage = handleText(a);
  }
  if ((status === "failed" || status === "cancelled") && a.error) statusMessage = a.error;
  return {
    taskId: a.runId,
    status,
    ...(statusMessage === undefined ? {} : { statusMessage }),
    createdAt: run.createdAt.toISOString(),
    lastUpdatedAt: run.updatedAt.toISOString(),
    ttl: null,
    pollInterval: pollMs,
  };
}
