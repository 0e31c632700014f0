/**
 * Signals (`signals.ts`), called directly on PGlite and PostgreSQL: a send
 * numbers its signal, a repeated id is one signal, a closed run takes none; a
 * call's take gets the oldest of its name, the same one again under its key,
 * never one another call took, and otherwise records what it waits for; a
 * send wakes a run asleep on its name at the epoch it slept at, and a send the
 * look missed is found when the run is let go (WAIT_RUN, run_writes.ts). On
 * PostgreSQL, a send and a sleep that really race, in both orders.
 */

import assert from "node:assert/strict";
import postgres from "npm:postgres@3.4.9";
import { pgTest } from "../../tests/_pg.ts";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { claim, writeDecision } from "../../harness/direct_writes.ts";
import { FencedError } from "../base/errors.ts";
import { openPostgres } from "./postgres.ts";
import { type Fence, type SideEffectRow, Store } from "./store.ts";

const T0 = new Date(Date.UTC(2026, 0, 1));
const at = (s: number) => new Date(T0.getTime() + s * 1000);
const code = (c: string) => (e: unknown) => e instanceof FencedError && e.code === c;

/** A run claimed by `w1` with step 0 decided as one call of `wait`, its intent written: the call's row. */
async function lookingCall(store: Store, runId: string, now = T0): Promise<{ f: Fence; row: SideEffectRow }> {
  await store.leases.createRun({ runId, agent: "signals", goal: "goal" }, now);
  const f = { runId, epoch: (await claim(store, runId, 0, "w1", now))! };
  await writeDecision(store, f, 0, { decision: { tool: "wait", args: {} } }, now);
  const row = await store.writes.effectIntentRow(
    f,
    { key: `${runId}:0`, seq: 0, tool: "wait", args: {} },
    now,
  );
  return { f, row };
}

/** What a call does after a look found none: its row waiting until `checkS`, then the run let go. */
async function sleepOn(store: Store, f: Fence, row: SideEffectRow, checkS = 3600): Promise<boolean> {
  const waiting = await store.writes.effectWaiting(f, row, {
    result: { waiting_for_signal: "paid" },
    checkAt: at(checkS),
    deadlineAt: at(2 * 3600),
  });
  return await store.writes.waitRun(f, waiting.check_at!, at(1), "waits for paid");
}

const send = (store: Store, runId: string, name: string, signalId: string, payload: unknown = null, s = 1) =>
  store.signals.send({ runId, name, signalId, payload: payload as never }, at(s));

