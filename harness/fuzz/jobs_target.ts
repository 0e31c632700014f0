/**
 * An agent whose calls wait on their remote, as a fuzz target: two
 * `render_report`-style job tools against the mock cloud's `POST /v1/jobs`
 * (finishing 30 s and 90 s after they start, on the simulator's clock) and
 * the demo's `create_server`, which answers at once. At two or three calls
 * per answer a step holds jobs of different lengths beside an instant call:
 * the run sleeps until the first job is due, is woken, polls it, sleeps again
 * for the second. What `deno task fuzz --target jobs` fuzzes.
 *
 * @module
 */

import { reportTool } from "../../examples/jobs/agent.ts";
import { demoTools } from "../../examples/provision/tools.ts";
import { type Agent, defineAgent } from "../../runtime/agent/agent.ts";
import type { AgentFactory } from "./run.ts";
import { SIM_CLOUD_URL } from "../sim.ts";

/** How long each job of {@link jobsAgent} runs on the simulator's clock, by tool. */
export const JOB_TARGET_DURATIONS_MS: Readonly<Record<string, number>> = {
  render_report: 30_000,
  export_ledger: 90_000,
};

/** The jobs agent as a fuzz target: its two job tools and `create_server`, against the given fetch. */
export const jobsAgent: AgentFactory = (fetch): Agent =>
  defineAgent({
    name: "jobs",
    instructions: "Start the reports and exports the user asks for, several at once when they are " +
      "independent, then say where they are.",
    tools: [
      reportTool({ cloudUrl: SIM_CLOUD_URL, fetch, durationMs: JOB_TARGET_DURATIONS_MS.render_report }),
      demoTools({ cloudUrl: SIM_CLOUD_URL, fetch }).find((t) => t.name === "create_server")!,
      reportTool({
        cloudUrl: SIM_CLOUD_URL,
        fetch,
        durationMs: JOB_TARGET_DURATIONS_MS.export_ledger,
        name: "export_ledger",
      }),
    ],
    maxSteps: 12,
    defaultInput: "Render the quarterly report, create a server for it and export the ledger.",
  });
