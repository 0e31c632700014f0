import assert from "node:assert/strict";
import { BudgetError } from "../agent/budget.ts";
import { ClientError } from "./errors.ts";
import { SimulatedKill } from "./crashpoints.ts";
import {
  AbortedError,
  ConfigError,
  ERROR_CODES,
  FencedError,
  hasCode,
  ModelError,
  ownCode,
  RuntimeError,
  StoreError,
  ToolError,
} from "./errors.ts";
import { WorkerError } from "../host/run_driver.ts";
import { ParentClosedError } from "../families/family.ts";
import { ValueUnstorableError } from "./storable.ts";

Deno.test("each error class carries a code its list in ERROR_CODES holds, and its name", () => {
  const cases: [Error & { code: string }, keyof typeof ERROR_CODES][] = [
    [new ConfigError(["x"]), "ConfigError"],
    [new StoreError("DB_UNREACHABLE", "x"), "StoreError"],
    [new FencedError("STALLED", "x"), "FencedError"],
    [new AbortedError("x"), "AbortedError"],
    [new SimulatedKill("after_call", 1), "SimulatedKill"],
    [new BudgetError("x"), "BudgetError"],
    [new WorkerError("r", new Error("x"), "released"), "WorkerError"],
    [new ParentClosedError("r.0", "r", "cancelled"), "ParentClosedError"],
    [new ClientError("RUN_NOT_FOUND", "x"), "ClientError"],
    [
      new ValueUnstorableError("tool result", { ok: false, kind: "not_json", reason: "NaN" }),
      "ValueUnstorableError",
    ],
    [new ModelError("MODEL_HTTP", "x"), "ModelError"],
    [new ToolError("TOOL_TIMEOUT", "x", { transient: true }), "ToolError"],
  ];
  for (const [err, list] of cases) {
    assert.ok((ERROR_CODES[list] as readonly string[]).includes(err.code), `${list}: ${err.code}`);
    assert.equal(err.name, list);
    assert.ok(err instanceof RuntimeError);
  }
});

Deno.test("every code is UPPER_SNAKE and listed once per class", () => {
  for (const [cls, codes] of Object.entries(ERROR_CODES)) {
    assert.equal(new Set(codes).size, codes.length, cls);
    for (const code of codes) assert.match(code, /^[A-Z][A-Z0-9_]*$/, `${cls}: ${code}`);
  }
});

Deno.test("a misspelt code is a type error, where it is thrown and where a branch tests it", () => {
  // deno check fails on an unused @ts-expect-error: each line below must be refused.
  // @ts-expect-error: not one of ERROR_CODES
  assert.equal(new RuntimeError("AGENT_MISMATCHED", "x").code, "AGENT_MISMATCHED");
  // @ts-expect-error: a fencing code is no store error's
  assert.equal(new StoreError("FENCED", "x").code, "FENCED");
  const fenced: FencedError = new FencedError("FENCED", "x");
  // @ts-expect-error: a FencedError's code is FENCED, STALLED or RUN_CLOSED: this can never hold
  assert.equal(fenced.code === "FENSED", false);
  // @ts-expect-error: not one of ERROR_CODES
  assert.equal(hasCode(fenced, "FENSED"), false);
  const client: ClientError = new ClientError("RUN_NOT_FOUND", "x");
  // @ts-expect-error: not one of a ClientError's codes
  assert.equal(client.code === "RUN_NOT_FOUNDED", false);
  assert.ok(hasCode(fenced, "FENCED") && hasCode(client, ["RUN_CLOSED", "RUN_NOT_FOUND"]));
  assert.ok(!hasCode(new Error("FENCED"), "FENCED"));
  // A code outside the list on purpose (a program's own), and a tool's own code, are allowed.
  assert.equal(new RuntimeError(ownCode("MINE"), "x").code, "MINE");
  assert.equal(new ToolError("TICKETS_HTTP", "x", { transient: false }).code, "TICKETS_HTTP");
});

Deno.test("every code the runtime throws a ModelError or ToolError with is listed (they take a tool's own too)", async () => {
  // Those two constructors take any string, for an agent's own tools and planners: so their
  // runtime codes are checked here, in the runtime's source.
  const listed = new Set<string>([...ERROR_CODES.ModelError, ...ERROR_CODES.ToolError]);
  const seen = new Set<string>();
  const walk = async (dir: URL): Promise<void> => {
    for await (const e of Deno.readDir(dir)) {
      if (e.isDirectory && e.name !== "testdata") await walk(new URL(`${e.name}/`, dir));
      if (!e.isFile || !e.name.endsWith(".ts") || e.name.endsWith("_test.ts")) continue;
      // Doc examples (comment lines) show a tool of one's own, with its own codes.
      const text = (await Deno.readTextFile(new URL(e.name, dir))).split("\n").filter((l) =>
        !/^\s*\*/.test(l)
      )
        .join("\n");
      for (const m of text.matchAll(/new (?:ModelError|ToolError)\(\s*"([A-Z0-9_]+)"/g)) seen.add(m[1]);
    }
  };
  await walk(new URL("../", import.meta.url));
  assert.ok(seen.size >= 6, [...seen].join(" "));
  for (const code of seen) assert.ok(listed.has(code), `${code} is thrown but not in ERROR_CODES`);
});
