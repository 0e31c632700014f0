/**
 * Runs that call runs, at the store: a child created under its parent's
 * fence (once, whatever re-sends its call), a family's spend, a child's end
 * waking the parent that waits on it (also when the parent is still asking
 * about it), a parent's end and a cancel taking the open descendants with
 * them, and prune taking a family whole. The same cases on PGlite and
 * PostgreSQL.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { claim, writeDecision } from "../../harness/direct_writes.ts";
import { FencedError } from "../base/errors.ts";
import type { Fence, SideEffectRow, Store } from "./store.ts";

const T0 = new Date(Date.UTC(2026, 0, 1));
const at = (s: number) => new Date(T0.getTime() + s * 1000);
const HOUR_S = 3600;

/** A running run (claimed at `now`) with step 0 decided as a call of `helper`. */
async function runningParent(store: Store, runId: string, now = T0): Promise<Fence> {
  await store.leases.createRun({ runId, agent: "boss", goal: "goal" }, now);
  const f = { runId, epoch: (await claim(store, runId, 0, "w1", now))! };
  await writeDecision(
    store,
    f,
    0,
    { decision: { tool: "helper", args: { task: "t" } }, usage: undefined },
    now,
  );
  return f;
}

/** The call at step 0 of `f`'s run, sent (at intent). */
async function sentCall(store: Store, f: Fence, now = T0): Promise<SideEffectRow> {
  return await store.writes.effectIntentRow(
    f,
    { key: `${f.runId}:0`, seq: 0, tool: "helper", args: { task: "t" } },
    now,
    true,
  );
}

/** Starts the child `${f.runId}.0` of the call at step 0. */
async function startChild(store: Store, f: Fence, now = T0) {
  return await store.families.createChild(f, {
    runId: `${f.runId}.0`,
    agent: "helper",
    goal: "t",
    input: "t",
    parentKey: `${f.runId}:0`,
  }, now);
}

/** Claims the (pending) child run `runId`. */
async function claimChild(store: Store, runId: string, now = T0): Promise<Fence> {
  return { runId, epoch: (await claim(store, runId, 0, "w2", now))! };
}

bothStoresTest(
  "a child run is created once under its parent's fence, and re-found by the same call",
  async (store) => {
    const f = await runningParent(store, "fam-a");
    await sentCall(store, f);
    const first = await startChild(store, f);
    assert.equal(first.created, true);
    assert.deepEqual(
      [
        first.run.run_id,
        first.run.status,
        first.run.parent_run_id,
        first.run.parent_key,
        first.run.root_run_id,
      ],
      ["fam-a.0", "pending", "fam-a", "fam-a:0", "fam-a"],
    );
    assert.equal(
      (await store.reads.getRun("fam-a"))?.root_run_id,
      "fam-a",
      "a root names itself once it has a child",
    );
    const again = await startChild(store, f, at(5));
    assert.equal(again.created, false);
    assert.equal(again.run.created_at.getTime(), T0.getTime(), "the child the call started first");

    // A grandchild takes the family's root.
    const c = await claimChild(store, "fam-a.0");
    await writeDecision(
      store,
      c,
      0,
      { decision: { tool: "helper", args: { task: "u" } }, usage: undefined },
      T0,
    );
    const grand = await startChild(store, c);
    assert.deepEqual([grand.run.parent_run_id, grand.run.root_run_id], ["fam-a.0", "fam-a"]);

    // A parent no longer running under this worker starts nothing.
    await store.families.cancel("fam-a", "cancelled by test", at(10));
    await assert.rejects(
      store.families.createChild(f, {
        runId: "fam-a.1",
        agent: "helper",
        goal: "t",
        input: "t",
        parentKey: "fam-a:1",
      }, at(11)),
      (e: FencedError) => e instanceof FencedError && e.code === "RUN_CLOSED",
    );
    assert.equal(await store.reads.getRun("fam-a.1"), undefined);
  },
);

bothStoresTest("a family's spend is read per run, through its root", async (store) => {
  const f = await runningParent(store, "fam-s");
  await sentCall(store, f);
  await startChild(store, f);
  const c = await claimChild(store, "fam-s.0");
  await writeDecision(store, c, 0, { decision: { tool: "x", args: {} }, usage: undefined }, T0);
  await store.writes.journalIntentRow(c, 1, T0, { reserveTokens: 500, fresh: true });
  await store.writes.effectIntentRow(c, { key: "fam-s.0:0", seq: 0, tool: "x", args: {} }, T0, true);
  await store.leases.createRun({ runId: "other", agent: "boss", goal: "g" }, T0);
  const family = await store.families.readFamily("fam-s");
  assert.deepEqual(
    family.map((m) => [m.run_id, m.parent_run_id, m.status, m.model_calls, m.tool_calls, m.tokens]),
    [["fam-s", null, "running", 1, 1, 0], ["fam-s.0", "fam-s", "running", 2, 1, 500]],
  );
});

