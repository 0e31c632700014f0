/**
 * What the MCP server does for each tool call, in no protocol's shape: start
 * (or find) an agent's run and wait a bounded time for its answer; get a
 * run, send a conversation its next message, cancel, approve and deny. A
 * call's caller may be sent progress while it waits and asked to approve a
 * tool call the run waits for (the protocol's progress notifications and
 * elicitation, in server.ts). Every refusal of the client (an unknown run, an
 * input that does not fit) is a tool result with `isError`, naming its code.
 *
 * @module
 */

import { createHash } from "node:crypto";
import type { Agent } from "../agent/agent.ts";
import { checkInput } from "../agent/agent.ts";
import { canonicalJson } from "../agent/version.ts";
import type { Client } from "../client/client.ts";
import type { RunInfo } from "../client/shapes.ts";
import { ClientError, hasCode, RuntimeError } from "../base/errors.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { idProblem } from "../base/ids.ts";
import {
  type PendingApproval,
  pendingApprovals,
  refusal,
  type RunAnswer,
  runAnswer,
  runResult,
  type ToolResult,
} from "./run_results.ts";
import { keyedRunId, keyOf, windowRunIds } from "./run_ids.ts";
import {
  agentEntries,
  type AgentEntry,
  checkRunToolArgs,
  type ListedTool,
  RUN_TOOL_NAMES,
  type RunToolArgs,
  type RunToolName,
  runTools,
} from "./tool_list.ts";
import { type Caller, waitFor } from "./bounded_wait.ts";

export type { Caller } from "./bounded_wait.ts";

/** The server's settings; every one but `client` and `agents` has its default in `DEFAULTS`. */
export interface McpCallsOptions {
  /** The client every run is started, read and steered through. */
  client: Client;
  /** The agents served, each as a tool. A worker somewhere must host them for their runs to move. */
  agents: readonly Agent[];
  /** How long an agent's tool call waits for the run's answer, in ms (0: answer at once). Default 5 000. */
  answerWaitMs?: number;
  /** The longest `get_run` and `send_message` wait when asked to, in ms. Default 45 000. */
  waitMaxMs?: number;
  /** A call without a key repeated within this is the same run, in ms. Default 60 000. */
  dedupeWindowMs?: number;
  /** How often a waiting call reports progress, in ms. Default 1 000. */
  progressMs?: number;
  /** How often a waiting call reads the run again, in ms. Default 100. */
  pollMs?: number;
  /**
   * Told of each run a call started or sent a message to: a worker host in the same process that the
   * client did not start ({@link Client.startWorker} wakes its own) can take it at once, not at its next poll.
   */
  onRunReady?: (runId: string) => void;
}

function positive(
  name: string,
  value: number | undefined,
  fallback: number,
  min = 1,
  max = 86_400_000,
): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max) {
    throw new RuntimeError(
      "MCP_SERVER_INVALID",
      `Cannot serve MCP as '${name}' must be an integer from ${min} to ${max}: current value is ${v}`,
    );
  }
  return v;
}

/** The tool calls of one MCP server over one client. */
export class McpCalls {
  /** The client underneath. */
  readonly client: Client;
  /** How long an agent's tool call waits for the run's answer, in ms. */
  readonly answerWaitMs: number;
  /** The longest a run tool waits, in ms. */
  readonly waitMaxMs: number;
  /** The window a call without a key is deduplicated in, in ms. */
  readonly dedupeWindowMs: number;
  readonly #progressMs: number;
  readonly #pollMs: number;
  readonly #entries: Map<string, AgentEntry>;
  readonly #onRunReady: (runId: string) => void;

  /** Checks the settings and builds each agent's tool (`MCP_SERVER_INVALID` when one cannot be). */
  constructor(opts: McpCallsOptions) {
    this.client = opts.client;
    this.answerWaitMs = positive("answerWaitMs", opts.answerWaitMs, DEFAULTS.mcpAnswerWaitMs, 0);
    this.waitMaxMs = positive("waitMaxMs", opts.waitMaxMs, DEFAULTS.mcpWaitMaxMs);
    this.dedupeWindowMs = positive("dedupeWindowMs", opts.dedupeWindowMs, DEFAULTS.mcpDedupeWindowMs);
    this.#progressMs = positive("progressMs", opts.progressMs, DEFAULTS.mcpProgressMs);
    this.#pollMs = positive("pollMs", opts.pollMs, 100);
    this.#entries = agentEntries(opts.agents, this.answerWaitMs);
    this.#onRunReady = opts.onRunReady ?? (() => {});
  }

