/**
 * The ticker on PGlite with a ManualClock: it sleeps until the next
 * occurrence (not a poll), starts one run per occurrence however many
 * tickers run at once, rides out a database that fails and catches up by the
 * schedule's rule, and keeps to the overlap rules against real run rows.
 */

import assert from "node:assert/strict";
import { ManualClock } from "../base/clock.ts";
import { arraySink, Logger } from "../base/log.ts";
import { StoreError } from "../base/errors.ts";
import { type NewSchedule, Store } from "../store/store.ts";
import { Schedules } from "../store/schedules.ts";
import { guarded } from "../testdata/guarded.ts";
import { ScheduleTicker } from "./ticker.ts";
import { checkSchedule, recurrenceOf, type ScheduleTiming } from "./spec.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

const T0 = Date.UTC(2026, 11, 6, 9, 0, 0);

/** Writes schedule `name` of agent `agent` as a client would, its first occurrence after the clock's now. */
async function put(store: Store, clock: ManualClock, name: string, agent: string, timing: ScheduleTiming) {
  const def = checkSchedule(name, timing);
  const s: NewSchedule = {
    ...def,
    agent,
    goal: `${name}'s goal`,
    input: `${name}'s goal`,
    nextAt: new Date(recurrenceOf(def).next(clock.now().getTime())),
  };
  await store.schedules.put(s, clock.now());
}

async function runIds(store: Store, name: string): Promise<string[]> {
  const rows = await store.client.query<{ run_id: string }>(
    "select run_id from runs where schedule = $1 order by scheduled_at",
    [name],
  );
  return rows.map((r) => r.run_id);
}

/** Waits (a real, bounded wait) until `pred` holds. */
async function until(pred: () => boolean | Promise<boolean>, what: string): Promise<void> {
  await guarded(
    (async () => {
      // Bounded by guarded's 10 s.
      while (!(await pred())) await new Promise((r) => setTimeout(r, 5));
    })(),
    what,
  );
}

function ticker(store: Store, clock: ManualClock, agent: string, lines: string[] = [], name = "t1") {
  const log = new Logger({ clock, sink: arraySink(lines) });
  return new ScheduleTicker({
    store,
    clock,
    log,
    agents: [agent],
    name,
    checkMs: 10_000,
    queueCheckMs: 1_000,
  });
}

/** The schedules' statements, failing with DB_UNREACHABLE while `down` is set (an outage, planted from outside). */
class Unreachable extends Schedules {
  down = false;
  override due(...args: Parameters<Schedules["due"]>) {
    if (this.down) return Promise.reject(new StoreError("DB_UNREACHABLE", "connection refused"));
    return super.due(...args);
  }
  override nextDue(...args: Parameters<Schedules["nextDue"]>) {
    if (this.down) return Promise.reject(new StoreError("DB_UNREACHABLE", "connection refused"));
    return super.nextDue(...args);
  }
}