bothStoresTest(
  "a child's end wakes the parent that waits on it, and marks its call due now",
  async (store) => {
    const f = await runningParent(store, "fam-w");
    const sent = await sentCall(store, f);
    await startChild(store, f);
    await store.writes.effectWaiting(f, sent, {
      result: { run: "fam-w.0" },
      checkAt: at(300),
      deadlineAt: at(HOUR_S),
    });
    assert.equal(await store.writes.waitRun(f, at(300), at(1)), true);
    assert.equal((await store.reads.getRun("fam-w"))?.wake_at?.getTime(), at(300).getTime());

    const c = await claimChild(store, "fam-w.0", at(2));
    const end = await store.families.finish(
      c,
      { status: "done", error: null, output: "the answer", orphaned: "x" },
      at(20),
      (fence, what) => store.writes.refusal(fence, what),
    );
    assert.deepEqual(end, { woken: true, cancelled: [] });
    const parent = await store.reads.getRun("fam-w");
    assert.deepEqual([parent?.status, parent?.wake_at?.getTime()], ["waiting", at(20).getTime()]);
    assert.equal((await store.reads.getEffect("fam-w:0"))?.check_at?.getTime(), at(20).getTime());
    const child = await store.reads.getRun("fam-w.0");
    assert.deepEqual([child?.status, child?.output], ["done", "the answer"]);
    // Taken at once.
    assert.deepEqual((await store.leases.takeRuns("w3", ["boss"], at(20), at(20), 10)).map((r) => r.run_id), [
      "fam-w",
    ]);
    // Refused once it is not this worker's any more.
    await assert.rejects(
      store.families.finish(
        c,
        { status: "done", error: null, output: "again", orphaned: "x" },
        at(21),
        (fence, what) => store.writes.refusal(fence, what),
      ),
      (e: FencedError) => e instanceof FencedError && e.code === "RUN_CLOSED",
    );
  },
);

bothStoresTest(
  "a child that ends while its parent asks about it is not slept past: the parent wakes at once",
  async (store) => {
    const f = await runningParent(store, "fam-r");
    const sent = await sentCall(store, f);
    await startChild(store, f);
    // The parent's tool has seen the child running; the child ends before the parent records that.
    const c = await claimChild(store, "fam-r.0", at(1));
    await store.families.finish(
      c,
      { status: "done", error: null, output: "early", orphaned: "x" },
      at(2),
      (fence, what) => store.writes.refusal(fence, what),
    );
    const waiting = await store.writes.effectWaiting(f, sent, {
      result: { run: "fam-r.0" },
      checkAt: at(300),
      deadlineAt: at(HOUR_S),
    });
    assert.equal(waiting.status, "waiting");
    assert.equal((await store.reads.getEffect("fam-r:0"))?.check_at?.getTime(), at(2).getTime());
    assert.equal(await store.writes.waitRun(f, at(300), at(3)), true);
    assert.equal((await store.reads.getRun("fam-r"))?.wake_at?.getTime(), at(2).getTime());
  },
);

