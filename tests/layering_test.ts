import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import {
  type ImportGraph,
  layeringProblems,
  readImportGraph,
  RUNTIME_FOLDERS,
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
  assert.ok(graph.has("runtime/store/postgres.ts") && graph.has("runtime/client/client.ts"));
  assert.ok(graph.get("runtime/agent/budget.ts")?.includes("runtime/store/store.ts"));
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
  assert.deepEqual(layeringProblems(graph, { ...RUNTIME_RULES, folders: undefined }), [
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

  await t.step("errors.ts importing the run driver closes a cycle and goes up five floors", () => {
    const problems = layeringProblems(
      plant("runtime/base/errors.ts", "runtime/host/run_driver.ts"),
      RUNTIME_RULES,
    );
    assert.equal(problems.length, 2, problems.join("\n"));
    assert.match(
      problems[0],
      /^Import cycle inside runtime\/: runtime\/\S+ -> .*runtime\/base\/errors\.ts -> .*runtime\/host\/run_driver\.ts/,
    );
    assert.equal(
      problems[1],
      "runtime/base/errors.ts imports runtime/host/run_driver.ts: base/ may import nothing outside itself " +
        "(the table in tests/_layering.ts)",
    );
  });

  await t.step("a module importing itself is a cycle", () => {
    assert.deepEqual(
      layeringProblems(plant("runtime/base/clock.ts", "runtime/base/clock.ts"), RUNTIME_RULES),
      [
        "Import cycle inside runtime/: runtime/base/clock.ts -> runtime/base/clock.ts",
      ],
    );
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
    assert.deepEqual(
      layeringProblems(plant("runtime/host/run_driver.ts", "runtime/host/run_driver_test.ts"), RUNTIME_RULES),
      [
        `runtime/host/run_driver.ts imports runtime/host/run_driver_test.ts, a test file: ${RULE}`,
      ],
    );
  });

  await t.step("a test beside the library may import the mocks", () => {
    assert.deepEqual(
      layeringProblems(plant("runtime/host/run_driver_test.ts", "mock/model.ts"), RUNTIME_RULES),
      [],
    );
  });
});

Deno.test("the folder table: each arrow not declared fails, with the folders that are", async (t) => {
  const real = await readImportGraph({ root: ROOT, dir: "runtime" });
  const plant = (from: string, to: string): ImportGraph => {
    const graph = new Map([...real].map(([k, v]) => [k, [...v]]));
    graph.set(from, [...(graph.get(from) ?? []), to]);
    return graph;
  };
  await t.step("the store importing the settings (as open.ts once did) is refused", () => {
    assert.deepEqual(
      layeringProblems(plant("runtime/store/open.ts", "runtime/settings/config.ts"), RUNTIME_RULES),
      [
        "runtime/store/open.ts imports runtime/settings/config.ts: store/ may import base/, model/ " +
        "(the table in tests/_layering.ts)",
      ],
    );
  });
  await t.step("the store importing an agent's module is refused", () => {
    assert.deepEqual(
      layeringProblems(plant("runtime/store/rows.ts", "runtime/agent/tools.ts"), RUNTIME_RULES),
      [
        "runtime/store/rows.ts imports runtime/agent/tools.ts: store/ may import base/, model/ " +
        "(the table in tests/_layering.ts)",
      ],
    );
  });
  await t.step("a planner importing the run's telemetry (as openai.ts once did) is refused", () => {
    assert.deepEqual(
      layeringProblems(plant("runtime/model/openai.ts", "runtime/run/telemetry.ts"), RUNTIME_RULES),
      [
        "runtime/model/openai.ts imports runtime/run/telemetry.ts: model/ may import base/ " +
        "(the table in tests/_layering.ts)",
      ],
    );
  });
  await t.step("a module at the library's root, in no folder, is refused", () => {
    const graph = new Map([...real, ["runtime/loose.ts", ["runtime/base/clock.ts"]]]);
    const problems = layeringProblems(graph, RUNTIME_RULES);
    assert.equal(problems.length, 1, problems.join("\n"));
    assert.match(
      problems[0],
      /^runtime\/loose\.ts is in no declared folder: every module of runtime\/ lives in one of base\/, model\//,
    );
  });
  await t.step("an undeclared folder is refused", () => {
    const graph = new Map([...real, ["runtime/misc/x.ts", []]]);
    assert.equal(layeringProblems(graph, RUNTIME_RULES).length, 1);
  });
  await t.step("a declared arrow is allowed: the step imports the run", () => {
    assert.deepEqual(
      layeringProblems(plant("runtime/step/act.ts", "runtime/run/stream.ts"), RUNTIME_RULES),
      [],
    );
  });
});

Deno.test("the folder table is the layout: each folder on disk is declared, each declared one exists, no arrow loops", async () => {
  const onDisk: string[] = [];
  for await (const e of Deno.readDir(`${ROOT}/runtime`)) {
    if (e.isDirectory && e.name !== "testdata") onDisk.push(e.name);
  }
  assert.deepEqual(onDisk.sort(), Object.keys(RUNTIME_FOLDERS).sort());
  // Declared order is a topological order: a folder imports only folders declared before it.
  const order = Object.keys(RUNTIME_FOLDERS);
  for (const [folder, may] of Object.entries(RUNTIME_FOLDERS)) {
    for (const other of may) {
      assert.ok(
        order.indexOf(other) < order.indexOf(folder),
        `${folder}/ may import ${other}/, declared after it`,
      );
    }
  }
  // No loose module at the library's root.
  for await (const e of Deno.readDir(`${ROOT}/runtime`)) {
    assert.ok(!e.isFile, `runtime/${e.name} is in no folder`);
  }
});

/** The names that occur in more than one of `paths`, each with its paths. */
function sharedNames(paths: readonly string[]): string[] {
  const byName = new Map<string, string[]>();
  for (const p of paths) byName.set(p.split("/").pop()!, [...(byName.get(p.split("/").pop()!) ?? []), p]);
  return [...byName].filter(([, ps]) => ps.length > 1).map(([name, ps]) => `${name}: ${ps.join(", ")}`);
}

Deno.test("no two files of the library share a name: a name says which file it is", async () => {
  const files: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    for await (const e of Deno.readDir(`${ROOT}/${dir}`)) {
      if (e.isDirectory && e.name !== "testdata") await walk(`${dir}/${e.name}`);
      else if (e.isFile && e.name.endsWith(".ts")) files.push(`${dir}/${e.name}`);
    }
  };
  await walk("runtime");
  assert.deepEqual(sharedNames(files), []);
  // And the check sees a shared name when there is one: a second reads.ts, as the client once had.
  assert.deepEqual(sharedNames([...files.sort(), "runtime/client/reads.ts"]), [
    "reads.ts: runtime/store/reads.ts, runtime/client/reads.ts",
  ]);
});

/** The modules among `names` (one folder's file names) with no `_test.ts` beside them. */
function untested(names: ReadonlySet<string>): string[] {
  return [...names].filter((n) =>
    n.endsWith(".ts") && !n.endsWith("_test.ts") && !names.has(n.replace(/\.ts$/, "_test.ts"))
  )
    .sort();
}

Deno.test("every module of step/ and store/ has its test beside it", async () => {
  const missing: string[] = [];
  for (const dir of ["runtime/step", "runtime/store"]) {
    const names = new Set<string>();
    for await (const e of Deno.readDir(`${ROOT}/${dir}`)) if (e.isFile) names.add(e.name);
    missing.push(...untested(names).map((n) => `${dir}/${n}`));
  }
  assert.deepEqual(missing, []);
  // And the check sees a module without its test.
  assert.deepEqual(untested(new Set(["send.ts", "send_test.ts", "settle.ts", "notes.md"])), ["settle.ts"]);
});
