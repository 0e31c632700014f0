/**
 * One run's fenced writes, on PGlite and PostgreSQL: each returns the row as
 * the write left it (the same row a read gives back), each is refused once
 * the fence moved (another worker claimed the run: FENCED) or the run was
 * closed under it (RUN_CLOSED), and a refused write changes nothing.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { claim } from "../../harness/direct_writes.ts";
import { FencedError } from "../base/errors.ts";

const T0 = new Date(Date.UTC(2030, 0, 1));
const at = (s: number) => new Date(T0.getTime() + s * 1000);

bothStoresTest("a step's four writes return the rows a read gives back", async (store) => {
  await store.leases.createRun({ runId: "w1", agent: "a", goal: "g" }, at(0));
  const f = { runId: "w1", epoch: (await claim(store, "w1", 0, "w", at(0)))! };
  const intent = await store.writes.journalIntentRow(f, 0, at(1));
  assert.deepEqual([intent.status, intent.llm_attempts, intent.epoch], ["intent", 1, f.epoch]);
  const decided = await store.writes.journalConfirm(
    f,
    intent,
    { decision: { tool: "note", args: { text: "hi" } }, usage: undefined },
    at(2),
  );
  const effect = await store.writes.effectIntentRow(
    f,
    { key: "w1:0", seq: 0, tool: "note", args: { text: "hi" } },
    at(3),
  );
  const confirmed = await store.writes.effectConfirm(
    f,
    effect,
    { result: { saved: true }, remote: "created" },
    at(4),
  );
  const read = await store.reads.loadHistory("w1");
  assert.deepEqual(read.journal, [decided]);
  assert.deepEqual(read.effects, [confirmed]);
});

bothStoresTest(
  "a write at an epoch that moved is refused as FENCED, one on a closed run as RUN_CLOSED, and changes nothing",
  async (store) => {
    await store.leases.createRun({ runId: "w2", agent: "a", goal: "g" }, at(0));
    const old = { runId: "w2", epoch: (await claim(store, "w2", 0, "old", at(0)))! };
    const intent = await store.writes.journalIntentRow(old, 0, at(1));
    const now = { runId: "w2", epoch: (await claim(store, "w2", old.epoch, "new", at(2)))! };
    await assert.rejects(
      store.writes.journalConfirm(
        old,
        intent,
        { decision: { done: true, message: "stale" }, usage: undefined },
        at(3),
      ),
      (e: FencedError) => e instanceof FencedError && e.code === "FENCED",
    );
    await assert.rejects(
      store.writes.effectIntentRow(old, { key: "w2:0", seq: 0, tool: "note", args: {} }, at(3)),
      (e: FencedError) => e instanceof FencedError && e.code === "FENCED",
    );
    assert.equal(await store.writes.heartbeat(old, at(3)), false);
    assert.equal(
      await store.writes.releaseRun(old, "late", at(3)),
      false,
      "an old worker cannot let go of it either",
    );
    const read = await store.reads.loadHistory("w2");
    assert.deepEqual(read.journal.map((j) => j.status), ["intent"], "the stale confirm wrote nothing");
    assert.deepEqual(read.effects, []);
    await store.writes.finishRun(now, "done", null, at(4), "the answer");
    await assert.rejects(
      store.writes.journalIntentRow(now, 1, at(5)),
      (e: FencedError) => e instanceof FencedError && e.code === "RUN_CLOSED",
    );
    const run = await store.reads.getRun("w2");
    assert.deepEqual([run?.status, run?.output, run?.error], ["done", "the answer", null]);
  },
);
