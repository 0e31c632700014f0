/**
 * The conversing agent of tests/chat_resume_pg_test.ts, loaded by the test
 * (its chat handler starts runs of it) and by the `deno run` worker processes
 * (`AGENT`): `job`'s remote accepts a call first (the call waits on it, a
 * passing state the journal does not keep), and answers it when asked again.
 *
 * @module
 */

import { z } from "zod";
import { defineAgent, defineTool, type ToolOutcome } from "../mod.ts";

const job = defineTool({
  name: "job",
  description: "Runs a job; its remote accepts it first and answers when asked again.",
  args: z.strictObject({ name: z.string() }),
  minCheckAfterMs: 1_000, // the call waits a second: long enough to be seen live
  run: (args, ctx): Promise<ToolOutcome> =>
    Promise.resolve(
      (ctx.polls ?? 0) < 1
        ? { result: { job: args.name, state: "accepted" }, accepted: { checkAfterMs: 1_000 } }
        : { result: { job: args.name, state: "done" } },
    ),
});

/** The agent: a conversation with `job`. */
export default defineAgent({
  name: "resumer",
  instructions: "Run the job asked for, then answer.",
  tools: [job],
  conversation: { idleMs: 600_000 },
});
