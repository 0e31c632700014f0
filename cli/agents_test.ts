import assert from "node:assert/strict";
import { ManualClock } from "../runtime/base/clock.ts";
import { ConfigError } from "../runtime/base/errors.ts";
import { importProblem, loadAgents } from "./agents.ts";

const MOD_TS = new URL("../mod.ts", import.meta.url).href;

Deno.test("an agent module that never finishes importing is refused after the bound, naming the module", async () => {
  const dir = await Deno.makeTempDir({ prefix: "agents_test_" });
  try {
    // A top-level await that settles only when the test lets it (after the bound), so the import
    // does not outlive the test.
    let release = () => {};
    const gate = new Promise<void>((r) => release = r);
    (globalThis as { agentsTestGate?: Promise<void> }).agentsTestGate = gate;
    await Deno.writeTextFile(`${dir}/hangs.ts`, `await globalThis.agentsTestGate;\nexport default 1;\n`);
    const clock = new ManualClock();
    const loading = loadAgents(`${dir}/hangs.ts`, { timeoutMs: 30_000, clock });
    let settled = false;
    loading.then(() => settled = true, () => settled = true);
    await clock.advance(29_999);
    assert.equal(settled, false, "still waiting within the bound");
    await clock.advance(1);
    await assert.rejects(loading, (err: ConfigError) => {
      assert.ok(err instanceof ConfigError);
      assert.equal(err.problems.length, 1);
      assert.match(err.problems[0], /^AGENT ".*hangs\.ts" did not finish loading within 30 s/);
      assert.match(err.problems[0], /AGENT_LOAD_S/);
      return true;
    });
    release();
    await import(`file://${dir}/hangs.ts`); // the module's own import, now finished
  } finally {
    delete (globalThis as { agentsTestGate?: Promise<void> }).agentsTestGate;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an agent module that loads within the bound leaves no timer behind", async () => {
  const dir = await Deno.makeTempDir({ prefix: "agents_test_" });
  try {
    await Deno.writeTextFile(
      `${dir}/quick.ts`,
      `import { defineAgent } from "${MOD_TS}";\nexport default defineAgent({ name: "quick", tools: [] });\n`,
    );
    const clock = new ManualClock();
    const { agents } = await loadAgents(`${dir}/quick.ts`, { timeoutMs: 30_000, clock });
    assert.deepEqual(agents.map((a) => a.name), ["quick"]);
    assert.equal(clock.pending, 0, "the bound's sleep was cancelled");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an agent module that does not load is named with the file, line and column of the problem", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "agents_test_" });
  const write = (name: string, text: string) => Deno.writeTextFile(`${dir}/${name}`, text);
  try {
    await write(
      "syntax.ts",
      `import { defineAgent } from "${MOD_TS}";\n\nexport default defineAgent({ name: "a", tools: [], model: ) });\n`,
    );
    await write("imports_bad.ts", `import "./syntax.ts";\nexport default 1;\n`);
    await write("throws.ts", `const url = undefined;\nif (!url) throw new Error("NOTES_URL is not set");\n`);
    await write("missing.ts", `import "./nowhere.ts";\nexport default 1;\n`);
    for (
      const [name, expected] of [
        [
          "syntax.ts",
          `SyntaxError: Expression expected at ${dir}/syntax.ts:3:59 (line 3, column 59): ` +
          `export default defineAgent({ name: "a", tools: [], model: ) });`,
        ],
        [
          "imports_bad.ts",
          `SyntaxError: Expression expected at ${dir}/syntax.ts:3:59 (line 3, column 59): ` +
          `export default defineAgent({ name: "a", tools: [], model: ) });`,
        ],
        ["throws.ts", `Error: NOTES_URL is not set at ${dir}/throws.ts:2:17 (line 2, column 17)`],
        [
          "missing.ts",
          `TypeError: Module not found "file://${dir}/nowhere.ts" at ${dir}/missing.ts:1:8 (line 1, column 8)`,
        ],
      ] as const
    ) {
      await t.step(name, async () => {
        await assert.rejects(loadAgents(`${dir}/${name}`), (err: ConfigError) => {
          assert.ok(err instanceof ConfigError);
          assert.equal(err.problems[0], `AGENT "${dir}/${name}" could not be loaded: ${expected}`);
          return true;
        });
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("importProblem() cuts a long line of source around the column and shows invisible characters", () => {
  const long = `${"a".repeat(200)} ) ${"b".repeat(200)}`;
  const err = new TypeError(
    `SyntaxError: Expression expected\n  |\n7 | ${long}\n  |   ~\n    at file:///m/agent.ts:7:202`,
  );
  const shown = importProblem(err);
  assert.match(
    shown,
    /^SyntaxError: Expression expected at \/m\/agent\.ts:7:202 \(line 7, column 202\): \.\.\.a+ \) b+\.\.\.$/,
  );
  assert.ok(shown.length < 220, shown);
  const hidden = importProblem(
    new TypeError("SyntaxError: Unexpected token\n1 | x\u202e = 1\n    at file:///m/a.ts:1:2"),
  );
  assert.ok(!hidden.includes("\u202e"), hidden);
});

Deno.test("--agent old.ts,new.ts loads both modules: one agent at two versions, hosted side by side", async () => {
  const dir = await Deno.makeTempDir({ prefix: "agents_test_" });
  try {
    for (const v of ["1", "2"]) {
      await Deno.writeTextFile(
        `${dir}/v${v}.ts`,
        `import { defineAgent } from "${MOD_TS}";\nexport default defineAgent({ name: "notes", version: "${v}", tools: [] });\n`,
      );
    }
    const { agents, where } = await loadAgents(`${dir}/v1.ts, ${dir}/v2.ts`);
    assert.deepEqual(agents.map((a) => `${a.name}@${a.version}`), ["notes@1", "notes@2"]);
    assert.equal(where, `${dir}/v1.ts, ${dir}/v2.ts`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
