/**
 * A run as an A2A task: its state from the run's status (a run waiting for a
 * person or for its conversation's next message is `TASK_STATE_INPUT_REQUIRED`,
 * one waiting on its calls' remotes still `TASK_STATE_WORKING`), a status
 * message saying what it waits for or why it failed, its answers as
 * artifacts (`answer-<n>` for the answer to message n; 0 is the goal) and
 * its messages as history. A task's context is its conversation: the run's
 * own id, for a run that converses or not.
 *
 * @module
 */

import type { Client } from "../client/client.ts";
import type { ConversationTurn, RunInfo } from "../client/shapes.ts";
import type { ApprovalRow } from "../store/store.ts";
import type { Artifact, Message, Task, TaskState, TaskStatus } from "./wire.ts";

/** How many messages of a conversation a task reads for its history and artifacts (the latest ones). */
export const TURNS_READ_MAX = 1_000;

/** The state of a run's task, from its status alone (and whether it waits on a remote or a conversation's message). */
export function stateOf(run: Pick<RunInfo, "status" | "wakeAt" | "conversation">): TaskState {
  switch (run.status) {
    case "pending":
      return "TASK_STATE_SUBMITTED";
    case "running":
      return "TASK_STATE_WORKING";
    case "waiting":
      // A conversation waiting for its next message, or a run waiting for a person (no wake time), needs input;
      // one waiting on its calls' remotes is taken again at its wake time by itself.
      if (run.conversation?.idle) return "TASK_STATE_INPUT_REQUIRED";
      return run.wakeAt === null ? "TASK_STATE_INPUT_REQUIRED" : "TASK_STATE_WORKING";
    case "blocked":
      return "TASK_STATE_INPUT_REQUIRED";
    case "done":
      return "TASK_STATE_COMPLETED";
    case "failed":
      return "TASK_STATE_FAILED";
    case "cancelled":
      return "TASK_STATE_CANCELED";
  }
}

/** The artifact id of the answer to message `turn` (0: the goal). */
export function answerArtifactId(turn: number): string {
  return `answer-${turn}`;
}

/** An agent's message with one text part. */
export function agentMessage(taskId: string, messageId: string, text: string): Message {
  return { messageId, contextId: taskId, taskId, role: "ROLE_AGENT", parts: [{ text }] };
}

/** The answers and messages of a run, as its turns: a conversation's own, or the goal and the output of any other. */
export async function turnsOf(client: Client, run: RunInfo): Promise<ConversationTurn[]> {
  if (!run.conversation) {
    return [{
      seq: 0,
      messageId: null,
      text: typeof run.input === "string" ? run.input : JSON.stringify(run.input),
      sentAt: run.createdAt,
      answer: run.status === "done" ? run.output : null,
      answerSeq: null,
      answeredAt: run.status === "done" ? run.updatedAt : null,
    }];
  }
  const fromSeq = Math.max(0, run.conversation.messages - TURNS_READ_MAX);
  return await client.conversations.answers(run.runId, { fromSeq, limit: TURNS_READ_MAX });
}

/** What the status says beside its state: the answer a conversation waits after, what a person must do, why it failed. */
export function statusText(run: RunInfo, pending: readonly ApprovalRow[]): string | undefined {
  if (run.conversation?.idle) return run.output ?? undefined;
  if (run.status === "waiting" && run.wakeAt === null) {
    const asks = pending.map((a) => `${a.tool} ${JSON.stringify(a.args)} (key ${a.idempotency_key})`);
    return asks.length === 0
      ? "Waiting for a person"
      : `Waiting for a person to approve ${asks.join(", ")}: 'deno task approve KEY' or the page answers it`;
  }
  if (run.status === "blocked") {
    return `Blocked: ${run.error ?? "a tool call's outcome is unknown"}; ` +
      `an operator settles it ('deno task resolve KEY' or the page)`;
  }
  if (run.status === "failed" || run.status === "cancelled") return run.error ?? undefined;
  return undefined;
}

/** The task's status: its state, when the run's status last changed, and a message saying why when one helps. */
export async function taskStatus(client: Client, run: RunInfo): Promise<TaskStatus> {
  const state = stateOf(run);
  const asksPerson = run.status === "waiting" && run.wakeAt === null && !run.conversation?.idle;
  const pending = asksPerson
    ? (await client.operators.approvals(run.runId)).filter((a) => a.status === "pending")
    : [];
  const text = statusText(run, pending);
  const timestamp = run.updatedAt.toISOString();
  if (text === undefined) return { state, timestamp };
  const message = agentMessage(run.runId, `${run.runId}/status-${run.updatedAt.getTime()}`, text);
  return { state, message, timestamp };
}

/** The artifacts of `turns`: one per answered message. */
export function artifactsOf(turns: readonly ConversationTurn[]): Artifact[] {
  return turns.filter((t) => t.answer !== null).map((t) => ({
    artifactId: answerArtifactId(t.seq),
    name: t.seq === 0 ? "answer" : `answer to message ${t.seq}`,
    parts: [{ text: t.answer! }],
  }));
}

/** The history of `turns`: each message, then its answer, oldest first. */
export function historyOf(runId: string, turns: readonly ConversationTurn[]): Message[] {
  const out: Message[] = [];
  for (const t of turns) {
    out.push({
      messageId: t.messageId ?? `${runId}/message-${t.seq}`,
      contextId: runId,
      taskId: runId,
      role: "ROLE_USER",
      parts: [{ text: t.text }],
    });
    if (t.answer !== null) out.push(agentMessage(runId, `${runId}/answer-${t.seq}`, t.answer));
  }
  return out;
}

/** What of a task to give: the last `historyLength` messages (all when unset, none at 0), and artifacts or not. */
export interface TaskShape {
  /** The most messages of history; unset: all read, 0: none. */
  historyLength?: number;
  /** Whether to give the artifacts. Default true. */
  artifacts?: boolean;
}

/** A run as a task, with the turns it was built from (a stream begins after them). */
export async function taskAndTurns(
  client: Client,
  run: RunInfo,
  shape: TaskShape = {},
): Promise<{ task: Task; turns: ConversationTurn[] }> {
  const wantHistory = shape.historyLength === undefined || shape.historyLength > 0;
  const wantArtifacts = shape.artifacts ?? true;
  const turns = wantHistory || wantArtifacts ? await turnsOf(client, run) : [];
  const task: Task = {
    id: run.runId,
    contextId: run.runId,
    status: await taskStatus(client, run),
    metadata: { agent: run.agent, runStatus: run.status },
  };
  if (wantArtifacts) task.artifacts = artifactsOf(turns);
  if (wantHistory) {
    const history = historyOf(run.runId, turns);
    task.history = shape.historyLength === undefined ? history : history.slice(-shape.historyLength);
  }
  return { task, turns };
}

/** A run as a task. */
export async function taskOf(client: Client, run: RunInfo, shape: TaskShape = {}): Promise<Task> {
  return (await taskAndTurns(client, run, shape)).task;
}
