import assert from "node:assert/strict";
import { planTick, type ScheduleState } from "./plan.ts";
import { cronRecurrence, intervalRecurrence } from "./recurrence.ts";
import type { ScheduleDefinition } from "./spec.ts";

const S = 1_000;
const everySecond = intervalRecurrence(S);
type Timing = Pick<ScheduleDefinition, "overlap" | "catchUp" | "catchUpMax" | "graceMs">;
const timing = (t: Partial<Timing> = {}): Timing => ({
  overlap: "allow",
  catchUp: "last",
  catchUpMax: 10,
  graceMs: S,
  ...t,
});
const state = (s: Partial<ScheduleState> = {}): ScheduleState => ({
  nextAtMs: 10 * S,
  queuedAtMs: null,
  lastRunOpen: false,
  ...s,
});
const secs = (ms: number[]) => ms.map((t) => t / S);

Deno.test("planTick() starts an occurrence that is due and on time, and moves to the next", () => {
  const plan = planTick(everySecond, timing(), state(), 10 * S + 50);
  assert.deepEqual(secs(plan.starts), [10]);
  assert.equal(plan.nextAtMs, 11 * S);
  assert.equal(plan.lastAtMs, 10 * S);
  assert.equal(plan.skipped, 0);
});

Deno.test("planTick() is idle before the next occurrence", () => {
  const plan = planTick(everySecond, timing(), state(), 10 * S - 1);
  assert.equal(plan.idle, true);
  assert.deepEqual(plan.starts, []);
  assert.equal(plan.nextAtMs, 10 * S);
});

Deno.test("after an outage, catch-up none starts only what is on time, last the latest missed too, all up to catchUpMax", async (t) => {
  // Ticked last for 9 s; the database was away from 9.5 s to 20.5 s: 10 s to 19 s were missed, 20 s is on time.
  const now = 20 * S + 500;
  await t.step("none", () => {
    const plan = planTick(everySecond, timing({ catchUp: "none" }), state(), now);
    assert.deepEqual(secs(plan.starts), [20]);
    assert.equal(plan.skipped, 10);
    assert.equal(plan.nextAtMs, 21 * S);
  });
  await t.step("last", () => {
    const plan = planTick(everySecond, timing({ catchUp: "last" }), state(), now);
    assert.deepEqual(secs(plan.starts), [19, 20]);
    assert.equal(plan.skipped, 9);
  });
  await t.step("all, bounded by catchUpMax (the latest kept)", () => {
    const plan = planTick(everySecond, timing({ catchUp: "all", catchUpMax: 4 }), state(), now);
    assert.deepEqual(secs(plan.starts), [16, 17, 18, 19, 20]);
    assert.equal(plan.skipped, 6);
  });
  await t.step("all, every missed one when the bound allows", () => {
    const plan = planTick(everySecond, timing({ catchUp: "all", catchUpMax: 100 }), state(), now);
    assert.deepEqual(secs(plan.starts), [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]);
    assert.equal(plan.skipped, 0);
  });
  await t.step("a grace as long as the outage makes every occurrence on time", () => {
    const plan = planTick(everySecond, timing({ catchUp: "none", graceMs: 20 * S }), state(), now);
    assert.equal(plan.starts.length, 11);
  });
});

Deno.test("a daily cron down over its hour: catch-up none skips it, last starts it late", () => {
  const daily = cronRecurrence("0 9 * * *", "Europe/Berlin");
  const nine = Date.parse("2026-12-07T08:00:00Z"); // 09:00 in Berlin
  const backAt = nine + 3 * 3_600_000;
  const none = planTick(
    daily,
    timing({ catchUp: "none", graceMs: 60 * S }),
    state({ nextAtMs: nine }),
    backAt,
  );
  assert.deepEqual(none.starts, []);
  assert.equal(none.skipped, 1);
  assert.equal(none.lastAtMs, nine);
  assert.equal(new Date(none.nextAtMs).toISOString(), "2026-12-08T08:00:00.000Z");
  const last = planTick(
    daily,
    timing({ catchUp: "last", graceMs: 60 * S }),
    state({ nextAtMs: nine }),
    backAt,
  );
  assert.deepEqual(last.starts, [nine]);
});

Deno.test("overlap skip: nothing starts while the last run is open; of several due, only the latest", () => {
  const open = planTick(everySecond, timing({ overlap: "skip" }), state({ lastRunOpen: true }), 10 * S);
  assert.deepEqual(open.starts, []);
  assert.equal(open.skipped, 1);
  assert.equal(open.nextAtMs, 11 * S);
  const several = planTick(everySecond, timing({ overlap: "skip", catchUp: "all" }), state(), 13 * S);
  assert.deepEqual(secs(several.starts), [13], "runs one at a time: the others would overlap it");
  assert.equal(several.skipped, 3);
});

Deno.test("overlap queue: one occurrence waits for the open run, later ones are skipped, it starts once the run closes", () => {
  const t = timing({ overlap: "queue" });
  const first = planTick(everySecond, t, state({ lastRunOpen: true }), 10 * S);
  assert.deepEqual(first.starts, []);
  assert.equal(first.queuedAtMs, 10 * S);
  const second = planTick(
    everySecond,
    t,
    state({ nextAtMs: first.nextAtMs, queuedAtMs: first.queuedAtMs, lastRunOpen: true }),
    11 * S,
  );
  assert.equal(second.queuedAtMs, 10 * S, "the queued one keeps its place");
  assert.equal(second.skipped, 1);
  const waiting = planTick(
    everySecond,
    t,
    state({ nextAtMs: 12 * S, queuedAtMs: 10 * S, lastRunOpen: true }),
    11 * S + 500,
  );
  assert.equal(waiting.idle, true, "nothing is due and the run is still open");
  const closed = planTick(everySecond, t, state({ nextAtMs: 12 * S, queuedAtMs: 10 * S }), 11 * S + 700);
  assert.deepEqual(secs(closed.starts), [10]);
  assert.equal(closed.queuedAtMs, null);
  assert.equal(closed.nextAtMs, 12 * S, "the next occurrence is not touched");
  // The queued one starts, and the occurrence due at the same tick queues behind it.
  const both = planTick(everySecond, t, state({ nextAtMs: 12 * S, queuedAtMs: 10 * S }), 12 * S);
  assert.deepEqual(secs(both.starts), [10]);
  assert.equal(both.queuedAtMs, 12 * S);
});

Deno.test("overlap allow starts every due occurrence whether or not the last run is open", () => {
  const plan = planTick(
    everySecond,
    timing({ overlap: "allow" }),
    state({ lastRunOpen: true }),
    10 * S + 999,
  );
  assert.deepEqual(secs(plan.starts), [10]);
  assert.equal(plan.queuedAtMs, null);
});
