import assert from "node:assert/strict";
import { stepEnd } from "./spine.ts";
import { BlockedError, SleepingError, WaitingError } from "./act.ts";
import { RetryingError } from "./decide.ts";
import { FencedError, ModelError, RuntimeError, ToolError } from "../base/errors.ts";
import { BudgetError } from "../agent/budget.ts";
import { ParentClosedError } from "../families/family.ts";
import { InvariantError } from "../base/assert.ts";

Deno.test("stepEnd() reads each error a stage throws on purpose as one end, and no other error", () => {
  const at = new Date("2030-01-01T00:00:00Z");
  const fenced = new FencedError("FENCED", "another worker holds it");
  assert.deepEqual(stepEnd(fenced), { kind: "fenced", error: fenced });
  for (
    const err of [
      new WaitingError([{ key: "r:0", tool: "pay" }]),
      new SleepingError(["r:0"], at),
      new RetryingError(at, "the model is down"),
    ]
  ) {
    assert.deepEqual(stepEnd(err), { kind: "waiting", reason: err.message });
  }
  const blocked = new BlockedError("r:1", "no key");
  assert.deepEqual(stepEnd(blocked), { kind: "blocked", key: "r:1", reason: blocked.message });
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
