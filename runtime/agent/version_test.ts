import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent, preparedVersion } from "./agent.ts";
import { defineTool, ToolRegistry } from "./tools.ts";
import { checkOnNewVersion, checkVersion, takeKey, versionDigest } from "./version.ts";

const tool = (name: string, opts: { replaces?: string[]; description?: string; extra?: boolean } = {}) =>
  defineTool({
    name,
    description: opts.description ?? "Saves a note.",
    args: opts.extra
      ? z.strictObject({ title: z.string(), tags: z.array(z.string()).default([]) })
      : z.strictObject({ title: z.string() }),
    replaces: opts.replaces,
    run: () => Promise.resolve({ result: "ok" }),
  });

Deno.test("the digest version changes with what the model sees and the tools' contracts, and only with them", () => {
  const base = versionDigest("Write notes.", [tool("write_note"), tool("list_notes")]);
  assert.match(base, /^[0-9a-f]{12}$/);
  assert.equal(versionDigest("Write notes.", [tool("list_notes"), tool("write_note")]), base, "tool order");
  assert.equal(
    versionDigest("Write notes.", [tool("write_note", { description: "Other words." }), tool("list_notes")]),
    base,
    "a description",
  );
  const changed = [
    versionDigest("Write short notes.", [tool("write_note"), tool("list_notes")]),
    versionDigest("Write notes.", [tool("save_note"), tool("list_notes")]),
    versionDigest("Write notes.", [tool("save_note", { replaces: ["write_note"] }), tool("list_notes")]),
    versionDigest("Write notes.", [tool("write_note", { extra: true }), tool("list_notes")]),
    versionDigest("Write notes.", [tool("write_note")]),
  ];
  assert.equal(
    new Set([base, ...changed]).size,
    6,
    "instructions, a rename, replaces, a schema, a tool removed",
  );
});

Deno.test("an agent's version: the one it gives, else the digest of the tools built", () => {
  const given = defineAgent({ name: "notes", version: "2026.12-1", tools: [tool("write_note")] });
  const digest = defineAgent({ name: "notes", instructions: "Write notes.", tools: [tool("write_note")] });
  assert.equal(preparedVersion({ agent: given, tools: new ToolRegistry([tool("write_note")]) }), "2026.12-1");
  assert.equal(
    preparedVersion({ agent: digest, tools: new ToolRegistry([tool("write_note")]) }),
    versionDigest("Write notes.", [tool("write_note")]),
  );
  assert.equal(digest.onNewVersion, "stay", "runs stay on their version unless the agent says otherwise");
  assert.equal(defineAgent({ name: "n", tools: [], onNewVersion: "move" }).onNewVersion, "move");
});

Deno.test("a version and a policy are checked when the agent is defined", async (t) => {
  for (const bad of ["", "has space", "a@b", "-lead", "x".repeat(65), 3]) {
    await t.step(`version ${JSON.stringify(bad)}`, () => {
      assert.throws(
        () => defineAgent({ name: "n", tools: [], version: bad as string }),
        (e: Error & { code?: string }) =>
          e.code === "AGENT_INVALID" && /'version' must be 1-64/.test(e.message),
      );
    });
  }
  assert.equal(checkVersion("v2.1+build_7", "x"), "v2.1+build_7");
  assert.throws(() => checkOnNewVersion("sometimes", "x"), /'onNewVersion' must be one of stay, move/);
  assert.equal(takeKey("notes", "v1"), "notes@v1");
  assert.equal(takeKey("notes", null), "notes@");
});

Deno.test("a tool says which names it replaces; one name is carried by one tool", () => {
  const save = tool("save_note", { replaces: ["write_note", "note"] });
  assert.deepEqual(save.replaces, ["write_note", "note"]);
  assert.throws(() => tool("save_note", { replaces: ["save_note"] }), /names the tool itself/);
  assert.throws(() => tool("save_note", { replaces: ["bad name"] }), /must be an array of tool names/);
  assert.throws(
    () => new ToolRegistry([save, tool("write_note")]),
    /replaces write_note, which is a tool of this version/,
  );
  assert.throws(
    () => new ToolRegistry([save, tool("keep_note", { replaces: ["note"] })]),
    /replaces note, which save_note replaces too/,
  );
});

Deno.test("a decided call is carried by the tool that replaces its name, checked against that tool's schema", () => {
  const registry = new ToolRegistry([tool("save_note", { replaces: ["write_note"], extra: true })]);
  const fresh = registry.check("write_note", { title: "t" });
  assert.equal(
    !fresh.ok && fresh.code,
    "UNKNOWN_TOOL",
    "a model's fresh answer must use this version's names",
  );
  const carried = registry.check("write_note", { title: "t" }, { carried: true });
  assert.ok(carried.ok);
  assert.equal(carried.tool.name, "save_note");
  assert.deepEqual(carried.args, { title: "t", tags: [] }, "the new argument's default applied");
  const refused = registry.check("write_note", { title: 7 }, { carried: true });
  assert.equal(!refused.ok && refused.code, "BAD_ARGS");
  assert.match(!refused.ok ? refused.message : "", /Arguments for write_note \(carried by save_note\)/);
  const unknown = registry.check("delete_note", {}, { carried: true });
  assert.match(
    !unknown.ok ? unknown.message : "",
    /Unknown tool "delete_note", and no tool of this version replaces it\. Available tools: save_note/,
  );
});
