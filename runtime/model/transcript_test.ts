import assert from "node:assert/strict";
import { type ModelAnswer, type PlannerDecision, plannerDecision } from "./transcript.ts";

Deno.test("plannerDecision() takes a neutral answer as it is and rewrites the one-call shape before #23", async (t) => {
  const usage = { total_tokens: 3 };
  await t.step("a neutral answer is returned unchanged", () => {
    const calls: PlannerDecision = {
      kind: "tool_calls",
      calls: [{ id: "c", name: "a", args: {} }],
      text: "t",
      usage,
    };
    const done: PlannerDecision = { kind: "done", text: "ok" };
    assert.equal(plannerDecision(calls), calls);
    assert.equal(plannerDecision(done), done);
  });
  const legacy: Array<[string, ModelAnswer, PlannerDecision]> = [
    [
      "{ kind: 'tool' } is one call",
      { kind: "tool", tool: "a", args: { x: 1 }, usage },
      { kind: "tool_calls", calls: [{ name: "a", args: { x: 1 } }], usage },
    ],
    [
      "{ kind: 'done', message } is done with that text",
      { kind: "done", message: "ok", usage },
      { kind: "done", text: "ok", usage },
    ],
  ];
  for (const [name, answer, expected] of legacy) {
    await t.step(name, () => assert.deepEqual(plannerDecision(answer), expected));
  }
});
