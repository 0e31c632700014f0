import assert from "node:assert/strict";
import { fenceScenario, GUARDED_WRITES, measureBaseline } from "./fence.ts";
import { SimDb } from "./sim.ts";

Deno.test("a worker holding a stale epoch is refused at every guarded write and writes nothing", async (t) => {
  const db = await SimDb.open();
  try {
    const baseline = await measureBaseline(db);
    for (const write of GUARDED_WRITES) {
      await t.step(`${write}: refused, fenced, settled by the new owner`, async () => {
        const result = await fenceScenario(db, write, baseline);
        assert.deepEqual(result.problems, [], result.transcript.join("\n"));
      });
    }
  } finally {
    await db.close();
  }
});
