/**
 * The conversing agent of tests/chat_proof_pg_test.ts, loaded both by the
 * test (its chat handler starts runs of it) and by the `deno run` worker
 * processes (`AGENT`): `lookup` answers at once, `ship` needs a person's
 * approval first. Its model is the worker's `MODEL_URL` (the mock).
 *
 * @module
 */

import { z } from "zod";
import { defineAgent, defineTool } from "../mod.ts";

const lookup = defineTool({
  name: "lookup",
  description: "Looks up how a service stands.",
  args: z.strictObject({ service: z.string() }),
  run: (args) => Promise.resolve({ result: { service: args.service, state: "green" } }),
});

const ship = defineTool({
  name: "ship",
  description: "Ships a release; a person approves it first.",
  args: z.strictObject({ release: z.string() }),
  approval: true,
  run: (args) => Promise.resolve({ result: { release: args.release, shipped: true } }),
});

/** The agent: a conversation with `lookup` and `ship`. */
export default defineAgent({
  name: "proof",
  instructions: "Look up what is asked about, ship what is asked for, then answer.",
  tools: [lookup, ship],
  conversation: { idleMs: 600_000 },
});
