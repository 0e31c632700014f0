// A complete agent: one tool whose remote is a folder of notes. The file is named by the
// idempotency key and created only if it does not exist, so a re-sent call finds the first one.
import { z } from "zod";
import { defineAgent, defineTool } from "../../mod.ts";

export default defineAgent({
  name: "notes",
  instructions: "Write the note the user asks for with write_note, then say what you wrote.",
  defaultInput: "Remind me to water the plants on Friday.",
  tools: (ctx) => [
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
          return { result: path, remote: "already_done" }; // written before a crash: not again
        }
      },
    }),
  ],
});
