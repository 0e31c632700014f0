/**
 * An agent that waits for a signal, as a fuzz target: `wait_for_approval`
 * (`waitForSignal`) waits for the signal `approved`, and the demo's
 * `create_server` acts on the remote. The mock model calls each tool once
 * (both at once at two or three calls per answer), so the wait lands beside a
 * call in flight. The person sends the signal where the schedule says
 * (`signal@stmt#N`) and whenever the run rests waiting for it. What
 * `deno task fuzz --target signals` fuzzes.
 *
 * @module
 */

import { demoTools } from "../../examples/provision/tools.ts";
import { type Agent, defineAgent } from "../../runtime/agent/agent.ts";
import { waitForSignal } from "../../runtime/signals/wait_tools.ts";
import type { FuzzSignal } from "./person.ts";
import type { AgentFactory } from "./run.ts";
import { SIM_CLOUD_URL } from "../sim.ts";

/** The signal the target waits for, and what every send of it carries. */
export const SIGNALS_TARGET_SIGNAL: FuzzSignal = {
  tool: "wait_for_approval",
  name: "approved",
  id: "approval-1",
  payload: { by: "person", note: "go ahead" },
};

/** The signals agent as a fuzz target: the wait (an hour at most) and `create_server`, against the given fetch. */
export const signalsAgent: AgentFactory = (fetch): Agent =>
  defineAgent({
    name: "signals",
    instructions: "Wait for the approval, then create the server, then say so.",
    tools: [
      waitForSignal(SIGNALS_TARGET_SIGNAL.name, { name: SIGNALS_TARGET_SIGNAL.tool, deadlineMs: 3_600_000 }),
      demoTools({ cloudUrl: SIM_CLOUD_URL, fetch }).find((t) => t.name === "create_server")!,
    ],
    maxSteps: 12,
    defaultInput: "Wait for the approval, then create the server.",
  });
