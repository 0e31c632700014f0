/**
 * Outages ridden out by real processes: the support agent under a real
 * supervisor on PostgreSQL, its shop's API and then its model's server taken
 * down (their ports closed) while runs are submitted, and brought back. Every
 * run ends done, none failed; while a remote is down its runs wait holding no
 * worker slot; each ticket is opened once per key. The outages here are short
 * (12 s) with a short backoff cap (4 s, above what a worker sleeps holding a
 * slot, 2 s); `deno task bench:outage` runs the same scene for minutes with
 * the defaults of a fresh `deno task supervise`.
 */

import assert from "node:assert/strict";
import { rideOutages } from "../harness/outage.ts";
import { freshSchema, pgIgnore } from "./_pg.ts";

Deno.test({
  name:
    "a shop's API and then the model's server down for a while: every run resumes by itself, none failed, no slot held, each ticket once",
  ignore: pgIgnore("outages on real processes"),
  async fn() {
    const pg = await freshSchema();
    try {
      const report = await rideOutages({
        databaseUrl: pg.url,
        phases: [
          { remote: "shop", downMs: 12_000, runs: 10 },
          { remote: "model", downMs: 12_000, runs: 10 },
        ],
        env: { WORKERS: "2", RETRY_BACKOFF_MAX_S: "4" },
        drainMs: 90_000,
      });
      for (const p of report.phases) {
        const what = `the ${p.phase.remote}'s outage`;
        assert.deepEqual(p.statuses, { done: p.phase.runs }, `${what}: every run done, none failed`);
        assert.ok(
          p.failuresRecorded >= p.phase.runs,
          `${what}: each run met the outage (${p.failuresRecorded})`,
        );
        assert.ok(p.waitingMost > 0, `${what}: runs waited it out without a worker`);
        // A worker sleeps at most 2 s holding a slot (holdSlotMaxMs); one that waited the outage out in a
        // worker would hold it for the whole 12 s.
        assert.ok(
          p.longestHoldMs < 6_000,
          `${what}: a run held a slot ${p.longestHoldMs} ms without a break`,
        );
        console.log(
          `${p.phase.remote} down ${
            p.phase.downMs / 1000
          } s: ${p.phase.runs} runs, ${p.failuresRecorded} failures ` +
            `recorded, at most ${p.waitingMost} waiting, no slot held longer than ${p.longestHoldMs} ms, ` +
            `all done ${p.backToDoneMs} ms after it was back`,
        );
      }
      // One ticket per run, opened once under its key, whatever was re-sent.
      const runs = report.phases.reduce((n, p) => n + p.phase.runs, 0);
      assert.equal(report.tickets.opened, runs);
      assert.equal(report.tickets.keys, runs);
      assert.equal(report.tickets.conflicts, 0, "no key came back with another body");
      // Every answer the model gave was to a request the journal counted: two steps and the answer each.
      for (const [runId, calls] of Object.entries(report.modelCalls)) {
        assert.equal(calls, 3, `${runId} bought ${calls} answers from the model`);
      }
      assert.ok(!report.supervisorLines.some((l) => /event=worker-refused/.test(l)));
    } finally {
      await pg.drop();
    }
  },
});
