/**
 * Calls that wait on their remote (HTTP 202), at the store: a call accepted
 * and re-sent to ask how its job stands, a run let go until its calls are
 * due, taken and claimed again then (and never while it waits for a person),
 * a call settled from outside, and cancel, reopen and prune of such runs. The
 * same cases on PGlite and PostgreSQL; the race of a settle with a run being
 * let go on PostgreSQL, where the two really run at once.
 */

import assert from "node:assert/strict";
import { pgTest } from "../../tests/_pg.ts";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { claim, writeDecision } from "../../harness/direct_writes.ts";
import { FencedError } from "../base/errors.ts";
import type { Fence, SideEffectRow, Store } from "./store.ts";

const T0 = new Date(Date.UTC(2026, 0, 1));
const at = (s: number) => new Date(T0.getTime() + s * 1000);
const HOUR_S = 3600;
const stalled = (e: unknown) => e instanceof FencedError && e.code === "STALLED";

/** A running run (claimed by `owner` at `now`) with step 0 decided as a call of `job`. */
async function runningRun(store: Store, runId: string, now = T0, owner = "w1"): Promise<Fence> {
  await store.leases.createRun({ runId, agent: "provision", goal: "goal" }, now);
  const f = { runId, epoch: (await claim(store, runId, 0, owner, now))! };
  await writeDecision(store, f, 0, { decision: { tool: "job", args: { n: 1 } }, usage: undefined }, now);
  return f;
}

/** `runningRun`, with its call sent and accepted by the remote: waiting until `checkS`. */
async function waitingCall(
  store: Store,
  runId: string,
  opts: { now?: Date; checkS?: number } = {},
): Promise<{ f: Fence; call: SideEffectRow }> {
  const now = opts.now ?? T0;
  const f = await runningRun(store, runId, now);
  const sent = await store.writes.effectIntentRow(
    f,
    { key: `${runId}:0`, seq: 0, tool: "job", args: { n: 1 } },
    now,
    true,
  );
  const call = await store.writes.effectWaiting(f, sent, {
    result: { job: `${runId}-job` },
    checkAt: at(opts.checkS ?? 30),
    deadlineAt: at(HOUR_S),
  });
  return { f, call };
}

/** The run ids of a take. */
const ids = (runs: { run_id: string }[]) => runs.map((r) => r.run_id);

async function effectOf(store: Store, key: string): Promise<SideEffectRow> {
  const e = await store.reads.getEffect(key);
  assert.ok(e, `call ${key} exists`);
  return e;
}

bothStoresTest(
  "an accepted call waits, and its re-send asks again counting a poll, not an attempt",
  async (store) => {
    const f = await runningRun(store, "w-poll");
    const e = { key: "w-poll:0", seq: 0, tool: "job", args: { n: 1 } };
    const sent = await store.writes.effectIntentRow(f, e, T0, true);
    assert.deepEqual([sent.status, sent.attempts, sent.polls, sent.check_at], ["intent", 1, 0, null]);

    const waiting = await store.writes.effectWaiting(f, sent, {
      result: { job: "j-1" },
      checkAt: at(30),
      deadlineAt: at(HOUR_S),
    });
    // The row the write returns is the row as a worker reads it back.
    assert.deepStrictEqual(waiting, (await store.reads.loadHistory("w-poll")).effects[0]);
    assert.deepEqual(
      [waiting.status, waiting.result, waiting.check_at, waiting.wait_deadline_at, waiting.polls],
      ["waiting", { job: "j-1" }, at(30), at(HOUR_S), 0],
    );
    // Only a request in flight is accepted: the waiting row is not at intent.
    await assert.rejects(
      store.writes.effectWaiting(f, waiting, { result: null, checkAt: at(31), deadlineAt: at(HOUR_S) }),
      stalled,
    );

    const poll = await store.writes.effectIntentRow(f, e, at(30));
    assert.deepEqual(
      [poll.status, poll.attempts, poll.polls, poll.check_at, poll.result, poll.intent_at],
      ["intent", 1, 1, null, { job: "j-1" }, at(30)],
      "a poll moves the row back to intent, counts a poll, keeps the accepted answer",
    );
    // A later accepted answer keeps the deadline the first one fixed.
    const again = await store.writes.effectWaiting(f, poll, {
      result: { job: "j-1", done: "40%" },
      checkAt: at(60),
      deadlineAt: at(2 * HOUR_S),
    });
    assert.deepStrictEqual(again, (await store.reads.loadHistory("w-poll")).effects[0]);
    assert.deepEqual([again.check_at, again.wait_deadline_at, again.polls], [at(60), at(HOUR_S), 1]);

    // A poll whose outcome was lost (a crash, a timeout) is re-sent as any request is: an attempt.
    await store.writes.effectIntentRow(f, e, at(60));
    const resent = await store.writes.effectIntentRow(f, e, at(61));
    assert.deepEqual([resent.attempts, resent.polls], [2, 2]);

    const done = await store.writes.effectConfirm(f, resent, {
      result: { job: "j-1", id: "i-9" },
      remote: "created",
    }, at(62));
    assert.deepStrictEqual(done, (await store.reads.loadHistory("w-poll")).effects[0]);
    assert.deepEqual([done.status, done.polls, done.wait_deadline_at], ["confirmed", 2, at(HOUR_S)]);
    await assert.rejects(
      store.writes.effectIntentRow(f, e, at(63)),
      stalled,
      "a confirmed call is never re-sent",
    );
  },
);

