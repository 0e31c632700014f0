import assert from "node:assert/strict";
import { CountingClient, TapClient, type TappedStatement, UNNAMED } from "./counting.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

Deno.test("CountingClient counts statements by the name they are sent under, and forgets them on reset", async () => {
  const pglite = await openTestPglite();
  const counting = new CountingClient(pglite);
  try {
    await counting.exec("create table pg_temp.t (k int primary key, v int)");
    const insert = { name: "t-insert" };
    for (let i = 0; i < 3; i++) await counting.run("insert into pg_temp.t values ($1, 0)", [i], insert);
    // By the name alone: the text's form (its case, its spaces) plays no part.
    await counting.run("  UPDATE pg_temp.t set v = v + 1 where k = $1", [1], { name: "t-update" });
    // A statement sent without a name is counted as unnamed.
    assert.deepEqual((await counting.query<{ n: number }>("select count(*)::int as n from pg_temp.t"))[0], {
      n: 3,
    });
    assert.deepEqual(Object.fromEntries(counting.counts), { "t-insert": 3, "t-update": 1, [UNNAMED]: 1 });
    assert.equal(counting.total, 5);
    counting.reset();
    assert.equal(counting.total, 0);
    assert.deepEqual(Object.fromEntries(counting.counts), {});
    await counting.run("insert into pg_temp.t values ($1, 0)", [9], insert);
    assert.deepEqual(Object.fromEntries(counting.counts), { "t-insert": 1 });
  } finally {
    await counting.close();
  }
});

Deno.test("TapClient shows each statement before it is sent, and passes its answer back unchanged", async () => {
  const pglite = await openTestPglite();
  const seen: TappedStatement[] = [];
  const settled: string[] = [];
  const tapped = new TapClient(pglite, (s) => {
    seen.push(s);
    // Called once the statement has settled, refused ones included.
    return () => settled.push(s.text);
  });
  try {
    await tapped.exec("create table pg_temp.t (k int primary key)");
    assert.equal(await tapped.run("insert into pg_temp.t values ($1), ($2)", [1, 2]), 2);
    assert.deepEqual(
      await tapped.query<{ k: number }>("select k from pg_temp.t where k > $1 order by k", [0], {
        planEachTime: true,
      }),
      [{ k: 1 }, { k: 2 }],
    );
    // A statement the database refuses was still shown first.
    await assert.rejects(tapped.run("insert into pg_temp.t values ($1)", [1]));
    assert.deepEqual(seen, [
      { rows: false, text: "insert into pg_temp.t values ($1), ($2)", params: [1, 2] },
      {
        rows: true,
        text: "select k from pg_temp.t where k > $1 order by k",
        params: [0],
        opts: { planEachTime: true },
      },
      { rows: false, text: "insert into pg_temp.t values ($1)", params: [1] },
    ]);
    assert.deepEqual(
      settled,
      seen.map((s) => s.text),
      "each statement settled, in order, the refused one too",
    );
    assert.equal(tapped.describe, pglite.describe);
  } finally {
    await tapped.close();
  }
});
