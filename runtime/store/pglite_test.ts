import assert from "node:assert/strict";
import { openPglite, PgliteSession } from "./pglite.ts";
import { Store } from "./store.ts";

Deno.test("the embedded session analyses its tables after 1,000 statements, then ever more rarely", () => {
  const session = new PgliteSession();
  const due: number[] = [];
  for (let n = 1; n <= 400_000; n++) if (session.countStatement()) due.push(n);
  // 1,000 apart at first, twice as far each time, never more than 64,000 apart.
  assert.deepEqual(due.slice(0, 7), [1_000, 3_000, 7_000, 15_000, 31_000, 63_000, 127_000]);
  assert.deepEqual(due.slice(7, 9), [191_000, 255_000]);
});

Deno.test("a PGlite store gathers the planner's statistics on its own, as autovacuum would", async () => {
  const client = await openPglite();
  try {
    await new Store(client).applySchema();
    const analysed = async () =>
      (await client.query<{ n: number }>(
        `select count(*)::int as n from pg_class where relname = $1 and reltuples >= 0`,
        ["runs"],
      ))[0].n === 1;
    assert.equal(await analysed(), false, "a new table has never been analysed");
    // Bounded: the first analysis is due within 1,000 statements.
    let statements = 0;
    while (!(await analysed()) && statements < 1_000) {
      await client.query(`select $1::int as n`, [statements]);
      statements += 2; // this one and the check
    }
    assert.ok(await analysed(), `not analysed after ${statements} statements`);
  } finally {
    await client.close();
  }
});