bothStoresTest("a waiting call past its deadline is failed without a re-send", async (store) => {
  const { f, call } = await waitingCall(store, "w-late");
  const failed = await store.writes.effectSettle(
    f,
    call,
    { status: "failed", error: "not done by its deadline" },
    at(HOUR_S),
  );
  assert.deepStrictEqual(failed, (await store.reads.loadHistory("w-late")).effects[0]);
  assert.deepEqual([failed.status, failed.check_at, failed.attempts], ["failed", null, 1]);
});

bothStoresTest(
  "waitRun() lets the run go until its wake time, and only then is it taken or claimed",
  async (store) => {
    const { f } = await waitingCall(store, "w-timer");
    assert.equal(await store.writes.waitRun(f, at(30), at(1)), true);
    const run = await store.reads.getRun("w-timer");
    assert.deepEqual(
      [run?.status, run?.wake_at, run?.heartbeat_at, run?.owner, run?.updated_at],
      ["waiting", at(30), null, "w1", at(1)],
    );
    assert.equal(await store.writes.heartbeat(f, at(2)), false, "the lease is let go");
    await assert.rejects(
      store.writes.finishRun(f, "done", null, at(2)),
      (e: FencedError) => e.code === "RUN_CLOSED",
    );

    const stale = new Date(0);
    assert.deepEqual(
      ids(await store.leases.takeRuns("w2", ["provision"], stale, at(29), 10)),
      [],
      "not before its wake time",
    );
    assert.equal(await store.leases.claimRun("w-timer", f.epoch, "w2", at(29)), undefined);
    const [taken] = await store.leases.takeRuns("w2", ["provision"], stale, at(30), 10);
    assert.deepEqual(
      [taken?.run_id, taken?.status, taken?.epoch, taken?.owner, taken?.wake_at, taken?.previous_owner],
      ["w-timer", "running", f.epoch + 1, "w2", null, "w1"],
    );
    const claimOnly = {
      previous_owner: undefined,
      previous_heartbeat_at: undefined,
      previous_version: undefined,
    };
    assert.deepStrictEqual({ ...taken, ...claimOnly }, {
      ...(await store.reads.getRun("w-timer")),
      ...claimOnly,
    });

    // A single run's claim (a worker started on it by hand) takes it too, once it is due.
    // (Its call is due at 50 s too: a run is never let go past a waiting call's own time, see WAIT_RUN.)
    const { f: g } = await waitingCall(store, "w-claim", { checkS: 50 });
    assert.equal(await store.writes.waitRun(g, at(50), at(1)), true);
    assert.equal(await store.leases.claimRun("w-claim", g.epoch, "w3", at(49)), undefined);
    assert.deepEqual(await store.leases.claimRun("w-claim", g.epoch, "w3", at(50)), {
      epoch: g.epoch + 1,
      stuck_claims: 1,
    });
    const claimed = await store.reads.getRun("w-claim");
    assert.deepEqual([claimed?.status, claimed?.wake_at, claimed?.owner], ["running", null, "w3"]);
  },
);

