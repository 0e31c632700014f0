// An agent that hands work to two others: each of its tools is an agent (agentTool). A call starts a child
// run `<run>.<seq>`, the parent waits (holding no worker) until the child ends, and the child's answer is the
// call's result. Run it with `deno task run --agent examples/team/agent.ts`; the process hosts the children too.
import { z } from "zod";
import { type AgentContext, agentTool, defineAgent, defineTool } from "../../mod.ts";

/** A notes folder as the remote (`NOTES_DIR`, else under `DATA_DIR`): a file per idempotency key, created once. */
const writeNote = (ctx: AgentContext) =>
  defineTool({
    name: "write_note",
    description: "Saves a note. Returns where it was saved.",
    args: z.strictObject({ title: z.string().min(1).max(80), body: z.string().max(2000) }),
    run: async ({ title, body }, { idempotencyKey }) => {
      const dir = ctx.env.NOTES_DIR ?? `${ctx.dataDir}/notes`;
      await Deno.mkdir(dir, { recursive: true });
      const path = `${dir}/${idempotencyKey.replaceAll(":", "_")}.md`;
      try {
        await Deno.writeTextFile(path, `# ${title}\n\n${body}\n`, { createNew: true });
        return { result: path, remote: "created" };
      } catch (err) {
        if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
        return { result: path, remote: "already_done" };
      }
    },
  });

const researcher = defineAgent({
  name: "researcher",
  instructions: "Research the task, save what you found with write_note, and answer with a one-line summary.",
  tools: (ctx) => [writeNote(ctx)],
});

const writer = defineAgent({
  name: "writer",
  instructions: "Draft the text the task asks for, save it with write_note, and answer with its first line.",
  tools: (ctx) => [writeNote(ctx)],
});

export default defineAgent({
  name: "team",
  instructions: "Ask the researcher and the writer at once (they do not depend on each other), then sum up " +
    "what both answered.",
  defaultInput: "Plan a launch note for the new release.",
  // Each child's spend counts against this ceiling too.
  budget: { modelCalls: 20 },
  tools: [agentTool(researcher), agentTool(writer, { budget: { modelCalls: 6 } })],
});
