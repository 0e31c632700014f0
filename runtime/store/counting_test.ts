import assert from "node:assert/strict";
import { CountingClient } from "./counting.ts";
import { openPglite } from "./pglite.ts";

Deno.test("CountingClient counts statements by their first word, and forgets them on reset", async () => {
  const pglite = await openPglite();
  const counting = new CountingClient(pglite);
  try {
    await counting.exec("create table pg_temp.t (k int primary key, v int)");
    for (let i = 0; i < 3; i++) await counting.run("insert into pg_temp.t values ($1, 0)", [i]);
    await counting.run("  UPDATE pg_temp.t set v = v + 1 where k = $1", [1]);
    assert.deepEqual((await counting.query<{ n: number }>("select count(*)::int as n from pg_temp.t"))[0], {
      n: 3,
    });
    assert.deepEqual(Object.fromEntries(counting.counts), { insert: 3, update: 1, select: 1 });
    assert.equal(counting.total, 5);
    counting.reset();
    assert.equal(counting.total, 0);
    assert.deepEqual(Object.fromEntries(counting.counts), {});
    await counting.run("insert into pg_temp.t values ($1, 0)", [9]);
    assert.deepEqual(Object.fromEntries(counting.counts), { insert: 1 });
  } finally {
    await counting.close();
  }
});