bothStoresTest(
  "a run waiting for a person is never taken, and a woken run is taken in the order it waited",
  async (store) => {
    const f = await runningRun(store, "w-person");
    const asked = await store.writes.requestApproval(
      f,
      { key: "w-person:0", seq: 0, tool: "job", args: { n: 1 }, hash: "h" },
      at(1),
    );
    assert.equal(asked.waiting, true);
    const woken = await waitingCall(store, "w-woken", { now: at(1), checkS: 2 });
    assert.equal(await store.writes.waitRun(woken.f, at(2), at(1)), true);
    await store.leases.createRun({ runId: "w-pending", agent: "provision", goal: "goal" }, at(5));

    const stale = new Date(0);
    const first = await store.leases.takeRuns("w2", ["provision"], stale, at(10), 1);
    assert.deepEqual(first.map((r) => r.run_id), ["w-woken"], "woken at 2, before the run created at 5");
    const second = await store.leases.takeRuns("w2", ["provision"], stale, at(10), 5);
    assert.deepEqual(second.map((r) => r.run_id), ["w-pending"]);
    assert.deepEqual(ids(await store.leases.takeRuns("w2", ["provision"], stale, at(100 * HOUR_S), 5)), []);
    const run = await store.reads.getRun("w-person");
    assert.deepEqual([run?.status, run?.wake_at], ["waiting", null]);
    assert.equal(await store.leases.claimRun("w-person", f.epoch, "w3", at(100 * HOUR_S)), undefined);
  },
);

bothStoresTest(
  "waitRun() leaves a run with no waiting call running, adds a timer to a wait for a person, and refuses another's run",
  async (store) => {
    // No call of the run waits (say one was settled from outside): the run is left to its worker.
    const f = await runningRun(store, "w-none");
    assert.equal(await store.writes.waitRun(f, at(30), at(1)), false);
    assert.deepEqual([
      (await store.reads.getRun("w-none"))?.status,
      (await store.reads.getRun("w-none"))?.wake_at,
    ], [
      "running",
      null,
    ]);

    // A step with a call waiting on its remote and another waiting for a person: the approval lets
    // the run go, and the same worker then adds the timer.
    const { f: g } = await waitingCall(store, "w-both");
    await writeDecision(store, g, 1, { decision: { tool: "job", args: { n: 2 } }, usage: undefined }, at(1));
    const asked = await store.writes.requestApproval(
      g,
      { key: "w-both:1", seq: 1, tool: "job", args: { n: 2 }, hash: "h" },
      at(1),
    );
    assert.equal(asked.waiting, true);
    assert.equal(await store.writes.waitRun(g, at(30), at(1)), true);
    const both = await store.reads.getRun("w-both");
    assert.deepEqual([both?.status, both?.wake_at, both?.epoch], ["waiting", at(30), g.epoch]);

    // Another worker's claim fences the first one's wait out.
    const { f: h } = await waitingCall(store, "w-fenced");
    assert.equal(await claim(store, "w-fenced", h.epoch, "w2", at(1)), h.epoch + 1);
    await assert.rejects(store.writes.waitRun(h, at(30), at(1)), (e: FencedError) => e.code === "FENCED");
    assert.deepEqual((await store.reads.getRun("w-fenced"))?.wake_at, null);
  },
);

