/**
 * What the store's statements are made of (`sql.ts`): a declared statement
 * keeps its name and options and is sent with them; the parameter helpers
 * write a value as the database will store it; and the shared conditions
 * (`RUNNING_AT`, `CLAIMABLE_AT`, `FENCE`) match exactly the rows they say,
 * never null, on PGlite and PostgreSQL.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { claim } from "../../harness/direct_writes.ts";
import { ValueUnstorableError } from "../base/storable.ts";
import type { QueryOptions, SqlClient } from "./driver.ts";
import { OPEN_RUN_STATUSES } from "./rows.ts";
import {
  CLAIMABLE_AT,
  FENCE,
  jsonParam,
  OPEN_STATUSES,
  queryRows,
  RUNNING_AT,
  runWrite,
  statement,
  textParam,
  ts,
} from "./sql.ts";

const T0 = new Date(Date.UTC(2026, 0, 1));

/** A driver that answers nothing and records what it was sent. */
function recordingClient(sent: { text: string; params?: unknown[]; opts?: QueryOptions }[]): SqlClient {
  return {
    describe: "recording",
    query: <T>(text: string, params?: unknown[], opts?: QueryOptions) => {
      sent.push({ text, params, opts });
      return Promise.resolve([{ one: 1 }] as T[]);
    },
    run: (text, params, opts) => {
      sent.push({ text, params, opts });
      return Promise.resolve(3);
    },
    exec: () => Promise.resolve(),
    close: () => Promise.resolve(),
  };
}

Deno.test("statement() is frozen with its options, and queryRows/runWrite send them every time", async () => {
  const s = statement("pick-one", "select $1::int as one", { planEachTime: true });
  assert.ok(Object.isFrozen(s) && Object.isFrozen(s.options));
  assert.deepEqual(s.options, { name: "pick-one", planEachTime: true });
  assert.deepEqual(statement("plain", "select 1").options, { name: "plain" });
  const sent: { text: string; params?: unknown[]; opts?: QueryOptions }[] = [];
  const client = recordingClient(sent);
  assert.deepEqual(await queryRows(client, s, [1]), [{ one: 1 }]);
  assert.equal(await runWrite(client, s, [2]), 3, "runWrite gives back the count the driver reports");
  assert.deepEqual(sent, [
    { text: s.text, params: [1], opts: s.options },
    { text: s.text, params: [2], opts: s.options },
  ]);
  assert.equal(sent[0].opts, sent[1].opts, "the options object is built once, not per execution");
});

Deno.test("textParam() and jsonParam() write NUL and lone surrogates out; ts() writes to the millisecond", () => {
  assert.equal(textParam(null), null);
  assert.equal(textParam("a\0b\0"), "a\\u0000b\\u0000");
  assert.equal(textParam("x\ud800y"), "x\ufffdy", "a lone surrogate is sent as U+FFFD");
  assert.equal(textParam("pair \ud83d\ude00"), "pair \ud83d\ude00", "a surrogate pair is kept");

  assert.deepEqual(JSON.parse(jsonParam({ a: "x\0", b: [1] }, "run input")), { a: "x\\u0000", b: [1] });
  assert.equal(jsonParam(undefined, "run budget"), "null");
  assert.throws(
    () => jsonParam({ n: NaN }, "run input"),
    (e: unknown) =>
      e instanceof ValueUnstorableError && e.kind === "changed" && e.message.startsWith("The run input"),
  );

  assert.equal(ts(new Date(Date.UTC(2026, 1, 3, 4, 5, 6, 7))), "2026-02-03T04:05:06.007Z");
  assert.equal(ts(new Date(Date.UTC(10000, 0, 1))), "+010000-01-01T00:00:00.000Z");
});

Deno.test("OPEN_STATUSES lists every open status, quoted, in their declared order", () => {
  assert.equal(OPEN_STATUSES, `(${OPEN_RUN_STATUSES.map((s) => `'${s}'`).join(", ")})`);
  assert.equal(OPEN_STATUSES, "('pending', 'running', 'waiting', 'blocked')");
});

// Rows standing in for `runs` (a CTE of that name hides the table), null columns included.
const ROWS = `runs(run_id, epoch, status, wake_at) as (values
  ('pending-1', 1, 'pending', null::timestamptz), ('running-1', 1, 'running', null),
  ('running-2', 2, 'running', null), ('blocked-1', 1, 'blocked', null),
  ('woken-1', 1, 'waiting', '2026-01-01T00:00:00Z'), ('later-1', 1, 'waiting', '2026-01-01T00:00:01Z'),
  ('person-1', 1, 'waiting', null), ('null-epoch', null::int, 'running', null))`;

bothStoresTest("RUNNING_AT, CLAIMABLE_AT and FENCE match exactly the rows they say", async (store, t) => {
  const ids = async (where: string, params: unknown[] = []) =>
    (await store.client.query<{ run_id: string }>(
      `with ${ROWS} select run_id from runs where ${where} order by run_id`,
      params,
    )).map((r) => r.run_id);

  await t.step("RUNNING_AT: running at that epoch, and false (not null) for a null column", async () => {
    assert.deepEqual(await ids(RUNNING_AT("1")), ["running-1"]);
    assert.deepEqual(await ids(RUNNING_AT("$1::int"), [2]), ["running-2"]);
    assert.ok((await ids(`not ${RUNNING_AT("1")}`)).includes("null-epoch"));
  });

  await t.step("CLAIMABLE_AT: pending or running, and waiting once its wake time has come", async () => {
    assert.deepEqual(await ids(CLAIMABLE_AT("1")), ["pending-1", "running-1"]);
    assert.deepEqual(await ids(CLAIMABLE_AT("1", "$1::timestamptz"), [ts(T0)]), [
      "pending-1",
      "running-1",
      "woken-1",
    ]);
    assert.ok((await ids(`not ${CLAIMABLE_AT("1", "$1::timestamptz")}`, [ts(T0)])).includes("person-1"));
  });

  await t.step("FENCE: holds for the epoch of the latest claim while the run is running", async () => {
    const held = async (epoch: number) =>
      (await store.client.query<{ held: boolean }>(`select ${FENCE} as held`, ["f-1", epoch]))[0].held;
    await store.leases.createRun({ runId: "f-1", agent: "a", goal: "g" }, T0);
    assert.equal(await held(0), false, "a pending run is held by nobody");
    const first = (await claim(store, "f-1", 0, "w1", T0))!;
    assert.equal(await held(first), true);
    const second = (await claim(store, "f-1", first, "w2", T0))!;
    assert.deepEqual([await held(first), await held(second)], [false, true]);
    await store.writes.finishRun({ runId: "f-1", epoch: second }, "done", null, T0, "ok");
    assert.equal(await held(second), false, "a closed run fences every epoch");
  });
});