Deno.test("the ticker on PGlite with a ManualClock", async (t) => {
  const base = new Store(await openTestPglite());
  await base.applySchema();
  try {
    await t.step("it sleeps until the next occurrence, then starts its run, one per occurrence", async () => {
      const clock = new ManualClock(T0 + 300);
      await put(base, clock, "every5", "a1", { every: "5s", overlap: "allow" });
      const tk = ticker(base, clock, "a1").start();
      try {
        await until(() => clock.pending > 0, "the ticker's first sleep");
        assert.equal(clock.nextWakeAtMs, T0 + 5_000, "it sleeps until the occurrence, not for a poll");
        for (let i = 1; i <= 3; i++) {
          // Advanced only while the ticker sleeps, as time would pass while it does.
          await until(() => clock.nextWakeAtMs === T0 + 5_000 * i, `the sleep to occurrence ${i}`);
          await clock.advance(5_000);
          await until(async () => (await runIds(base, "every5")).length === i, `run ${i}`);
        }
        assert.deepEqual(await runIds(base, "every5"), [
          "every5@20261206T090005Z",
          "every5@20261206T090010Z",
          "every5@20261206T090015Z",
        ]);
        await until(() => clock.nextWakeAtMs === T0 + 20_000, "the sleep to the fourth occurrence");
      } finally {
        await tk.stop();
      }
    });

    await t.step(
      "a schedule written elsewhere wakes a sleeping ticker through the store's channel",
      async () => {
        const clock = new ManualClock(T0 + 300);
        const tk = ticker(base, clock, "a6").start();
        try {
          await until(
            () => clock.nextWakeAtMs === T0 + 300 + 10_000,
            "the ticker's bounded sleep (nothing due)",
          );
          // Written through the store, as another process would: no client wakes this ticker, the channel does.
          await put(base, clock, "woken", "a6", { every: "2s", overlap: "allow" });
          await until(
            () => clock.nextWakeAtMs === T0 + 2_000,
            "the sleep to the new schedule's first occurrence",
          );
        } finally {
          await tk.stop();
        }
      },
    );

    await t.step("three tickers at once start each occurrence once", async () => {
      const clock = new ManualClock(T0);
      await put(base, clock, "many", "a2", { every: "1s", overlap: "allow" });
      const tickers = ["x", "y", "z"].map((n) => ticker(base, clock, "a2", [], n));
      for (let i = 0; i < 20; i++) {
        await clock.advance(1_000);
        await Promise.all(tickers.map((tk) => tk.tick()));
      }
      const ids = await runIds(base, "many");
      assert.equal(ids.length, 20);
      assert.equal(new Set(ids).size, 20);
      assert.equal(ids[0], "many@20261206T090001Z");
      assert.equal(ids.at(-1), "many@20261206T090020Z");
      // Each occurrence was written by one ticker: the others' compare-and-swap found the revision moved.
      const [row] = await base.schedules.list({ name: "many" });
      assert.equal(row.revision, 20);
    });

    await t.step(
      "a database away for 10 s: the ticker says so, tries again, and catches up by the rule",
      async () => {
        // 1-5 s ticked; 6-15 s missed (at 16 s, 15 s is on time: 1 s of grace); 16-20 s ticked.
        for (const [catchUp, expected] of [["all", 15], ["last", 12], ["none", 11]] as const) {
          const clock = new ManualClock(T0);
          const schedules = new Unreachable(base.client);
          const store = base.withAudiences({ schedules });
          const name = `out-${catchUp}`;
          await put(store, clock, name, `a-${catchUp}`, {
            every: "1s",
            overlap: "allow",
            catchUp,
            catchUpMax: 4,
            graceMs: 1_000,
          });
          const lines: string[] = [];
          const tk = ticker(store, clock, `a-${catchUp}`, lines);
          // Ticked for 5 s, away for 10 s (the ticker fails and retries), back for the last 5 s at 20 s.
          for (let s = 1; s <= 20; s++) {
            await clock.advance(1_000);
            schedules.down = s > 5 && s <= 15;
            await tk.tick().catch(() => {});
          }
          const ids = await runIds(store, name);
          assert.equal(ids.length, expected, `${catchUp}: ${ids.join(" ")}`);
          assert.equal(new Set(ids).size, ids.length);
          const [row] = await store.schedules.list({ name });
          assert.equal(row.skipped, 20 - expected, `${catchUp}: the rest are counted as skipped`);
        }
      },
    );

    await t.step(
      "tickers killed before or after their tick commits leave each occurrence one run",
      async () => {
        // Each pass of each of two tickers may die just before its tick is sent, or just after it commits (its
        // answer lost), as a SIGKILL at either point would; a seeded choice, so a failure replays.
        let seed = 7;
        const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
        class Killed extends Schedules {
          override async tick(...args: Parameters<Schedules["tick"]>) {
            const roll = random();
            if (roll < 0.25) throw new Error("killed before the tick was sent");
            const out = await super.tick(...args);
            if (roll < 0.5) throw new Error("killed after the tick committed");
            return out;
          }
        }
        const clock = new ManualClock(T0);
        const store = base.withAudiences({ schedules: new Killed(base.client) });
        await put(store, clock, "killed", "a5", {
          every: "1s",
          overlap: "allow",
          catchUp: "all",
          catchUpMax: 100,
        });
        const tickers = ["p", "q"].map((n) => ticker(store, clock, "a5", [], n));
        for (let s = 1; s <= 60; s++) {
          await clock.advance(1_000);
          for (const tk of tickers) await tk.tick().catch(() => {});
        }
        // One last pass that is not killed, so the last occurrences are not left to a next one.
        await ticker(base, clock, "a5").tick();
        const ids = await runIds(base, "killed");
        assert.equal(ids.length, 60, "each of the 60 occurrences has its run");
        assert.equal(new Set(ids).size, 60);
        const [row] = await base.schedules.list({ name: "killed" });
        assert.equal(row.skipped, 0);
      },
    );

    await t.step("the loop logs a failed pass and retries with a growing pause", async () => {
      const clock = new ManualClock(T0);
      const schedules = new Unreachable(base.client);
      schedules.down = true;
      const lines: string[] = [];
      const tk = ticker(base.withAudiences({ schedules }), clock, "a3", lines).start();
      try {
        await until(() => clock.pending > 0, "the first pause");
        assert.equal(clock.nextWakeAtMs, T0 + 500);
        await clock.advance(500);
        await until(() => clock.nextWakeAtMs === T0 + 1_500, "the second pause, doubled");
        schedules.down = false;
        await clock.advance(1_000);
        await until(() => lines.some((l) => l.includes("schedule-tick-recovered")), "the recovery line");
        assert.equal(lines.filter((l) => l.includes("schedule-tick-failed")).length, 2);
        assert.match(lines.find((l) => l.includes("schedule-tick-failed"))!, /DB_UNREACHABLE.*retry_ms=500/);
      } finally {
        await tk.stop();
      }
    });

    await t.step(
      "overlap skip: no run while the last is open; queue: one waits and starts when it closes",
      async () => {
        const clock = new ManualClock(T0);
        await put(base, clock, "skipper", "a4", { every: "1s", overlap: "skip" });
        await put(base, clock, "queuer", "a4", { every: "1s", overlap: "queue" });
        const tk = ticker(base, clock, "a4");
        const close = (id: string) =>
          base.client.run("update runs set status = 'done' where run_id = $1", [id]);
        for (let s = 1; s <= 3; s++) {
          await clock.advance(1_000);
          await tk.tick();
        }
        assert.deepEqual(await runIds(base, "skipper"), ["skipper@20261206T090001Z"]);
        assert.deepEqual(await runIds(base, "queuer"), ["queuer@20261206T090001Z"]);
        let [queuer] = await base.schedules.list({ name: "queuer" });
        assert.equal(
          queuer.queued_at?.getTime(),
          T0 + 2_000,
          "the first occurrence behind the open run waits",
        );
        await close("skipper@20261206T090001Z");
        await close("queuer@20261206T090001Z");
        await clock.advance(500);
        await tk.tick();
        assert.deepEqual(await runIds(base, "queuer"), [
          "queuer@20261206T090001Z",
          "queuer@20261206T090002Z",
        ]);
        assert.deepEqual(
          await runIds(base, "skipper"),
          ["skipper@20261206T090001Z"],
          "skip waits for its next",
        );
        await clock.advance(500);
        await tk.tick();
        assert.deepEqual(await runIds(base, "skipper"), [
          "skipper@20261206T090001Z",
          "skipper@20261206T090004Z",
        ]);
        [queuer] = await base.schedules.list({ name: "queuer" });
        assert.equal(queuer.queued_at?.getTime(), T0 + 4_000);
        assert.equal(queuer.skipped, 1, "03 was skipped: one was queued already");
      },
    );
  } finally {
    await base.client.close();
  }
});
