/**
 * Schedules under failure, with real processes (`harness/schedule_proof.ts`):
 * three one-second schedules (catch-up all, last, none) ticked by two
 * supervisors on a PostgreSQL server of the test's own, each supervisor
 * SIGKILLed and started again once, and the database stopped for a while.
 * Each occurrence has at most one run, named after it; catch-up `all` leaves
 * none without a run; the others leave without a run exactly the
 * occurrences they counted as skipped; no run's `schedule-started` line
 * appears twice across every supervisor, and one is missing only for a tick
 * a kill or the server's stop cut off after its commit; every run is done,
 * one resource per key at the mock cloud.
 *
 * In the suite it runs 15 s with a 3 s outage. The issue's length:
 * `SCHEDULES_PROOF_S=60 SCHEDULES_OUTAGE_S=10 deno test -A tests/schedules_pg_test.ts`.
 * A server of the test's own needs root and the PostgreSQL server binaries;
 * without them the test says it was skipped, and why.
 */

import assert from "node:assert/strict";
import { pgServerSkipReason } from "../harness/pg_server.ts";
import { proveSchedules } from "../harness/schedule_proof.ts";

const SKIP = pgServerSkipReason();
const PROOF_S = Number(Deno.env.get("SCHEDULES_PROOF_S") ?? 15);
const OUTAGE_S = Number(Deno.env.get("SCHEDULES_OUTAGE_S") ?? 3);
const NAME =
  `one-second schedules for ${PROOF_S} s under two supervisors, each SIGKILLed and restarted once, ` +
  `and a ${OUTAGE_S} s database outage: one run per occurrence, catch-up as configured, none doubled`;

Deno.test({
  name: NAME,
  ignore: (() => {
    if (SKIP) console.log(`skipped (${SKIP}): ${NAME}`);
    return SKIP !== undefined;
  })(),
  async fn() {
    const report = await proveSchedules({
      durationMs: PROOF_S * 1_000,
      outageMs: OUTAGE_S * 1_000,
      note: (line) => console.log(`  ${line}`),
      // SCHEDULES_LOG=path keeps every supervisor's lines for a look afterwards.
      logPath: Deno.env.get("SCHEDULES_LOG"),
    });
    for (const s of report.schedules) {
      console.log(
        `  ${s.name}: ${s.occurrences} occurrences, ${s.runs} runs, ${s.skipped} skipped (${s.missing} without a ` +
          `run), doubled ${s.doubled.length}, misnamed ${s.misnamed.length}, not done ${s.notDone.length}, ` +
          `started twice ${s.startedTwice.length}, start not logged ${s.unlogged.length} (${
            s.unlogged.join(" ")
          }), ` +
          `effects not once ${s.effectsNotOnce.length}`,
      );
    }
    console.log(
      `  database away ${report.outageMs} ms (${report.tickFailures} failed ticks logged); every run done ` +
        `${report.drainMs} ms after the pause; supervisors: ${
          report.supervisors.map((p) => `${p.name} exit ${p.code}`).join(", ")
        }`,
    );
    for (const s of report.schedules) {
      assert.deepEqual(s.doubled, [], `${s.name}: an occurrence with two runs`);
      assert.deepEqual(s.misnamed, [], `${s.name}: a run not named after an occurrence of its window`);
      assert.deepEqual(s.notDone, [], `${s.name}: runs not done`);
      assert.deepEqual(s.startedTwice, [], `${s.name}: runs whose start was logged twice`);
      // A start line is lost only with its ticker's process, or with the answer to its commit.
      assert.deepEqual(
        s.unloggedUnexplained,
        [],
        `${s.name}: runs whose start was never logged, though no kill or stop came within 3 s of their tick`,
      );
      assert.deepEqual(s.effectsNotOnce, [], `${s.name}: runs whose keys did not create one resource each`);
      assert.equal(s.runs + s.missing, s.occurrences, `${s.name}: every occurrence has a run or none`);
      assert.equal(
        s.missing,
        s.skipped,
        `${s.name}: the occurrences without a run are those counted as skipped`,
      );
      assert.ok(s.occurrences >= PROOF_S - 2, `${s.name}: ticked to the end (${s.occurrences} occurrences)`);
    }
    const [all, last, none] = report.schedules;
    assert.equal(all.missing, 0, "catch-up all: every occurrence has its run");
    assert.ok(report.tickFailures > 0, "the tickers met the outage");
    assert.ok(none.skipped > 0, "catch-up none skipped the occurrences the outage made late");
    assert.ok(last.skipped < none.skipped, "catch-up last started the latest of each late stretch");
    // The killed supervisors exited by the kill (137); the last two by SIGTERM, cleanly.
    assert.deepEqual(report.supervisors.map((p) => p.code), [137, 137, 0, 0]);
  },
});
