import assert from "node:assert/strict";

import {
  APPROVAL_STATUSES,
  EFFECT_STATUSES,
  JOURNAL_STATUSES,
  OPEN_RUN_STATUSES,
  REMOTE_OUTCOMES,
  RUN_STATUSES,
} from "./statuses.ts";
import { Store } from "./store.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

Deno.test("schema.sql's check constraints allow exactly the statuses statuses.ts declares", async () => {
  const store = new Store(await openTestPglite());
  try {
    await store.applySchema();
    const rows = await store.client.query<{ tbl: string; def: string }>(
      `select c.conrelid::regclass::text as tbl, pg_get_constraintdef(c.oid) as def
         from pg_constraint c
        where c.contype = 'c' and c.conrelid::regclass::text in ('runs', 'journal', 'side_effects', 'approvals')`,
    );
    /** The values a constraint on `column` of `table` allows, in its order. */
    const allowed = (table: string, column: string): string[] => {
      const defs = rows.filter((r) => r.tbl === table && new RegExp(`\\(${column} = ANY`).test(r.def));
      assert.equal(defs.length, 1, `one check on ${table}.${column}: ${JSON.stringify(rows)}`);
      return [...defs[0].def.matchAll(/'([^']*)'::text/g)].map((m) => m[1]);
    };
    assert.deepEqual(allowed("runs", "status"), [...RUN_STATUSES]);
    assert.deepEqual(allowed("journal", "status"), [...JOURNAL_STATUSES]);
    assert.deepEqual(allowed("side_effects", "status"), [...EFFECT_STATUSES]);
    assert.deepEqual(allowed("side_effects", "remote"), [...REMOTE_OUTCOMES]);
    assert.deepEqual(allowed("approvals", "status"), [...APPROVAL_STATUSES]);
  } finally {
    await store.client.close();
  }
});

Deno.test("the open run statuses are run statuses, in the order runs move through them", () => {
  assert.deepEqual(OPEN_RUN_STATUSES, RUN_STATUSES.filter((s) => OPEN_RUN_STATUSES.includes(s)));
  assert.ok(!OPEN_RUN_STATUSES.some((s) => s === "done" || s === "failed" || s === "cancelled"));
});
