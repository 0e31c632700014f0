import assert from "node:assert/strict";
import { dropEpochFromFence, fenceScenario, GUARDED_WRITES, measureBaseline } from "./fence.ts";
import { openTestSim } from "../tests/_pg.ts";

Deno.test("a worker holding a stale epoch is refused at every guarded write and writes nothing", async (t) => {
  const db = await openTestSim();
  try {
    const baseline = await measureBaseline(db);
    for (const variant of ["closed", "open"] as const) {
      for (const write of GUARDED_WRITES) {
        const where = variant === "closed"
          ? "after the new owner settled the run"
          : "while the new owner's run is open";
        await t.step(`${write}: refused ${where}, fenced, settled by the new owner`, async () => {
          const result = await fenceScenario(db, write, baseline, { variant });
          assert.deepEqual(result.problems, [], result.transcript.join("\n"));
        });
      }
    }
  } finally {
    await db.close();
  }
});

Deno.test("with the epoch dropped from the fence, the proof fails at every guarded write", async (t) => {
  const db = await openTestSim();
  try {
    const baseline = await measureBaseline(db);
    for (const write of GUARDED_WRITES) {
      await t.step(`${write}: the stale worker's write goes through, and the proof says so`, async () => {
        const counter = { rewritten: 0 };
        const result = await fenceScenario(db, write, baseline, {
          variant: "open",
          plant: (client) => dropEpochFromFence(client, counter),
        });
        assert.ok(counter.rewritten > 0, "the planted bug changed no statement");
        assert.notDeepEqual(result.problems, [], result.transcript.join("\n"));
      });
    }
  } finally {
    await db.close();
  }
});
