/**
 * The A2A operations over the runtime's client, binding-free: send a
 * message, get, list and cancel a task. A task is a run; a context is a
 * conversation (the run of an agent with `conversation`), whose id is the
 * run's. A message id sent twice is one message: a new task's run id is
 * derived from the agent and the message id ({@link runIdFor}), so a retried
 * send finds the run it started instead of starting a second (the store
 * refuses a second run of one id), and a message to a conversation goes
 * through `client.conversations.send` with its message id, which stores it
 * once.
 *
 * @module
 */

import type { Agent } from "../agent/agent.ts";
import type { Client } from "../client/client.ts";
import type { RunInfo } from "../client/shapes.ts";
import { LIST_LIMIT_MAX } from "../client/shapes.ts";
import { ClientError, hasCode, RuntimeError } from "../base/errors.ts";
import { isRunId } from "../base/ids.ts";
import type { RunStatus } from "../store/store.ts";
import { info } from "../client/checks.ts";
import {
  checkListParams,
  checkMessage,
  type InboundMessage,
  inputOf,
  type ListParams,
  pageToken,
} from "./requests.ts";
import { stateOf, taskOf, type TaskShape } from "./tasks.ts";
import { A2aError, INTERRUPTED_STATES, type Task, type TaskState, TERMINAL_STATES } from "./wire.ts";

/** The hex digits of a message id's digest in a run id: 80 bits, so two messages never meet by chance. */
const DIGEST_HEX = 20;

/**
 * The run id of the task a new message starts: the agent's name (cut to 36
 * characters) and the first {@link DIGEST_HEX} hex digits of the sha-256 of
 * the agent's name and the message id. The same message to the same agent
 * is always the same run.
 */
export async function runIdFor(agent: string, messageId: string): Promise<string> {
  const bytes = new TextEncoder().encode(`${agent}\n${messageId}`);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  const hex = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("").slice(0, DIGEST_HEX);
  return `${agent.slice(0, 36)}-a2a-${hex}`;
}

/** What a send did: the task's run, the message's place in it, and whether it was a retry of one stored. */
export interface Sent {
  /** The run (the task). */
  run: RunInfo;
  /** The message's place in the run's conversation (0: the run's goal). */
  turn: number;
  /** True when the message was stored by an earlier send: this one wrote nothing. */
  duplicate: boolean;
}

/** Options of {@link A2aOperations}. */
export interface OperationsOptions {
  /** The client every read and write goes through. */
  client: Client;
  /** The agent served. */
  agent: Agent;
  /** Recorded as who cancelled a task. Default `a2a`. */
  actor?: string;
}

/** Run statuses a task state is found among (a `waiting` run is either state, by what it waits for). */
const RUN_STATUSES_OF: Record<TaskState, readonly RunStatus[]> = {
  TASK_STATE_SUBMITTED: ["pending"],
  TASK_STATE_WORKING: ["running", "waiting"],
  TASK_STATE_COMPLETED: ["done"],
  TASK_STATE_FAILED: ["failed"],
  TASK_STATE_CANCELED: ["cancelled"],
  TASK_STATE_INPUT_REQUIRED: ["waiting", "blocked"],
  TASK_STATE_REJECTED: [],
  TASK_STATE_AUTH_REQUIRED: [],
};

/** The operations for one agent. */
export class A2aOperations {
  readonly #client: Client;
  readonly #agent: Agent;
  readonly #actor: string;

  /** Over `opts.client`, for `opts.agent`. */
  constructor(opts: OperationsOptions) {
    this.#client = opts.client;
    this.#agent = opts.agent;
    this.#actor = opts.actor ?? "a2a";
  }

  /** The agent served. */
  get agent(): Agent {
    return this.#agent;
  }

  /** The client underneath. */
  get client(): Client {
    return this.#client;
  }

  /** A task of this agent, by id; `TaskNotFoundError` for any other id. */
  async run(taskId: string): Promise<RunInfo> {
    const run = isRunId(taskId) ? await this.#client.get(taskId) : undefined;
    if (!run || run.agent !== this.#agent.name) {
      throw new A2aError(
        "TaskNotFoundError",
        `No task ${JSON.stringify(taskId)} of agent ${this.#agent.name}: 'ListTasks' lists them`,
      );
    }
    return run;
  }

  /** Sends a message (`params.message`): a new task, or the next message of a conversation. */
  async send(params: Record<string, unknown>): Promise<Sent> {
    const msg = checkMessage(params);
    if (msg.taskId !== undefined && msg.contextId !== undefined && msg.taskId !== msg.contextId) {
      throw new A2aError(
        "InvalidParamsError",
        `Task ${msg.taskId} is of context ${msg.taskId}, not ${msg.contextId}: a task's context here is its own id`,
        { field: "message.contextId" },
      );
    }
    const target = msg.taskId ?? msg.contextId;
    return target === undefined ? await this.#start(msg) : await this.#continue(target, msg);
  }

