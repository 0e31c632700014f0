import assert from "node:assert/strict";
import { z } from "zod";
import { defineTool, type Json, ToolRegistry } from "../agent/tools.ts";
import type { JournalRow, SideEffectRow } from "../store/store.ts";
import { carryProblems } from "./carry.ts";

const tools = new ToolRegistry([
  defineTool({
    name: "save_note",
    description: "Saves a note.",
    args: z.strictObject({ title: z.string(), tags: z.array(z.string()).default([]) }),
    replaces: ["write_note"],
    run: () => Promise.resolve({ result: "ok" }),
  }),
]);

const step = (seq: number, decision: JournalRow["decision"]) =>
  ({ run_id: "r", seq, status: "confirmed", decision }) as JournalRow;
const call = (seq: number, status: SideEffectRow["status"]) =>
  ({ run_id: "r", seq, idempotency_key: `r:${seq}`, status, tool: "write_note" }) as SideEffectRow;

Deno.test("carryProblems() lists the unsettled decided calls a version cannot carry, and why", () => {
  const journal = [
    step(0, { tool: "delete_note", args: {} }), // settled: history
    step(1, {
      calls: [{ tool: "write_note", args: { title: "a" } }, { tool: "write_note", args: { title: 5 } }],
    }),
    step(3, { tool: "archive", args: {} }),
  ];
  const effects = new Map([[0, call(0, "confirmed")], [1, call(1, "confirmed")]]);
  const open = carryProblems(tools, { journal, effects });
  assert.deepEqual(open.map((p) => [p.seq, p.tool, p.settled]), [[2, "write_note", false], [
    3,
    "archive",
    false,
  ]]);
  assert.match(open[0].problem, /Arguments for write_note \(carried by save_note\) do not fit its schema/);
  assert.match(open[1].problem, /Unknown tool "archive", and no tool of this version replaces it/);
  const all = carryProblems(tools, { journal, effects }, { settledToo: true });
  assert.deepEqual(all.map((p) => [p.seq, p.settled]), [[0, true], [2, false], [3, false]]);
});

Deno.test("carryProblems() leaves a call sent and not settled to the version that sent it", () => {
  const journal = [step(0, { tool: "write_note", args: { title: "a" } })];
  for (const status of ["intent", "waiting", "flagged"] as const) {
    const effects = new Map([[0, call(0, status)]]);
    assert.deepEqual(
      carryProblems(tools, { journal, effects }),
      [],
      `${status}: carried by name, no mover named`,
    );
    const moved = carryProblems(tools, { journal, effects }, { sentBy: "v1" });
    assert.match(
      moved[0].problem,
      new RegExp(`sent by version v1 and is ${status}, and this version would not send the same request`),
    );
  }
  assert.deepEqual(
    carryProblems(tools, { journal, effects: new Map() }, { sentBy: "v1" }),
    [],
    "not sent: carried",
  );
});

Deno.test("carryProblems() lets a moved run's call in flight be settled only by the same request", () => {
  const registry = new ToolRegistry([
    defineTool({
      name: "publish",
      description: "Publishes.",
      args: z.strictObject({ id: z.string(), channel: z.string().default("web") }),
      run: () => Promise.resolve({ result: "ok" }),
    }),
  ]);
  const sent = (args: Json) => new Map([[0, { ...call(0, "intent"), tool: "publish", args }]]);
  const journal = (args: Json) => [step(0, { tool: "publish", args })];
  const same = { id: "p", channel: "web" };
  assert.deepEqual(
    carryProblems(registry, { journal: journal(same), effects: sent(same) }, { sentBy: "v1" }),
    [],
  );
  const changed = carryProblems(registry, { journal: journal({ id: "p" }), effects: sent({ id: "p" }) }, {
    sentBy: "v1",
  });
  assert.match(
    changed[0].problem,
    /would not send the same request under its key \(its schema makes the arguments/,
  );
});