bothStoresTest(
  "a parent's end cancels its open descendants; a cancel takes the whole subtree and wakes the parent above it",
  async (store) => {
    // fam-p -> fam-p.0 -> fam-p.0.0
    const f = await runningParent(store, "fam-p");
    await sentCall(store, f);
    await startChild(store, f);
    const c = await claimChild(store, "fam-p.0");
    await writeDecision(
      store,
      c,
      0,
      { decision: { tool: "helper", args: { task: "u" } }, usage: undefined },
      T0,
    );
    await store.writes.effectIntentRow(
      c,
      { key: "fam-p.0:0", seq: 0, tool: "helper", args: { task: "u" } },
      T0,
      true,
    );
    await startChild(store, c);
    const end = await store.families.finish(
      f,
      { status: "failed", error: "boom", output: null, orphaned: "cancelled with fam-p, which failed" },
      at(5),
      (fence, what) => store.writes.refusal(fence, what),
    );
    assert.deepEqual(end, { woken: false, cancelled: ["fam-p.0", "fam-p.0.0"] });
    for (const id of ["fam-p.0", "fam-p.0.0"]) {
      const r = await store.reads.getRun(id);
      assert.deepEqual([r?.status, r?.error], ["cancelled", "cancelled with fam-p, which failed"]);
    }
    // A child's worker is stopped by its next write.
    assert.equal(await store.writes.heartbeat(c, at(6)), false);

    // A cancel of a middle run: its subtree goes with it, and the parent waiting on it is woken.
    const g = await runningParent(store, "fam-c");
    const sent = await sentCall(store, g);
    await startChild(store, g);
    await store.writes.effectWaiting(g, sent, {
      result: { run: "fam-c.0" },
      checkAt: at(300),
      deadlineAt: at(HOUR_S),
    });
    assert.equal(await store.writes.waitRun(g, at(300), at(1)), true);
    const gc = await claimChild(store, "fam-c.0");
    await writeDecision(
      store,
      gc,
      0,
      { decision: { tool: "helper", args: { task: "u" } }, usage: undefined },
      T0,
    );
    await store.writes.effectIntentRow(
      gc,
      { key: "fam-c.0:0", seq: 0, tool: "helper", args: { task: "u" } },
      T0,
      true,
    );
    await startChild(store, gc);
    const out = await store.families.cancel("fam-c.0", "cancelled by ops", at(7));
    assert.deepEqual([out?.run.status, out?.run.error, out?.cancelled], [
      "cancelled",
      "cancelled by ops",
      ["fam-c.0.0"],
    ]);
    assert.equal((await store.reads.getRun("fam-c.0.0"))?.error, "cancelled with fam-c.0: cancelled by ops");
    assert.deepEqual(
      [(await store.reads.getRun("fam-c"))?.status, (await store.reads.getRun("fam-c"))?.wake_at?.getTime()],
      ["waiting", at(7).getTime()],
    );
    // The root's cancel takes what is left open.
    const root = await store.families.cancel("fam-c", "cancelled by ops", at(8));
    assert.deepEqual(root?.cancelled, []);
    assert.equal(await store.families.cancel("fam-c", "again", at(9)), undefined);
    assert.deepEqual(
      (await store.families.children("fam-c")).map((r) => [r.run_id, r.status, r.parent_key]),
      [
        ["fam-c.0", "cancelled", "fam-c:0"],
      ],
    );
  },
);

bothStoresTest(
  "prune takes a family whole with its root, and never a child before its parent",
  async (store) => {
    const f = await runningParent(store, "fam-x");
    await sentCall(store, f);
    await startChild(store, f);
    const c = await claimChild(store, "fam-x.0");
    await store.families.finish(
      c,
      { status: "done", error: null, output: "ok", orphaned: "x" },
      at(1),
      (fence, what) => store.writes.refusal(fence, what),
    );
    // The child is finished and old, its root still open: neither goes.
    assert.deepEqual((await store.operators.pruneRuns(at(HOUR_S), 10, true)).runs, []);
    await store.families.finish(
      f,
      { status: "done", error: null, output: "ok", orphaned: "x" },
      at(2),
      (fence, what) => store.writes.refusal(fence, what),
    );
    // Both finished: but the root is not old enough yet for a cut at 2 s, so neither goes.
    assert.deepEqual((await store.operators.pruneRuns(at(2), 10, true)).runs, []);
    const dry = await store.operators.pruneRuns(at(HOUR_S), 10, true);
    assert.deepEqual([dry.runs, dry.journal, dry.effects], [["fam-x", "fam-x.0"], 1, 1]);
    const pruned = await store.operators.pruneRuns(at(HOUR_S), 10);
    assert.deepEqual(pruned.runs, ["fam-x", "fam-x.0"]);
    assert.equal(await store.reads.getRun("fam-x.0"), undefined);
  },
);

bothStoresTest(
  "take-family takes the run and the runs under it only, never another run of the same agents",
  async (store) => {
    const f = await runningParent(store, "tf", at(0));
    await sentCall(store, f, at(0));
    await startChild(store, f, at(0));
    await store.leases.createRun({ runId: "tf-other", agent: "helper", goal: "g" }, at(0));
    await store.leases.createRun({ runId: "tf-other-boss", agent: "boss", goal: "g" }, at(0));
    // The parent (its lease lapsed by 100) and its pending child: both taken, and nothing else.
    assert.deepEqual(
      (await store.leases.takeFamily("host-f", ["boss", "helper"], "tf", at(100), at(101), 10)).map((r) =>
        r.run_id
      )
        .sort(),
      ["tf", "tf.0"],
    );
    assert.equal(
      (await store.leases.takeFamily("host-f", ["boss", "helper"], "tf", at(50), at(201), 10)).length,
      0,
    );
    assert.equal((await store.reads.getRun("tf-other"))?.status, "pending");
    assert.equal((await store.reads.getRun("tf-other-boss"))?.status, "pending");
    // A root of another family takes its own: the takeable runs are there for takeRuns.
    assert.deepEqual(
      (await store.leases.takeRuns("host-g", ["boss", "helper"], at(50), at(301), 10)).map((r) => r.run_id)
        .sort(),
      ["tf-other", "tf-other-boss"],
    );
  },
);