  async #start(msg: InboundMessage): Promise<Sent> {
    const input = inputOf(this.#agent, msg.parts);
    const runId = await runIdFor(this.#agent.name, msg.messageId);
    try {
      const run = await this.#client.start(this.#agent, { runId, input });
      return { run, turn: 0, duplicate: false };
    } catch (err) {
      if (hasCode(err, "RUN_EXISTS")) return { run: await this.run(runId), turn: 0, duplicate: true };
      if (hasCode(err, "INPUT_INVALID")) {
        throw new A2aError("InvalidParamsError", err.message, { field: "message.parts", cause: err });
      }
      throw err;
    }
  }

  async #continue(target: string, msg: InboundMessage): Promise<Sent> {
    const run = await this.run(target);
    // The message that started this task, sent again with the task's id: the task's first message.
    if (run.runId === await runIdFor(this.#agent.name, msg.messageId)) {
      return { run, turn: 0, duplicate: true };
    }
    if (!this.#agent.conversation) {
      throw new A2aError(
        "UnsupportedOperationError",
        `Agent ${this.#agent.name} does not converse: each message is a task of its own; ` +
          `send this one without a taskId or contextId`,
      );
    }
    const state = stateOf(run);
    if (TERMINAL_STATES.includes(state)) {
      throw new A2aError(
        "UnsupportedOperationError",
        `Task ${run.runId} is ${state}: it takes no more messages; send without a taskId to start a new one`,
      );
    }
    const text = inputOf(this.#agent, msg.parts, true) as string;
    try {
      const sent = await this.#client.conversations.send(run.runId, text, { messageId: msg.messageId });
      return { run: await this.run(run.runId), turn: sent.seq, duplicate: sent.duplicate };
    } catch (err) {
      if (hasCode(err, "CONVERSATION_ENDED")) {
        throw new A2aError("UnsupportedOperationError", (err as RuntimeError).message, { cause: err });
      }
      if (hasCode(err, "MESSAGE_INVALID")) {
        throw new A2aError("InvalidParamsError", (err as RuntimeError).message, {
          field: "message.parts",
          cause: err,
        });
      }
      throw err;
    }
  }

  /**
   * Waits up to `waitMs` for a run to reach a terminal or interrupted state
   * (a blocking send, §3.2.2), and returns it as it then stands.
   */
  async settle(runId: string, waitMs: number, signal?: AbortSignal): Promise<RunInfo> {
    try {
      const run = await this.#client.wait(runId, { timeoutMs: waitMs, signal });
      // wait() also returns a run that waits on its remotes by itself: that one works on.
      return run;
    } catch (err) {
      if (hasCode(err, ["WAIT_TIMEOUT", "ABORTED"]) || signal?.aborted) return await this.run(runId);
      throw err;
    }
  }

  /** A task (`GetTask`). */
  async get(taskId: string, shape: TaskShape = {}): Promise<Task> {
    return await taskOf(this.#client, await this.run(taskId), shape);
  }

  /**
   * Cancels a task (`CancelTask`): a cancelled one is returned as it is (a
   * cancel is idempotent, §3.3.1); a completed or failed one is
   * `TaskNotCancelableError`.
   */
  async cancel(taskId: string): Promise<Task> {
    const run = await this.run(taskId);
    if (run.status !== "cancelled") {
      try {
        await this.#client.operators.cancel(run.runId, { by: this.#actor, reason: "CancelTask over A2A" });
      } catch (err) {
        if (!(err instanceof ClientError && err.code === "RUN_CLOSED")) throw err;
      }
    }
    const after = await this.run(taskId);
    if (after.status !== "cancelled") {
      throw new A2aError(
        "TaskNotCancelableError",
        `Task ${taskId} is ${stateOf(after)} already: only a task still going on can be cancelled`,
      );
    }
    return await taskOf(this.#client, after);
  }

  /**
   * A page of this agent's tasks (`ListTasks`), the most recently changed
   * first, from the newest {@link LIST_LIMIT_MAX} runs of each status.
   */
  async list(params: Record<string, unknown>): Promise<
    { tasks: Task[]; nextPageToken: string; pageSize: number; totalSize: number }
  > {
    const p = checkListParams(params);
    const runs = (await this.#candidates(p)).filter((r) =>
      (p.status === undefined || stateOf(r) === p.status) && (p.after === undefined || r.updatedAt >= p.after)
    );
    runs.sort((a, b) => b.updatedAt.getTime() - a.updatedAt.getTime() || (a.runId < b.runId ? 1 : -1));
    const page = runs.slice(p.offset, p.offset + p.pageSize);
    const shape = { historyLength: p.historyLength ?? 0, artifacts: p.includeArtifacts };
    const tasks: Task[] = [];
    for (const run of page) tasks.push(await taskOf(this.#client, run, shape));
    const next = p.offset + page.length;
    return {
      tasks,
      nextPageToken: next < runs.length ? pageToken(next) : "",
      pageSize: p.pageSize,
      totalSize: runs.length,
    };
  }

  async #candidates(p: ListParams): Promise<RunInfo[]> {
    if (p.contextId !== undefined) {
      const run = isRunId(p.contextId) ? await this.#client.get(p.contextId) : undefined;
      return run && run.agent === this.#agent.name ? [run] : [];
    }
    const statuses: (RunStatus | undefined)[] = p.status ? [...RUN_STATUSES_OF[p.status]] : [undefined];
    const out: RunInfo[] = [];
    for (const status of statuses) {
      const { runs } = await this.#client.reads.list({
        agent: this.#agent.name,
        status,
        limit: LIST_LIMIT_MAX,
      });
      out.push(...runs.map(info));
    }
    return out;
  }
}

/** True when a task in `state` will not change without its client or a person (a stream ends there). */
export function isSettledState(state: TaskState): boolean {
  return TERMINAL_STATES.includes(state) || INTERRUPTED_STATES.includes(state);
}
