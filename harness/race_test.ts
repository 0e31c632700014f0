import assert from "node:assert/strict";
import { measureBaseline } from "./fence.ts";
import { claimRace, stallAndSteal } from "./race.ts";
import { openTestSim } from "../tests/_pg.ts";

Deno.test("two live workers on one run end as if one worker ran it alone", async (t) => {
  const db = await openTestSim();
  try {
    const baseline = await measureBaseline(db);
    await t.step("two workers started together: exactly one wins the claim", async () => {
      const r = await claimRace(db, baseline);
      assert.deepEqual(r.problems, [], r.transcript.join("\n"));
    });
    await t.step("a worker stalled at after_decide is fenced on its first write after a steal", async () => {
      const r = await stallAndSteal(db, baseline);
      assert.deepEqual(r.problems, [], r.transcript.join("\n"));
    });
    await t.step("a steal at every step's after_decide leaves the same clean run", async () => {
      for (const seq of [1, 2, 3]) {
        const r = await stallAndSteal(db, baseline, { runId: `race-steal-s${seq}`, seq });
        assert.deepEqual(r.problems, [], r.transcript.join("\n"));
      }
    });
  } finally {
    await db.close();
  }
});