bothStoresTest("signals: sends, takes, and the wake of a run asleep on them", async (store, t) => {
  await t.step("send() numbers a run's signals, and a repeated id is one signal", async () => {
    await store.leases.createRun({ runId: "s-send", agent: "signals", goal: "g" }, T0);
    const first = await send(store, "s-send", "paid", "p1", { cents: 500 });
    assert.deepEqual(
      [first?.signal.seq, first?.signal.name, first?.signal.payload, first?.duplicate, first?.woken],
      [1, "paid", { cents: 500 }, false, false],
    );
    const again = await send(store, "s-send", "paid", "p1", { cents: 999 }, 5);
    assert.deepEqual(again, { signal: first!.signal, duplicate: true, woken: false }, "the first one stands");
    assert.equal((await send(store, "s-send", "shipped", "s1"))?.signal.seq, 2);
    assert.equal((await store.reads.getRun("s-send"))?.signals_sent, 2, "the duplicate counted nothing");
    assert.deepEqual((await store.signals.list("s-send")).map((s) => [s.seq, s.signal_id]), [[1, "p1"], [
      2,
      "s1",
    ]]);
    assert.deepEqual((await store.signals.list("s-send", { afterSeq: 1 })).map((s) => s.seq), [2]);
    assert.equal((await store.signals.get("s-send", "s1"))?.name, "shipped");
    assert.equal(await send(store, "nobody", "paid", "p1"), undefined, "no run, no signal");
    await store.leases.createRun({ runId: "s-closed", agent: "signals", goal: "g" }, T0);
    await store.families.cancel("s-closed", "no more", T0);
    assert.equal(await send(store, "s-closed", "paid", "p1"), undefined, "a closed run takes none");
  });

  await t.step(
    "take() gets the oldest of its name, the same again under its key, and none twice",
    async () => {
      const { f, row } = await lookingCall(store, "s-take");
      await send(store, "s-take", "paid", "p1", 1);
      await send(store, "s-take", "other", "o1", 2);
      await send(store, "s-take", "paid", "p2", 3);
      const took = await store.signals.take(f, row, "paid", at(10));
      assert.ok(took.kind === "taken");
      assert.deepEqual([took.signal.signal_id, took.again, took.signal.consumed_by], [
        "p1",
        false,
        "s-take:0",
      ]);
      const again = await store.signals.take(f, row, "paid", at(11));
      assert.ok(again.kind === "taken");
      assert.deepEqual([again.signal.signal_id, again.again], ["p1", true], "a re-send gets the same signal");
      // Another call of the run takes the next one, never p1.
      const second = await store.writes.effectIntentRow(f, {
        key: "s-take:1",
        seq: 1,
        tool: "wait",
        args: {},
      }, T0);
      const next = await store.signals.take(f, second, "paid", at(12));
      assert.ok(next.kind === "taken");
      assert.equal(next.signal.signal_id, "p2");
      const third = await store.writes.effectIntentRow(
        f,
        { key: "s-take:2", seq: 2, tool: "wait", args: {} },
        T0,
      );
      const none = await store.signals.take(f, third, "paid", at(13));
      assert.ok(none.kind === "none");
      const marked = await store.reads.getEffect("s-take:2");
      assert.deepEqual(
        [marked?.wait_signal, marked?.signals_seen],
        ["paid", 3],
        "the name and the count it saw",
      );
      assert.deepStrictEqual(none.row, marked, "the row comes back as written");
      assert.equal((await store.signals.get("s-take", "o1"))?.consumed_by, null, "another name is left");
    },
  );

  await t.step("take() is fenced on the run and the call's row", async () => {
    const { f, row } = await lookingCall(store, "s-fence");
    await send(store, "s-fence", "paid", "p1");
    await assert.rejects(
      store.signals.take({ ...f, epoch: f.epoch + 1 }, row, "paid", at(2)),
      code("FENCED"),
    );
    await store.writes.effectConfirm(f, row, { result: null, remote: "created" }, at(2));
    await assert.rejects(store.signals.take(f, row, "paid", at(3)), code("STALLED"));
    await store.families.cancel("s-fence", "stop", at(3));
    await assert.rejects(store.signals.take(f, row, "paid", at(4)), code("RUN_CLOSED"));
    assert.equal((await store.signals.get("s-fence", "p1"))?.consumed_by, null, "nothing was taken");
  });

  await t.step("a send wakes a run asleep on its name, at once, and marks the waiting call due", async () => {
    const { f, row } = await lookingCall(store, "s-wake");
    assert.equal(
      (await store.signals.take(f, row, "paid", at(1))).kind,
      "none",
    );
    assert.equal(await sleepOn(store, f, (await store.reads.getEffect(row.idempotency_key))!), true);
    let run = await store.reads.getRun("s-wake");
    assert.deepEqual([run?.status, run?.wake_at, run?.signal_waits, run?.signal_waits_epoch], [
      "waiting",
      at(3600),
      ["paid"],
      f.epoch,
    ]);
    assert.equal((await send(store, "s-wake", "shipped", "x1", null, 5))?.woken, false, "another name");
    assert.deepEqual((await store.reads.getRun("s-wake"))?.wake_at, at(3600));
    assert.equal((await send(store, "s-wake", "paid", "p1", null, 7))?.woken, true);
    run = await store.reads.getRun("s-wake");
    assert.deepEqual([run?.status, run?.wake_at], ["waiting", at(7)]);
    assert.deepEqual((await store.reads.getEffect(row.idempotency_key))?.check_at, at(7), "the call is due");
    const taken = await store.leases.takeRuns("w2", ["signals"], T0, at(7), 10);
    assert.ok(taken.some((r) => r.run_id === "s-wake"), "taken at once");
    // Claimed anew, at another epoch: a later send of the name no longer counts as waking that sleep.
    const later = await send(store, "s-wake", "paid", "p2", null, 8);
    assert.equal(later?.woken, false);
  });

  await t.step("a send the look missed wakes the run as it is let go, and marks the call due", async () => {
    const { f, row } = await lookingCall(store, "s-missed");
    assert.equal(
      (await store.signals.take(f, row, "paid", at(1))).kind,
      "none",
    );
    // The signal comes after the look and before the sleep: the run is running, so the send wakes nothing.
    assert.equal((await send(store, "s-missed", "paid", "p1", null, 1))?.woken, false);
    assert.equal(await sleepOn(store, f, (await store.reads.getEffect(row.idempotency_key))!), true);
    const run = await store.reads.getRun("s-missed");
    assert.deepEqual([run?.status, run?.wake_at], ["waiting", at(1)], "woken at once");
    assert.deepEqual((await store.reads.getEffect(row.idempotency_key))?.check_at, at(1), "the call is due");
  });
});

