/**
 * The agents tests/mcp_server_pg_test.ts serves over MCP, as a user's agent module gives them: `quick`
 * answers at once (a model asked once), `patient` calls a tool that waits for the signal `go` sent to
 * its run, so it outlives any bound until the test sends it. Their model is the process's (`MODEL_URL`).
 */

import { defineAgent } from "../../mod.ts";
import { waitForSignal } from "../../runtime/signals/wait_tools.ts";

export const quick = defineAgent({
  name: "quick",
  instructions: "Answer the goal in one sentence.",
  tools: [],
});

export const patient = defineAgent({
  name: "patient",
  instructions: "Wait for the go signal, then say you went.",
  tools: [waitForSignal("go")],
});

export default [quick, patient];