  /** Every tool the server lists: the agents', then the run tools. */
  tools(): ListedTool[] {
    return [...[...this.#entries.values()].map((e) => e.tool), ...runTools(this.waitMaxMs)];
  }

  /** True when `name` is an agent's tool. */
  isAgentTool(name: string): boolean {
    return this.#entries.has(name);
  }

  /** True when `name` is one of the server's tools. */
  hasTool(name: string): boolean {
    return this.#entries.has(name) || (RUN_TOOL_NAMES as readonly string[]).includes(name);
  }

  /**
   * Calls a tool: an agent's (start or find its run, wait up to
   * `answerWaitMs`) or a run tool. A refusal is a result with `isError`.
   */
  async call(
    name: string,
    args: Record<string, unknown>,
    meta: Record<string, unknown> | undefined,
    caller: Caller,
  ): Promise<ToolResult> {
    try {
      if (this.#entries.has(name)) {
        const { run, started } = await this.startRun(name, args, meta, caller);
        const answer = await this.#waitRun(run.runId, this.answerWaitMs, caller);
        return runResult({ ...answer, started });
      }
      return await this.#runTool(name as RunToolName, args, meta, caller);
    } catch (err) {
      if (err instanceof ClientError || hasCode(err, "INPUT_INVALID")) {
        return refusal((err as RuntimeError).code, (err as Error).message);
      }
      throw err;
    }
  }

  /**
   * Starts the run a call of agent `name`'s tool is, or finds the one an
   * earlier call started (run_ids.ts). A key reused for another input is
   * refused (`IDEMPOTENCY_KEY_REUSED`).
   */
  async startRun(
    name: string,
    args: Record<string, unknown>,
    meta: Record<string, unknown> | undefined,
    caller: Pick<Caller, "client">,
  ): Promise<{ run: RunInfo; started: boolean }> {
    const entry = this.#entries.get(name)!;
    const input = entry.inputOf(args);
    // The input is checked before any run id is taken, so a refused call leaves nothing behind.
    const checked = checkInput(entry.agent, input);
    const key = keyOf(meta);
    if (key !== undefined) {
      const found = await this.#startOrFind(entry.agent, input, keyedRunId(name, key));
      if (!found.started && canonicalJson(found.run.input) !== canonicalJson(checked.input)) {
        throw new ClientError(
          "IDEMPOTENCY_KEY_REUSED",
          `The idempotency key ${JSON.stringify(key)} was given before with other arguments (run ` +
            `${found.run.runId}): a key is one call; send a new key for new arguments`,
        );
      }
      return found;
    }
    const now = this.client.clock.now().getTime();
    const ids = windowRunIds({ client: caller.client, agent: name, args }, now, this.dedupeWindowMs);
    const previous = await this.client.get(ids.previous);
    if (previous && now - previous.createdAt.getTime() < this.dedupeWindowMs) {
      return { run: previous, started: false };
    }
    return await this.#startOrFind(entry.agent, input, ids.current);
  }

  async #startOrFind(
    agent: Agent,
    input: unknown,
    runId: string,
  ): Promise<{ run: RunInfo; started: boolean }> {
    try {
      const run = await this.client.start(agent, { runId, input });
      this.#onRunReady(runId);
      return { run, started: true };
    } catch (err) {
      if (!hasCode(err, "RUN_EXISTS")) throw err;
      const run = await this.client.get(runId);
      if (!run) throw err;
      return { run, started: false };
    }
  }

  /** A run's facts as a tool result carries them (`RUN_NOT_FOUND` for an unknown run). */
  async answerOf(runId: string): Promise<RunAnswer> {
    const run = await this.client.get(runId);
    if (!run) throw new ClientError("RUN_NOT_FOUND", `No run ${JSON.stringify(runId)}`);
    return runAnswer(run, await this.#approvalsOf(run));
  }

  async #approvalsOf(run: RunInfo): Promise<PendingApproval[]> {
    return run.status === "waiting" ? pendingApprovals(await this.client.operators.approvals(run.runId)) : [];
  }

  /** Waits up to `waitMs` for the run to settle, asking the caller about its approvals on the way. */
  async #waitRun(runId: string, waitMs: number, caller: Caller): Promise<RunAnswer> {
    const asked = new Set<string>();
    return await waitFor({
      clock: this.client.clock,
      waitMs,
      pollMs: this.#pollMs,
      progressMs: this.#progressMs,
      caller,
      read: async () => {
        const answer = await this.answerOf(runId);
        const ask = answer.approvals.find((a) => !asked.has(a.key));
        if (!ask || !caller.askApproval) {
          return { done: answer.settled, value: answer, status: answer.status };
        }
        asked.add(ask.key);
        const said = await caller.askApproval(ask, runId, this.waitMaxMs);
        if (said === undefined) return { done: true, value: answer, status: answer.status };
        await this.#decide(ask.key, said.approved, by(caller), said.reason);
        return { done: false, value: await this.answerOf(runId), status: "approval answered" };
      },
    });
  }

