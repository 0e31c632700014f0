import assert from "node:assert/strict";
import { compile } from "./compile.ts";

const MOD_TS = new URL("../mod.ts", import.meta.url).href;

Deno.test("the compile entry carries the agent module: it runs the agent with no --agent", async () => {
  const dir = await Deno.makeTempDir({ prefix: "compile_test_" });
  try {
    await Deno.writeTextFile(
      `${dir}/agent.ts`,
      `import { z } from "npm:zod@4.6.7";
import { defineAgent, defineTool } from "${MOD_TS}";
export default defineAgent({
  name: "echoer",
  tools: [defineTool({
    name: "echo", description: "Echoes.", args: z.strictObject({ text: z.string() }),
    run: (args) => Promise.resolve({ result: args.text }),
  })],
  model: {
    describe: "script",
    decide: (req) => Promise.resolve(req.seq === 0
      ? { kind: "tool_calls", calls: [{ name: "echo", args: { text: "hi" } }] }
      : { kind: "done", text: "echoed" }),
  },
  defaultInput: "echo something",
});
`,
    );
    const original = console.log;
    console.log = () => {};
    try {
      assert.equal(
        await compile(["--agent", `${dir}/agent.ts`, "--entry", `${dir}/entry.ts`, "--entry-only"]),
        0,
      );
    } finally {
      console.log = original;
    }
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--config",
        new URL("../deno.json", import.meta.url).pathname,
        `${dir}/entry.ts`,
        "run",
      ],
      env: { DATA_DIR: `${dir}/data`, DATABASE_URL: "", MODEL_URL: "", AGENT: "", RUN_ID: "c1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, text);
    assert.match(text, /backends .*agent=echoer/);
    assert.match(text, /event=confirmed run=c1 seq=0 key=c1:0 result=hi remote=created/);
    assert.match(text, /event=done run=c1 tool_calls=1/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
