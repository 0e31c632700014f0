import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import {
  type ImportGraph,
  layeringProblems,
  readImportGraph,
  RUNTIME_RULES,
  SUPERVISOR_RULES,
} from "./_layering.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const FIXTURE = fileURLToPath(new URL("./testdata/layering/", import.meta.url));

const RULE = "the library imports nothing outside runtime/ (but schema.sql)";

Deno.test("runtime/ has no import cycle and imports nothing outside it", async () => {
  const graph = await readImportGraph({ root: ROOT, dir: "runtime" });
  assert.deepEqual(layeringProblems(graph, RUNTIME_RULES), []);
  // The graph is the whole library, type imports included (budget.ts only imports the store's row types).
  assert.ok(graph.has("runtime/store/postgres.ts") && graph.has("runtime/client.ts"));
  assert.ok(graph.get("runtime/budget.ts")?.includes("runtime/store/store.ts"));
  assert.ok(graph.get("runtime/store/store.ts")?.includes("schema.sql"));
  assert.ok(![...graph.keys()].some((p) => p.endsWith("_test.ts")), "tests are no part of the library");
});

Deno.test("supervisor/ imports the runtime and nothing else: its command lives in cli/", async () => {
  const graph = await readImportGraph({ root: ROOT, dir: "supervisor" });
  assert.deepEqual(layeringProblems(graph, SUPERVISOR_RULES), []);
  assert.deepEqual(
    layeringProblems(
      new Map([...graph, ["supervisor/spawn.ts", [...graph.get("supervisor/spawn.ts")!, "cli/agents.ts"]]]),
      SUPERVISOR_RULES,
    ),
    [
      "supervisor/spawn.ts imports cli/agents.ts, a module outside supervisor/: the library imports nothing " +
      "outside supervisor/ (but runtime/, schema.sql)",
    ],
  );
});

Deno.test("the layering check fails on a planted cycle and planted backward imports (testdata/layering)", async () => {
  const graph = await readImportGraph({ root: FIXTURE, dir: "runtime", config: `${ROOT}/deno.json` });
  assert.deepEqual(layeringProblems(graph, RUNTIME_RULES), [
    "Import cycle inside runtime/: runtime/a.ts -> runtime/store/b.ts -> runtime/a.ts",
    `runtime/c.ts imports mock/m.ts, a module outside runtime/: ${RULE}`,
    `runtime/e.ts imports harness/h.ts, a module outside runtime/: ${RULE}`,
  ]);
});

Deno.test("the layering check fails when an edge planted in the real graph closes a cycle or points backward", async (t) => {
  const real = await readImportGraph({ root: ROOT, dir: "runtime" });
  const plant = (from: string, to: string): ImportGraph => {
    const graph = new Map([...real].map(([k, v]) => [k, [...v]]));
    graph.set(from, [...(graph.get(from) ?? []), to]);
    return graph;
  };

  await t.step("errors.ts importing loop.ts closes a cycle through the whole step", () => {
    const problems = layeringProblems(plant("runtime/errors.ts", "runtime/loop.ts"), RUNTIME_RULES);
    assert.equal(problems.length, 1, problems.join("\n"));
    assert.match(
      problems[0],
      /^Import cycle inside runtime\/: runtime\/\S+ -> .*runtime\/errors\.ts -> .*runtime\/loop\.ts/,
    );
  });

  await t.step("a module importing itself is a cycle", () => {
    assert.deepEqual(layeringProblems(plant("runtime/clock.ts", "runtime/clock.ts"), RUNTIME_RULES), [
      "Import cycle inside runtime/: runtime/clock.ts -> runtime/clock.ts",
    ]);
  });

  for (
    const target of ["cli/main.ts", "supervisor/supervisor.ts", "tests/_pg.ts", "mock/model.ts", "mod.ts"]
  ) {
    await t.step(`store.ts importing ${target} is a backward import`, () => {
      assert.deepEqual(layeringProblems(plant("runtime/store/store.ts", target), RUNTIME_RULES), [
        `runtime/store/store.ts imports ${target}, a module outside runtime/: ${RULE}`,
      ]);
    });
  }

  await t.step("the library importing a test file beside it is refused too", () => {
    assert.deepEqual(layeringProblems(plant("runtime/loop.ts", "runtime/loop_test.ts"), RUNTIME_RULES), [
      `runtime/loop.ts imports runtime/loop_test.ts, a test file: ${RULE}`,
    ]);
  });

  await t.step("a test beside the library may import the mocks", () => {
    assert.deepEqual(layeringProblems(plant("runtime/loop_test.ts", "mock/model.ts"), RUNTIME_RULES), []);
  });
});