bothStoresTest(
  "settleCall() confirms or fails a waiting call from outside and wakes its run",
  async (store) => {
    const { f } = await waitingCall(store, "w-settle");
    assert.equal(await store.writes.waitRun(f, at(30), at(1)), true);
    const out = await store.operators.settleCall("w-settle:0", { result: { id: "i-7" } }, "hook", at(5));
    assert.deepEqual([out.settled, out.runStatus, out.woken], [true, "waiting", true]);
    assert.deepStrictEqual(out.effect, await effectOf(store, "w-settle:0"));
    assert.deepEqual(
      [
        out.effect?.status,
        out.effect?.result,
        out.effect?.remote,
        out.effect?.resolved_by,
        out.effect?.resolved_at,
      ],
      ["confirmed", { id: "i-7" }, "resolved", "hook", at(5)],
    );
    assert.deepEqual([out.effect?.confirmed_at, out.effect?.check_at, out.effect?.error], [
      at(5),
      null,
      null,
    ]);
    assert.deepEqual((await store.reads.getRun("w-settle"))?.wake_at, at(5));
    const [taken] = await store.leases.takeRuns("w2", ["provision"], new Date(0), at(5), 5);
    assert.equal(taken?.run_id, "w-settle", "taken at once, not at its check time");

    const { f: g } = await waitingCall(store, "w-fail");
    assert.equal(await store.writes.waitRun(g, at(30), at(1)), true);
    const failed = await store.operators.settleCall(
      "w-fail:0",
      { error: "the job failed: disk full" },
      "hook",
      at(6),
    );
    assert.deepEqual(
      [
        failed.settled,
        failed.effect?.status,
        failed.effect?.error,
        failed.effect?.remote,
        failed.effect?.result,
      ],
      [true, "failed", "the job failed: disk full", null, { job: "w-fail-job" }],
    );

    // A second report of the same call settles nothing, and says how the call stands.
    const again = await store.operators.settleCall("w-fail:0", { result: 1 }, "hook", at(7));
    assert.deepEqual([again.settled, again.effect?.status, again.woken], [false, "failed", false]);
    const unknown = await store.operators.settleCall("w-nope:0", { result: 1 }, "hook", at(7));
    assert.deepEqual(unknown, { effect: undefined, settled: false, runStatus: undefined, woken: false });

    // A running run (its worker holds it): the call is settled, nothing to wake.
    await waitingCall(store, "w-held");
    const held = await store.operators.settleCall("w-held:0", { result: 2 }, "hook", at(8));
    assert.deepEqual([held.settled, held.runStatus, held.woken], [true, "running", false]);
  },
);

bothStoresTest(
  "settleCall() leaves a call being asked about, a closed run's call and a wait for a person alone",
  async (store) => {
    // The call's re-send is in flight (at intent): refused, the worker's answer decides.
    const { f, call } = await waitingCall(store, "w-asking");
    await store.writes.effectIntentRow(f, { key: "w-asking:0", seq: 0, tool: "job", args: { n: 1 } }, at(30));
    const asking = await store.operators.settleCall("w-asking:0", { result: 1 }, "hook", at(31));
    assert.deepEqual([asking.settled, asking.effect?.status, asking.runStatus], [false, "intent", "running"]);
    assert.equal(call.status, "waiting");

    // A cancelled run's call is not answered (reopen it first).
    const { f: g } = await waitingCall(store, "w-closed");
    assert.equal(await store.writes.waitRun(g, at(30), at(1)), true);
    await store.families.cancel("w-closed", "cancelled by test", at(2));
    const closed = await store.operators.settleCall("w-closed:0", { result: 1 }, "hook", at(3));
    assert.deepEqual([closed.settled, closed.effect?.status, closed.runStatus], [
      false,
      "waiting",
      "cancelled",
    ]);

    // A run waiting only for a person stays so: settling one call does not answer the person.
    const { f: h } = await waitingCall(store, "w-also-person");
    await writeDecision(store, h, 1, { decision: { tool: "job", args: { n: 2 } }, usage: undefined }, at(1));
    await store.writes.requestApproval(
      h,
      { key: "w-also-person:1", seq: 1, tool: "job", args: { n: 2 }, hash: "h" },
      at(1),
    );
    const person = await store.operators.settleCall("w-also-person:0", { result: 1 }, "hook", at(2));
    assert.deepEqual([person.settled, person.runStatus, person.woken], [true, "waiting", false]);
    assert.equal((await store.reads.getRun("w-also-person"))?.wake_at, null);
  },
);

bothStoresTest(
  "a settle before the worker's re-send or its wait leaves the worker the settled call",
  async (store) => {
    const { f } = await waitingCall(store, "w-first");
    assert.equal((await store.operators.settleCall("w-first:0", { result: 1 }, "hook", at(2))).settled, true);
    await assert.rejects(
      store.writes.effectIntentRow(f, { key: "w-first:0", seq: 0, tool: "job", args: { n: 1 } }, at(30)),
      stalled,
      "the re-send finds the call settled",
    );
    assert.equal(await store.writes.waitRun(f, at(30), at(3)), false, "no call waits: the run is not let go");
    assert.equal((await store.reads.getRun("w-first"))?.status, "running");
  },
);

