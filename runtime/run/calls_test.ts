import assert from "node:assert/strict";
import { settledSteps } from "./calls.ts";
import type { Decision, JournalRow, SideEffectRow } from "../store/rows.ts";

/** A journal row and effect rows as settledSteps reads them: only seq, status and decision count. */
function rows(
  journal: [seq: number, status: JournalRow["status"], decision: Decision | null][],
  effects: [seq: number, status: SideEffectRow["status"]][],
) {
  return {
    journal: new Map(
      journal.map(([seq, status, decision]) => [seq, { seq, status, decision } as JournalRow]),
    ),
    effects: new Map(effects.map(([seq, status]) => [seq, { seq, status } as SideEffectRow])),
  };
}

const one = (tool: string): Decision => ({ tool, args: {} });
const two: Decision = { calls: [{ tool: "a", args: {} }, { tool: "b", args: {} }] };

Deno.test("settledSteps() goes past decisions whose every call is confirmed, one seq a call", () => {
  const r = rows(
    [[0, "confirmed", one("a")], [1, "confirmed", two], [3, "confirmed", one("c")], [4, "intent", null]],
    [[0, "confirmed"], [1, "confirmed"], [2, "confirmed"], [3, "confirmed"]],
  );
  assert.deepEqual(settledSteps(r, 0, 100), { seq: 4, steps: 3 });
  assert.deepEqual(settledSteps(r, 1, 100), { seq: 4, steps: 2 }, "from a later step");
  assert.deepEqual(settledSteps(r, 0, 2), { seq: 3, steps: 2 }, "at most `most` steps");
  assert.deepEqual(settledSteps(r, 0, 0), { seq: 0, steps: 0 });
});

Deno.test("settledSteps() stops at an answer, an unconfirmed decision, or a call not confirmed", () => {
  const answer = rows([[0, "confirmed", one("a")], [1, "confirmed", { done: true, message: "ok" }]], [[
    0,
    "confirmed",
  ]]);
  assert.deepEqual(
    settledSteps(answer, 0, 100),
    { seq: 1, steps: 1 },
    "an answer is replayed: it closes the run",
  );
  const undecided = rows([[0, "intent", null]], []);
  assert.deepEqual(settledSteps(undecided, 0, 100), { seq: 0, steps: 0 });
  for (const status of ["intent", "waiting", "failed", "flagged"] as const) {
    const r = rows([[0, "confirmed", two]], [[0, "confirmed"], [1, status]]);
    assert.deepEqual(settledSteps(r, 0, 100), { seq: 0, steps: 0 }, `a call at ${status}`);
  }
  const unsent = rows([[0, "confirmed", two]], [[0, "confirmed"]]);
  assert.deepEqual(settledSteps(unsent, 0, 100), { seq: 0, steps: 0 }, "a call with no row yet");
});
