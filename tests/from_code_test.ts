/**
 * The README's first page runs an agent from code in three calls
 * (`connect`, `run`, `close`): `examples/notes/from_code.ts` is that code,
 * run here as a user would, a process of its own against the mock model
 * over HTTP, in an empty folder. The README shows the file as it is.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";

const ROOT = new URL("../", import.meta.url);
const EXAMPLE = new URL("examples/notes/from_code.ts", ROOT);

Deno.test("examples/notes/from_code.ts runs the notes agent to its answer in three calls; again, it adds a run", async () => {
  const mocks = await serveMocks();
  const dir = await Deno.makeTempDir({ prefix: "from-code-" });
  try {
    const once = async () => {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", EXAMPLE.pathname],
        cwd: dir,
        env: { MODEL_URL: mocks.modelUrl, MODEL: "mock-planner" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stdout);
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
      return text;
    };
    // The worker it hosts logs each step to stdout first; the program's own line is the last.
    const last = (text: string) => text.trimEnd().split("\n").at(-1);
    const first = await once();
    assert.match(first, /event=confirmed run=notes-\S+ seq=0 key=notes-\S+:0 .*remote=created/);
    assert.equal(last(first), "done Called write_note.");
    assert.equal(last(await once()), "done Called write_note.");
    const notes = [...Deno.readDirSync(`${dir}/.data/notes`)].map((e) => e.name);
    assert.equal(notes.length, 2, `one note per run, each under its own key: ${notes.join(", ")}`);
  } finally {
    await mocks.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the README shows examples/notes/from_code.ts as it is, and its code is three calls", async () => {
  const readme = await Deno.readTextFile(new URL("README.md", ROOT));
  const code = await Deno.readTextFile(EXAMPLE);
  // Marked `ignore`: its relative imports are the example folder's, not the README's (deno test --doc).
  assert.ok(
    readme.includes("```ts ignore\n" + code + "```\n"),
    "README.md's block differs from examples/notes/from_code.ts",
  );
  const calls = code.split("\n").filter((l) => /\bawait\b/.test(l));
  assert.deepEqual(calls.map((l) => /(connect|client\.\w+)\(/.exec(l)?.[1]), [
    "connect",
    "client.run",
    "client.close",
  ]);
});
