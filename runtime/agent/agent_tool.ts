/**
 * Agents that call agents: {@link agentTool} makes an agent a tool of
 * another. Its call starts a child run of that agent whose id comes from the
 * call's key (`<run>:<seq>` starts `<run>.<seq>`, family.ts), so a re-sent
 * call, after a crash or to ask how the child stands, finds the child it
 * started. While the child runs, the call waits as any call whose remote
 * accepted the work (`ToolAccepted`): the parent holds no worker's slot, and
 * is woken the moment the child ends. Then the child's final answer is the
 * call's result, or its failure the call's permanent failure, which the
 * parent's model sees.
 *
 * A worker that hosts the parent hosts the child too ({@link withChildAgents}:
 * every entry point prepares the agents its agents call), cancelling the
 * parent cancels its children, and the parent's budget counts what its
 * children spend (family.ts).
 *
 * @module
 */

import { z } from "npm:zod@4.6.7";
import { type Agent, checkInput, type PreparedAgent } from "./agent.ts";
import { type Budget, checkBudget, mergeBudget } from "./budget.ts";
import { describeError, RuntimeError, ToolError } from "../base/errors.ts";
import { defineTool, type Json, type Tool } from "./tools.ts";

/** What {@link agentTool} takes besides the agent. */
export interface AgentToolOptions {
  /** The tool's name. Default: the agent's name (which must then be a valid tool name: no `.`). */
  name?: string;
  /** What the calling model is told the tool does. Default: the agent's name and the start of its instructions. */
  description?: string;
  /** Ceilings on each child run's own spend, over the agent's own. The parent's ceilings apply as well. */
  budget?: Budget;
  /** How long a call may wait for its child to end before it fails `TOOL_WAIT_EXPIRED`. Default 86 400 000 (a day). */
  waitDeadlineMs?: number;
  /**
   * How often a waiting call looks at its child by itself. The child's end
   * wakes the parent at once; this bounds the wait should that wake be lost
   * (a crash between the two). Default 300 000 (five minutes).
   */
  checkAfterMs?: number;
  /** Whether a person must approve each call first, as for any tool. */
  approval?: boolean | ((args: unknown) => boolean);
}

/** A tool made from an agent: the tool, and the agent it starts (which a worker hosting the tool must host). */
export interface AgentTool extends Tool {
  /** The agent each call starts a child run of. */
  readonly childAgent: Agent;
}

/** The arguments of an agent that takes text: the task, as the child's goal. */
const TASK_ARGS = z.strictObject({
  task: z.string().min(1).describe("What the agent is to do, in words: the goal it is given"),
});

/**
 * Makes `child` a tool of another agent. The tool's arguments are the
 * child's input: its input schema when it has one, else `{ task: string }`,
 * the text the child is given as its goal.
 *
 * @example
 * ```ts
 * import { agentTool, defineAgent, defineTool } from "../../mod.ts";
 * import { z } from "zod";
 * const researcher = defineAgent({
 *   name: "researcher",
 *   instructions: "Find the answer to the task and reply with it.",
 *   tools: [defineTool({
 *     name: "search",
 *     description: "Searches the notes.",
 *     args: z.strictObject({ q: z.string() }),
 *     run: (args) => Promise.resolve({ result: `notes about ${args.q}` }),
 *   })],
 * });
 * export default defineAgent({
 *   name: "lead",
 *   instructions: "Split the goal into questions, ask the researcher each, then sum up.",
 *   tools: [agentTool(researcher, { budget: { modelCalls: 20 } })],
 * });
 * ```
 */