  async #decide(key: string, approved: boolean, who: string, reason?: string): Promise<void> {
    if (approved) await this.client.operators.approve(key, { by: who });
    else await this.client.operators.deny(key, { by: who, reason: reason ?? `denied by ${who}` });
  }

  async #runTool(
    name: RunToolName,
    raw: Record<string, unknown>,
    meta: Record<string, unknown> | undefined,
    caller: Caller,
  ): Promise<ToolResult> {
    const args = checkRunToolArgs(name, raw, this.waitMaxMs);
    if ("problems" in args) return refusal("ARGS_INVALID", `${name}: ${args.problems.join("; ")}`);
    switch (name) {
      case "get_run":
        return runResult(await this.#waitRun(args.runId!, args.waitMs ?? 0, caller));
      case "send_message":
        return await this.#send(args, meta, caller);
      case "cancel_run": {
        const run = await this.client.operators.cancel(args.runId!, { by: by(caller), reason: args.reason });
        return runResult(runAnswer(run, []));
      }
      case "approve_call":
      case "deny_call": {
        const answered = await this.client.operators[name === "approve_call" ? "approve" : "deny"](
          args.key!,
          {
            by: by(caller),
            reason: args.reason,
          },
        );
        return runResult(await this.answerOf(answered.run_id));
      }
    }
  }

  /** Sends a conversation its next message and waits for the answer to it (or its status, after the bound). */
  async #send(
    args: RunToolArgs,
    meta: Record<string, unknown> | undefined,
    caller: Caller,
  ): Promise<ToolResult> {
    const runId = args.runId!;
    const messageId = args.messageId ?? keyOf(meta) ?? this.#messageId(runId, args.message!, caller);
    const sent = await this.client.conversations.send(runId, args.message!, { messageId });
    if (!sent.duplicate) this.#onRunReady(runId);
    const answer = await waitFor({
      clock: this.client.clock,
      waitMs: args.waitMs ?? this.answerWaitMs,
      pollMs: this.#pollMs,
      progressMs: this.#progressMs,
      caller,
      read: async () => {
        const [turn] = await this.client.conversations.answers(runId, { fromSeq: sent.seq, limit: 1 });
        const now = await this.answerOf(runId);
        // The run's output may still be the answer before this message: only this message's answer counts.
        const answered = turn?.seq === sent.seq && turn.answer !== null;
        const value = { ...now, answer: answered ? turn.answer : null };
        const closed = now.status === "done" || now.status === "failed" || now.status === "cancelled";
        return { done: answered || closed || now.approvals.length > 0, value, status: now.status };
      },
    });
    const answered = answer.answer !== null && answer.status !== "failed" && answer.status !== "cancelled";
    const result = runResult(answer);
    if (answered && answer.conversation?.idle !== true) {
      result.content = [{ type: "text", text: answer.answer! }];
    }
    result.structuredContent = { ...result.structuredContent, messageId, duplicate: sent.duplicate };
    return result;
  }

  /** A message's id when the caller gave none: the client, run and text within the dedupe window. */
  #messageId(runId: string, message: string, caller: Caller): string {
    const window = Math.floor(this.client.clock.now().getTime() / this.dedupeWindowMs);
    const parts = ["message", caller.client, runId, message, this.dedupeWindowMs, window];
    return `mcp-${createHash("sha256").update(canonicalJson(parts)).digest("hex").slice(0, 24)}`;
  }
}

/** Who acts, as recorded: `mcp:<client name>`, or `mcp` for a name the id rule refuses. */
function by(caller: Pick<Caller, "client">): string {
  const name = `mcp:${caller.client}`.slice(0, 200);
  return caller.client !== "" && idProblem(name) === undefined ? name : "mcp";
}
