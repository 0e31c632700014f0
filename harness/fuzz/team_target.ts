/**
 * A family of agents as a fuzz target: a parent `team` whose two tools are
 * agents (`agentTool`), `researcher` (which creates a server) and `writer`
 * (which creates a DNS record), each a keyed call on the remote. A call of
 * the parent starts the child run `<run>.<seq>` and waits on it; the child's
 * close wakes the parent, whose next answer reads both children's answers.
 * At two or three calls per answer the parent asks both children at once.
 * The fuzzer's world hosts all three agents and drives every run of the
 * family (`Target.children`), so a schedule's faults land on the child's
 * creation, the parent's waits, the children's own steps and the wake. What
 * `deno task fuzz --target team` fuzzes.
 *
 * @module
 */

import { demoTools } from "../../examples/provision/tools.ts";
import { type Agent, defineAgent } from "../../runtime/agent/agent.ts";
import { agentTool } from "../../runtime/agent/agent_tool.ts";
import type { AgentFactory } from "./run.ts";
import { SIM_CLOUD_URL } from "../sim.ts";

/** The team agent as a fuzz target: its two child agents, each with one keyed cloud tool on `fetch`. */
export const teamAgent: AgentFactory = (fetch): Agent => {
  const tool = (name: string) => demoTools({ cloudUrl: SIM_CLOUD_URL, fetch }).find((t) => t.name === name)!;
  const researcher = defineAgent({
    name: "researcher",
    instructions: "Create the server the task needs, then answer with its id.",
    tools: [tool("create_server")],
    maxSteps: 6,
  });
  const writer = defineAgent({
    name: "writer",
    instructions: "Create the DNS record the task needs, then answer with its id.",
    tools: [tool("create_dns_record")],
    maxSteps: 6,
  });
  return defineAgent({
    name: "team",
    instructions:
      "Ask the researcher and the writer at once (they do not depend on each other), then sum up.",
    // The children's waits are woken by their close; the check is a bound should that wake be lost.
    tools: [agentTool(researcher, { checkAfterMs: 60_000 }), agentTool(writer, { checkAfterMs: 60_000 })],
    maxSteps: 8,
    defaultInput: "Set up a server and its DNS record through the researcher and the writer.",
  });
};
