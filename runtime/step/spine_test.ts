/**
 * The step's ends: an error a stage ends with on purpose is read as one end
 * of the one union the driver switches over; waits, sleeps and blocks are
 * not errors at all, so no error reads as them.
 */

import assert from "node:assert/strict";
import { stepEnd } from "./spine.ts";
import { blockedBy } from "./act.ts";
import { FencedError, ModelError, RuntimeError, ToolError } from "../base/errors.ts";
import { BudgetError } from "../agent/budget.ts";
import { ParentClosedError } from "../families/family.ts";
import { InvariantError } from "../base/assert.ts";
import { effectRow } from "../testdata/rows.ts";

Deno.test("stepEnd() reads each error a stage ends with on purpose as one end, and no other error", () => {
  const fenced = new FencedError("FENCED", "another worker holds it");
  assert.deepEqual(stepEnd(fenced), { kind: "fenced", error: fenced });
  const parent = new ParentClosedError("r.0", "r", "cancelled");
  assert.deepEqual(stepEnd(parent), { kind: "cancelled", ancestor: "r", reason: parent.message });
  for (
    const err of [
      new ModelError("MODEL_GAVE_UP", "gave up"),
      new ToolError("TOOL_GAVE_UP", "gave up", { transient: false }),
      new BudgetError("budget: spent"),
      new RuntimeError("DECISION_INVALID", "too long"),
    ]
  ) {
    assert.deepEqual(stepEnd(err), { kind: "failed", error: err });
  }
  // Not an end: an agent's code, a statement refused, a broken invariant: the driver lets the run go.
  for (const err of [new Error("agent code threw"), new InvariantError("r", "x"), "a string"]) {
    assert.equal(stepEnd(err), undefined);
  }
});

Deno.test("a flagged call blocks the run with its reason and the commands that resolve it", () => {
  const row = effectRow("r", 1, { tool: "pay", args: {} }, { status: "flagged", error: "no key" });
  const end = blockedBy(row);
  assert.equal(end.kind, "blocked");
  assert.equal(end.key, "r:1");
  assert.match(
    end.reason,
    /^Tool call r:1 needs a human: no key\. .*'deno task resolve r:1 --result <json>'/,
  );
  // A flagged row with no reason recorded still says what is wrong.
  assert.match(blockedBy({ ...row, error: null }).reason, /its outcome is unknown/);
});