export function agentTool(child: Agent, opts: AgentToolOptions = {}): AgentTool {
  const name = opts.name ?? child.name;
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(name)) {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot make agent ${child.name} a tool named ${JSON.stringify(name)}: a tool name is 1-64 letters, ` +
        `digits, '_' or '-'${
          opts.name === undefined ? "; give the tool a name with agentTool(agent, { name })" : ""
        }`,
    );
  }
  const budget = mergeBudget(
    child.budget,
    checkBudget(opts.budget, `Cannot make agent ${child.name} a tool`),
  );
  const checkAfterMs = opts.checkAfterMs ?? 300_000;
  const waitDeadlineMs = opts.waitDeadlineMs ?? 86_400_000;
  if (!Number.isInteger(checkAfterMs) || checkAfterMs < 1 || checkAfterMs > waitDeadlineMs) {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot make agent ${child.name} a tool as 'checkAfterMs' must be an integer from 1 to waitDeadlineMs ` +
        `(${waitDeadlineMs}): current value is ${checkAfterMs}`,
    );
  }
  const tool = defineTool<unknown>({
    name,
    description: opts.description ??
      `Hands a task to the agent ${child.name} and answers with its final answer. ${
        child.instructions.slice(0, 300)
      }`,
    args: child.input ?? TASK_ARGS,
    waitDeadlineMs,
    approval: opts.approval,
    // Starting a child run touches no remote: in a dry run (a fork) the child is a dry run too, and its own
    // tools' calls are answered as the fork's are (docs/fork.md).
    effect: "read",
    run: async (args, ctx) => {
      if (!ctx.runs) {
        throw new ToolError(
          "AGENT_TOOL_OUTSIDE_RUNTIME",
          `The tool ${name} starts a run of agent ${child.name}, which only the runtime can do: ` +
            "call it from an agent's run (its context has no 'runs')",
          { transient: false },
        );
      }
      let given: { input: Json; goal: string };
      try {
        given = checkInput(child, child.input ? args : (args as { task: string }).task);
      } catch (err) {
        throw new ToolError("AGENT_CHILD_FAILED", describeError(err), { transient: false, cause: err });
      }
      const run = await ctx.runs.startChild(child.name, given, { budget });
      if (run.status === "done") return { result: run.output ?? "" };
      if (run.status === "failed" || run.status === "cancelled") {
        throw new ToolError(
          "AGENT_CHILD_FAILED",
          `Agent ${child.name} (run ${run.runId}) ${run.status}: ${run.error ?? "no reason given"}`,
          { transient: false },
        );
      }
      // Running, or waiting for a person: the call waits too, woken when the child ends.
      return { result: { child_run: run.runId, status: run.status }, accepted: { checkAfterMs } };
    },
  });
  return Object.freeze({ ...tool, childAgent: child });
}

/** The agent a tool starts runs of, when it was made by {@link agentTool}. */
export function childAgentOf(tool: Tool): Agent | undefined {
  const child = (tool as Partial<AgentTool>).childAgent;
  return child !== undefined && (child as { kind?: unknown }).kind === "agent" ? child : undefined;
}

/** The most agents one process hosts once the agents its agents call are added. */
const HOSTED_AGENTS_MAX = 1000;

/**
 * `agents`, and every agent their tools start runs of ({@link agentTool}),
 * and theirs in turn, each prepared once with `prepare`: what a process that
 * hosts `agents` must host, so a child run is driven wherever its parent is.
 * Two different agents under one name are refused (`AGENT_INVALID`).
 */
export async function withChildAgents(
  agents: readonly PreparedAgent[],
  prepare: (agent: Agent) => Promise<PreparedAgent>,
): Promise<PreparedAgent[]> {
  const out = [...agents];
  const byName = new Map(out.map((p) => [p.agent.name, p.agent]));
  // Bounded: each pass looks at an agent added once, and at most HOSTED_AGENTS_MAX are added.
  for (let i = 0; i < out.length; i++) {
    for (const toolName of out[i].tools.names) {
      const child = childAgentOf(out[i].tools.get(toolName)!);
      if (!child) continue;
      const known = byName.get(child.name);
      if (known === child) continue;
      if (known !== undefined) {
        throw new RuntimeError(
          "AGENT_INVALID",
          `Two different agents are named ${child.name} (one is the tool ${toolName} of agent ${
            out[i].agent.name
          }): a process hosts one agent per name`,
        );
      }
      if (out.length >= HOSTED_AGENTS_MAX) {
        throw new RuntimeError(
          "AGENT_INVALID",
          `Agent ${out[i].agent.name} calls more agents than one process hosts (${HOSTED_AGENTS_MAX})`,
        );
      }
      byName.set(child.name, child);
      out.push(await prepare(child));
    }
  }
  return out;
}
