// Two agents in one module, each answering with its own name at once: `run --agent-name` picks one (settings_test.ts).
import { defineAgent } from "../../../mod.ts";

const answering = (name: string) =>
  defineAgent({
    name,
    tools: [],
    model: {
      describe: `${name}'s script`,
      decide: () => Promise.resolve({ kind: "done", text: `answered by ${name}` }),
    },
  });

export default [answering("first"), answering("second")];