bothStoresTest("cancel, reopen and prune handle a run whose call waits", async (store) => {
  const { f } = await waitingCall(store, "w-cancel");
  assert.equal(await store.writes.waitRun(f, at(30), at(1)), true);
  const cancelled = (await store.families.cancel("w-cancel", "cancelled by test", at(2)))?.run;
  assert.deepEqual([cancelled?.status, cancelled?.wake_at], ["cancelled", null]);
  assert.deepEqual(
    ids(await store.leases.takeRuns("w2", ["provision"], new Date(0), at(100), 5)),
    [],
    "never taken",
  );

  const reopened = await store.operators.reopenRun("w-cancel", at(3));
  assert.deepEqual([reopened?.status, reopened?.wake_at], ["pending", null]);
  const call = await effectOf(store, "w-cancel:0");
  assert.deepEqual([call.status, call.check_at, call.attempts_at_reopen], ["waiting", at(30), null]);
  const [taken] = await store.leases.takeRuns("w2", ["provision"], new Date(0), at(4), 5);
  assert.equal(
    taken?.run_id,
    "w-cancel",
    "a reopened run is taken at once; its worker finds the call waiting",
  );

  await store.families.cancel("w-cancel", "cancelled again", at(5));
  const pruned = await store.operators.pruneRuns(at(6), 10);
  assert.deepEqual([pruned.runs, pruned.effects, pruned.journal], [["w-cancel"], 1, 1]);
  assert.equal(await store.reads.getEffect("w-cancel:0"), undefined);
});

bothStoresTest(
  "a run woken again and again while its job runs is not stuck; one whose poll never returns is",
  async (store) => {
    const e = { key: "w-stuck:0", seq: 0, tool: "job", args: { n: 1 } };
    const { f } = await waitingCall(store, "w-stuck");
    assert.equal(await store.writes.waitRun(f, at(30), at(1)), true);
    let epoch = f.epoch;
    for (let i = 1; i <= 3; i++) {
      // Woken, asked again, answered "not done": each claim finds progress.
      const [taken] = await store.leases.takeRuns("w2", ["provision"], new Date(0), at(30 * i), 1);
      assert.equal(taken?.stuck_claims, 1, `wake ${i}`);
      epoch = taken.epoch;
      const g = { runId: "w-stuck", epoch };
      const poll = await store.writes.effectIntentRow(g, e, at(30 * i));
      await store.writes.effectWaiting(g, poll, {
        result: null,
        checkAt: at(30 * (i + 1)),
        deadlineAt: at(HOUR_S),
      });
      assert.equal(await store.writes.waitRun(g, at(30 * (i + 1)), at(30 * i)), true);
    }
    // Then the worker dies with each poll in flight: claims without progress.
    for (const expected of [1, 2, 3]) {
      const [taken] = await store.leases.takeRuns("w2", ["provision"], new Date(0), at(HOUR_S), 1);
      assert.equal(taken?.stuck_claims, expected);
      const g = { runId: "w-stuck", epoch: taken.epoch };
      await store.writes.effectIntentRow(g, e, at(HOUR_S));
      await store.writes.releaseRun(g, "died", at(HOUR_S));
      await store.client.run(`update runs set updated_at = $1::timestamptz where run_id = 'w-stuck'`, [
        new Date(0).toISOString(),
      ]);
    }
  },
);

pgTest("a settle racing the worker's wait never leaves the run asleep with no call waiting", async (pg) => {
  const store = pg.store;
  for (let i = 0; i < 25; i++) {
    const runId = `w-race-${i}`;
    const { f } = await waitingCall(store, runId);
    const [settled, waited] = await Promise.all([
      store.operators.settleCall(`${runId}:0`, { result: i }, "hook", at(2)),
      store.writes.waitRun(f, at(HOUR_S), at(2)),
    ]);
    assert.equal(settled.settled, true, runId);
    const run = (await store.reads.getRun(runId))!;
    if (waited) {
      // The wait came first: the settle woke the run.
      assert.deepEqual([run.status, run.wake_at, settled.woken], ["waiting", at(2), true], runId);
    } else {
      // The settle came first: the run was not let go.
      assert.deepEqual([run.status, run.wake_at, settled.woken], ["running", null, false], runId);
    }
  }
});
