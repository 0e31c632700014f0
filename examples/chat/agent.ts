// A conversation agent, what `deno task dev` chats with when given no --agent: each message a person sends is
// its next turn, answered in the same run. Its one tool saves a note (a file per idempotency key, created once,
// so a call re-sent after a crash reads `already_done`). With no MODEL_URL the dev command answers with the
// in-process mock model; set MODEL_URL and MODEL for a real one.
import { z } from "npm:zod@4.6.7";
import { type AgentContext, defineAgent, defineTool } from "../../mod.ts";

/** Notes go to NOTES_DIR, else under DATA_DIR. */
const saveNote = (ctx: AgentContext) =>
  defineTool({
    name: "save_note",
    description: "Saves a note the person asked to keep. Returns where it was saved.",
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

export default defineAgent({
  name: "chat",
  instructions: "You chat with a person. When they ask you to remember something, save it with save_note; " +
    "answer in one or two sentences.",
  defaultInput: "Hello! Please keep a note: water the plants on Friday.",
  tools: (ctx) => [saveNote(ctx)],
  // A conversation: the run waits for the next message, up to an hour of silence.
  conversation: { idleMs: 3_600_000 },
});
