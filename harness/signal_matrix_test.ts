import assert from "node:assert/strict";
import { Signals } from "../runtime/store/signals.ts";
import type { Store } from "../runtime/store/store.ts";
import { runSignalCase, runSignalMatrix, signalCases, signalSummaryLine } from "./signal_matrix.ts";
import { openTestSim } from "../tests/_pg.ts";

/** A store whose take forgets the signal its call's key took before: a re-send then waits for another. */
function forgetful(store: Store): Store {
  const signals = new Signals(store.client);
  const original = signals.take.bind(signals);
  const take: Signals["take"] = async (f, row, name, now) => {
    const took = await original(f, row, name, now);
    return took.kind === "taken" && took.again ? { kind: "none", row } : took;
  };
  return store.withAudiences({ signals: Object.assign(signals, { take }) });
}

Deno.test("the crash matrix of a run that waits for a signal: every point, the signal before, during and waking the wait", async (t) => {
  const db = await openTestSim();
  try {
    await t.step(
      "every case reached passes; the points that cannot fire are reported not reached",
      async () => {
        const result = await runSignalMatrix(db);
        assert.equal(result.cases.length, signalCases().length);
        const failed = result.cases.filter((c) => c.verdict === "failed");
        assert.deepEqual(failed.map((c) => `${c.timing} ${c.point}@${c.seq}: ${c.problems.join("; ")}`), []);
        const notReached = result.cases.filter((c) => c.verdict === "not reached").map((c) =>
          `${c.timing} ${c.point}@${c.seq}`
        );
        // The done-step calls nothing (4 tool points, each timing); woken, the first decision was made before the wait.
        const toolPoints = ["before_intent", "after_intent", "after_call", "after_confirm"];
        assert.deepEqual(
          notReached.sort(),
          [
            ...["before", "during", "woken"].flatMap((timing) => toolPoints.map((p) => `${timing} ${p}@2`)),
            ...["before_decide", "after_decide_before_journal", "after_decide"].map((p) => `woken ${p}@0`),
          ].sort(),
        );
        assert.equal(signalSummaryLine(result), "signal-matrix: 48 passed, 0 failed, 15 not reached");
        // A crash between the take and its confirm: the re-send under the key gets the same signal.
        const taken = result.cases.filter((c) => c.point === "after_call" && c.seq === 0).map((c) =>
          `${c.timing}=${c.remote}`
        );
        assert.deepEqual(taken, ["before=already_done", "during=created", "woken=already_done"]);
      },
    );
    await t.step("a take that forgets the signal its key took fails the case it matters to", async () => {
      const c = { timing: "woken" as const, point: "after_call" as const, seq: 0 };
      await db.freshSchema();
      const result = await runSignalCase(db, c, { layerStore: forgetful });
      assert.equal(result.verdict, "failed");
      assert.ok(
        result.problems.some((p) => /the run ended exited status=waiting/.test(p)),
        result.problems.join("\n"),
      );
    });
  } finally {
    await db.close();
  }
});
