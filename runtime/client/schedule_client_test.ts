/**
 * `client.schedules`: a schedule checked before anything is written, set
 * (replaced by name, its place kept while its timing is), listed with its
 * next occurrence and last runs, paused, resumed and removed; and a worker
 * host from `client.startWorker` that ticks it, its runs driven to the end.
 * Time is a ManualClock.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../agent/agent.ts";
import { ManualClock } from "../base/clock.ts";
import { ClientError, RuntimeError } from "../base/errors.ts";
import { arraySink, Logger } from "../base/log.ts";
import { guarded } from "../testdata/guarded.ts";
import { Client } from "./client.ts";
import { testClient } from "../../tests/_pglite.ts";

const T0 = Date.UTC(2026, 11, 6, 8, 59, 30);

const model = {
  describe: "done at once",
  decide: (req: { runId: string }) => Promise.resolve({ kind: "done" as const, text: `ran ${req.runId}` }),
};
const report = defineAgent({ name: "report", tools: [], model, defaultInput: "write the report" });
const typed = defineAgent({ name: "typed", tools: [], model, input: z.object({ team: z.string() }) });

function refusedWith(code: string, message: RegExp) {
  return (e: unknown) => {
    assert.ok(e instanceof RuntimeError, String(e));
    assert.equal(e.code, code);
    assert.match(e.message, message);
    return true;
  };
}

Deno.test("client.schedules: set, list, pause, resume, remove", async (t) => {
  const clock = new ManualClock(T0);
  const embedded = await testClient();
  const client = new Client(embedded.store, clock);
  try {
    await t.step("a schedule is checked before anything is written", async () => {
      const cases: [Parameters<typeof client.schedules.set>, string, RegExp][] = [
        [
          [report, { name: "bad name!", every: "5m" }],
          "SCHEDULE_INVALID",
          /schedule's name is 1-47 characters/,
        ],
        [[report, { name: "x", cron: "0 9 * *" }], "SCHEDULE_INVALID", /has 4 fields/],
        [[report, { name: "x", cron: "0 9 * * *", zone: "Mars/Base" }], "SCHEDULE_INVALID", /no zone/],
        [
          [report, { name: "x", every: "5m", cron: "0 9 * * *" }],
          "SCHEDULE_INVALID",
          /exactly one of 'cron'/,
        ],
        [
          [report, { name: "x", every: "5m", overlap: "maybe" as "skip" }],
          "SCHEDULE_INVALID",
          /'overlap' must/,
        ],
        [[report, { name: "x", every: "5m", catchUpMax: 0 }], "SCHEDULE_INVALID", /'catchUpMax' must/],
        [[typed, { name: "x", every: "5m", input: { team: 7 } }], "INPUT_INVALID", /does not fit its schema/],
      ];
      for (const [args, code, message] of cases) {
        await assert.rejects(client.schedules.set(...args), refusedWith(code, message));
      }
      assert.deepEqual(await client.schedules.list(), []);
    });

    await t.step("set() creates it with every default, its next occurrence after now", async () => {
      const s = await client.schedules.set(report, {
        name: "daily",
        cron: "0 9 * * MON-FRI",
        zone: "Europe/Berlin",
      });
      assert.deepEqual(
        { ...s, createdAt: undefined, updatedAt: undefined },
        {
          name: "daily",
          agent: "report",
          cron: "0 9 * * MON-FRI",
          every: null,
          zone: "Europe/Berlin",
          overlap: "skip",
          catchUp: "last",
          catchUpMax: 10,
          graceMs: 60_000,
          input: "write the report",
          enabled: true,
          nextAt: new Date("2026-12-07T08:00:00Z"), // Monday, 09:00 in Berlin
          lastAt: null,
          queuedAt: null,
          skipped: 0,
          lastRuns: [],
          createdAt: undefined,
          updatedAt: undefined,
        },
      );
    });

    await t.step("set() again replaces it by name; the same timing keeps its place", async () => {
      await clock.advance(86_400_000);
      const s = await client.schedules.set(report, {
        name: "daily",
        cron: "0 9 * * MON-FRI",
        zone: "Europe/Berlin",
        input: "write the short report",
      });
      assert.equal(s.input, "write the short report");
      assert.deepEqual(s.nextAt, new Date("2026-12-07T08:00:00Z"));
      const moved = await client.schedules.set(report, { name: "daily", every: "15m" });
      assert.deepEqual([moved.every, moved.cron, moved.zone, moved.graceMs], ["15m", null, "UTC", 60_000]);
      assert.deepEqual(moved.nextAt, new Date("2026-12-07T09:00:00Z"), "new timing: from now");
      assert.equal((await client.schedules.list()).length, 1);
    });

    await t.step("pause, resume (from the next occurrence after now), remove", async () => {
      const paused = await client.schedules.pause("daily");
      assert.deepEqual([paused.enabled, paused.nextAt], [false, null]);
      await clock.advance(3_600_000);
      const resumed = await client.schedules.resume("daily");
      assert.deepEqual([resumed.enabled, resumed.nextAt], [true, new Date("2026-12-07T10:00:00Z")]);
      await client.schedules.remove("daily");
      assert.equal(await client.schedules.get("daily"), undefined);
      for (const call of [client.schedules.pause("daily"), client.schedules.remove("daily")]) {
        await assert.rejects(
          call,
          (e: unknown) => e instanceof ClientError && e.code === "SCHEDULE_NOT_FOUND",
        );
      }
    });
  } finally {
    await embedded.close();
  }
});

Deno.test("client.startWorker() ticks its agents' schedules: one run per occurrence, each driven to its end", async () => {
  const clock = new ManualClock(Date.UTC(2026, 11, 6, 8, 59, 55));
  const embedded = await testClient();
  const client = new Client(embedded.store, clock);
  const lines: string[] = [];
  const worker = await client.startWorker([report], { log: new Logger({ clock, sink: arraySink(lines) }) });
  try {
    // Set after the worker started: the client wakes its ticker, which sleeps until 09:00:00.
    // Time moves a second at a time (the host's poll and heartbeat come due too) up to each occurrence.
    await client.schedules.set(report, { name: "every10", every: "10s", overlap: "allow" });
    const started = () => lines.filter((l) => l.includes("event=schedule-started")).length;
    for (let i = 0; i < 3; i++) {
      // Bounded: 25 seconds of clock time in all.
      while (clock.now().getTime() < Date.UTC(2026, 11, 6, 9, 0, 10 * i)) await clock.advance(1_000);
      await guarded(
        (async () => {
          // Bounded by guarded.
          while (started() < i + 1) await new Promise((r) => setTimeout(r, 5));
        })(),
        `occurrence ${i}'s run`,
      );
    }
    await guarded(
      (async () => {
        // Bounded by guarded.
        for (;;) {
          const [s] = await client.schedules.list();
          if (s.lastRuns.length === 3 && s.lastRuns.every((r) => r.status === "done")) return;
          await new Promise((r) => setTimeout(r, 10));
        }
      })(),
      "three scheduled runs done",
    );
    const [s] = await client.schedules.list();
    assert.deepEqual(s.lastRuns.map((r) => r.runId), [
      "every10@20261206T090020Z",
      "every10@20261206T090010Z",
      "every10@20261206T090000Z",
    ]);
    assert.equal((await client.get("every10@20261206T090000Z"))?.output, "ran every10@20261206T090000Z");
    assert.equal(lines.filter((l) => l.includes("event=schedule-started")).length, 3);
  } finally {
    await worker.stop();
    await embedded.close();
  }
});
