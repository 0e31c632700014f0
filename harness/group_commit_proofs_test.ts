/**
 * The harness's proofs with group commit on (`GROUP_COMMIT_MS`) in every
 * simulated process: the fence and race proofs, the crash matrix on a step
 * of three calls (whose intents and confirms share group statements), and a
 * run of the fuzzer. The same proofs with grouping off are in fence_test.ts,
 * race_test.ts, crash_matrix_test.ts and fuzz_test.ts.
 *
 * For each write a group statement carries, and in the stall-and-steal race,
 * the stale worker's process carries a second run frozen with it (its mate),
 * so the refused write rides a group statement with the mate's valid one:
 * each scenario fails unless its refused write was refused inside a group
 * statement, and the test counts and prints how many writes rode group
 * statements and how many were refused inside one.
 */

import assert from "node:assert/strict";
import { CountingClient } from "../runtime/store/counting.ts";
import { runMatrix } from "./crash_matrix.ts";
import type { GroupCommitStats } from "../runtime/store/group_commit.ts";
import {
  dropEpochFromFence,
  fenceScenario,
  GROUPED_WRITES,
  GUARDED_WRITES,
  measureBaseline,
} from "./fence.ts";
import { demoAgent, fuzz } from "./fuzz.ts";
import { claimRace, stallAndSteal } from "./race.ts";
import { SimWorld } from "./sim.ts";
import { openTestSim } from "../tests/_pg.ts";

const GROUP_COMMIT_MS = 2;

Deno.test("a simulated process with grouping on sends a step's three calls in group statements", async () => {
  const db = await openTestSim({ groupCommitMs: GROUP_COMMIT_MS });
  try {
    const world = await SimWorld.open(db, { modelParallel: 3 });
    let counting: CountingClient | undefined;
    const proc = world.spawn({
      runId: "grouped-3",
      hooks: { wrapStore: (client) => counting = new CountingClient(client) },
    });
    const exit = await proc.exit;
    assert.equal(exit.kind, "exited", JSON.stringify(exit));
    // Three tool intents in one statement and three confirms in another.
    assert.equal(counting!.counts.get("group-write"), 2, JSON.stringify([...counting!.counts]));
    const snap = await world.snapshot("grouped-3");
    assert.equal(snap.run?.status, "done");
    assert.equal(snap.created.length, 3);
  } finally {
    await db.close();
  }
});

Deno.test("with grouping on, the fence, race and crash-matrix proofs pass", async (t) => {
  const db = await openTestSim({ groupCommitMs: GROUP_COMMIT_MS });
  try {
    const baseline = await measureBaseline(db);
    // What the stale workers' processes sent from their wake to their end, over every scenario.
    const sent: GroupCommitStats = { groupStatements: 0, grouped: 0, refused: 0, alone: 0 };
    const add = (group: GroupCommitStats | undefined) => {
      for (const k of Object.keys(sent) as (keyof GroupCommitStats)[]) sent[k] += group?.[k] ?? 0;
    };
    for (const variant of ["closed", "open"] as const) {
      for (const write of GUARDED_WRITES) {
        const mate = GROUPED_WRITES.includes(write);
        const inGroup = mate ? ", inside a group statement" : "";
        await t.step(`fence (${variant}): a stale worker's ${write} is refused${inGroup}`, async () => {
          const result = await fenceScenario(db, write, baseline, { variant, mate });
          assert.deepEqual(result.problems, [], result.transcript.join("\n"));
          add(result.group);
        });
      }
    }
    await t.step("race: two workers started together, exactly one wins", async () => {
      const r = await claimRace(db, baseline, "race-claim-grouped");
      assert.deepEqual(r.problems, [], r.transcript.join("\n"));
    });
    await t.step(
      "race: a worker stalled at after_decide is fenced after a steal, inside a group statement",
      async () => {
        const r = await stallAndSteal(db, baseline, { runId: "race-steal-grouped", mate: true });
        assert.deepEqual(r.problems, [], r.transcript.join("\n"));
        add(r.group);
      },
    );
    console.log(
      `grouped fence and race proofs: after the stale workers woke, ${sent.grouped} writes rode ` +
        `${sent.groupStatements} group statements, ${sent.refused} refused inside one; ${sent.alone} went alone`,
    );
    // One refused inside a group statement per scenario with a mate: ten fence scenarios and the race.
    assert.equal(sent.refused, 2 * GROUPED_WRITES.length + 1, JSON.stringify(sent));
    assert.ok(sent.grouped > sent.refused, JSON.stringify(sent));
    await t.step("crash matrix, one step of three calls: every case passes", async () => {
      const result = await runMatrix(db, { parallel: 3 });
      assert.equal(result.failed, 0, result.transcript);
      assert.ok(result.passed > 0);
    });
  } finally {
    await db.close();
  }
});

Deno.test(
  "with the epoch dropped from the group statement's fence alone, the grouped fence proof fails at every write it carries",
  async (t) => {
    const db = await openTestSim({ groupCommitMs: GROUP_COMMIT_MS });
    try {
      const baseline = await measureBaseline(db);
      for (const write of GROUPED_WRITES) {
        await t.step(
          `${write}: the stale write rides the group statement through, and the proof says so`,
          async () => {
            const counter = { rewritten: 0 };
            const result = await fenceScenario(db, write, baseline, {
              variant: "open",
              mate: true,
              plant: (client) => dropEpochFromFence(client, counter, "group-write"),
            });
            assert.ok(counter.rewritten > 0, "the planted bug changed no group statement");
            assert.notDeepEqual(result.problems, [], result.transcript.join("\n"));
          },
        );
      }
    } finally {
      await db.close();
    }
  },
);

Deno.test("with grouping on, 40 fuzz schedules find no violation", async () => {
  const db = await openTestSim({ groupCommitMs: GROUP_COMMIT_MS });
  try {
    const report = await fuzz(demoAgent, { db, seed: 7, schedules: 40, remote: "mock-cloud" });
    assert.deepEqual(report.failures.map((f) => f.text), []);
    assert.equal(report.schedules, 40);
  } finally {
    await db.close();
  }
});
