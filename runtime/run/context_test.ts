import assert from "node:assert/strict";
import { applyRow } from "./context.ts";
import { InvariantError } from "../base/assert.ts";
import { effectRow, journalRow } from "../testdata/rows.ts";
import type { JournalRow, SideEffectRow } from "../store/rows.ts";

const CALL = { tool: "t", args: {} };

function state(runId = "run-a") {
  return {
    fence: { runId, epoch: 1 },
    journal: new Map<number, JournalRow>(),
    effects: new Map<number, SideEffectRow>(),
  };
}

Deno.test("applyRow() applies a row to its step, and each of its invariants fires as a bug naming the run", async (t) => {
  await t.step("a row of another run", () => {
    const s = state();
    assert.throws(
      () => applyRow(s, journalRow("run-b", 0, null)),
      (e: InvariantError) =>
        e instanceof InvariantError && e.runId === "run-a" && /a row of run run-b/.test(e.message),
    );
    assert.equal(s.journal.size, 0, "nothing applied");
  });
  await t.step("a row at a seq that is no whole number", () => {
    assert.throws(() => applyRow(state(), journalRow("run-a", -1, null)), InvariantError);
  });
  await t.step("a confirmed decision or result replaced by one that is not", () => {
    const s = state();
    applyRow(s, journalRow("run-a", 0, null));
    applyRow(s, journalRow("run-a", 0, { done: true, message: "ok" }));
    assert.equal(s.journal.get(0)?.status, "confirmed");
    assert.throws(
      () => applyRow(s, journalRow("run-a", 0, null)),
      /the confirmed decision at seq 0 replaced by one intent/,
    );
    applyRow(s, effectRow("run-a", 0, CALL, {}));
    assert.throws(
      () => applyRow(s, effectRow("run-a", 0, CALL, { status: "intent", confirmed_at: null })),
      /the confirmed tool call at seq 0 replaced by one intent/,
    );
    assert.equal(s.effects.get(0)?.status, "confirmed");
  });
});
