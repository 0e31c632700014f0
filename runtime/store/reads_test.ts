/**
 * Reads of one run's rows (`reads.ts`): the history statement splits its one
 * `union all` back into journal rows and tool calls, each by step, and reads
 * exactly what the writes returned; a watcher's later read starts at a step;
 * a watcher's look at the run carries four columns and says when a
 * conversation is idle; a tool call and its approval requests are found by
 * key and by run; and whatever does not exist reads as undefined or empty.
 * On PGlite and PostgreSQL.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { writeDecision } from "../../harness/direct_writes.ts";
import { ManualClock } from "../base/clock.ts";
import type { Fence, Store } from "./store.ts";
import { MIGRATIONS } from "./migrate.ts";
import { HISTORY_FROM_QUERY } from "./reads.ts";

/** Creates `runId` and claims it: its fence. */
async function held(store: Store, runId: string, now: Date, conversationIdleMs?: number): Promise<Fence> {
  await store.leases.createRun({ runId, agent: "reader", goal: "g", conversationIdleMs }, now);
  return { runId, epoch: (await store.leases.claimRun(runId, 0, "w1", now))!.epoch };
}

bothStoresTest("reads of one run's rows", async (store, t) => {
  const clock = new ManualClock(Date.UTC(2026, 0, 1));

  await t.step("what does not exist reads as undefined or empty", async () => {
    assert.equal(await store.reads.getRun("r-none"), undefined);
    assert.equal(await store.reads.watchRun("r-none"), undefined);
    assert.equal(await store.reads.getEffect("r-none:0"), undefined);
    assert.equal(await store.reads.getApproval("r-none:0"), undefined);
    assert.equal((await store.reads.listApprovals("r-none")).length, 0);
    assert.deepEqual(await store.reads.loadHistory("r-none"), { journal: [], effects: [] });
  });

  await t.step("the history is each table's rows by step, as the writes returned them", async () => {
    const f = await held(store, "r-hist", clock.now());
    const steps = [];
    for (const seq of [0, 1]) {
      await clock.advance(1_000);
      steps.push(
        await writeDecision(store, f, seq, { decision: { tool: "note", args: { seq } } }, clock.now()),
      );
    }
    const asking = await store.writes.journalIntentRow(f, 2, clock.now());
    // Step 1's call is written before step 0's: the read orders them.
    const call1 = await store.writes.effectIntentRow(
      f,
      { key: "r-hist:1", seq: 1, tool: "note", args: {} },
      clock.now(),
    );
    const call0 = await store.writes.effectIntentRow(
      f,
      { key: "r-hist:0", seq: 0, tool: "note", args: {} },
      clock.now(),
    );
    const done0 = await store.writes.effectConfirm(
      f,
      call0,
      { result: { ok: 1 }, remote: "created" },
      clock.now(),
    );

    const history = await store.reads.loadHistory("r-hist");
    assert.deepStrictEqual(history, { journal: [...steps, asking], effects: [done0, call1] });
    const later = await store.reads.historyFrom("r-hist", 1);
    assert.deepStrictEqual(later, { journal: [steps[1], asking], effects: [call1] });
    assert.deepEqual(await store.reads.historyFrom("r-hist", 3), { journal: [], effects: [] });
    assert.deepStrictEqual(await store.reads.getEffect("r-hist:0"), done0);
  });

  await t.step("a watcher's look is status, epoch, error and whether a conversation is idle", async () => {
    const failing = await held(store, "r-watch", clock.now());
    await store.writes.finishRun(failing, "failed", "model refused", clock.now(), "partial answer");
    assert.deepEqual(await store.reads.watchRun("r-watch"), {
      status: "failed",
      epoch: 1,
      error: "model refused",
      idle: false,
    });

    const retrying = await held(store, "r-retry", clock.now());
    await store.writes.retryRun(retrying, new Date(clock.now().getTime() + 5_000), "model down", clock.now());
    assert.deepEqual(await store.reads.watchRun("r-retry"), {
      status: "waiting",
      epoch: 1,
      error: "model down",
      idle: false,
    });

    const chat = await held(store, "r-chat", clock.now(), 60_000);
    const answered = await store.conversations.answer(chat, {
      message: 0,
      answerSeq: 0,
      answer: "hello",
      answeredAt: clock.now(),
      idleUntil: new Date(clock.now().getTime() + 60_000),
    });
    assert.equal(answered?.status, "waiting");
    assert.deepEqual(await store.reads.watchRun("r-chat"), {
      status: "waiting",
      epoch: 1,
      error: null,
      idle: true,
    });
  });

  await t.step("approval requests are found by key, and listed by step for their run only", async () => {
    const f = await held(store, "r-ask", clock.now());
    const other = await held(store, "r-ask-other", clock.now());
    const ask = (runId: string, seq: number) => ({
      key: `${runId}:${seq}`,
      seq,
      tool: "pay",
      args: { seq },
      hash: `h${seq}`,
    });
    const asked = await store.writes.requestApprovals(f, [ask("r-ask", 4), ask("r-ask", 3)], clock.now());
    await store.writes.requestApprovals(other, [ask("r-ask-other", 0)], clock.now());
    // A plain array: postgres.js sends back its own subclass, which a strict comparison tells apart.
    const listed = [...await store.reads.listApprovals("r-ask")];
    assert.deepEqual(listed.map((a) => [a.idempotency_key, a.status, a.args_hash]), [
      ["r-ask:3", "pending", "h3"],
      ["r-ask:4", "pending", "h4"],
    ]);
    assert.deepStrictEqual(listed, asked.approvals);
    assert.deepStrictEqual(await store.reads.getApproval("r-ask:4"), listed[1]);
  });
});

Deno.test("a watcher's read in schema.sql runs HISTORY_FROM_QUERY, as its last migration wrote it", () => {
  // read_history_from keeps one generic plan per session; a change to the history's columns or
  // order is a new migration replacing it, and this says so.
  const defined = MIGRATIONS.filter((m) => m.sql.includes("function read_history_from("));
  assert.ok(defined.length > 0, "schema.sql defines read_history_from");
  const sql = defined[defined.length - 1].sql;
  const body =
    /\$history\$\s*#variable_conflict use_column\s*begin\s+return query\s+([\s\S]*?);\s*end\s*\$history\$/
      .exec(sql);
  assert.ok(body, "read_history_from is one `return query`");
  const words = (text: string) => text.trim().split(/\s+/).join(" ");
  assert.equal(words(body[1]), words(HISTORY_FROM_QUERY));
});