// A send and a worker letting its run sleep, really at once on PostgreSQL: a transaction holds the run's
// row, both statements queue for it (their snapshots taken before either commits), and it is let go. In
// either order the run ends up woken: the sleep finds the send's count, or the send finds the run asleep.
pgTest("a send and a sleep that race leave the run woken, in either order", async (pg) => {
  const app = `sig_${crypto.randomUUID().slice(0, 8)}`;
  const u = new URL(pg.url);
  u.searchParams.set("application_name", app);
  const racers = new Store(await openPostgres(u.toString(), { max: 4 }));
  const admin = postgres(pg.url, { max: 2, onnotice: () => {} });
  const lockWaits = async (n: number) => {
    const waiting = `select count(*)::int as n from pg_stat_activity where application_name = $1
                       and wait_event_type = 'Lock'`;
    for (let tries = 0; (await admin.unsafe(waiting, [app]))[0].n < n; tries++) {
      assert.ok(tries < 10_000, `${n} statements wait for the run's row`);
    }
  };
  try {
    for (const first of ["sleep", "send"] as const) {
      const runId = `race-${first}`;
      const { f, row } = await lookingCall(racers, runId);
      assert.equal(
        (await racers.signals.take(f, row, "paid", at(1))).kind,
        "none",
      );
      // The worker's two writes after a look that found none: its call waiting, then the run let go.
      const wait = () =>
        racers.writes.effectWaiting(f, row, { result: null, checkAt: at(3600), deadlineAt: at(7200) });
      const waiting = first === "sleep" ? await wait() : undefined;
      const holder = await admin.reserve();
      await holder.unsafe("begin");
      await holder.unsafe(`select 1 from runs where run_id = '${runId}' for update`);
      const sleep = async () =>
        await racers.writes.waitRun(f, (waiting ?? await wait()).check_at!, at(2), "waits for paid");
      const sent = () => send(racers, runId, "paid", "p1", null, 2);
      // Sleep first: the send finds the run asleep. Send first: its snapshot has the call at intent, so it
      // marks nothing, and the sleep (its call's write queued behind the send) finds the count moved.
      const a = first === "sleep" ? sleep() : sent();
      await lockWaits(1);
      const b = first === "sleep" ? sent() : sleep();
      await lockWaits(2);
      await holder.unsafe("commit");
      holder.release();
      await Promise.all([a, b]);
      const run = await racers.reads.getRun(runId);
      assert.deepEqual([run?.status, run?.wake_at], ["waiting", at(2)], `${first} first: the run is woken`);
      assert.deepEqual(
        (await racers.reads.getEffect(row.idempotency_key))?.check_at,
        at(2),
        "its call is due",
      );
    }
  } finally {
    await admin.end({ timeout: 1 });
    await racers.client.close();
  }
});
