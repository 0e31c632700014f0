/**
 * The rows a fresh intent's plain insert writes (`fresh_rows.ts`) are the
 * rows the database reads back, column for column, on PGlite and
 * PostgreSQL: a column added to the schema without its default there fails
 * here.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { claim } from "../../harness/direct_writes.ts";
import { freshEffectRow, freshJournalRow } from "./fresh_rows.ts";

const T0 = new Date(Date.UTC(2026, 0, 1));

bothStoresTest("a fresh intent's row, built from its values, is the row read back", async (store) => {
  await store.leases.createRun({ runId: "fresh", agent: "a", goal: "g" }, T0);
  const f = { runId: "fresh", epoch: (await claim(store, "fresh", 0, "w1", T0))! };
  const params = { temperature: 0.5 };
  const journal = await store.writes.journalIntentRow(f, 0, T0, { fresh: true, reserveTokens: 7, params });
  const call = { key: "fresh:0", seq: 0, tool: "note", args: { text: "hi" } };
  const effect = await store.writes.effectIntentRow(f, call, T0, true);
  const history = await store.reads.loadHistory("fresh");
  assert.deepStrictEqual(journal, freshJournalRow(f, 0, T0, 7, params));
  assert.deepStrictEqual(history.journal, [journal], "the journal row as read back");
  assert.deepStrictEqual(effect, freshEffectRow(f, call, T0));
  assert.deepStrictEqual(history.effects, [effect], "the call's row as read back");
  assert.deepStrictEqual(await store.reads.getEffect("fresh:0"), effect, "and as read alone");
});
