/**
 * The demo agent as a fuzz target: what `deno task fuzz` fuzzes, its tools
 * against the fetch the fuzzer gives each process, its `create_database`
 * made to need a person's approval.
 *
 * @module
 */

import { DEMO_GOAL } from "../../examples/provision/agent.ts";
import { demoTools } from "../../examples/provision/tools.ts";
import { type Agent, defineAgent } from "../../runtime/agent/agent.ts";
import type { AgentFactory } from "./run.ts";
import { SIM_CLOUD_URL } from "../sim.ts";

/** The demo's tool that `deno task fuzz` makes need a person's approval. */
export const DEMO_APPROVAL_TOOL = "create_database";

/** The demo agent as a fuzz target: its three cloud tools against the given fetch. */
export const demoAgent: AgentFactory = (fetch): Agent =>
  defineAgent({
    name: "provision",
    instructions: "You are an agent that completes the user's goal by calling tools, one call per answer. " +
      "When the goal is complete, answer with a short summary and no tool call.",
    tools: demoTools({ cloudUrl: SIM_CLOUD_URL, fetch }),
    maxSteps: 12,
    defaultInput: DEMO_GOAL,
  });
