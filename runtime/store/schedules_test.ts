/**
 * The schedules' statements (`schedules.ts`): a schedule written and
 * replaced by name (its place kept unless its timing changed), listed with
 * its latest runs, paused and resumed, removed; the due read; and a tick,
 * written only at the revision read, inserting its runs in the same
 * statement and never a run twice; a write or a resume said on the
 * schedules' channel. On PGlite and PostgreSQL.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import type { NewSchedule, Store } from "./store.ts";
import { guarded } from "../testdata/guarded.ts";

const T0 = new Date("2026-12-06T09:00:00Z");
const at = (s: number) => new Date(T0.getTime() + s * 1000);

function schedule(s: Partial<NewSchedule> = {}): NewSchedule {
  return {
    name: "nightly",
    agent: "ops",
    cron: null,
    everyMs: 60_000,
    zone: "UTC",
    overlap: "skip",
    catchUp: "last",
    catchUpMax: 10,
    graceMs: 60_000,
    goal: "tidy up",
    input: "tidy up",
    nextAt: at(60),
    ...s,
  };
}

async function runsOf(store: Store, name: string) {
  return await store.client.query<
    { run_id: string; agent: string; goal: string; status: string; scheduled_at: Date }
  >(
    "select run_id, agent, goal, status, scheduled_at from runs where schedule = $1 order by run_id",
    [name],
  );
}

bothStoresTest(
  "a schedule is written once by name: the same timing keeps its place, new timing moves it",
  async (store) => {
    assert.equal(await store.schedules.put(schedule(), T0), true, "created");
    assert.equal(
      await store.schedules.put(schedule({ goal: "tidy up more", nextAt: at(120) }), at(5)),
      false,
    );
    let [row] = await store.schedules.list();
    assert.equal(row.goal, "tidy up more");
    assert.equal(row.next_at.getTime(), at(60).getTime(), "same timing: the next occurrence is not moved");
    assert.equal(row.every_ms, 60_000);
    assert.equal(row.revision, 1);
    await store.schedules.put(schedule({ everyMs: 120_000, nextAt: at(120) }), at(6));
    [row] = await store.schedules.list();
    assert.equal(row.next_at.getTime(), at(120).getTime(), "new timing: from its first occurrence after now");
    assert.deepEqual(row.last_runs, []);
  },
);

bothStoresTest(
  "a tick moves the schedule on and inserts its runs in one statement, at the revision it read only",
  async (store) => {
    await store.schedules.put(schedule({ nextAt: at(60) }), T0);
    assert.equal((await store.schedules.due(["ops"], at(59), 10)).length, 0, "not yet due");
    assert.equal(
      (await store.schedules.due(["other"], at(60), 10)).length,
      0,
      "another agent's host does not tick it",
    );
    const [due] = await store.schedules.due(["ops"], at(60), 10);
    assert.equal(due.name, "nightly");
    assert.equal(due.last_run_open, false);
    const tick = {
      name: "nightly",
      revision: due.revision,
      nextAt: at(120),
      queuedAt: null,
      lastAt: at(60),
      skipped: 0,
      runs: [{ runId: "nightly@20261206T090100Z", at: at(60) }],
    };
    assert.deepEqual(await store.schedules.tick(tick, at(60)), {
      advanced: true,
      created: ["nightly@20261206T090100Z"],
    });
    // A second ticker that read the same revision writes nothing and creates nothing.
    assert.deepEqual(await store.schedules.tick(tick, at(60)), { advanced: false, created: [] });
    const runs = await runsOf(store, "nightly");
    assert.deepEqual(runs.map((r) => [r.run_id, r.agent, r.goal, r.status]), [
      ["nightly@20261206T090100Z", "ops", "tidy up", "pending"],
    ]);
    assert.equal(runs[0].scheduled_at.getTime(), at(60).getTime());
    const [row] = await store.schedules.list();
    assert.equal(row.last_run_id, "nightly@20261206T090100Z");
    assert.equal(row.next_at.getTime(), at(120).getTime());
    assert.deepEqual(row.last_runs.map((r) => [r.run_id, r.status, r.scheduled_at.getTime()]), [
      ["nightly@20261206T090100Z", "pending", at(60).getTime()],
    ]);
    const [again] = await store.schedules.due(["ops"], at(120), 10);
    assert.equal(again.last_run_open, true, "the run it started is open");
    assert.deepEqual(await store.schedules.nextDue(["ops"]), { nextAt: at(120), queued: false });
    // A tick from a fresh read whose run exists already (a stale plan) moves on but creates no second run.
    const stale = { ...tick, revision: again.revision, nextAt: at(180), lastAt: at(120) };
    assert.deepEqual(await store.schedules.tick(stale, at(121)), { advanced: true, created: [] });
    assert.equal((await runsOf(store, "nightly")).length, 1);
  },
);

bothStoresTest(
  "a paused schedule is not due; resuming goes on from the next occurrence; a removed one is gone, its runs kept",
  async (store) => {
    await store.schedules.put(schedule({ nextAt: at(60) }), T0);
    const [due] = await store.schedules.due(["ops"], at(60), 10);
    await store.schedules.tick({
      name: "nightly",
      revision: due.revision,
      nextAt: at(120),
      queuedAt: at(60),
      lastAt: at(60),
      skipped: 0,
      runs: [],
    }, at(60));
    assert.equal(await store.schedules.pause("nightly", at(70)), true);
    assert.equal(await store.schedules.pause("nobody", at(70)), false);
    assert.equal((await store.schedules.due(["ops"], at(500), 10)).length, 0);
    assert.deepEqual(await store.schedules.nextDue(["ops"]), { nextAt: null, queued: false });
    let [row] = await store.schedules.list({ name: "nightly" });
    assert.deepEqual(
      [row.enabled, row.queued_at, row.skipped],
      [false, null, 1],
      "the queued occurrence dropped",
    );
    assert.equal(await store.schedules.resume("nightly", at(540), at(500)), true);
    assert.equal(await store.schedules.resume("nightly", at(540), at(500)), false, "not paused");
    [row] = await store.schedules.list({ name: "nightly" });
    assert.deepEqual([row.enabled, row.next_at.getTime()], [true, at(540).getTime()]);
    await store.leases.createRun({ runId: "nightly@x", agent: "ops", goal: "g" }, T0);
    assert.equal(await store.schedules.remove("nightly"), true);
    assert.equal(await store.schedules.remove("nightly"), false);
    assert.equal((await store.schedules.list()).length, 0);
    assert.ok(await store.reads.getRun("nightly@x"));
  },
);

bothStoresTest(
  "a schedule written or resumed is said on the schedules' channel, with its name",
  async (store) => {
    const heard: string[] = [];
    const unlisten = await store.schedules.listen((name) => heard.push(name));
    try {
      await store.schedules.put(schedule({ name: "said" }), T0);
      await store.schedules.put(schedule({ name: "said", goal: "again" }), T0);
      await store.schedules.pause("said", T0);
      assert.equal(await store.schedules.resume("said", at(60), T0), true);
      assert.equal(await store.schedules.resume("said", at(60), T0), false, "not paused: nothing said");
      await guarded(
        (async () => {
          // Bounded by guarded.
          while (heard.length < 3) await new Promise((r) => setTimeout(r, 5));
        })(),
        () => `three notifications (heard ${JSON.stringify(heard)})`,
      );
      await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(
        heard,
        ["said", "said", "said"],
        "two writes and a resume; no pause, no resume of a running one",
      );
    } finally {
      await unlisten();
    }
  },
);
